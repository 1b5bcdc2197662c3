"""`weave migrate`, `weave admin …` and `weave admin stats`: the operator's commands on the database."""

from __future__ import annotations

from weave import auth, migrate
from weave.cli.args import _print
from weave.db import Database
from weave.scanner import backlog
from weave.sql import retention, tenancy


def cmd_migrate(args) -> int:
    url = args.database_url
    migrate.shipped()  # a broken installation creates no database
    migrate.ensure_database(url)
    applied = migrate.apply(url)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    return 0


def cmd_stats(args) -> int:
    figures = Database(args.database_url).read(backlog, count_due=True)
    lines = [
        f"{source}: {figures['due'][source]} due, the oldest for {lag:.1f} s"
        for source, lag in figures["lag_seconds"].items()
    ]
    lines += [f"needs review in {namespace}: {count}" for namespace, count in figures["needs_review"].items()]
    lines += [f"purgeable in {namespace}: {count}" for namespace, count in figures["purgeable"].items()]
    lines.append(f"purge: the oldest purgeable instance is {figures['purge_lag_seconds']:.1f} s past its retention")
    notifications = figures["notifications"]
    lines.append(
        f"notifications: the oldest undelivered for {notifications['oldest_undelivered_seconds']:.1f} s, "
        f"{notifications['failing_subscriptions']} failing subscription(s)"
    )
    _print(args, figures, "\n".join(lines))
    return 0


def cmd_namespace_create(args) -> int:
    result = tenancy.create_namespace(Database(args.database_url), args.namespace)
    _print(args, result, f"created namespace {args.namespace}")
    return 0


def _kept(days: int | None) -> str:
    return "forever" if days is None else f"{days} day(s)"


def cmd_namespace_retention(args) -> int:
    days = None if args.forever else retention.UNCHANGED if args.days is None else args.days
    audit_days = None if args.audit_forever else retention.UNCHANGED if args.audit_days is None else args.audit_days
    result = retention.set_retention(Database(args.database_url), args.namespace, days, audit_days)
    text = (
        f"{args.namespace}: ended instances kept {_kept(result['retention_days'])}, "
        f"audit records {_kept(result['effective_audit_days'])}"
    )
    _print(args, result, text)
    return 0


def cmd_queue_create(args) -> int:
    result = tenancy.create_queue(Database(args.database_url), args.namespace, args.queue, args.permits)
    _print(args, result, f"created queue {args.queue} in {args.namespace} with {args.permits} permit(s)")
    return 0


def cmd_app_create(args) -> int:
    result = tenancy.create_application(Database(args.database_url), args.namespace, args.app, args.signals_per_minute)
    quota = f"{args.signals_per_minute} signal(s)/minute" if args.signals_per_minute is not None else "no quota"
    _print(args, result, f"created application {args.app} in {args.namespace} ({quota})")
    return 0


def cmd_app_status(args) -> int:
    status = "DISABLED" if args.action == "disable" else "ACTIVE"
    result = tenancy.set_application_status(Database(args.database_url), args.namespace, args.app, status)
    _print(args, result, f"application {args.app} in {args.namespace} is {status}")
    return 0


def cmd_credential_create(args) -> int:
    token = auth.new_token()
    created = tenancy.create_credential(
        Database(args.database_url),
        args.namespace,
        args.app,
        args.actor,
        args.scope,
        args.queue or [],
        auth.token_hash(token),
        args.expires_in,
    )
    result = {"credential_id": created["credential_id"], "token": token}
    _print(args, result, f"credential {result['credential_id']} (the token is shown only now):\n{token}")
    return 0


def cmd_credential_revoke(args) -> int:
    result = tenancy.revoke_credential(Database(args.database_url), args.namespace, args.credential_id)
    _print(args, result, f"revoked credential {args.credential_id}")
    return 0
