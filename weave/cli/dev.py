"""`weave dev`: everything on one machine (a private database, the demo tenant, a scanner and the API)."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import sys
import threading
from pathlib import Path

from weave import auth, migrate, server
from weave.cli.demo import DEV_DEFINITIONS, DEV_POLL_INTERVAL, DEV_QUEUE, DEV_REVIEW_WAIT
from weave.cli.serve import _exit_on_sigterm, _server_config, deliveries_of
from weave.config import Config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.errors import Code, WeaveError
from weave.scanner import Scanner, scanned
from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key
from weave.sql import definitions, tenancy

DEV_DIR = Path(".weave")
DEV_NAMESPACE = "demo"
DEV_APPLICATION = "demo-app"
OPS_SCOPES = frozenset({"workflows:read", "workflows:review", "workflows:control"})
DEV_LOCK = DEV_DIR / "dev.lock"  # held by the running `weave dev` of this folder: its pid and URL
DEV_ENV = DEV_DIR / "env"  # the database's URL, the secret key and the tokens, for a shell
DEV_SECRET_KEY = DEV_DIR / "secret-key"  # this folder's WEAVE_SECRET_KEY, made on the first start


def cmd_dev(args) -> int:
    _exit_on_sigterm()
    # In this order, so that a second `weave dev` here, or a port in use, changes nothing: the
    # folder's lock, then the port, then the database and the tokens.
    lock = _hold_folder()
    if lock is None:
        return 1
    try:
        (listener,) = server.listen(args.host, args.port)
        base = f"http://{args.host}:{listener.getsockname()[1]}"
        _write_holder(lock, base)
        with listener:
            return _run(args, listener, base)
    finally:
        os.close(lock)  # after the database has stopped: the next `weave dev` here may start it


def _hold_folder() -> int | None:
    """The lock of `./.weave/` (fcntl.flock on DEV_LOCK), held until this process ends however it
    ends: a second `weave dev` in the same folder finds it held, says who holds it and stops. A pid
    file alone would outlive a killed process and name a pid that may be another program's."""
    DEV_DIR.mkdir(exist_ok=True)
    lock = os.open(DEV_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(lock)
        os.close(lock)
        print(
            f"Weave is already running from this folder ({holder}): use that one, stop it first, "
            "or start another in another folder",
            file=sys.stderr,
        )
        return None
    _write_holder(lock, None)
    return lock


def _write_holder(lock: int, url: str | None) -> None:
    os.ftruncate(lock, 0)
    os.pwrite(lock, json.dumps({"pid": os.getpid(), "url": url}).encode(), 0)


def _read_holder(lock: int) -> str:
    try:
        holder = json.loads(os.pread(lock, 4096, 0))
        return f"pid {int(holder['pid'])}, {holder['url'] or 'not listening yet'}"
    except (ValueError, KeyError, TypeError):  # written between our read and its write
        return "starting"


def _run(args, listener, base: str) -> int:
    # Before the database starts (a malformed key stops nothing half-way); the server below, in
    # this process, reads it from the environment as `weave serve` does.
    secret_key = os.environ[SECRET_KEY_VARIABLE] = _secret_key()
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
        tokens = _dev_tenant(database)
        exports = {"WEAVE_URL": base, "WEAVE_NAMESPACE": DEV_NAMESPACE, **tokens}
        env_file = _write_env(url, secret_key, exports)
        start = json.dumps({"order_id": "o-1"})
        print(f"Weave dev: {base}  (database {url.yoyo_url()})")
        print(f"review console: {base}/console/  (sign in with the client or the operator token)")
        if args.cluster and args.database_url is None:
            print(f"Galera cluster of {args.cluster} nodes (WEAVE_DATABASE_URL for more processes): {url.url()}")
        print(
            f"namespace {DEV_NAMESPACE}, queue {DEV_QUEUE}, definitions order v1 (reserve -> payment -> ship), "
            f"shipment v1 (track: POLL, {DEV_POLL_INTERVAL} s between rounds) "
            f"and refund v1 (approve: SIGNAL, a wait of {DEV_REVIEW_WAIT} s)"
        )
        for label, name in (
            ("client token (all workflow scopes)", "WEAVE_TOKEN"),
            (f"worker token (tasks:work on {DEV_QUEUE})", "WEAVE_WORKER_TOKEN"),
            ("operator token (workflows:read, review, control)", "WEAVE_OPS_TOKEN"),
        ):
            print(f"{label + ':':50}{tokens[name]}")
        print(
            "in another terminal (`weave workflow ...`, `weave signal ...`, scripts/example_worker.py; see the README), "
            f"paste this line, or `. {env_file}`, which also sets WEAVE_DATABASE_URL for `weave admin ...`:"
        )
        print("  " + _export_line(exports))
        print(
            f"  weave workflow start order --version 1 --id order-1 --input {shlex.quote(start)} --deadline-seconds 3600"
        )
        sys.stdout.flush()
        stop = threading.Event()
        scanning = Config.from_env(serving=False)  # the key written above, the notifications' settings
        scanner_database = Database(scanner_url, pool_size=scanning.pool_size + scanning.notify_deliveries)
        scanning_loop = Scanner(
            scanner_database,
            sources=scanned(scanning.purge_share),
            deliveries=deliveries_of(scanning, scanner_database),
        )
        scanner = threading.Thread(target=scanning_loop.run, args=(stop,), name="scanner", daemon=True)
        scanner.start()
        try:
            server.serve(_server_config(args, url), args.host, args.port, api=[listener])
        finally:
            stop.set()
            scanner.join(timeout=10)
    finally:
        if database_server is not None:
            database_server.stop()
    return 0


def _export_line(values: dict[str, str]) -> str:
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


def _secret_key() -> str:
    """The WEAVE_SECRET_KEY of this run: the environment's when it has one, else this folder's,
    made on the first start (readable by its owner only) and the same on every start after, so
    that the inbound secrets stored in the database stay readable. ValueError when malformed."""
    if Keyring.from_env() is not None:
        return os.environ[SECRET_KEY_VARIABLE]
    try:
        descriptor = os.open(DEV_SECRET_KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # the folder's lock is ours: no other `weave dev` is writing it now
        key = DEV_SECRET_KEY.read_text().strip()
        Keyring([key])
        return key
    key = new_key()
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key


def _write_env(url: DatabaseUrl, secret_key: str, exports: dict[str, str]) -> Path:
    """./.weave/env: the server's settings (the database's URL, the secret key) and this run's
    exports, for a shell (`. .weave/env`). Only its owner may read it: it holds tokens, the key
    (and the database's password, if the URL has one)."""
    lines = [
        f"# Written by `weave dev` (pid {os.getpid()}) for this folder; each start writes it again.",
        _export_line({"WEAVE_DATABASE_URL": url.url(), SECRET_KEY_VARIABLE: secret_key}),
        _export_line(exports),
    ]
    descriptor = os.open(DEV_ENV, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as env:
        env.write("\n".join(lines) + "\n")
    os.chmod(DEV_ENV, 0o600)  # a file from before may have had other permissions
    return DEV_ENV.resolve()


def _dev_tenant(database: Database) -> dict[str, str]:
    """The demo namespace (created once, kept across runs) and three fresh tokens, by the names
    the banner exports them as."""
    try:
        tenancy.create_namespace(database, DEV_NAMESPACE)
        tenancy.create_queue(database, DEV_NAMESPACE, DEV_QUEUE, 4)
        tenancy.create_application(database, DEV_NAMESPACE, DEV_APPLICATION, None)
    except WeaveError as exc:
        if exc.code is not Code.INVALID_STATE:
            raise
    client_token, worker_token, ops_token = auth.new_token(), auth.new_token(), auth.new_token()
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
    # An operator's: what the README's repair walk-through uses (review, and pause/resume/cancel).
    tenancy.create_credential(
        database,
        DEV_NAMESPACE,
        DEV_APPLICATION,
        "dev-operator",
        sorted(OPS_SCOPES),
        [DEV_QUEUE],
        auth.token_hash(ops_token),
        None,
    )
    principal = tenancy.authenticate(database, auth.token_hash(client_token))
    for document in DEV_DEFINITIONS:  # an unchanged document keeps its version (D1)
        definitions.publish_definition(
            database, principal.namespace_id, document, principal.credential_id, principal.actor
        )
    return {"WEAVE_TOKEN": client_token, "WEAVE_WORKER_TOKEN": worker_token, "WEAVE_OPS_TOKEN": ops_token}
