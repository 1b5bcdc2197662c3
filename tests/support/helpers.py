"""Plain helpers that test modules import (`from helpers import ...`); fixtures stay in conftest.py.

`Tenant`/`make_tenant` set up a namespace to test in, `Flow` drives workflows through the HTTP API
and the scanner, `serving` runs a real waitress server in a thread (`read_answer` reads an answer
off a raw socket), and the rest are definition documents and signal bodies that several tests share.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import io
import json
import logging
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from clock import ControlledClock
from waitress import wasyncore

from weave import auth, logs
from weave.cli.demo import PAYMENT_STEP, payment_signal
from weave.db import Database
from weave.devdb import free_port
from weave.processes import die_with_parent
from weave.sql import tenancy
from weave.tx import DatabaseClock


def empty_database(database: Database, tables: list[str], clock: ControlledClock) -> None:
    """Every Weave table empty and the clock back at its start: what the `database` fixture does
    before each test, and a hypothesis test before each of its examples."""
    clock.set(ControlledClock().now())
    database.before_commit = None

    def empty(tx):
        for table in tables:
            tx.execute(f"DELETE FROM `{table}`")  # names come from information_schema, not input

    database.run(empty)


@dataclass
class Tenant:
    """One namespace with an application and queues, and a way to mint credentials in it."""

    database: Database
    namespace: str
    application: str

    def token(
        self,
        *scopes: str,
        queues: tuple[str, ...] = (),
        actor: str = "tester",
        expires_in: int | None = None,
        application: str | None = None,
    ) -> str:
        token = auth.new_token()
        tenancy.create_credential(
            self.database,
            self.namespace,
            application or self.application,
            actor,
            list(scopes),
            list(queues),
            auth.token_hash(token),
            expires_in,
        )
        return token

    def headers(self, *scopes: str, **kwargs) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(*scopes, **kwargs)}"}

    def principal(self, *scopes: str, **kwargs) -> auth.Principal:
        """What a request with a new credential of these scopes and grants is authorized as."""
        return tenancy.authenticate(self.database, auth.token_hash(self.token(*scopes, **kwargs)))


@contextlib.contextmanager
def captured_log(level: int, log_format: str = "text"):
    """Every record of the process at `level` and above, as the `weave` commands write them (one
    line each, in `log_format`), into the StringIO this yields."""
    buffer = io.StringIO()
    handler = logs.handler(buffer, log_format)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


@contextlib.contextmanager
def serving(server):
    """Run a waitress server (from `weave.server.create_server`) in a thread; stop it afterwards."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.task_dispatcher.shutdown()
        wasyncore.close_all(server._map)  # every connection and the listener: the loop then ends
        thread.join(10)


def read_message(conn: socket.socket) -> bytes:
    """One whole HTTP/1.1 request or response off a raw socket (headers, then Content-Length bytes);
    what arrived before the peer closed, b"" when nothing did."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class HttpFront:
    """A TCP listener on 127.0.0.1 (`url`) in front of an HTTP server on `upstream_port`, for tests
    that make the way to the server misbehave: each connection it accepts is served in a thread of
    its own by `serve_connection` (a subclass's), which takes what to do from `plan`, in order
    (`next_behaviour`; "forward" once the plan is used up)."""

    def __init__(self, upstream_port: int, plan: list[str]):
        self.upstream_port = upstream_port
        self.plan = list(plan)
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def next_behaviour(self) -> str:
        return self.plan.pop(0) if self.plan else "forward"

    def serve_connection(self, conn: socket.socket, number: int) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.serve_connection, args=(conn, self.connections), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def read_answer(sock: socket.socket) -> Answer:
    """One response read off a raw socket, framed by its Content-Length (every answer of Weave and
    of waitress has one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection before answering: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection in the middle of a body"
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body[:length])


def make_tenant(database: Database, namespace: str, queues: dict[str, int]) -> Tenant:
    tenancy.create_namespace(database, namespace)
    tenancy.create_application(database, namespace, "app", None)
    for name, permits in queues.items():
        tenancy.create_queue(database, namespace, name, permits)
    return Tenant(database, namespace, "app")


class Flow:
    """Drives workflows through the HTTP API the way clients and workers do, plus the scanner."""

    def __init__(self, client, tenant: Tenant, database: Database):
        from weave.scanner import Scanner

        self.client = client
        self.database = database
        self.tenant = tenant
        self.ns = f"/v1/namespaces/{tenant.namespace}"
        self.headers = tenant.headers(
            "definitions:write", "workflows:start", "workflows:read", queues=("inventory", "carrier")
        )
        self.worker = tenant.headers("tasks:work", queues=("inventory", "carrier"), actor="worker")
        self.signaller = tenant.headers(
            "workflows:signal", "workflows:read", queues=("inventory", "carrier"), actor="payments-bot"
        )
        self.scanner = Scanner(database)

    def publish(self, document: dict) -> int:
        result = self.client.simulate_post(f"{self.ns}/definitions", json=document, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json["version"]

    def start(
        self, workflow_id: str, definition: str = "flow", version: int = 1, input=None, deadline_seconds: int = 3600
    ) -> dict:
        body = {
            "definition": definition,
            "version": version,
            "input": input if input is not None else {},
            "deadline_seconds": deadline_seconds,
            "workflow_id": workflow_id,
        }
        result = self.client.simulate_post(f"{self.ns}/workflows", json=body, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json

    def workflow(self, workflow_id: str) -> dict:
        result = self.client.simulate_get(f"{self.ns}/workflows/{workflow_id}", headers=self.headers)
        assert result.status_code == 200, result.text
        return result.json

    def events(self, workflow_id: str) -> list[str]:
        result = self.client.simulate_get(
            f"{self.ns}/workflows/{workflow_id}/events", query_string="limit=1000", headers=self.headers
        )
        return [e["type"] for e in result.json["events"]]

    def scan(self, rounds: int = 20) -> None:
        """Run scanner batches until one finds nothing to do."""
        for _ in range(rounds):
            report = self.scanner.run_once()
            if not report.candidates and not report.leases:
                return
        raise AssertionError("the scanner kept finding work")

    def claim(self, queue: str = "inventory", lease_seconds: int = 60, wait_seconds: int = 0, worker="w1"):
        return self.client.simulate_post(
            f"{self.ns}/queues/{queue}/claim",
            headers=self.worker,
            json={"worker_id": worker, "lease_seconds": lease_seconds, "wait_seconds": wait_seconds},
        )

    def complete(self, task: dict, outcome: str = "SUCCEEDED", **body):
        return self.client.simulate_post(
            f"{self.ns}/tasks/{task['task_id']}/complete",
            headers=self.worker,
            json={"lease_token": task["lease_token"], "outcome": outcome, **body},
        )

    def heartbeat(self, task: dict, lease_seconds: int = 60):
        return self.client.simulate_post(
            f"{self.ns}/tasks/{task['task_id']}/heartbeat",
            headers=self.worker,
            json={"lease_token": task["lease_token"], "lease_seconds": lease_seconds},
        )

    def send(self, workflow_id: str, key: str, body: dict, headers: dict | None = None):
        return self.client.simulate_post(
            f"{self.ns}/workflows/{workflow_id}/signals",
            json=body,
            headers={**(headers or self.signaller), "Idempotency-Key": key},
        )

    def signal(self, workflow_id: str, signal_id: str, headers: dict | None = None):
        return self.client.simulate_get(
            f"{self.ns}/workflows/{workflow_id}/signals/{signal_id}", headers=headers or self.signaller
        )

    def finish_task(self, result=None, queue: str = "inventory") -> dict:
        """Claim the next task, complete it, and let the scanner react."""
        claimed = self.claim(queue)
        assert claimed.status_code == 200, claimed.text
        assert self.complete(claimed.json, result=result if result is not None else {}).status_code == 200
        self.scan()
        return claimed.json

    def rows(self, sql: str, params=()) -> list[dict]:
        return self.database.run(lambda tx: tx.all(sql, params))


def task_steps(*keys: str, queue: str = "inventory", max_attempts: int = 3, timeout: int = 300) -> dict:
    return {
        "name": "flow",
        "steps": [
            {"key": key, "type": "TASK", "queue": queue, "max_attempts": max_attempts, "timeout_seconds": timeout}
            for key in keys
        ],
    }


PAYMENT_SCHEMA = PAYMENT_STEP["signal"]["payload_schema"]


def signal_flow_definition(timeout: int = 3600) -> dict:
    """reserve (TASK) -> payment (SIGNAL, correlated on the order id) -> ship (TASK)."""
    return {
        "name": "flow",
        "steps": [
            {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 300},
            {**copy.deepcopy(PAYMENT_STEP), "timeout_seconds": timeout},  # callers change theirs
            {"key": "ship", "type": "TASK", "queue": "carrier", "timeout_seconds": 300},
        ],
    }


ABSENT = object()  # `payment(payload=ABSENT)` leaves the member out of the body
# The members of a signal receipt, in the order it is written (SPEC §11).
RECEIPT_FIELDS = (
    "signal_id",
    "workflow_id",
    "status",
    "disposition",
    "accepted_at",
    "expires_at",
    "idempotency_key",
    "request_digest",
)


# The Stripe mapping of docs/webhooks.md and of W3's text (docs/rules.md#webhooks): a plainly valid one.
STRIPE_MAPPING = {
    "event_type": "/type",
    "idempotency_key": "/id",
    "rules": [
        {
            "event": "payment_intent.succeeded",
            "name": "payment.settled",
            "payload_version": "v1",
            "correlation_key": "/data/object/metadata/order_id",
            "payload": "/data/object",
            "reason": "Stripe: payment succeeded",
        }
    ],
}


def payment(correlation_key: str = "o-1", sequence: int = 1, **overrides) -> dict:
    body = {**payment_signal(correlation_key, reason="PSP webhook settled the payment", sequence=sequence), **overrides}
    return {k: v for k, v in body.items() if v is not ABSENT}


INSERT_INSTANCE_ROW = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest, status, gate,
                       review_reason, deadline_at, created_at, updated_at)
SELECT d.namespace_id, %s, d.id, a.id, '{}', REPEAT('0', 64), %s, %s, %s, %s, %s, %s
FROM definitions d JOIN applications a ON a.namespace_id = d.namespace_id AND a.name = 'app'
WHERE d.namespace_id = (SELECT id FROM namespaces WHERE name = %s) AND d.name = %s AND d.version = %s
"""


def insert_instances(database: Database, namespace: str, definition: str, version: int, rows: list[tuple]) -> None:
    """Instances written straight into the table (not started: no steps, checkpoint or history), fast.

    `rows` are `(workflow_id, status, review_reason)`; the definition version must be published.
    """
    now = database.run(lambda tx: tx.now())
    gates = {"RUNNING": "OPEN"}
    database.run(
        lambda tx: tx.executemany(
            INSERT_INSTANCE_ROW,
            [
                (wid, status, gates.get(status, "CLOSED"), reason, now, now, now, namespace, definition, version)
                for wid, status, reason in rows
            ],
        )
    )


# ---- the SDK --------------------------------------------------------------------------------------

OPERATOR_SCOPES = tuple(sorted(auth.SCOPES - {"tasks:work"}))


def sdk_client(url: str, tenant: Tenant, *scopes: str, actor: str = "ops", **kwargs):
    """A `weave.sdk.Client` of a new credential (every operator scope, both queues, unless told)."""
    from weave.sdk import Client

    token = tenant.token(*(scopes or OPERATOR_SCOPES), queues=("inventory", "carrier"), actor=actor)
    return Client(url, token, tenant.namespace, **{"timeout": 10, **kwargs})


# ---- `weave serve` processes ------------------------------------------------------------------------------


def ready(port: int) -> int:
    """The status of GET /readyz on 127.0.0.1:`port`, 0 when nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


@contextlib.contextmanager
def weave_serve(url, *flags: str, soft_file_limit: int | None = None, stderr=subprocess.DEVNULL):
    """A `weave serve` process on a free port, ready; (process, port). Stopped at the end (SIGTERM,
    then SIGKILL if it has not stopped within 10 s)."""
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}

    def in_the_child():  # before exec: the limit a process inherits, and no orphan if the tests die
        die_with_parent()
        if soft_file_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft_file_limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "serve", "--port", str(port), *flags],
        env=env,
        stderr=stderr,
        preexec_fn=in_the_child,
    )
    try:
        wait_until(lambda: ready(port) == 200, timeout=20)
        yield process, port
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def weave_dev(folder, port: int, env: dict) -> tuple[subprocess.Popen, list[str]]:
    """A `weave dev --port PORT` started in `folder` (its ./.weave/) with `env`: the process and the
    banner it printed, up to its `weave workflow start` line. The caller stops it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "dev", "--port", str(port)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=die_with_parent,
    )
    printed = []
    while not any(line.startswith("  weave workflow start ") for line in printed):
        line = process.stdout.readline()
        if not line:
            process.wait(30)
            raise AssertionError(f"weave dev exited early ({process.returncode}) after:\n{''.join(printed)}")
        printed.append(line)
    return process, printed


# ---- scanner processes (crash tests) --------------------------------------------------------------------


def use_real_time(database: Database, clock: ControlledClock) -> None:
    """Scanner processes read the database clock: make the test's clock agree with it."""
    clock.set(database.run(lambda tx: DatabaseClock().now(tx)))


def scanner_process(config, *extra) -> subprocess.Popen:
    """A real `weave scan` process on the test database."""
    env = {**os.environ, "WEAVE_DATABASE_URL": config.database_url}
    return subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "scan", "--idle-seconds", "0.05", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,  # a killed test run leaves no scanner behind
    )


TOGETHER_SECONDS = 2


def run_scanners_until(config, count: int, condition: Callable[[], bool]) -> list[tuple[int, int]]:
    """Run `count` scanner processes until `condition()` holds, stop them with SIGTERM, and return
    each one's (returncode, done candidates).

    With several processes, the checkpoints due now come due `TOGETHER_SECONDS` later, when every
    process is up: the first to start (about half a second) could otherwise do them all, with its
    threads, before the others look, and a race between processes would not be one."""
    if count > 1:
        database = Database(config.database_url)
        try:
            database.run(
                lambda tx: tx.execute(
                    "UPDATE checkpoints SET available_at = UTC_TIMESTAMP(6) + INTERVAL %s SECOND"
                    " WHERE available_at <= UTC_TIMESTAMP(6)",
                    (TOGETHER_SECONDS,),
                )
            )
        finally:
            database.close()
    scanners = [scanner_process(config) for _ in range(count)]
    try:
        if count > 1:
            time.sleep(TOGETHER_SECONDS)  # `condition` may count what is due: nothing is, until then
        wait_until(condition)
    finally:
        for p in scanners:
            p.send_signal(signal.SIGTERM)
    outputs = [p.communicate(timeout=30)[1] for p in scanners]
    return [(p.returncode, sum(b["done"] for b in batch_lines(err))) for p, err in zip(scanners, outputs)]


def run_with_kills(
    config,
    kills: int,
    after_kill: Callable[[], None],
    *,
    working: Callable[[], int] | None = None,
    seed: int = 7,
) -> None:
    """Start a scanner process and SIGKILL it, `kills` times, one process at a time, calling
    `after_kill()` after each kill.

    Without `working` a process is killed 0.3-0.9 s after its start; with it (a count that changes
    as scanners work, e.g. what is left to do) it is killed 0-30 ms after that count changed, so
    that the kill lands while it works rather than while it starts.
    """
    rng = random.Random(seed)
    for _ in range(kills):
        before = working() if working is not None else None
        p = scanner_process(config)
        if working is None:
            time.sleep(rng.uniform(0.3, 0.9))
        else:
            wait_until(lambda: working() != before, pause=0.01)
            time.sleep(rng.uniform(0, 0.03))
        p.kill()  # SIGKILL: no clean-up at all
        p.wait()
        p.communicate()
        after_kill()


def batch_lines(stderr_text: str) -> list[dict]:
    return [json.loads(line[line.index("{") :]) for line in stderr_text.splitlines() if '"scan_batch"' in line]


def wait_until(predicate: Callable[[], bool], timeout: float = 60, pause: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(pause)
    raise AssertionError("condition not reached in time")


def run_units_until_idle(database: Database, rounds: int = 50) -> None:
    """Run the scanner's units in this process (lease expiry, then every due candidate of every
    source, one transaction each) until none is due. Unlike `Scanner.run_once`, which backs a
    failing candidate off (K2), a failure is raised: in a test it is a bug."""
    from weave.scanner import SOURCES
    from weave.sql import tasks

    for _ in range(rounds):
        expired = database.read(tasks.expired_lease_candidates, 100)
        for row in expired:
            tasks.expire_lease(database, row["id"], row["queue_id"])
        due = [(source, row["id"]) for source in SOURCES for row in database.read(source.due, 100)]
        for source, candidate in due:
            source.process(database, candidate)
        if not expired and not due:
            return
    raise AssertionError("the scanner's units kept finding work")


def quickly(fn, limit: float = 5.0):
    """A bound loose enough for a loaded CI machine, yet far below what backtracking or pairwise
    comparison costs here (minutes). How fast it really is: scripts/bench --only validation."""
    started = time.perf_counter()
    result = fn()
    assert time.perf_counter() - started < limit
    return result


def start_task_backlog(flow, database: Database, count: int, prefix: str = "b") -> None:
    """`count` instances of a one-TASK workflow started through the units: as many ROOT checkpoints
    due now for the scanners."""
    from weave.sql import instances

    if not flow.rows("SELECT id FROM definitions WHERE name = 'flow'"):
        flow.publish(task_steps("work"))
    starter = flow.tenant.principal("workflows:start", queues=("inventory",))
    for i in range(count):
        request = instances.StartRequest(f"{prefix}{i}", "flow", 1, "{}", 3600, f"{i:064d}")
        instances.start_workflow(database, starter, request)


def assert_each_instance_advanced_once(flow, count: int) -> None:
    """Every one of the `count` instances of `start_task_backlog` has one activation and one task."""
    per_instance = flow.rows(
        "SELECT i.id, COUNT(DISTINCT a.id) AS activations, COUNT(DISTINCT t.id) AS tasks "
        "FROM instances i LEFT JOIN step_activations a ON a.instance_id = i.id "
        "LEFT JOIN tasks t ON t.instance_id = i.id GROUP BY i.id"
    )
    assert len(per_instance) == count
    assert {(r["activations"], r["tasks"]) for r in per_instance} == {(1, 1)}
