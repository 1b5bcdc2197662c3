"""`weave dev`: everything on one machine (a private database, the demo tenant, a scanner and the API)."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from pathlib import Path

from weave import auth, migrate, server
from weave.cli.serve import _exit_on_sigterm, _server_config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.errors import Code, WeaveError
from weave.scanner import Scanner
from weave.sql import definitions, tenancy

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
