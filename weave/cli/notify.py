"""`weave admin notify …`: the operator's side of outbound notifications (docs/rules.md#notifications,
N1, N3).

`create` makes the subscription's Standard Webhooks secret (`whsec_` + base64 of random bytes),
encrypts it with WEAVE_SECRET_KEY before it reaches the database, and prints it once: it is never
shown again (a lost secret means delete and create). The URL and the event types are checked
(`weave.rules.subscriptions`) before anything is stored.
"""

from __future__ import annotations

import argparse

from weave.cli.args import _integer, _name, _print, _shown
from weave.cli.inbound import keyring
from weave.db import Database
from weave.rules import notify, subscriptions
from weave.sql import notifications
from weave.statuses import NotificationStatus

_limit = _integer(1, 1000)
_cursor = _integer(1, 2**64 - 1)


def _url(text: str) -> str:
    problem = subscriptions.url_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {problem}")
    return text


def _event(text: str) -> str:
    if subscriptions.unknown_events([text]):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)}: not an event type; one of {', '.join(subscriptions.EVENT_TYPES)}"
        )
    return text


def add_commands(objects, leaf: list[argparse.ArgumentParser]) -> None:
    """`notify …` under `weave admin`."""
    notify = objects.add_parser("notify", help="endpoints notified of a namespace's events (N1)").add_subparsers(
        dest="action", required=True
    )
    p = notify.add_parser("create", parents=leaf, help="subscribe an endpoint; prints its signing secret once")
    _subscription_arguments(p)
    p.add_argument("--url", type=_url, required=True, help="the http or https endpoint notifications are POSTed to")
    p.add_argument(
        "--event",
        type=_event,
        action="append",
        required=True,
        help=f"event type (repeatable): {', '.join(subscriptions.EVENT_TYPES)}",
    )
    p.set_defaults(run=cmd_notify_create)
    p = notify.add_parser("list", parents=leaf, help="the namespace's subscriptions (never a secret)")
    p.add_argument("namespace", type=_name)
    p.set_defaults(run=cmd_notify_list)
    p = notify.add_parser("disable", parents=leaf, help="send nothing more; pending notifications are dropped")
    _subscription_arguments(p)
    p.set_defaults(run=cmd_notify_disable)
    p = notify.add_parser("delete", parents=leaf, help="delete a subscription with its notifications and attempts")
    _subscription_arguments(p)
    p.set_defaults(run=cmd_notify_delete)
    p = notify.add_parser(
        "deliveries", parents=leaf, help="a subscription's notifications, newest first, with attempts"
    )
    _subscription_arguments(p)
    p.add_argument("--status", choices=[s.value for s in NotificationStatus], default=None)
    p.add_argument("--limit", type=_limit, default=20, help="how many (1-1000, default 20)")
    p.add_argument("--after", type=_cursor, default=None, help="only notifications with ids below this one")
    p.set_defaults(run=cmd_notify_deliveries)


def _subscription_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", type=_name)
    p.add_argument("name", type=_name)


def cmd_notify_create(args) -> int:
    ring = keyring()
    events = list(dict.fromkeys(args.event))  # a type given twice is one type
    secret = notify.new_secret()
    created = notifications.create_subscription(
        Database(args.database_url), args.namespace, args.name, args.url, events, ring.encrypt(secret)
    )
    _print(
        args,
        {"subscription_id": created["subscription_id"], "secret": secret},
        f"created subscription {args.name} in {args.namespace} ({', '.join(created['events'])} -> {args.url})\n"
        f"its signing secret, shown only now:\n{secret}",
    )
    return 0


def cmd_notify_list(args) -> int:
    listed = notifications.list_subscriptions(Database(args.database_url), args.namespace)
    lines = [
        f"{s['name']}: {s['status']}{', FAILING since ' + s['failing_since'] if s['failing_since'] else ''}, "
        f"{s['url']}, events {' '.join(s['events'])}"
        for s in listed
    ]
    _print(args, {"subscriptions": listed}, "\n".join(lines) or f"no subscription in {args.namespace}")
    return 0


def cmd_notify_disable(args) -> int:
    disabled = notifications.disable_subscription(Database(args.database_url), args.namespace, args.name)
    _print(
        args,
        disabled,
        f"disabled subscription {args.name} in {args.namespace}: {disabled['dropped']} pending notification(s) dropped",
    )
    return 0


def cmd_notify_delete(args) -> int:
    deleted = notifications.delete_subscription(Database(args.database_url), args.namespace, args.name)
    _print(
        args,
        deleted,
        f"deleted subscription {args.name} in {args.namespace} with its "
        f"{deleted['notifications_deleted']} notification(s)",
    )
    return 0


def cmd_notify_deliveries(args) -> int:
    listed = notifications.list_deliveries(
        Database(args.database_url), args.namespace, args.name, args.status, args.after, args.limit
    )
    lines = []
    for d in listed:
        lines.append(
            f"{d['notification_id']} {d['event_type']} {d['status']} occurred {d['occurred_at']}"
            f"{' workflow ' + d['workflow_id'] if d['workflow_id'] else ''}, {len(d['attempts'])} attempt(s)"
            f"{', delivered ' + d['delivered_at'] if d['delivered_at'] else ''}"
            f"{', next ' + d['due_at'] if d['due_at'] else ''}"
        )
        for a in d["attempts"]:
            outcome = f"HTTP {a['http_status']}" if a["http_status"] is not None else "no answer"
            lines.append(
                f"    {a['attempted_at']} {outcome} in {a['duration_ms']} ms{': ' + a['error'] if a['error'] else ''}"
            )
    _print(args, {"deliveries": listed}, "\n".join(lines) or f"no notification for {args.name} in {args.namespace}")
    return 0
