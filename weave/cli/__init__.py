"""The `weave` command: migrate, serve, scan, dev and admin (docs/rules.md#operating); `workflow`,
`signal` and `definition` talk to a running server through the SDK. One module per family:
`args` (every argument checked while the line is parsed), `serve` (serve, scan), `admin`
(migrate, admin), `dev` (everything on one machine), `client` (workflow, signal over HTTP),
`definitions` (definition over HTTP).

The server-side commands take the database from WEAVE_DATABASE_URL or --database-url; `dev`
starts a private server in ./.weave/ when neither is given.
"""

from __future__ import annotations

import argparse
import os
import sys

import weave
from weave import auth, logs, migrate
from weave.cli import client as cli_client
from weave.cli import definitions as cli_definitions
from weave.cli import inbound as cli_inbound
from weave.cli import notify as cli_notify
from weave.cli.admin import (
    cmd_app_create,
    cmd_app_status,
    cmd_credential_create,
    cmd_credential_revoke,
    cmd_migrate,
    cmd_namespace_create,
    cmd_namespace_retention,
    cmd_queue_create,
    cmd_stats,
)
from weave.cli.args import (
    _actor,
    _cluster_size,
    _credential_id,
    _database_url,
    _expires_in,
    _idle_seconds,
    _name,
    _non_negative,
    _permits,
    _port,
    _positive,
    _resolve_database_url,
    _retention_days,
    _scan_threads,
    _signals_per_minute,
)
from weave.cli.demo import (  # noqa: F401  (tests, docs)
    DEV_DEFINITION,
    DEV_POLL_DEFINITION,
    DEV_POLL_INTERVAL,
    DEV_REVIEW_DEFINITION,
    DEV_REVIEW_WAIT,
)
from weave.cli.dev import cmd_dev
from weave.cli.serve import _server_config, cmd_scan, cmd_serve  # noqa: F401  (_server_config: tests)
from weave.config import (
    BODIES_BUFFERED,
    DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT_SECONDS,
    DEFAULT_MIN_BODY_RATE,
    DEFAULT_PORT,
    DEFAULT_SCAN_IDLE_SECONDS,
    DEFAULT_SCAN_THREADS,
    DEFAULT_THREADS,
)
from weave.db import DatabaseError
from weave.errors import Code, WeaveError, problem_text

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left

# ---- parser --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url", type=_database_url, help="mysql://user:pass@host:port/db (default: $WEAVE_DATABASE_URL)"
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print one JSON object")

    parser = argparse.ArgumentParser(prog="weave", description="Durable workflows on MySQL.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {weave.__version__}")
    # Not required: a bare `weave` prints this help (main), as a bare `pip` does.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser("migrate", parents=[common], help="apply pending schema migrations")
    p.set_defaults(run=cmd_migrate)

    p = commands.add_parser("scan", parents=[common], help="run the scanner loop (inbox, checkpoints, leases)")
    p.add_argument("--once", action="store_true", help="process one batch, print its report and exit")
    p.add_argument(
        "--idle-seconds",
        type=_idle_seconds,
        default=None,
        help="the longest sleep between batches, once idle (shorter while work keeps arriving; "
        f"default: {DEFAULT_SCAN_IDLE_SECONDS})",
    )
    p.add_argument(
        "--threads",
        type=_scan_threads,
        default=None,
        help=f"candidates processed at once (default: {DEFAULT_SCAN_THREADS}); their commits share the log flushes",
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
        p.add_argument(
            "--threads", type=_positive, default=None, help=f"threads of each process (default: {DEFAULT_THREADS})"
        )
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

    admin = commands.add_parser(
        "admin", help="namespaces, queues, applications, credentials, inbound sources, notifications"
    )
    objects = admin.add_subparsers(dest="object", required=True)
    leaf = [common, as_json]

    ns = objects.add_parser("namespace").add_subparsers(dest="action", required=True)
    p = ns.add_parser("create", parents=leaf)
    p.add_argument("namespace", type=_name)
    p.set_defaults(run=cmd_namespace_create)
    p = ns.add_parser(
        "retention",
        parents=leaf,
        help="how long ended instances and audit records are kept (L1); with no option, show it",
    )
    p.add_argument("namespace", type=_name)
    _kept_for(p, "--days", "--forever", "ended instances", "0: at the next pass")
    _kept_for(p, "--audit-days", "--audit-forever", "audit records", "never fewer than --days")
    p.set_defaults(run=cmd_namespace_retention)

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

    cli_inbound.add_commands(objects, leaf)
    cli_notify.add_commands(objects, leaf)

    cli_client.add_commands(commands)
    cli_definitions.add_commands(commands)
    return parser


def _kept_for(p: argparse.ArgumentParser, days: str, forever: str, what: str, note: str) -> None:
    """`days` N or `forever`, one or neither (neither: left as it is)."""
    kept = p.add_mutually_exclusive_group()
    kept.add_argument(days, type=_retention_days, help=f"purge {what} more than N days old ({note})")
    kept.add_argument(forever, action="store_true", help=f"keep {what} forever (the default)")


def _metrics_arguments(p: argparse.ArgumentParser, port_help: str) -> None:
    p.add_argument("--metrics-port", type=_port, default=None, help=port_help)
    p.add_argument("--metrics-host", default=DEFAULT_HOST, help=f"address of --metrics-port (default: {DEFAULT_HOST})")


def _log_format_argument(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--log-format", choices=logs.LOG_FORMATS, default=default, help=f"one line per record (default: {default})"
    )


def _failed(args, code: Code, detail: str, errors: list[dict] | None = None) -> int:
    """A command's failure on standard error, exit status 1: `weave: DETAIL`, or with `--json` the
    problem+json document the API would answer (a program reads errors as it reads answers)."""
    if getattr(args, "json", False):
        print(problem_text(code, detail, errors), file=sys.stderr)
    else:
        print(f"weave: {detail}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    try:
        status = _run(argv)
        sys.stdout.flush()  # inside the try: a reader that left is found here, not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`weave workflow show ID | head`): what is left to print has no one
        # to read it. Python would print a traceback when it flushes stdout at exit; point stdout
        # at /dev/null first, and exit as a program killed by SIGPIPE does in a shell.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `weave`: what it can do, on stdout, and success
        parser.print_help()
        return 0
    # One line per record, escaped: logged values may come from clients.
    logs.install(getattr(args, "log_format", "text"))
    _resolve_database_url(parser, args)
    try:
        return args.run(args)
    except WeaveError as exc:
        return _failed(args, exc.code, exc.detail, exc.errors)
    except (DatabaseError, migrate.MigrationsMissing) as exc:
        return _failed(args, Code.UNAVAILABLE, str(exc))
    except ValueError as exc:
        return _failed(args, Code.BAD_REQUEST, str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
