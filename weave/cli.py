"""The `weave` command: migrate, serve, scan, dev and admin (SPEC §12); `workflow` and `signal`
talk to a running server through the SDK (weave/cli_client.py).

The server-side commands take the database from WEAVE_DATABASE_URL or --database-url; `dev`
starts a private server in ./.weave/ when neither is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import threading
from pathlib import Path

from prometheus_client import start_http_server

from weave import auth, cli_client, logs, metrics, migrate, server
from weave.config import (
    BODIES_BUFFERED,
    DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT_SECONDS,
    DEFAULT_MIN_BODY_RATE,
    DEFAULT_PORT,
    DEFAULT_THREADS,
    Config,
    body_buffer_bytes_from_env,
    header_timeout_from_env,
    idle_timeout_from_env,
    max_body_bytes_from_env,
    max_waiting_claims_from_env,
    min_body_rate_from_env,
)
from weave.db import DEFAULT_POOL_SIZE, Database, DatabaseError
from weave.dburl import DatabaseUrl
from weave.errors import Code, WeaveError
from weave.scanner import IDLE_SECONDS, THREADS, Scanner, backlog
from weave.sql import definitions, tenancy

log = logging.getLogger("weave.cli")

DEV_DIR = Path(".weave")
DEV_NAMESPACE = "demo"
DEV_QUEUE = "default"
DEV_APPLICATION = "demo-app"
# The README walk-through: reserve stock (TASK), wait for the payment (SIGNAL), ship (TASK).
DEV_DEFINITION = {
    "name": "order",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": DEV_QUEUE, "max_attempts": 3, "timeout_seconds": 300},
        {
            "key": "payment",
            "type": "SIGNAL",
            "timeout_seconds": 3600,
            "correlation": "/input/order_id",
            "signal": {
                "name": "payment.settled",
                "payload_version": "v1",
                "payload_schema": {
                    "type": "object",
                    "required": ["amount"],
                    "properties": {"amount": {"type": "number"}},
                },
            },
        },
        {"key": "ship", "type": "TASK", "queue": DEV_QUEUE, "max_attempts": 3, "timeout_seconds": 300},
    ],
}
# The second walk-through: track a parcel (POLL). Query rounds ask the carrier where the parcel is,
# the next one a few seconds after each PENDING answer, while the carrier's webhook may send the
# final answer first. A definition of its own, so that `order` v1 and its walk-through stay as they are.
DEV_POLL_INTERVAL = 5
DEV_POLL_DEFINITION = {
    "name": "shipment",
    "steps": [
        {
            "key": "track",
            "type": "POLL",
            "queue": DEV_QUEUE,
            "interval_seconds": DEV_POLL_INTERVAL,
            "timeout_seconds": 3600,
            "max_attempts": 3,
            "correlation": "/input/tracking_number",
            "final_signal": {
                "name": "shipment.final",
                "payload_version": "v1",
                "payload_schema": {
                    "type": "object",
                    "required": ["status"],
                    "properties": {"status": {"type": "string"}},
                },
            },
        },
    ],
}


# ---- argument checks --------------------------------------------------------------------------------
# Every argument is checked while the command line is parsed, before any database work: a refusal
# is a usage error with argparse's exit status 2 and says which argument and why. The bounds are
# listed in README "Admin commands: what each argument accepts".

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # the API's names (docs/decisions.md), matched whole
DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what `weave migrate` can create
DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() would also take " 7", "7_0" and other scripts' digits
ACTOR_MAX_CHARS = 128  # credentials.actor and audit_records.actor are VARCHAR(128) (characters)
RESERVED_ACTOR_PREFIX = "system:"  # Weave's own actors in audit: system:admin, system:scanner
MAX_PERMITS = 1_000_000  # far above any worker fleet; catches a slipped finger, fits INT UNSIGNED
MAX_SIGNALS_PER_MINUTE = 2**32 - 1  # applications.signals_per_minute is INT UNSIGNED
MAX_EXPIRES_IN_SECONDS = 10 * 365 * 86_400  # ten years; expires_at stays far inside DATETIME
MAX_ID = 2**64 - 1  # BIGINT UNSIGNED keys
MAX_IDLE_SECONDS = 3600
SHOWN_CHARS = 40


def _shown(text: str) -> str:
    """An argument as a message quotes it: escaped (no control character reaches the terminal), short."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


def _name(text: str) -> str:
    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: use 1-64 of A-Z a-z 0-9 _ . -")
    return text


def _integer(low: int, high: int, unit: str = ""):
    """An argparse type: a whole number written in ASCII digits, from `low` to `high`."""

    def parse(text: str) -> int:
        if not (DIGITS.fullmatch(text) and len(text) <= len(str(high)) and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: must be a whole number from {low} to {high}{unit}")
        return int(text)

    return parse


_positive = _integer(1, 2**31 - 1)  # serve's counts and sizes: their real limits are the machine's
_non_negative = _integer(0, 2**31 - 1)
_port = _integer(0, 65535)  # 0: the system picks a free port
_scan_threads = _integer(1, DEFAULT_POOL_SIZE)  # each holds one of the pool's connections
# Fewer than 3 Galera nodes cannot tell a dead peer from a cut network: none would keep a quorum.
_cluster_size = _integer(3, 9, " nodes")
_credential_id = _integer(1, MAX_ID)
_permits = _integer(1, MAX_PERMITS)
_signals_per_minute = _integer(0, MAX_SIGNALS_PER_MINUTE)
_expires_in = _integer(1, MAX_EXPIRES_IN_SECONDS, " seconds (ten years)")


def _idle_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_IDLE_SECONDS:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be a number of seconds from 0 to {MAX_IDLE_SECONDS}")
    return seconds


def _actor(text: str) -> str:
    """The name audit records for every call made with the credential: one printable line."""
    if not 1 <= len(text) <= ACTOR_MAX_CHARS:
        problem = f"must be 1 to {ACTOR_MAX_CHARS} characters (got {len(text)})"
    elif not text.isprintable():  # control (newline, ESC), format (bidi overrides) and separator characters
        problem = "must be printable: no control, format or line-separator characters"
    elif text != text.strip():
        problem = "must not start or end with a space"
    elif text.startswith(RESERVED_ACTOR_PREFIX):
        problem = f"{RESERVED_ACTOR_PREFIX!r} is reserved for Weave's own actors in audit"
    else:
        return text
    raise argparse.ArgumentTypeError(f"{_shown(text)}: {problem}")


def _database_url(text: str) -> DatabaseUrl:
    try:
        url = DatabaseUrl.parse(text)
    except ValueError as exc:  # its messages never repeat the URL, which may hold a password
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not DATABASE_NAME.fullmatch(url.database):
        raise argparse.ArgumentTypeError(f"database name {_shown(url.database)}: use 1-64 of A-Z a-z 0-9 _ -")
    return url


def _resolve_database_url(parser: argparse.ArgumentParser, args) -> None:
    """Fill in `args.database_url` from WEAVE_DATABASE_URL (checked like the flag) when the flag is
    absent; only `dev` may go without, and starts its own server then."""
    if "database_url" not in vars(args) or args.database_url is not None:
        return
    text = os.environ.get("WEAVE_DATABASE_URL")
    if text:
        try:
            args.database_url = _database_url(text)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"WEAVE_DATABASE_URL: {exc}")
    elif args.command != "dev":
        parser.error("set WEAVE_DATABASE_URL=mysql://user:pass@host:port/db or pass --database-url")


def _print(args, result: dict, text: str) -> None:
    print(json.dumps(result) if args.json else text)


# ---- commands ------------------------------------------------------------------------------------


def cmd_migrate(args) -> int:
    url = args.database_url
    migrate.shipped()  # a broken installation creates no database
    migrate.ensure_database(url)
    applied = migrate.apply(url)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    return 0


def _server_config(args, url: DatabaseUrl) -> Config:
    """What `serve` and `dev` give each API process: flags first, then the environment, then defaults."""
    return Config(
        database_url=url.url(),
        max_body_bytes=args.max_body_bytes or max_body_bytes_from_env(),
        threads=args.threads,
        idle_timeout_seconds=args.idle_timeout or idle_timeout_from_env(),
        max_waiting_claims=max_waiting_claims_from_env()
        if args.max_waiting_claims is None
        else args.max_waiting_claims,
        header_timeout_seconds=args.header_timeout or header_timeout_from_env(),
        min_body_rate=args.min_body_rate or min_body_rate_from_env(),
        body_buffer_bytes=args.body_buffer_bytes or body_buffer_bytes_from_env(),
    )


def cmd_serve(args) -> int:
    metrics_address = None if args.metrics_port is None else (args.metrics_host, args.metrics_port)
    if metrics_address == (args.host, args.port) and args.port != 0:
        # with --processes N every socket is SO_REUSEPORT: the two would share the port, not refuse it
        print(f"weave: --metrics-port {args.port} is the API's own port on {args.host}", file=sys.stderr)
        return 2
    server.serve(_server_config(args, args.database_url), args.host, args.port, args.processes, metrics_address)
    return 0


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so that `finally` blocks (stopping the private server) run."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _stop_on_signals() -> threading.Event:
    """SIGTERM and SIGINT ask the scanner to stop after its current transaction."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def cmd_scan(args) -> int:
    database = Database(args.database_url)
    scanner = Scanner(database, idle_seconds=args.idle_seconds, threads=args.threads)
    if args.once:
        print(scanner.run_once().line())
        return 0
    if args.metrics_port is not None:
        exposed = metrics.registry(lambda: database.attempt(backlog))
        try:
            http_server, _ = start_http_server(args.metrics_port, args.metrics_host, exposed)
        except OSError as exc:
            print(f"weave: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}", file=sys.stderr)
            return 1
        log.info("metrics on http://%s:%d/metrics", args.metrics_host, http_server.server_port)
    scanner.run(_stop_on_signals())
    return 0


def cmd_stats(args) -> int:
    figures = Database(args.database_url).read(backlog, count_due=True)
    lines = [
        f"{source}: {figures['due'][source]} due, the oldest for {lag:.1f} s"
        for source, lag in figures["lag_seconds"].items()
    ]
    lines += [f"needs review in {namespace}: {count}" for namespace, count in figures["needs_review"].items()]
    _print(args, figures, "\n".join(lines))
    return 0


def cmd_dev(args) -> int:
    _exit_on_sigterm()
    url = scanner_url = args.database_url
    database_server = None
    if url is None and args.cluster:
        from weave.devdb import GaleraCluster

        print(f"starting a {args.cluster}-node Galera cluster in {DEV_DIR / 'galera'} ...", flush=True)
        database_server = GaleraCluster(DEV_DIR / "galera", args.cluster).start()
        url = DatabaseUrl.parse(database_server.url("weave"))
        scanner_url = url.on_host(1)
    elif url is None:
        from weave.devdb import PrivateServer

        database_server = PrivateServer(DEV_DIR / "mariadb").start()
        url = scanner_url = DatabaseUrl.parse(database_server.url("weave"))
    try:
        migrate.ensure_database(url)
        migrate.apply(url)
        database = Database(url)
        client_token, worker_token = _dev_tenant(database)
        base = f"http://{args.host}:{args.port}"
        exports = {
            "WEAVE_URL": base,
            "WEAVE_NAMESPACE": DEV_NAMESPACE,
            "WEAVE_TOKEN": client_token,
            "WEAVE_WORKER_TOKEN": worker_token,
        }
        start = json.dumps({"order_id": "o-1"})
        print(f"Weave dev: {base}  (database {url.yoyo_url()})")
        if args.cluster and args.database_url is None:
            print(f"Galera cluster of {args.cluster} nodes (WEAVE_DATABASE_URL for more processes): {url.url()}")
        print(
            f"namespace {DEV_NAMESPACE}, queue {DEV_QUEUE}, definitions order v1 (reserve -> payment -> ship) "
            f"and shipment v1 (track: POLL, {DEV_POLL_INTERVAL} s between rounds)"
        )
        print(f"client token (all workflow scopes): {client_token}")
        print(f"worker token (tasks:work on {DEV_QUEUE}):   {worker_token}")
        print(
            "in another terminal (`weave workflow ...`, `weave signal ...`, scripts/example_worker.py; see the README):"
        )
        print("  export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in exports.items()))
        print(
            f"  weave workflow start order --version 1 --id order-1 --input {shlex.quote(start)} --deadline-seconds 3600"
        )
        sys.stdout.flush()
        stop = threading.Event()
        scanner = threading.Thread(target=Scanner(Database(scanner_url)).run, args=(stop,), name="scanner", daemon=True)
        scanner.start()
        try:
            server.serve(_server_config(args, url), args.host, args.port)
        finally:
            stop.set()
            scanner.join(timeout=10)
    finally:
        if database_server is not None:
            database_server.stop()
    return 0


def _dev_tenant(database: Database) -> tuple[str, str]:
    """The demo namespace (created once, kept across runs) and two fresh tokens."""
    try:
        tenancy.create_namespace(database, DEV_NAMESPACE)
        tenancy.create_queue(database, DEV_NAMESPACE, DEV_QUEUE, 4)
        tenancy.create_application(database, DEV_NAMESPACE, DEV_APPLICATION, None)
    except WeaveError as exc:
        if exc.code is not Code.INVALID_STATE:
            raise
    client_token, worker_token = auth.new_token(), auth.new_token()
    client_scopes = sorted(auth.SCOPES - {"tasks:work"})
    tenancy.create_credential(
        database,
        DEV_NAMESPACE,
        DEV_APPLICATION,
        "dev-client",
        client_scopes,
        [DEV_QUEUE],
        auth.token_hash(client_token),
        None,
    )
    tenancy.create_credential(
        database,
        DEV_NAMESPACE,
        DEV_APPLICATION,
        "dev-worker",
        ["tasks:work"],
        [DEV_QUEUE],
        auth.token_hash(worker_token),
        None,
    )
    principal = tenancy.authenticate(database, auth.token_hash(client_token))
    for document in (DEV_DEFINITION, DEV_POLL_DEFINITION):  # an unchanged document keeps its version (D1)
        definitions.publish_definition(
            database, principal.namespace_id, document, principal.credential_id, principal.actor
        )
    return client_token, worker_token


def cmd_namespace_create(args) -> int:
    result = tenancy.create_namespace(Database(args.database_url), args.namespace)
    _print(args, result, f"created namespace {args.namespace}")
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


# ---- parser --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url", type=_database_url, help="mysql://user:pass@host:port/db (default: $WEAVE_DATABASE_URL)"
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print one JSON object")

    parser = argparse.ArgumentParser(prog="weave", description="Durable workflows on MySQL.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("migrate", parents=[common], help="apply pending schema migrations")
    p.set_defaults(run=cmd_migrate)

    p = commands.add_parser("scan", parents=[common], help="run the scanner loop (inbox, checkpoints, leases)")
    p.add_argument("--once", action="store_true", help="process one batch, print its report and exit")
    p.add_argument(
        "--idle-seconds",
        type=_idle_seconds,
        default=IDLE_SECONDS,
        help="the longest sleep between batches, once idle (shorter while work keeps arriving)",
    )
    p.add_argument(
        "--threads",
        type=_scan_threads,
        default=THREADS,
        help=f"candidates processed at once (default: {THREADS}); their commits share the log flushes",
    )
    _metrics_arguments(p, "serve Prometheus metrics on this port (default: none)")
    _log_format_argument(p, "json")
    p.set_defaults(run=cmd_scan)

    for name, help_text, run, log_format in (
        ("serve", "serve the HTTP API with waitress", cmd_serve, "json"),
        ("dev", "private database, demo tenant and server on this machine", cmd_dev, "text"),
    ):
        p = commands.add_parser(name, parents=[common], help=help_text)
        _log_format_argument(p, log_format)
        p.add_argument("--host", default=DEFAULT_HOST)
        p.add_argument("--port", type=_port, default=DEFAULT_PORT)
        p.add_argument("--threads", type=_positive, default=DEFAULT_THREADS)
        p.add_argument(
            "--max-body-bytes",
            type=_positive,
            default=None,
            help="request bodies above this get 413 before they are read (default: $WEAVE_MAX_BODY_BYTES or 1 MiB)",
        )
        p.add_argument(
            "--idle-timeout",
            type=_positive,
            default=None,
            metavar="SECONDS",
            help="close a connection that has sent nothing for this long with no request in progress "
            f"(default: $WEAVE_IDLE_TIMEOUT or {DEFAULT_IDLE_TIMEOUT_SECONDS})",
        )
        p.add_argument(
            "--header-timeout",
            type=_positive,
            default=None,
            metavar="SECONDS",
            help="close a connection whose request line and headers have not all arrived this long after "
            f"the request's first byte (default: $WEAVE_HEADER_TIMEOUT or {DEFAULT_HEADER_TIMEOUT_SECONDS})",
        )
        p.add_argument(
            "--min-body-rate",
            type=_positive,
            default=None,
            metavar="BYTES_PER_SECOND",
            help="close a connection whose request body arrives slower than this "
            f"(default: $WEAVE_MIN_BODY_RATE or {DEFAULT_MIN_BODY_RATE})",
        )
        p.add_argument(
            "--body-buffer-bytes",
            type=_positive,
            default=None,
            help="request bodies one process holds at once, in memory and temporary files; a body beyond "
            f"it gets 503 (default: $WEAVE_BODY_BUFFER_BYTES or {BODIES_BUFFERED} times --max-body-bytes)",
        )
        p.add_argument(
            "--max-waiting-claims",
            type=_non_negative,
            default=None,
            help="long-polling claims one process lets wait, below --threads; beyond it a claim answers "
            "204 with Retry-After at once (default: $WEAVE_MAX_WAITING_CLAIMS or half of --threads)",
        )
        if name == "dev":
            p.add_argument(
                "--cluster",
                type=_cluster_size,
                default=None,
                metavar="N",
                help="a private MariaDB Galera cluster of N nodes instead of one server; the API uses "
                "node 0 first, the scanner node 1 first, each failing over to the others",
            )
        if name == "serve":
            p.add_argument(
                "--processes",
                type=_positive,
                default=1,
                help="API worker processes sharing the port (a Python process runs on one core)",
            )
            _metrics_arguments(
                p, "serve GET /metrics on this port, for every process, instead of on --port (default: on --port)"
            )
        p.set_defaults(run=run)

    admin = commands.add_parser("admin", help="namespaces, queues, applications, credentials")
    objects = admin.add_subparsers(dest="object", required=True)
    leaf = [common, as_json]

    ns = objects.add_parser("namespace").add_subparsers(dest="action", required=True)
    p = ns.add_parser("create", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.set_defaults(run=cmd_namespace_create)

    queue = objects.add_parser("queue").add_subparsers(dest="action", required=True)
    p = queue.add_parser("create", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.add_argument("queue", type=_name)
    p.add_argument("--permits", type=_permits, required=True, help="max concurrently running tasks")
    p.set_defaults(run=cmd_queue_create)

    app = objects.add_parser("app").add_subparsers(dest="action", required=True)
    p = app.add_parser("create", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.add_argument("app", type=_name)
    p.add_argument(
        "--signals-per-minute", type=_signals_per_minute, default=None, help="signal quota (none when absent)"
    )
    p.set_defaults(run=cmd_app_create)
    for action in ("disable", "enable"):
        p = app.add_parser(action, parents=leaf)
        p.add_argument("namespace", type=_name)
        p.add_argument("app", type=_name)
        p.set_defaults(run=cmd_app_status)

    p = objects.add_parser(
        "stats", parents=leaf, help="what waits for the scanners (due candidates, lag) and for operators (reviews)"
    )
    p.set_defaults(run=cmd_stats)

    cred = objects.add_parser("credential").add_subparsers(dest="action", required=True)
    p = cred.add_parser("create", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.add_argument("app", type=_name)
    p.add_argument("--actor", type=_actor, required=True, help="name recorded in audit for this credential")
    p.add_argument("--scope", action="append", required=True, choices=sorted(auth.SCOPES))
    p.add_argument("--queue", action="append", type=_name, help="queue grant (repeatable)")
    p.add_argument("--expires-in", type=_expires_in, default=None, metavar="SECONDS")
    p.set_defaults(run=cmd_credential_create)
    p = cred.add_parser("revoke", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.add_argument("credential_id", type=_credential_id)
    p.set_defaults(run=cmd_credential_revoke)

    cli_client.add_commands(commands)
    return parser


def _metrics_arguments(p: argparse.ArgumentParser, port_help: str) -> None:
    p.add_argument("--metrics-port", type=_port, default=None, help=port_help)
    p.add_argument("--metrics-host", default=DEFAULT_HOST, help=f"address of --metrics-port (default: {DEFAULT_HOST})")


def _log_format_argument(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--log-format", choices=logs.LOG_FORMATS, default=default, help=f"one line per record (default: {default})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # One line per record, escaped: logged values may come from clients.
    logs.install(getattr(args, "log_format", "text"))
    _resolve_database_url(parser, args)
    try:
        return args.run(args)
    except WeaveError as exc:
        print(f"weave: {exc.detail}", file=sys.stderr)
        return 1
    except (DatabaseError, ValueError, migrate.MigrationsMissing) as exc:
        print(f"weave: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
