"""Benchmarks: Weave over HTTP beside a raw PyMySQL baseline doing the same statements, same run.

    scripts/bench [--only pulse|e2e|signals|latency|consumption|peer|scale|validation|hostile] [--json FILE]   (--help lists every option)
    scripts/bench --only scale --scale-signals 1000000   (flat cost: the figures at a million stored signals)
    scripts/bench --only signals --against main      (signal acceptance: this checkout against a revision)
    scripts/bench --only peer                        (signal acceptance beside DBOS Transact's `send`)
    scripts/bench --only hostile --hostile-repeat 100  (issue 26's worst inputs over HTTP: CPU per request, RSS)

Everything runs on this machine: a private database server, `weave serve` and `weave scan` as
separate processes, and load generator threads here. Each figure is printed beside its baseline
and the ratio, because absolute numbers mean little across machines; ratios measured in one run do.
Development tooling: it lives in scripts/, outside the installed package, and imports the checkout's
Weave from .venv (tests/test_bench.py loads it by path).
"""

from __future__ import annotations

import argparse
import http.client
import io
import itertools
import json
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import partial
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hostile  # noqa: E402  (scripts/bench_hostile.py: the hostile section)

from weave import auth, jsontext, migrate, schemas
from weave.db import Database, connect
from weave.dburl import DatabaseUrl
from weave.devdb import PrivateServer, free_port
from weave.processes import die_with_parent
from weave.rules import definitions as definition_rules
from weave.schemas import budget
from weave.schemas.payload import payload_errors
from weave.sql import inbox as inbox_sql
from weave.sql import instances as instance_sql
from weave.sql import tasks as task_sql
from weave.sql import tenancy

NS = "bench"
QUEUE = "work"
PERMITS = 64


# ---- the system under test --------------------------------------------------------------------------


@dataclass
class Bench:
    url: DatabaseUrl
    database: Database
    base: str  # http://127.0.0.1:port
    client_token: str
    worker_token: str
    namespace_id: int
    server_pid: int
    database_pid: int
    label: str = "weave"  # what the figures of this server are printed as
    reference: "Bench | None" = None  # `--against REF`: REF's `weave serve`, on the same database


ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def running_weave(threads: int, processes: int = 1, against: str | None = None):
    """A private database server with the bench's tenant, this checkout's `weave serve`, and with
    `against` a second `weave serve` of that git revision on the same database (`Bench.reference`)."""
    with (
        tempfile.TemporaryDirectory(prefix="weave-bench-") as folder,
        PrivateServer(Path(folder)) as server,
        ExitStack() as stack,
    ):
        url = DatabaseUrl.parse(server.url("weave_bench"))
        database, client_token, worker_token, namespace_id = prepared(url)
        stack.callback(database.close)
        env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
        base, pid = stack.enter_context(_serving(env, threads, processes))
        bench = Bench(url, database, base, client_token, worker_token, namespace_id, pid, server.process.pid)
        if against:
            tree = stack.enter_context(_revision_tree(against))
            reference_env = {**env, "PYTHONPATH": str(tree)}
            _require_imported_from(tree, reference_env)
            base, pid = stack.enter_context(_serving(reference_env, threads, processes))
            bench.reference = replace(bench, base=base, server_pid=pid, label=against)
        yield bench


def prepared(url: DatabaseUrl) -> tuple[Database, str, str, int]:
    """The bench's database at `url`, migrated, with its tenant: (the database, the client's token,
    the worker's token, the namespace's id)."""
    migrate.ensure_database(url)
    migrate.apply(url)
    database = Database(url)
    tenancy.create_namespace(database, NS)
    tenancy.create_queue(database, NS, QUEUE, PERMITS)
    tenancy.create_application(database, NS, "app", None)
    client_token, worker_token = auth.new_token(), auth.new_token()
    client_scopes = sorted(auth.SCOPES - {"tasks:work"})
    tenancy.create_credential(
        database, NS, "app", "bench-client", client_scopes, [QUEUE], auth.token_hash(client_token), None
    )
    tenancy.create_credential(
        database, NS, "app", "bench-worker", ["tasks:work"], [QUEUE], auth.token_hash(worker_token), None
    )
    namespace_id = tenancy.authenticate(database, auth.token_hash(client_token)).namespace_id
    return database, client_token, worker_token, namespace_id


# `-P`: without it, `-m` puts the working directory first on sys.path, ahead of PYTHONPATH, and a
# bench run from a checkout would serve that checkout's code as `--against`'s revision too.
WEAVE_CLI = (sys.executable, "-P", "-m", "weave.cli")


def _weave(env: dict, *args: str) -> subprocess.Popen:
    """A `weave` command (`serve`, `scan`) of the Weave that `env` imports; its log goes nowhere,
    and it ends with the bench."""
    return subprocess.Popen([*WEAVE_CLI, *args], env=env, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)


def _require_imported_from(tree: Path, env: dict) -> None:
    """Refuse to compare unless a `weave serve` started with `env` runs the code in `tree`."""
    found = subprocess.run(
        [sys.executable, "-P", "-c", "import weave.cli, weave.sql; print(weave.cli.__file__, weave.sql.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not all(Path(path).is_relative_to(tree) for path in found):
        raise RuntimeError(f"the reference would run {found}, not the revision in {tree}")


@contextmanager
def _serving(env: dict, threads: int, processes: int):
    """`weave serve` (the Weave that `env` imports) on a free port: (base URL, pid). Logs go nowhere."""
    port = free_port()
    serve = _weave(env, "serve", "--port", str(port), "--threads", str(threads), "--processes", str(processes))
    try:
        _wait_http(port)
        yield f"http://127.0.0.1:{port}", serve.pid
    finally:
        serve.terminate()
        serve.wait(10)


@contextmanager
def _revision_tree(ref: str):
    """The Weave of git revision `ref`, laid out as installed (its top-level sql/ and migrations/ as
    weave/sql and weave/migrations), in a temporary folder to put first on PYTHONPATH. It runs on
    this run's database, migrated by this checkout: `ref` must need no migration this one lacks."""
    with tempfile.TemporaryDirectory(prefix="weave-ref-") as folder:
        archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        tree = Path(folder)
        for name in ("sql", "migrations"):
            (tree / name).rename(tree / "weave" / name)
        yield tree


def _wait_http(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("weave serve did not answer")


class Http:
    """One keep-alive HTTP/1.1 connection, like a real client or worker.

    Deliberately lean (a socket, a prebuilt header block, Content-Length framing): the load
    generator shares the machine's cores with the system under test, and `http.client` spends more
    CPU per request (its header parsing goes through `email.parser`) than the server's framework.
    """

    def __init__(self, bench: Bench, token: str):
        host, port = bench.base.split("//")[1].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._unread = b""

    def post(self, path: str, body: dict) -> tuple[int, dict | None]:
        return self._request("POST", path, json.dumps(body).encode())

    def get(self, path: str) -> dict:
        return self._request("GET", path, b"")[1]

    def _request(self, method: str, path: str, body: bytes) -> tuple[int, dict | None]:
        head = "".join(f"{name}: {value}\r\n" for name, value in self.headers.items())
        self.sock.sendall(
            f"{method} /v1/namespaces/{NS}{path} HTTP/1.1\r\nHost: bench\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        while b"\r\n\r\n" not in self._unread:
            self._unread += self._receive()
        head_bytes, _, rest = self._unread.partition(b"\r\n\r\n")
        lines = head_bytes.split(b"\r\n")
        status, length = int(lines[0].split()[1]), 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += self._receive()
        data, self._unread = rest[:length], rest[length:]
        return status, (json.loads(data) if data else None)

    def _receive(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk


# ---- measuring --------------------------------------------------------------------------------------


def run_threads(count: int, target, prepare=None, at_start=None) -> float:
    """Run `target(i)` in `count` threads; seconds from the common start to the last finish.

    `prepare(i)` (connecting, warming up) runs in each thread before the common start, untimed;
    `at_start()` runs once at the common start (to read counters).
    """
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def body(i):
        try:
            if prepare is not None:
                prepare(i)
        except BaseException as exc:  # reported after the run; this thread sits the run out
            errors.append(exc)
            barrier.wait()
            return
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    if at_start is not None:
        at_start()
    started = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def report(
    label: str,
    weave_rate: float,
    baseline_rate: float,
    unit: str,
    extra: str = "",
    ratio: float | None = None,
    baseline_name: str = "baseline",
) -> dict:
    if ratio is None:
        ratio = weave_rate / baseline_rate if baseline_rate else float("nan")
    print(
        f"{label:<44} weave {weave_rate:8.1f} {unit}   {baseline_name} {baseline_rate:8.1f} {unit}   "
        f"ratio {ratio:4.2f}{extra}",
        flush=True,
    )
    return {
        "label": label,
        "weave": round(weave_rate, 1),
        "baseline": round(baseline_rate, 1),
        "ratio": round(ratio, 3),
        "unit": unit,
    }


# ---- Pulse: claim + complete -----------------------------------------------------------------------


def seed_tasks(bench: Bench, count: int) -> None:
    """Insert QUEUED tasks (and the activations they belong to) straight into the tables."""
    app_id = bench.database.run(lambda tx: tx.one("SELECT id FROM applications LIMIT 1"))["id"]
    definition = {"name": "one", "steps": [{"key": "s", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600}]}
    from weave.sql import definitions

    definitions.publish_definition(bench.database, bench.namespace_id, definition, 1, "bench")

    def insert(tx, start):
        queue_id = tx.one("SELECT id FROM queues WHERE name = %s", (QUEUE,))["id"]
        definition_id = tx.one("SELECT id FROM definitions WHERE name = 'one'")["id"]
        now = tx.now()
        for i in range(start, min(count, start + 500)):
            instance_id = tx.insert(
                instance_sql.INSERT_INSTANCE,
                (
                    bench.namespace_id,
                    f"t-{time.time_ns()}-{i}",
                    definition_id,
                    app_id,
                    "{}",
                    "0" * 64,
                    now.replace(year=now.year + 1),
                    now,
                    now,
                ),
            )
            activation_id = tx.insert(
                "INSERT INTO step_activations (instance_id, step_key, step_index, "
                "activation_sequence, status, activated_at) VALUES (%s, 's', 0, 1, 'ACTIVE', %s)",
                (instance_id, now),
            )
            tx.execute(
                task_sql.INSERT_TASK,
                (
                    bench.namespace_id,
                    queue_id,
                    instance_id,
                    activation_id,
                    "TASK",
                    3,
                    now,
                    now.replace(year=now.year + 1),
                    now,
                ),
            )

    for start in range(0, count, 500):
        bench.database.run(insert, start)


def http_pulse_worker(bench: Bench, done: list):
    def work(i):
        client = Http(bench, bench.worker_token)
        while True:
            status, task = client.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "lease_seconds": 60})
            if status == 204:
                return
            status, _ = client.post(
                f"/tasks/{task['task_id']}/complete",
                {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"i": i}},
            )
            assert status == 200, status
            done.append(1)

    return work


def raw_pulse_worker(bench: Bench, done: list):
    """The same statements as claim_task and complete_task, on a bare PyMySQL connection."""

    def work(i):
        conn = connect(bench.url)
        cur = conn.cursor()
        while True:
            cur.execute(task_sql.LOCK_QUEUE_BY_NAME, (bench.namespace_id, QUEUE))
            queue = cur.fetchone()
            cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
            now = cur.fetchone()["now"]
            cur.execute(task_sql.CLAIM_NEXT_TASK, (queue["id"], now))
            task = cur.fetchone()
            if task is None:
                conn.rollback()
                break
            token = os.urandom(16).hex()
            cur.execute(task_sql.START_TASK, (token, now, f"w{i}", task["id"]))
            cur.execute(task_sql.TAKE_PERMIT, (queue["id"],))
            cur.execute(task_sql.SELECT_TASK_CONTEXT, (task["activation_id"],))
            cur.execute(instance_sql.SELECT_STEP_RESULTS, (task["instance_id"],))
            cur.execute(
                "INSERT INTO audit_records (namespace_id, instance_id, actor, action, at, details) "
                "VALUES (%s, %s, 'w', 'task.claim', %s, '{}')",
                (bench.namespace_id, task["instance_id"], now),
            )
            conn.commit()
            cur.execute(task_sql.SELECT_TASK_QUEUE, (task["id"], bench.namespace_id))
            cur.execute(task_sql.LOCK_QUEUE, (queue["id"],))
            cur.execute(task_sql.LOCK_TASK, (task["id"],))
            cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
            cur.execute(task_sql.SETTLE_TASK, ("SUCCEEDED", '{"i":1}', None, now, task["id"]))
            cur.execute(task_sql.RELEASE_PERMIT, (queue["id"],))
            cur.execute(inbox_sql.INSERT_INBOX, (task["id"], task["instance_id"], "SUCCEEDED", '{"i":1}', now, now))
            cur.execute(
                "INSERT INTO audit_records (namespace_id, instance_id, actor, action, at, details) "
                "VALUES (%s, %s, 'w', 'task.complete', %s, '{}')",
                (bench.namespace_id, task["instance_id"], now),
            )
            conn.commit()
            done.append(1)
        conn.close()

    return work


def bench_pulse(bench: Bench, tasks: int) -> list[dict]:
    results = []
    for workers in (1, 8):
        rates = {}
        for name, make in (("weave", http_pulse_worker), ("baseline", raw_pulse_worker)):
            seed_tasks(bench, tasks)
            done: list = []
            seconds = run_threads(workers, make(bench, done))
            assert len(done) == tasks, (name, len(done))
            rates[name] = tasks / seconds
        results.append(
            report(f"tasks claimed+completed, {workers} worker(s)", rates["weave"], rates["baseline"], "tasks/s")
        )
    return results


# ---- end to end: TASK-step workflows ------------------------------------------------------------------

E2E_DEFINITION = {
    "name": "e2e",
    "steps": [
        {"key": "a", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
        {"key": "b", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
    ],
}


def bench_e2e(bench: Bench, workflows: int, workers: int = 8) -> list[dict]:
    client = Http(bench, bench.client_token)
    client.post("/definitions", E2E_DEFINITION)
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.yoyo_url()}
    scanner = _weave(env, "scan", "--idle-seconds", "0.02")
    run_id = time.time_ns()
    finished = threading.Event()
    try:
        # Earlier sections leave inbox events behind (their tasks' outcomes): drain them first, so
        # that this measures these workflows, not a backlog.
        while bench.database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbox_events WHERE status = 'PENDING'"))[
            "n"
        ]:
            time.sleep(0.2)

        def start_all(_):
            c = Http(bench, bench.client_token)
            for i in range(workflows):
                c.post(
                    "/workflows",
                    {
                        "definition": "e2e",
                        "version": 1,
                        "input": {"i": i},
                        "deadline_seconds": 3600,
                        "workflow_id": f"e2e-{run_id}-{i}",
                    },
                )

        def work(i):
            if i == 0:
                return start_all(i)
            c = Http(bench, bench.worker_token)
            while not finished.is_set():
                status, task = c.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "wait_seconds": 1})
                if status == 200:
                    c.post(
                        f"/tasks/{task['task_id']}/complete",
                        {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"ok": True}},
                    )

        def watch():
            while (
                bench.database.run(
                    lambda tx: tx.one(
                        "SELECT COUNT(*) AS n FROM instances WHERE workflow_id LIKE %s AND status = 'SUCCEEDED'",
                        (f"e2e-{run_id}-%",),
                    )
                )["n"]
                < workflows
            ):
                time.sleep(0.05)
            finished.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        seconds = run_threads(workers + 1, work)
        watcher.join()
    finally:
        scanner.terminate()
        scanner.wait(10)
    weave_rate = workflows / seconds
    baseline_rate = workflows / _in_process_e2e(bench, workflows)
    return [
        report(
            f"2-step TASK workflows end to end, {workers} workers",
            weave_rate,
            baseline_rate,
            "wf/s",
            "  (baseline: the same units in-process, no HTTP, no scanner process)",
        )
    ]


def _in_process_e2e(bench: Bench, workflows: int) -> float:
    from weave.sql import checkpoints, engine, inbox

    db = bench.database
    starter = tenancy.authenticate(db, auth.token_hash(bench.client_token))
    run_id = time.time_ns()
    started = time.perf_counter()
    for i in range(workflows):
        request = instance_sql.StartRequest(f"raw-{run_id}-{i}", "e2e", 1, '{"i":%d}' % i, 3600, f"{i:064d}")
        instance_sql.start_workflow(db, starter, request)
    while True:
        did = 0
        for row in db.run(checkpoints.due_candidates, 100):
            did += engine.process_checkpoint(db, row["id"]) is not None
        while (claimed := task_sql.claim_task(db, bench.namespace_id, QUEUE, "w", 60, 1, "w")) is not None:
            task_sql.complete_task(
                db,
                bench.namespace_id,
                claimed.task_id,
                claimed.lease_token,
                task_sql.Completion("SUCCEEDED", '{"ok":true}'),
                frozenset({QUEUE}),
                1,
                "w",
            )
            did += 1
        for row in db.run(inbox.due_candidates, 100):
            did += engine.consume_inbox_event(db, row["id"]) is not None
        if not did:
            break
    return time.perf_counter() - started


# ---- signal acceptance -------------------------------------------------------------------------------

SIGNAL_DEFINITION = {
    "name": "pay",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
        {
            "key": "payment",
            "type": "SIGNAL",
            "timeout_seconds": 3600,
            "correlation": "/input/order_id",
            "signal": {
                "name": "payment.settled",
                "payload_version": "v1",
                "payload_schema": {"type": "object", "required": ["amount"]},
            },
        },
    ],
}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _signal_body(order: str) -> dict:
    return {
        "name": "payment.settled",
        "payload_version": "v1",
        "target_step_key": "payment",
        "target_activation_sequence": 1,
        "correlation_key": order,
        "payload": {"amount": 12.5},
        "reason": "benchmark",
    }


def _start_signal_targets(bench: Bench, prefix: str, count: int) -> list[str]:
    client = Http(bench, bench.client_token)
    ids = [f"{prefix}-{i}" for i in range(count)]
    for workflow_id in ids:
        status, _ = client.post(
            "/workflows",
            {
                "definition": "pay",
                "version": 1,
                "input": {"order_id": "o"},
                "deadline_seconds": 86400,
                "workflow_id": workflow_id,
            },
        )
        assert status == 201, status
    return ids


WARM_UP_SIGNALS = 10  # per client, to one separate instance: connections and caches exist before timing
HOT_INSTANCE_SIGNALS = 960  # one instance holds at most 1024 signals (S1.6)


def _http_sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list):
    clients: dict[int, Http] = {}

    def send_one(client: Http, workflow_id: str, key: str) -> float:
        client.headers["Idempotency-Key"] = key
        started = time.perf_counter()
        status, _ = client.post(f"/workflows/{workflow_id}/signals", _signal_body("o"))
        assert status == 201, status
        return time.perf_counter() - started

    def prepare(i):
        clients[i] = Http(bench, bench.client_token)
        for n in range(WARM_UP_SIGNALS):
            send_one(clients[i], warm_up, f"warm-c{i}-{n}")

    def send(i):
        for n in range(per_client):
            latencies.append(send_one(clients[i], targets[(i * per_client + n) % len(targets)], f"c{i}-{n}"))

    return prepare, send


def _receipt_rest(workflow_id: str, key: str, digest: str, now, deadline_at) -> str:
    """The receipt's stored rest that `send_signal` writes for the bench's signal, built the same way."""
    from weave.times import rfc3339

    return jsontext.compact(
        {
            "workflow_id": workflow_id,
            "status": "PENDING",
            "disposition": None,
            "accepted_at": rfc3339(now),
            "expires_at": rfc3339(deadline_at),
            "idempotency_key": key,
            "request_digest": digest,
        }
    )[1:]


def _event_and_audit_texts(signal_id: int, key: str, now, deadline_at) -> tuple[str, str]:
    """The event data and the audit details that `send_signal` writes for the bench's signal."""
    from weave.times import rfc3339

    data = {
        "signal_id": str(signal_id),
        "name": _signal_body("o")["name"],
        "target_step_key": "payment",
        "target_activation_sequence": 1,
        "status": "PENDING",
        "disposition": None,
        "actor": "raw",
    }
    details = {
        **data,
        "idempotency_key": key,
        "accepted_at": rfc3339(now),
        "instance_deadline_at": rfc3339(deadline_at),
    }
    return jsontext.compact(data), jsontext.compact(details)


def _signal_row(instance_id: int, key: str, digest: str, now, deadline_at, receipt_rest: str) -> tuple:
    body = _signal_body("o")
    payload_text = jsontext.compact(body["payload"])
    return (
        instance_id,
        body["name"],
        "v1",
        "payment",
        1,
        b"o",
        payload_text,
        jsontext.sha256_text(payload_text),
        1,
        body["reason"],
        None,
        "raw",
        1,
        key,
        digest,
        "PENDING",
        None,
        now,
        deadline_at,
        deadline_at,  # available_at: a PENDING signal's first look is at its expiry, as Weave writes it
        None,
        now,
        receipt_rest,
    )


def _on_connections(
    bench: Bench, send_one, targets: list[str], warm_up: str, per_client: int, latencies: list, label: str
):
    """(prepare, send) for `run_threads` of a sender on bare PyMySQL connections, one per client:
    `send_one(cursor, workflow_id, key)` sends one signal and answers its seconds."""
    connections: dict[int, object] = {}

    def prepare(i):
        connections[i] = connect(bench.url)
        for n in range(WARM_UP_SIGNALS):
            send_one(connections[i].cursor(), warm_up, f"{label}-warm-c{i}-{n}")

    def send(i):
        cur = connections[i].cursor()
        for n in range(per_client):
            latencies.append(send_one(cur, targets[(i * per_client + n) % len(targets)], f"{label}-c{i}-{n}"))
        connections[i].close()

    return prepare, send


def _raw_sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list):
    """The statements of `send_signal` on a bare PyMySQL connection, one transaction per signal, in
    the same round trips (`weave.tx.Tx` sends queued writes with the next statement or COMMIT),
    writing the same rows with the same contents (receipt, event data, audit details); without
    authentication, HTTP, JSON parsing, schema validation or the contract check."""
    from weave.sql import audit as audit_sql
    from weave.sql import events as event_sql
    from weave.sql import signals as sig_sql

    body = _signal_body("o")

    def send_one(cur, workflow_id: str, key: str) -> float:
        started = time.perf_counter()
        digest = jsontext.digest(body)
        cur.execute(sig_sql.SELECT_TARGET_INSTANCE_AND_KEY, (key, bench.namespace_id, workflow_id))
        instance_id = cur.fetchone()["id"]
        facts = {"instance": instance_id, "key": key, "step": "payment"}
        cur.execute(
            ";\n".join(
                (
                    cur.mogrify(sig_sql.LOCK_QUEUES_SHARED, (bench.namespace_id, (QUEUE,))),
                    cur.mogrify(instance_sql.MARK_DECIDING, (instance_id,)),
                    cur.mogrify(sig_sql.FACTS_UNDER_LOCK, facts),
                )
            )
        )
        cur.nextset()
        cur.nextset()
        instance = cur.fetchone()
        now, deadline_at = instance["now"], instance["deadline_at"]
        receipt_rest = _receipt_rest(workflow_id, key, digest, now, deadline_at)
        cur.execute(sig_sql.INSERT_SIGNAL, _signal_row(instance_id, key, digest, now, deadline_at, receipt_rest))
        signal_id = cur.lastrowid
        data, details = _event_and_audit_texts(signal_id, key, now, deadline_at)
        audit_row = (bench.namespace_id, instance_id, signal_id, 1, "raw", "signal.send", digest, now, details)
        cur.execute(
            ";\n".join(
                (
                    cur.mogrify(instance_sql.COUNT_STORED_SIGNAL, (instance_id,)),
                    cur.mogrify(event_sql.APPEND_EVENT, (instance_id, "SIGNAL_ACCEPTED", now, data, instance_id)),
                    cur.mogrify(audit_sql.INSERT_AUDIT, audit_row),
                    "COMMIT",
                )
            )
        )
        while cur.nextset():
            pass
        return time.perf_counter() - started

    return _on_connections(bench, send_one, targets, warm_up, per_client, latencies, "raw")


# The lean floor (issue 17, target 1): the durable work of accepting one signal as the issue
# defines it, and nothing else, on tables with only the indexes that work needs. Seven statements,
# one per round trip as a plain PyMySQL program sends them: lock the instance (by its workflow id),
# look the key up, insert the signal, a checkpoint (due now, found by its due-time index), the
# event, the audit record and the receipt (its own table: the signal row leaves it NULL); commit.
# Its tables have Weave's columns (the same row sizes), made with CREATE TABLE … LIKE; its
# instances are copies of the run's instances, with their ids.
#
# The spec floor adds to it what the specification and the owner require of any implementation,
# one statement each, as the same plain program would send them: the current credential read on
# every request (S1.1; no staleness window), the definition's queues locked before the instance
# (S1.3), and the target step's latest activation with its wait read under the lock (S1.10 decides
# the signal's disposition from them). Weave over the spec floor is what Weave's own code costs.
FLOOR_TABLES = (
    """CREATE TABLE IF NOT EXISTS floor_instances (
         id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, namespace_id BIGINT UNSIGNED NOT NULL,
         workflow_id VARCHAR(128) NOT NULL, deadline_at DATETIME(6) NOT NULL,
         PRIMARY KEY (id), UNIQUE KEY uq_floor_instances (namespace_id, workflow_id)
       ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS floor_receipts (
         signal_id BIGINT UNSIGNED NOT NULL, body TEXT NOT NULL, PRIMARY KEY (signal_id)
       ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    "CREATE TABLE IF NOT EXISTS floor_signals LIKE signals",
    "CREATE TABLE IF NOT EXISTS floor_checkpoints LIKE checkpoints",
    "CREATE TABLE IF NOT EXISTS floor_events LIKE events",
    "CREATE TABLE IF NOT EXISTS floor_audit LIKE audit_records",
)
FLOOR_INSTANCES = """
INSERT IGNORE INTO floor_instances (id, namespace_id, workflow_id, deadline_at)
SELECT id, namespace_id, workflow_id, deadline_at FROM instances WHERE namespace_id = %s AND workflow_id IN %s
"""
FLOOR_INDEXES_KEPT = {
    "floor_signals": {"PRIMARY", "uq_signals_idempotency"},
    "floor_checkpoints": {"PRIMARY", "ix_checkpoints_available"},
    "floor_audit": {"PRIMARY"},
}
FLOOR_LOCK = """
SELECT id, deadline_at, UTC_TIMESTAMP(6) AS now FROM floor_instances WHERE namespace_id = %s AND workflow_id = %s
FOR UPDATE
"""
FLOOR_LOOKUP = "SELECT receipt FROM floor_signals WHERE instance_id = %s AND idempotency_key = %s"
FLOOR_RECEIPT = "INSERT INTO floor_receipts (signal_id, body) VALUES (%s, %s)"
SPEC_FLOOR_ACTIVATION = """
SELECT a.activation_sequence, a.status, w.id, w.status, w.deadline_at, w.correlation
FROM step_activations a LEFT JOIN waits w ON w.activation_id = a.id
WHERE a.instance_id = %s AND a.step_key = %s ORDER BY a.activation_sequence DESC LIMIT 1
"""


def _floor_tables(bench: Bench) -> None:
    def create(tx):
        for statement in FLOOR_TABLES:
            tx.execute(statement)
        for table, kept in FLOOR_INDEXES_KEPT.items():
            for name in {row["Key_name"] for row in tx.all("SHOW INDEX FROM " + table)} - kept:
                tx.execute(f"ALTER TABLE {table} DROP INDEX {name}")

    bench.database.run(create)


def _floor_sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list, spec: bool = False):
    """The lean floor (FLOOR_TABLES): one transaction of 7 statements per signal; with `spec`, the
    spec floor: 10 statements, the credential's read, the queue lock and the activation's read
    besides."""
    from weave.sql import audit as audit_sql
    from weave.sql import checkpoints as checkpoint_sql
    from weave.sql import events as event_sql
    from weave.sql import signals as sig_sql

    body = _signal_body("o")
    token_sha256 = auth.token_hash(bench.client_token)
    insert_signal = sig_sql.INSERT_SIGNAL.replace("INSERT INTO signals", "INSERT INTO floor_signals")
    insert_checkpoint = checkpoint_sql.INSERT_CHECKPOINT.replace(
        "INSERT INTO checkpoints", "INSERT INTO floor_checkpoints"
    )
    append_event = event_sql.APPEND_EVENT.replace("events", "floor_events")
    insert_audit = audit_sql.INSERT_AUDIT.replace("INSERT INTO audit_records", "INSERT INTO floor_audit")

    def send_one(cur, workflow_id: str, key: str) -> float:
        started = time.perf_counter()
        digest = jsontext.digest(body)
        if spec:
            cur.execute(tenancy.SELECT_CURRENT_CREDENTIAL, (token_sha256,))
            assert cur.fetchone() is not None
            cur.execute(sig_sql.LOCK_QUEUES_SHARED, (bench.namespace_id, (QUEUE,)))
        cur.execute(FLOOR_LOCK, (bench.namespace_id, workflow_id))
        instance = cur.fetchone()
        instance_id, now, deadline_at = instance["id"], instance["now"], instance["deadline_at"]
        if spec:
            cur.execute(SPEC_FLOOR_ACTIVATION, (instance_id, "payment"))
            cur.fetchall()
        cur.execute(FLOOR_LOOKUP, (instance_id, key))
        assert cur.fetchone() is None
        cur.execute(insert_signal, _signal_row(instance_id, key, digest, now, deadline_at, None))
        signal_id = cur.lastrowid
        receipt_rest = _receipt_rest(workflow_id, key, digest, now, deadline_at)
        data, details = _event_and_audit_texts(signal_id, key, now, deadline_at)
        cur.execute(insert_checkpoint, (instance_id, "WAIT", 1, now, now, now))
        cur.execute(append_event, (instance_id, "SIGNAL_ACCEPTED", now, data, instance_id))
        cur.execute(
            insert_audit, (bench.namespace_id, instance_id, signal_id, 1, "raw", "signal.send", digest, now, details)
        )
        cur.execute(FLOOR_RECEIPT, (signal_id, '{"signal_id":"%d",%s' % (signal_id, receipt_rest)))
        cur.connection.commit()
        return time.perf_counter() - started

    # The floor's own instances, untimed: copies of the run's, ids included (the spec floor reads
    # their activations by id).
    bench.database.run(lambda tx: tx.execute(FLOOR_INSTANCES, (bench.namespace_id, (*targets, warm_up))))
    label = "spec" if spec else "floor"
    return _on_connections(bench, send_one, targets, warm_up, per_client, latencies, label)


def _signal_run(bench: Bench, sender, targets: int, clients: int, per_client: int, run: str) -> tuple:
    """One timed run over `targets` fresh instances: (signals per second, latencies in seconds, [CPU
    ms per signal of the server, this load generator, the database])."""
    return _timed_sends(bench, sender, _start_signal_targets(bench, f"s{run}", targets), clients, per_client, run)


def _timed_sends(bench: Bench, sender, targets: list[str], clients: int, per_client: int, run: str) -> tuple:
    """`_signal_run` to the instances `targets`: client i sends its n-th signal to
    `targets[(i * per_client + n) % len(targets)]`."""
    warm_up = _start_signal_targets(bench, f"warm{run}", 1)[0]
    latencies: list[float] = []
    prepare, send = sender(bench, targets, warm_up, per_client, latencies)
    before: list[float] = []
    seconds = run_threads(clients, send, prepare, at_start=lambda: before.extend(_cpu_split(bench)))
    cpu = [(after - first) * 1000 / len(latencies) for first, after in zip(before, _cpu_split(bench))]
    return len(latencies) / seconds, latencies, cpu


def bench_signals(bench: Bench, per_run: int, repeat: int, instances: int = 200) -> list[dict]:
    """Each run: clients connect and send a few untimed signals to a separate instance, then the
    timed signals go round-robin over `instances` instances, or all to one (at most 960 there).

    Weave and its baseline run `repeat` times in alternation, each first in every other pair;
    rates are medians, the ratio is the median of the ratios of the pairs (each pair shares the
    machine's conditions of the moment). The baseline is the raw PyMySQL sender, or with
    `--against REF` the same HTTP load on REF's `weave serve` (`bench.reference`). Without
    `--against`, the lean floor and the spec floor (`_floor_sender`) run in each pair too: the
    database CPU per signal of Weave is printed beside theirs, with the ratios (target 1 of issue
    17).
    """
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    reference = bench.reference
    contenders = (
        ("weave", bench, _http_sender),
        ("baseline", bench, _raw_sender),
        ("floor", bench, _floor_sender),
        ("spec floor", bench, partial(_floor_sender, spec=True)),
    )
    if reference is not None:
        contenders = (("weave", bench, _http_sender), ("baseline", reference, _http_sender))
    else:
        _floor_tables(bench)
    results = []
    runs = map(str, itertools.count(1))  # each run's workflow ids are its own
    for shape in ("many instances", "one hot instance"):
        for clients in (1, 8, 32):
            signals = per_run if shape == "many instances" else min(per_run, HOT_INSTANCE_SIGNALS)
            per_client = max(1, signals // clients)
            targets = instances if shape == "many instances" else 1
            rates, latencies, cpu = _alternate(
                {
                    name: partial(_signal_run, target, sender, targets, clients, per_client)
                    for name, target, sender in contenders
                },
                repeat,
                runs,
            )
            ratios, tails, mean_cpu = _summary(rates, latencies, cpu, "weave", "baseline")
            baseline_server = "-" if reference is None else f"{mean_cpu['baseline'][0]:.2f}"
            extra = (
                f"   p50/p99 ms weave {tails['weave'][0]:.1f}/{tails['weave'][1]:.1f}"
                f" baseline {tails['baseline'][0]:.1f}/{tails['baseline'][1]:.1f}"
                "   CPU ms/signal (server, load, db) weave %.2f, %.2f, %.2f baseline %s, %.2f, %.2f"
                % (*mean_cpu["weave"], baseline_server, mean_cpu["baseline"][1], mean_cpu["baseline"][2])
                + (f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}" if repeat > 1 else "")
            )
            if "floor" in cpu:
                weave_db, floor_db, spec_db = (mean_cpu[name][2] for name in ("weave", "floor", "spec floor"))
                db_over_floor, db_over_spec, spec_over_floor = (
                    a / b if b else float("nan")  # tiny runs: 0 ticks
                    for a, b in ((weave_db, floor_db), (weave_db, spec_db), (spec_db, floor_db))
                )
                extra += (
                    "   floor %.1f sig/s, db CPU %.2f ms/signal: weave/floor %.2f"
                    "   spec floor %.1f sig/s, db CPU %.2f ms/signal: weave/spec floor %.2f, spec floor/floor %.2f"
                    % (
                        median(rates["floor"]),
                        floor_db,
                        db_over_floor,
                        median(rates["spec floor"]),
                        spec_db,
                        db_over_spec,
                        spec_over_floor,
                    )
                )
            row = report(
                f"signals accepted, {shape}, {clients} client(s)",
                median(rates["weave"]),
                median(rates["baseline"]),
                "sig/s",
                extra,
                ratio=median(ratios),
                baseline_name="baseline" if reference is None else reference.label,
            )
            if reference is not None:
                row["against"] = reference.label
            row["run_ratios"] = [round(r, 3) for r in ratios]
            row["p50_ms"], row["p99_ms"] = round(tails["weave"][0], 1), round(tails["weave"][1], 1)
            row["cpu_ms_per_signal"] = {name: [round(v, 2) for v in split] for name, split in mean_cpu.items()}
            if "floor" in cpu:
                row["floor"] = round(median(rates["floor"]), 1)
                row["db_cpu_weave_over_floor"] = round(db_over_floor, 3)
                row["spec_floor"] = round(median(rates["spec floor"]), 1)
                row["db_cpu_weave_over_spec_floor"] = round(db_over_spec, 3)
                row["db_cpu_spec_floor_over_floor"] = round(spec_over_floor, 3)
            results.append(row)
    rss = _rss_kib(bench.server_pid)
    print(f"server RSS after the signal runs: {rss / 1024:.1f} MiB", flush=True)
    results.append({"label": "server RSS after signal load", "rss_mib": round(rss / 1024, 1)})
    return results


def _alternate(contenders: dict[str, Callable[[str], tuple]], repeat: int, runs: Iterator[str]) -> tuple:
    """Run each contender `repeat` times, in alternation, each first in every other pair (a pair
    shares the machine's conditions of the moment); each call gets the next label of `runs` and
    answers (rate, latencies, CPU split). Per contender: (its rates, all its latencies, its splits)."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    latencies: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[list[float]]] = {name: [] for name in contenders}
    names = list(contenders)
    for pair in range(repeat):
        for name in names[:: 1 if pair % 2 == 0 else -1]:
            rate, times, split = contenders[name](next(runs))
            rates[name].append(rate)
            latencies[name] += times
            cpu[name].append(split)
    return rates, latencies, cpu


def _summary(rates: dict, latencies: dict, cpu: dict, first: str, second: str) -> tuple:
    """(the ratios first/second of each pair, p50 and p99 in ms and the mean CPU split per contender)."""
    ratios = [a / b for a, b in zip(rates[first], rates[second])]
    tails = {name: (percentile(times, 50) * 1000, percentile(times, 99) * 1000) for name, times in latencies.items()}
    mean_cpu = {name: [sum(column) / len(column) for column in zip(*splits)] for name, splits in cpu.items()}
    return ratios, tails, mean_cpu


def _with_workers(pid: int) -> list[int]:
    """`pid` and its child processes (the workers of `weave serve --processes N`)."""
    return [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]


def _rss_kib(pid: int) -> int:
    total = 0
    for each in _with_workers(pid):
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def _cpu_split(bench: Bench) -> tuple[float, float, float]:
    """CPU seconds used so far by the API server (all its processes), this load generator and the
    database server."""
    usage = os.times()
    server = sum(_cpu_seconds(pid) for pid in _with_workers(bench.server_pid))
    return server, usage.user + usage.system, _cpu_seconds(bench.database_pid)


def _cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (field 3 on): [11], [12] user and system CPU ticks,
    [13], [14] those of its children it has waited for."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


# ---- signal to consumption latency ----------------------------------------------------------------------


# Sends that wake an idle scanner, before the measured ones: at 37 ms apart, the scanner's longest
# sleep (0.25 s) takes up to 7 of them.
LATENCY_WARM_UP = 10


def bench_latency(bench: Bench, signals: int, idle_window: float = 5.0) -> list[dict]:
    """Acceptance to consumption with one `weave scan` running and active waits (database times)."""
    (scanner,) = _scanners(bench, 1)
    try:
        ids = _waiting_workflows(bench, "lat", signals + LATENCY_WARM_UP)
        time.sleep(1)
        cpu_before = _cpu_seconds(scanner.pid)
        time.sleep(idle_window)
        idle_cpu = (_cpu_seconds(scanner.pid) - cpu_before) / idle_window
        client = Http(bench, bench.client_token)
        for i, workflow_id in enumerate(ids):
            client.headers["Idempotency-Key"] = f"lat-{i}"
            client.post(f"/workflows/{workflow_id}/signals", _signal_body(f"o-{i}"))
            time.sleep(0.037)  # spread the sends over the scanner's sleep cycle
        while _pending(bench, "lat"):
            time.sleep(0.1)
        rows = bench.database.run(
            lambda tx: tx.all(
                "SELECT TIMESTAMPDIFF(MICROSECOND, accepted_at, consumed_at) AS us"
                " FROM signals WHERE idempotency_key LIKE 'lat-%%' ORDER BY id"
            )
        )
    finally:
        scanner.terminate()
        scanner.wait(10)
    # The first sends find the scanner in its idle sleep (up to IDLE_SECONDS): they wait for it to
    # wake, by design. The steady-state figures are those of the sends after them.
    first = rows[0]["us"] / 1000
    millis = [row["us"] / 1000 for row in rows[LATENCY_WARM_UP:]]
    p50, p99 = percentile(millis, 50), percentile(millis, 99)
    print(
        f"signal accepted -> consumed ({len(millis)} signals, one scanner, after {LATENCY_WARM_UP} sent first)   "
        f"p50 {p50:.1f} ms   p99 {p99:.1f} ms   max {max(millis):.1f} ms   the first after idling {first:.1f} ms   "
        f"idle scanner CPU {idle_cpu * 100:.1f}% of a core",
        flush=True,
    )
    return [
        {
            "label": "signal accepted -> consumed",
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
            "max_ms": round(max(millis), 1),
            "first_after_idle_ms": round(first, 1),
            "idle_scanner_cpu_percent": round(idle_cpu * 100, 2),
        }
    ]


def _scanners(bench: Bench, count: int) -> list[subprocess.Popen]:
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.url()}
    return [_weave(env, "scan") for _ in range(count)]


def _count(bench: Bench, sql: str, *params) -> int:
    return bench.database.read(lambda tx: tx.one(sql, params))["n"]


def _waiting_workflows(bench: Bench, prefix: str, count: int) -> list[str]:
    """`count` workflows `{prefix}-{i}` of one SIGNAL step (definition `wait`), started over HTTP;
    their ids once the scanners running have opened every wait."""
    client = Http(bench, bench.client_token)  # its own: the server closes a connection idle for 10 s
    client.post("/definitions", {"name": "wait", "steps": [SIGNAL_DEFINITION["steps"][1]]})  # 200 once published
    ids = [f"{prefix}-{i}" for i in range(count)]
    for i, workflow_id in enumerate(ids):
        body = {"definition": "wait", "version": 1, "input": {"order_id": f"o-{i}"}, "deadline_seconds": 86400}
        client.post("/workflows", {**body, "workflow_id": workflow_id})
    waiting = (
        "SELECT COUNT(*) AS n FROM waits w JOIN instances i ON i.id = w.instance_id "
        "WHERE w.status = 'WAITING' AND i.workflow_id LIKE %s"
    )
    deadline = time.monotonic() + 120
    while _count(bench, waiting, f"{prefix}-%") < count:
        assert time.monotonic() < deadline, "waits did not activate"
        time.sleep(0.1)
    return ids


def _pending(bench: Bench, prefix: str) -> int:
    return _count(
        bench, "SELECT COUNT(*) AS n FROM signals WHERE status = 'PENDING' AND idempotency_key LIKE %s", f"{prefix}-%"
    )


def bench_consumption(
    bench: Bench, signals: int, scanner_counts: tuple[int, ...] = (1, 3), clients: int = 8
) -> list[dict]:
    """The scanner keeping up: `signals` workflows wait on their one SIGNAL step; `clients` clients
    send their signals as fast as Weave accepts them while 1 (then 3) `weave scan` processes
    consume them. Printed: the acceptance rate, the consumption rate (signals over the time from
    the first acceptance to the last consumption, database times) and the backlog of accepted,
    not yet consumed signals, sampled every 50 ms: its largest value and its value when sending ended."""
    results = []
    for count in scanner_counts:
        prefix = f"con{count}-{int(time.time())}"
        scanners = _scanners(bench, count)
        try:
            ids = _waiting_workflows(bench, prefix, signals)
            backlog: list[int] = []
            sending = threading.Event()
            sending.set()

            def sample() -> None:
                while sending.is_set():
                    backlog.append(_pending(bench, prefix))
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            senders: dict[int, Http] = {}
            per_client = max(1, signals // clients)

            def prepare(i: int) -> None:
                senders[i] = Http(bench, bench.client_token)

            def send(i: int) -> None:
                for n in range(per_client):
                    k = i * per_client + n
                    senders[i].headers["Idempotency-Key"] = f"{prefix}-{k}"
                    status, _ = senders[i].post(f"/workflows/{ids[k]}/signals", _signal_body(f"o-{k}"))
                    assert status == 201, status

            sampler.start()
            seconds = run_threads(clients, send, prepare)
            sent = per_client * clients
            at_end = _pending(bench, prefix)
            deadline = time.monotonic() + 120
            while _pending(bench, prefix):
                assert time.monotonic() < deadline, "signals were not consumed"
                time.sleep(0.05)
            sending.clear()
            sampler.join()
            span = bench.database.read(
                lambda tx: tx.one(
                    "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(accepted_at), MAX(consumed_at)) AS us FROM signals "
                    "WHERE idempotency_key LIKE %s",
                    (f"{prefix}-%",),
                )
            )["us"]
        finally:
            for scanner in scanners:
                scanner.terminate()
            for scanner in scanners:
                scanner.wait(10)
        row = {
            "label": f"signals consumed while accepted at full speed, {count} scanner(s)",
            "signals": sent,
            "accepted_per_second": round(sent / seconds, 1),
            "consumed_per_second": round(sent / (span / 1e6), 1),
            "max_backlog": max(backlog, default=0),
            "backlog_when_sending_ended": at_end,
        }
        print(
            f"{row['label']:<62} accepted {row['accepted_per_second']:7.1f}/s   consumed {row['consumed_per_second']:7.1f}/s"
            f"   backlog max {row['max_backlog']}, {at_end} when sending ended ({sent} signals, {clients} clients)",
            flush=True,
        )
        results.append(row)
    return results


# ---- the DBOS peer (issue 17, target 3) -------------------------------------------------------------

DBOS_VERSION = "3.4.0"  # pinned so that runs compare; the peer's own venv, never Weave's
DBOS_VENV = ROOT / ".bench" / "dbos-venv"
DBOS_DRIVER = ROOT / "scripts" / "bench_dbos.py"
POSTGRES_SEARCH_PATH = "/usr/lib/postgresql/*/bin"
POSTGRES_HINT = (
    "PostgreSQL server binaries (initdb, postgres) were not found on PATH or in "
    f"{POSTGRES_SEARCH_PATH}; install them, e.g. on Debian/Ubuntu: `sudo apt-get install postgresql`"
)
POSTGRES_ACCOUNTS = ("postgres", "nobody")  # PostgreSQL refuses to run as root
POSTGRES_START_SECONDS = 60


class PeerUnavailable(RuntimeError):
    """The peer cannot run on this machine: the message says what to install."""


def postgres_binaries() -> Path:
    """The folder holding `initdb` and `postgres`: PATH first, then the newest Debian version."""
    versions = sorted(Path("/").glob(POSTGRES_SEARCH_PATH.lstrip("/")), key=_version, reverse=True)
    search_path = os.pathsep.join([os.environ.get("PATH", ""), *map(str, versions)])
    found = shutil.which("initdb", path=search_path)
    if found is None:
        raise PeerUnavailable(POSTGRES_HINT)
    folder = Path(found).resolve().parent  # /usr/local/bin/initdb may link into the version's folder
    if not (folder / "postgres").exists():
        raise PeerUnavailable(POSTGRES_HINT)
    return folder


def _version(binaries: Path) -> list[int]:
    return [int(part) for part in binaries.parent.name.split(".") if part.isdigit()]


def dbos_python() -> Path:
    """The python of the peer's venv, with `dbos==DBOS_VERSION`: made on first use, then reused."""
    python, stamp = DBOS_VENV / "bin" / "python", DBOS_VENV / f".dbos-{DBOS_VERSION}"
    if not stamp.exists():
        print(f"making {DBOS_VENV.relative_to(ROOT)} with dbos=={DBOS_VERSION} (once)", flush=True)
        for command in (
            [sys.executable, "-m", "venv", str(DBOS_VENV)],
            [str(python), "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}"],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise PeerUnavailable(f"`{' '.join(command)}` failed ({last}); needs python3-venv and PyPI")
        stamp.touch()
    return python


@dataclass
class Postgres:
    url: str  # postgresql://postgres@127.0.0.1:port/…, the peer's system database
    pid: int  # the postmaster


@contextmanager
def private_postgres(folder: Path, binaries: Path):
    """A PostgreSQL of our own in `folder` (its socket there too) on 127.0.0.1 and a free port, with
    durable commits (fsync, synchronous_commit: the defaults, said aloud), and trust for local
    clients. As root it runs as `postgres` (or `nobody`), which then owns `folder`."""
    account = None
    if os.geteuid() == 0:
        account = next((name for name in POSTGRES_ACCOUNTS if _has_account(name)), None)
        if account is None:
            raise PeerUnavailable("PostgreSQL cannot run as root and no 'postgres' or 'nobody' account exists")
        owner = pwd.getpwnam(account)
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data, log = folder / "data", folder / "postgres.log"
    # --no-sync: initdb's own final flush only; the server below commits durably.
    initdb = [binaries / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
    done = subprocess.run(initdb, cwd=folder, user=account, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
    port = free_port()
    settings = {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(folder),
        "fsync": "on",
        "synchronous_commit": "on",
        "shared_buffers": "256MB",  # the private MariaDB's buffer pool
        "logging_collector": "off",
    }
    with log.open("w") as log_file:
        server = subprocess.Popen(
            [binaries / "postgres", "-D", data, "-p", str(port), *(f"-c{k}={v}" for k, v in settings.items())],
            cwd=folder,
            user=account,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        _wait_postgres_ready(server, data, log)
        yield Postgres(f"postgresql://postgres@127.0.0.1:{port}/weave_bench_dbos", server.pid)
    finally:
        server.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM would wait for clients to leave
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _has_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _wait_postgres_ready(server: subprocess.Popen, data: Path, log: Path) -> None:
    """postmaster.pid's last line reads `ready` once the server accepts connections."""
    deadline = time.monotonic() + POSTGRES_START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with {server.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if (data / "postmaster.pid").read_text().split("\n")[7].strip() == "ready":
                return
        except (FileNotFoundError, IndexError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"PostgreSQL did not start within {POSTGRES_START_SECONDS}s:\n{log.read_text(errors='replace')}")


def _postgres_cpu_seconds(postmaster: int) -> float:
    """CPU seconds of PostgreSQL so far: the postmaster with the children it has reaped (its cutime
    and cstime), plus its live children (backends, background workers)."""
    fields = _stat_fields(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    for child in _with_workers(postmaster)[1:]:
        try:
            total += _cpu_seconds(child)
        except FileNotFoundError:  # ended between the listing and the reading
            pass
    return total


def _dbos_run(postgres: Postgres, python: Path, threads: int, per_thread: int, destinations: int, run: str) -> tuple:
    """One timed run of the DBOS driver (scripts/bench_dbos.py): (sends per second, latencies in
    seconds, [CPU ms per send of the driver, PostgreSQL])."""
    command = [python, DBOS_DRIVER, "--url", postgres.url, "--run", run, "--threads", str(threads)]
    command += ["--sends", str(threads * per_thread), "--destinations", str(destinations)]
    driver = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if driver.stdout.readline().strip() != "ready":
            raise RuntimeError("the DBOS driver stopped before its timed sends (its errors are above)")
        before = _postgres_cpu_seconds(postgres.pid)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        line = driver.stdout.readline()
        after = _postgres_cpu_seconds(postgres.pid)
        if not line:
            raise RuntimeError("the DBOS driver stopped during its timed sends (its errors are above)")
    finally:
        driver.stdin.close()  # the driver exits when its stdin closes
        driver.wait(60)
    timed = json.loads(line)
    sends = len(timed["latencies"])
    cpu = [timed["cpu_seconds"] * 1000 / sends, (after - before) * 1000 / sends]
    return sends / timed["seconds"], timed["latencies"], cpu


def bench_peer(bench: Bench, per_run: int, repeat: int, clients: int = 8, instances: int = 200) -> list[dict]:
    """Weave's signal acceptance beside DBOS Transact's `send`: `clients` HTTP clients sending signals
    over `instances` instances (as in bench_signals), alternating `repeat` times with the DBOS driver
    sending as many messages from as many threads over as many destination workflows, on a private
    PostgreSQL. DBOS's `send` is a library call: no HTTP, no authentication, no validation. Skipped
    with one line saying what to install where PostgreSQL or the peer's venv is missing."""
    try:
        binaries = postgres_binaries()
        python = dbos_python()
    except PeerUnavailable as missing:
        print(f"DBOS peer skipped: {missing}", flush=True)
        return []
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)  # 200 once published
    per_client = max(1, per_run // clients)
    runs = (f"peer{n}" for n in itertools.count())
    with (
        tempfile.TemporaryDirectory(prefix="weave-bench-pg-") as folder,
        private_postgres(Path(folder), binaries) as postgres,
    ):
        rates, latencies, cpu = _alternate(
            {
                "weave": partial(_signal_run, bench, _http_sender, instances, clients, per_client),
                "dbos": partial(_dbos_run, postgres, python, clients, per_client, instances),
            },
            repeat,
            runs,
        )
    ratios, tails, mean_cpu = _summary(rates, latencies, cpu, "weave", "dbos")
    extra = (
        f"   p50/p99 ms weave {tails['weave'][0]:.1f}/{tails['weave'][1]:.1f}"
        f" dbos {tails['dbos'][0]:.1f}/{tails['dbos'][1]:.1f}"
        "   CPU ms/signal weave (server, load, db) %.2f, %.2f, %.2f dbos (driver, postgres) %.2f, %.2f"
        % (*mean_cpu["weave"], *mean_cpu["dbos"])
        + (f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}" if repeat > 1 else "")
    )
    row = report(
        f"signals vs DBOS send, {instances} instances, {clients} clients",
        median(rates["weave"]),
        median(rates["dbos"]),
        "sig/s",
        extra,
        ratio=median(ratios),
        baseline_name="dbos",
    )
    row["peer"] = f"dbos=={DBOS_VERSION}"
    row["run_ratios"] = [round(r, 3) for r in ratios]
    row["p50_ms"], row["p99_ms"] = round(tails["weave"][0], 1), round(tails["weave"][1], 1)
    row["dbos_p50_ms"], row["dbos_p99_ms"] = round(tails["dbos"][0], 1), round(tails["dbos"][1], 1)
    row["cpu_ms_per_signal"] = {name: [round(v, 2) for v in split] for name, split in mean_cpu.items()}
    return [row]


# ---- flat cost: the same figures with a million stored signals (issue 17, target 4) ------------------

SCALE_BASE = 10_000  # stored signals of the reference figures
SCALE_SIGNALS_PER_INSTANCE = 100  # how the stored signals are spread: 10,000 instances hold a million
SCALE_RUNNING_EVERY = 10  # every 10th stored instance still runs; its signals are early (PENDING)
SCALE_CHUNK = 100_000  # signals loaded per transaction
SCALE_CONSUMED = 500  # signals consumed by the scanner per size
HOT_SENDS = 24  # timed signals per hot instance (1 and 8 clients: 24 and 3 each)
HOT_INSTANCES = 40  # hot instances per run: 960 timed signals
SCALE_TARGET = 1.2  # target 4: every figure at the large size within 1.2x of the one at 10,000

# Stored signals are written as Weave writes them (sql/signals.py `_accept`, sql/events.py, sql/audit.py),
# server-side from MariaDB's sequence engine, one chunk of instances at a time. Every statement names
# its columns, so a column added later with a default loads with its default (`signals_stored`, the
# count acceptance keeps, is set to the signals loaded). A settled instance
# (SUCCEEDED) holds its consumed winner, rejected and expired signals, both steps settled, its task done
# and its inbox event consumed; a running one is in its first (TASK) step, leased far ahead, and its
# signals wait for the SIGNAL step as early signals (PENDING, expiring at the instance's deadline,
# 30 days ahead). Instances are `{prefix}.{chunk}-{n}`; chunk by chunk they are found by that prefix.
LOAD_INSTANCES = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest, signals_stored,
                       status, gate, deadline_at, created_at, updated_at)
SELECT %(namespace)s, CONCAT(%(chunk)s, '-', s.seq), %(definition)s, %(application)s, '{{"order_id":"o"}}',
       SHA2(CONCAT(%(chunk)s, '-', s.seq), 256), %(per_instance)s,
       IF(s.seq MOD %(running_every)s = 0, 'RUNNING', 'SUCCEEDED'), IF(s.seq MOD %(running_every)s = 0, 'OPEN', 'CLOSED'),
       IF(s.seq MOD %(running_every)s = 0, %(now)s + INTERVAL 30 DAY, %(now)s - INTERVAL 19 DAY),
       %(now)s - INTERVAL 20 DAY + INTERVAL s.seq SECOND, %(now)s - INTERVAL 20 DAY + INTERVAL s.seq SECOND
FROM seq_0_to_{last_instance} s
"""
CHUNK_INSTANCES = (
    "FROM instances i WHERE i.namespace_id = %(namespace)s AND i.workflow_id LIKE CONCAT(%(chunk)s, '-%%')"
)
LOAD_ACTIVATIONS = (
    """
INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status, result, activated_at,
                              deadline_at, settled_at)
SELECT i.id, 'reserve', 0, 1, IF(i.status = 'RUNNING', 'ACTIVE', 'SUCCEEDED'), IF(i.status = 'RUNNING', NULL, '{{"ok":true}}'),
       i.created_at, i.deadline_at, IF(i.status = 'RUNNING', NULL, i.created_at + INTERVAL 1 SECOND)
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.id, 'payment', 1, 1, 'SUCCEEDED', '{{"amount":12.5}}', i.created_at, i.deadline_at, i.created_at + INTERVAL 1 HOUR
"""
    + CHUNK_INSTANCES
    + " AND i.status = 'SUCCEEDED'"
)
LOAD_TASKS = """
INSERT INTO tasks (namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
                   available_at, lease_token, lease_expires_at, worker_id, deadline_at, result, created_at, completed_at)
SELECT i.namespace_id, %(queue)s, i.id, a.id, 'TASK', IF(i.status = 'RUNNING', 'RUNNING', 'SUCCEEDED'), 1, 3,
       i.created_at, IF(i.status = 'RUNNING', LEFT(SHA2(i.id, 256), 32), NULL),
       IF(i.status = 'RUNNING', i.deadline_at, NULL), 'loader', i.deadline_at,
       IF(i.status = 'RUNNING', NULL, '{{"ok":true}}'), i.created_at, IF(i.status = 'RUNNING', NULL, i.created_at)
""" + CHUNK_INSTANCES.replace(
    "WHERE", "JOIN step_activations a ON a.instance_id = i.id AND a.step_key = 'reserve' WHERE"
)
LOAD_INBOX = (
    """
INSERT INTO inbox_events (task_id, instance_id, outcome, result, completed_at, status, available_at, attempts,
                          consumed_at)
SELECT t.id, i.id, 'SUCCEEDED', t.result, t.completed_at, 'CONSUMED', t.completed_at, 0, t.completed_at
"""
    + CHUNK_INSTANCES.replace("WHERE", "JOIN tasks t ON t.instance_id = i.id WHERE")
    + " AND i.status = 'SUCCEEDED'"
)
# A running instance looks again at its task's deadline (engine.activate).
LOAD_CHECKPOINTS = (
    """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
SELECT i.id, 'ROOT', NULL, i.deadline_at, i.deadline_at, 0, i.created_at
"""
    + CHUNK_INSTANCES
    + " AND i.status = 'RUNNING'"
)
# Signal n of an instance: the first is its wait's winner, every 10th expired unmatched, the rest
# turned down when the step settled; all of a running instance's are early, PENDING.
LOAD_SIGNALS = (
    (
        """
INSERT INTO signals (instance_id, name, payload_version, target_step_key, target_activation_sequence, correlation,
                     payload, payload_sha256, payload_present, reason, evidence_ref, actor, credential_id,
                     idempotency_key, request_digest, status, disposition, accepted_at, expires_at, available_at,
                     settled_at, created_at, receipt, consumed_at)
SELECT i.id, 'payment.settled', 'v1', 'payment', 1, 'o', '{{"amount":12.5}}', SHA2('{{"amount":12.5}}', 256), 1,
       'benchmark', NULL, 'bench-client', %(credential)s, CONCAT('load-', n.seq), SHA2(CONCAT(i.id, '-', n.seq), 256),
       {status}, {disposition}, i.created_at + INTERVAL n.seq SECOND, i.deadline_at, i.deadline_at,
       IF(i.status = 'RUNNING', NULL, i.created_at + INTERVAL 1 HOUR), i.created_at + INTERVAL n.seq SECOND,
       CONCAT('"workflow_id":"', CONVERT(i.workflow_id USING utf8mb4), '","status":"', {status}, '","disposition":',
              IFNULL(CONCAT('"', {disposition}, '"'), 'null'), ',"accepted_at":"',
              DATE_FORMAT(i.created_at + INTERVAL n.seq SECOND, %(rfc3339)s), '","expires_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '","idempotency_key":"load-', n.seq,
              '","request_digest":"', SHA2(CONCAT(i.id, '-', n.seq), 256), '"}}'),
       IF(i.status <> 'RUNNING' AND n.seq = 0, i.created_at + INTERVAL 1 HOUR, NULL)
"""
        + CHUNK_INSTANCES.replace("WHERE", "JOIN seq_0_to_{last_signal} n WHERE")
    )
    .replace(
        "{status}",
        "IF(i.status = 'RUNNING', 'PENDING', IF(n.seq = 0, 'CONSUMED', IF(n.seq MOD 10 = 9, 'EXPIRED', 'REJECTED')))",
    )
    .replace(
        "{disposition}",
        "IF(i.status = 'RUNNING' OR n.seq = 0, NULL, IF(n.seq MOD 10 = 9, 'EXPIRED_UNMATCHED', 'WAIT_SETTLED'))",
    )
)
LOADED_SIGNALS = CHUNK_INSTANCES.replace("WHERE", "JOIN signals s ON s.instance_id = i.id WHERE")
LOAD_WAITS = (
    """
INSERT INTO waits (instance_id, step_key, kind, name, payload_version, correlation, activation_id,
                   activation_sequence, status, deadline_at, created_at, winner_signal_id, settled_at)
SELECT i.id, 'payment', 'SIGNAL', 'payment.settled', 'v1', 'o', a.id, 1, 'SATISFIED', i.deadline_at, i.created_at,
       s.id, s.consumed_at
"""
    + LOADED_SIGNALS.replace(
        "WHERE", "JOIN step_activations a ON a.instance_id = i.id AND a.step_key = 'payment' WHERE"
    )
    + " AND s.status = 'CONSUMED'"
)
SIGNAL_EVENT_DATA = """CONCAT('{{"signal_id":"', s.id, '","name":"payment.settled","target_step_key":"payment",',
       '"target_activation_sequence":1,"status":"PENDING","disposition":null,"actor":"bench-client"')"""
LOAD_EVENTS = (
    """
INSERT INTO events (instance_id, seq, type, at, data)
SELECT i.id, 1, 'WORKFLOW_STARTED', i.created_at,
       CONCAT('{{"definition":"pay","version":1,"actor":"bench-client","deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.id, 2 + CAST(SUBSTRING(s.idempotency_key, 6) AS UNSIGNED), 'SIGNAL_ACCEPTED', s.accepted_at,
       CONCAT({data}, '}}')
"""
    + LOADED_SIGNALS
).replace("{data}", SIGNAL_EVENT_DATA)
LOAD_AUDIT = (
    """
INSERT INTO audit_records (namespace_id, instance_id, signal_id, credential_id, actor, action, request_digest, at,
                           details)
SELECT i.namespace_id, i.id, NULL, %(credential)s, 'bench-client', 'workflow.start', i.request_digest, i.created_at,
       CONCAT('{{"workflow_id":"', CONVERT(i.workflow_id USING utf8mb4), '","definition":"pay","version":1,"deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.namespace_id, i.id, s.id, %(credential)s, 'bench-client', 'signal.send', s.request_digest, s.accepted_at,
       CONCAT({data}, ',"idempotency_key":"', CONVERT(s.idempotency_key USING utf8mb4), '","accepted_at":"',
              DATE_FORMAT(s.accepted_at, %(rfc3339)s), '","instance_deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + LOADED_SIGNALS
).replace("{data}", SIGNAL_EVENT_DATA)
# Each statement of a chunk, in the order of their references.
LOAD_CHUNK = (
    LOAD_ACTIVATIONS,
    LOAD_TASKS,
    LOAD_INBOX,
    LOAD_CHECKPOINTS,
    LOAD_SIGNALS,
    LOAD_WAITS,
    LOAD_EVENTS,
    LOAD_AUDIT,
)


def load_stored_signals(bench: Bench, prefix: str, instances: int, per_instance: int, running_every: int) -> list[str]:
    """`instances` instances of `pay` holding `per_instance` signals each, with their events and
    audit records, written server-side; every `running_every`-th instance still runs. Returns their
    workflow ids. The loading connection skips unique checks: the rows are unique by construction."""
    ids = bench.database.read(
        lambda tx: tx.one(
            "SELECT d.id AS definition, c.application_id AS application, c.id AS credential,"
            " (SELECT id FROM queues WHERE namespace_id = %s AND name = %s) AS queue"
            " FROM definitions d JOIN credentials c ON c.namespace_id = d.namespace_id"
            " WHERE d.namespace_id = %s AND d.name = 'pay' AND c.actor = 'bench-client'",
            (bench.namespace_id, QUEUE, bench.namespace_id),
        )
    )
    per_chunk = max(1, SCALE_CHUNK // per_instance)
    conn = connect(bench.url)
    workflow_ids = []
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION unique_checks = 0")
        cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
        now = cur.fetchone()["now"]
        for first in range(0, instances, per_chunk):
            count = min(per_chunk, instances - first)
            chunk = f"{prefix}.{first // per_chunk}"
            params = {
                **ids,
                "namespace": bench.namespace_id,
                "chunk": chunk,
                "running_every": running_every,
                "per_instance": per_instance,
                "now": now,
                "rfc3339": "%Y-%m-%dT%H:%i:%s.%fZ",
            }
            cur.execute(LOAD_INSTANCES.format(last_instance=count - 1), params)
            for statement in LOAD_CHUNK:
                cur.execute(statement.format(last_signal=per_instance - 1), params)
            conn.commit()
            workflow_ids += [f"{chunk}-{n}" for n in range(count)]
    finally:
        conn.close()
    return workflow_ids


PURGE_SETTLED = 1000  # undo records of committed transactions left for InnoDB's purge threads


def _purge_backlog(cur) -> int:
    """InnoDB's history list length: what its purge threads still have to clean up."""
    cur.execute("SHOW ENGINE INNODB STATUS")
    status = cur.fetchone()["Status"]
    found = re.search(r"History list length (\d+)", status)
    return int(found.group(1)) if found else 0


def _settled(bench: Bench, most_seconds: float = 120.0) -> float:
    """After a load: fresh optimizer statistics, the loaded pages written out and the load's undo
    purged, so that neither InnoDB's flushing, its checkpoint pressure nor its purge threads compete
    with what is measured next. MariaDB's page cleaner leaves dirty pages alone until the redo log
    presses, so the bench's own server is told to flush everything now
    (`innodb_max_dirty_pages_pct = 0`), then set back. Returns the seconds it took."""
    started = time.monotonic()
    conn = connect(bench.url, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("ANALYZE TABLE instances, signals, events, audit_records, step_activations, tasks, waits")
        cur.fetchall()
        cur.execute("SELECT @@innodb_max_dirty_pages_pct AS pct, @@innodb_io_capacity AS io")
        was = cur.fetchone()
        cur.execute(
            "SET GLOBAL innodb_max_dirty_pages_pct = 0, innodb_io_capacity = GREATEST(@@innodb_io_capacity, 2000)"
        )
        try:
            while time.monotonic() - started < most_seconds:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                dirty = int(cur.fetchone()["Value"])
                if dirty <= 100 and _purge_backlog(cur) <= PURGE_SETTLED:
                    break
                time.sleep(0.5)
        finally:
            cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = %s, innodb_io_capacity = %s", (was["pct"], was["io"]))
    finally:
        conn.close()
    return time.monotonic() - started


def _consumption_cost(bench: Bench, prefix: str, count: int, clients: int = 8) -> dict:
    """The scanner's cost per candidate: `count` workflows wait on their SIGNAL step; with the one
    `weave scan` stopped (SIGSTOP once nothing is due, so it holds no lock), `clients` clients send
    their signals; then it goes on and consumes them. Per consumed signal: the wall time (first to
    last consumption, database times), the scanner's and the database's CPU."""
    (scanner,) = _scanners(bench, 1)
    waiting = (
        "SELECT COUNT(*) AS n FROM instances i JOIN waits w ON w.instance_id = i.id "
        "WHERE i.namespace_id = %s AND i.workflow_id LIKE %s AND w.status = 'WAITING'"
    )
    try:
        ids = _waiting_workflows(bench, prefix, count)
        # Every wait's first look (a WAIT checkpoint due at its activation) done and committed: its
        # batches now find nothing, so it is stopped holding no lock.
        deadline = time.monotonic() + 120
        while _count(bench, "SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= UTC_TIMESTAMP(6)"):
            assert time.monotonic() < deadline, "the scanner did not catch up"
            time.sleep(0.1)
        os.kill(scanner.pid, signal.SIGSTOP)
        try:
            senders: dict[int, Http] = {}
            per_client = -(-count // clients)

            def prepare(i: int) -> None:
                senders[i] = Http(bench, bench.client_token)

            def send(i: int) -> None:
                for k in range(i * per_client, min(count, (i + 1) * per_client)):
                    senders[i].headers["Idempotency-Key"] = f"{prefix}-{k}"
                    status, _ = senders[i].post(f"/workflows/{ids[k]}/signals", _signal_body(f"o-{k}"))
                    assert status == 201, status

            run_threads(clients, send, prepare)
        finally:
            before = _cpu_seconds(scanner.pid), _cpu_seconds(bench.database_pid), _pool_reads(bench)
            os.kill(scanner.pid, signal.SIGCONT)
        deadline = time.monotonic() + 300
        while _count(bench, waiting, bench.namespace_id, f"{prefix}-%"):
            assert time.monotonic() < deadline, "signals were not consumed"
            time.sleep(0.1)
        scanner_cpu, database_cpu, pool_reads = (
            _cpu_seconds(scanner.pid) - before[0],
            _cpu_seconds(bench.database_pid) - before[1],
            _pool_reads(bench) - before[2],
        )
    finally:
        scanner.terminate()
        scanner.wait(10)
    span = bench.database.read(
        lambda tx: tx.one(
            "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(s.consumed_at), MAX(s.consumed_at)) AS us, COUNT(*) AS n "
            "FROM instances i JOIN signals s ON s.instance_id = i.id "
            "WHERE i.namespace_id = %s AND i.workflow_id LIKE %s AND s.status = 'CONSUMED'",
            (bench.namespace_id, f"{prefix}-%"),
        )
    )
    assert span["n"] == count, span
    return {
        "ms_per_candidate": span["us"] / 1000 / max(1, count - 1),
        "scanner_cpu_ms": scanner_cpu * 1000 / count,
        "database_cpu_ms": database_cpu * 1000 / count,
        "pool_reads": pool_reads / count,
    }


def _pool_reads(bench: Bench) -> int:
    """Pages InnoDB has read from disk so far (buffer pool misses), on the whole server."""
    return int(bench.database.read(lambda tx: tx.one("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'"))["Value"])


def _within(ratio: float, slower_when_above: bool) -> str:
    """Target 4 on one ratio (large / reference): met, or by how much it is missed."""
    worse = ratio if slower_when_above else 1 / ratio if ratio else float("inf")
    return "  meets 1.2x" if worse <= SCALE_TARGET else f"  MISSES 1.2x ({worse:.2f}x slower)"


@contextmanager
def _beside(bench: Bench, database: str, threads: int, processes: int):
    """A second database on `bench`'s server, with the bench's tenant and a `weave serve` of its
    own: a Bench whose runs can alternate with `bench`'s under the same conditions."""
    url = bench.url.with_database(database)
    prepared_database, client_token, worker_token, namespace_id = prepared(url)
    try:
        env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
        with _serving(env, threads, processes) as (base, pid):
            yield Bench(url, prepared_database, base, client_token, worker_token, namespace_id, pid, bench.database_pid)
    finally:
        prepared_database.close()


def _load_sized(bench: Bench, size: int) -> None:
    """`size` stored signals into `bench`'s database, 100 per instance, then settled; timed."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    started = time.monotonic()
    instances = size // SCALE_SIGNALS_PER_INSTANCE
    load_stored_signals(bench, "load", instances, SCALE_SIGNALS_PER_INSTANCE, SCALE_RUNNING_EVERY)
    loaded = time.monotonic() - started
    waited = _settled(bench)
    print(
        f"scale: {size:,} stored signals in {instances:,} instances, with their events and audit records: "
        f"loaded in {loaded:.1f} s, written out in {waited:.1f} s",
        flush=True,
    )


def bench_scale(
    bench: Bench,
    large: int,
    base: int = SCALE_BASE,
    per_run: int = 2000,
    repeat: int = 3,
    consumed: int = SCALE_CONSUMED,
    hot_instances: int = HOT_INSTANCES,
    threads: int = 16,
    processes: int = 2,
) -> list[dict]:
    """Target 4: the same figures with `large` stored signals (in `bench`'s database) and with `base`
    (in a second database on the same server, served by a second `weave serve`), runs alternating
    between the two, each first in every other pair (the machine's conditions of the moment are
    shared by a pair, as in `bench_signals`): acceptance at 8 clients over 200 fresh instances, and
    the scanner's cost per consumed signal (`_consumption_cost`). Each large figure is printed
    beside the reference with the median of the pairs' ratios. Then one hot instance near its cap
    against one holding 10 signals, at 1 and 8 clients, in the large database."""
    from weave.sql.signals import SIGNALS_PER_INSTANCE

    with _beside(bench, f"{bench.url.database}_base", threads, processes) as small:
        _load_sized(small, base)
        _load_sized(bench, large)
        sides = {"large": bench, "base": small}
        rates: dict[str, list[float]] = {"large": [], "base": []}
        cpu: dict[str, list[list[float]]] = {"large": [], "base": []}
        costs: dict[str, list[dict]] = {"large": [], "base": []}
        for pair in range(repeat):
            for side in ("large", "base")[:: 1 if pair % 2 == 0 else -1]:
                reads = _pool_reads(bench)
                rate, times, split = _signal_run(
                    sides[side], _http_sender, 200, 8, max(1, per_run // 8), f"scale{pair}"
                )
                rates[side].append(rate)
                cpu[side].append([*split, (_pool_reads(bench) - reads) / len(times)])
        for pair in range(repeat):
            for side in ("large", "base")[:: 1 if pair % 2 == 0 else -1]:
                costs[side].append(_consumption_cost(sides[side], f"scan{pair}", consumed))
    at_base = f"{base:,} stored"
    mean_cpu = {side: [sum(column) / len(column) for column in zip(*splits)] for side, splits in cpu.items()}
    ratios = [big / small for big, small in zip(rates["large"], rates["base"])]
    accepted = report(
        f"scale: signals accepted, 8 clients, {large:,} stored",
        median(rates["large"]),
        median(rates["base"]),
        "sig/s",
        "   CPU ms/signal (server, load, db) %.2f, %.2f, %.2f vs %.2f, %.2f, %.2f"
        "   pages read from disk per signal %.2f vs %.2f"
        % (*mean_cpu["large"][:3], *mean_cpu["base"][:3], mean_cpu["large"][3], mean_cpu["base"][3])
        + _within(median(ratios), slower_when_above=False)
        + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}",
        ratio=median(ratios),
        baseline_name=at_base,
    )
    accepted["run_ratios"] = [round(r, 3) for r in ratios]
    accepted["cpu_ms_per_signal"] = {side: [round(v, 2) for v in split[:3]] for side, split in mean_cpu.items()}
    accepted["pool_reads_per_signal"] = {side: round(split[3], 2) for side, split in mean_cpu.items()}
    results = [accepted]
    for key, label in (
        ("ms_per_candidate", "scanner: wall ms per consumed signal"),
        ("scanner_cpu_ms", "scanner: its CPU ms per consumed signal"),
        ("database_cpu_ms", "scanner: database CPU ms per consumed signal"),
    ):
        values = {side: [cost[key] for cost in runs] for side, runs in costs.items()}
        ratios = [big / small if small else float("nan") for big, small in zip(values["large"], values["base"])]
        row = report(
            f"scale: {label}, {large:,} stored",
            median(values["large"]),
            median(values["base"]),
            "ms",
            _within(median(ratios), slower_when_above=True)
            + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}"
            + (
                "   pages read from disk per signal %.2f vs %.2f"
                % tuple(median(cost["pool_reads"] for cost in costs[side]) for side in ("large", "base"))
                if key == "database_cpu_ms"
                else ""
            ),
            median(ratios),
            at_base,
        )
        row["run_ratios"] = [round(r, 3) for r in ratios]
        results.append(row)
    for row in results:
        row["stored"], row["baseline_stored"] = large, base
    return results + _bench_hot_instance(bench, SIGNALS_PER_INSTANCE - HOT_SENDS, repeat, hot_instances)


def _bench_hot_instance(bench: Bench, near: int, repeat: int, instances: int, far: int = 10) -> list[dict]:
    """Per-signal cost into one instance that holds `near` signals (its last HOT_SENDS before the
    cap) against one holding `far`: every client sends its share to the same instance, then all go
    on to the next of `instances` loaded ones. Runs alternate, each first in every other pair."""
    results = []
    run = 0
    for clients in (1, 8):
        per_instance = HOT_SENDS // clients
        rates: dict[int, list[float]] = {near: [], far: []}
        cpu: dict[int, list[list[float]]] = {near: [], far: []}
        for pair in range(repeat):
            for held in (near, far)[:: 1 if pair % 2 == 0 else -1]:
                run += 1
                hot = load_stored_signals(bench, f"hot{run}", instances, held, running_every=1)
                _settled(bench)
                targets = [hot[n // per_instance] for _ in range(clients) for n in range(per_instance * instances)]
                rate, _, split = _timed_sends(
                    bench, _http_sender, targets, clients, per_instance * instances, f"hot{run}"
                )
                rates[held].append(rate)
                cpu[held].append(split)
        mean_cpu = {held: [sum(column) / len(column) for column in zip(*splits)] for held, splits in cpu.items()}
        ratios = [n / f for n, f in zip(rates[near], rates[far])]  # each pair shares the moment's conditions
        ratio = median(ratios)
        row = report(
            f"scale: one hot instance, {clients} client(s), {near:,} -> {near + HOT_SENDS:,} stored",
            median(rates[near]),
            median(rates[far]),
            "sig/s",
            "   CPU ms/signal (server, load, db) %.2f, %.2f, %.2f vs %.2f, %.2f, %.2f"
            % (*mean_cpu[near], *mean_cpu[far])
            + ("  no slower" if ratio >= 1 else f"  {1 / ratio:.2f}x slower per signal")
            + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}",
            ratio=ratio,
            baseline_name=f"{far} stored",
        )
        row["run_ratios"] = [round(r, 3) for r in ratios]
        row["cpu_ms_per_signal"] = {
            "near": [round(v, 2) for v in mean_cpu[near]],
            "far": [round(v, 2) for v in mean_cpu[far]],
        }
        results.append(row)
    return results


# ---- payload validation under hostile schemas (issue 10, items 2-3) ---------------------------------

VALIDATION_BYTES = 256 * 1024
VALIDATION_TARGET_MS = 100.0
VALIDATION_RUNS = 5
CHAIN_DEPTH = 200  # arrays nested around the wide one; jsonschema's own recursion stops near 300
# Stock jsonschema runs in a subprocess (Weave's RE2 and uniqueItems replace its code in-process) on
# inputs small enough to finish: it doubles with every character of the first, is quadratic in the second.
STOCK_PATTERN_CHARS = 24
STOCK_UNIQUE_OBJECTS = 1000

CATASTROPHIC = "^(a+)+$"  # exponential on backtracking engines
# Linear on RE2 too, but with a factor: its DFA needs 2^1000 states here, so RE2 falls back to its NFA,
# which steps every instruction of the program (≈1,000 here) for every character of the subject.
NFA_FALLBACK = "[ab]*a[ab]{1000}c"
MANY_PATTERNS = 100
MANY_BRANCHES = 50


def _json_bytes(value) -> int:
    return len(jsontext.compact(value))


def _largest(build, size: int) -> int:
    """The largest n whose build(n) has a compact JSON text of at most `size` bytes."""
    low, high = 0, 1
    while _json_bytes(build(high)) <= size:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _json_bytes(build(middle)) <= size else (low, middle)
    return low


def _recursive(node: dict) -> dict:
    """A schema applying `node` (with `items` pointing back to it) at every level of nested arrays."""
    return {"$ref": "#/$defs/node", "$defs": {"node": {**node, "items": {"$ref": "#/$defs/node"}}}}


def _tree(low: int, high: int):
    """A balanced binary tree of arrays over the integers low..high-1: every array is distinct."""
    if high - low <= 2:
        return list(range(low, high))
    middle = (low + high) // 2
    return [_tree(low, middle), _tree(middle, high)]


def _chain(depth: int, inner):
    for _ in range(depth):
        inner = [inner]
    return inner


def validation_cases(chain_depth: int = CHAIN_DEPTH) -> list[tuple[str, dict, object]]:
    """(label, hostile schema, build): build(n) is a payload growing with n, the worst shape for
    that schema that we know of."""
    rng = random.Random(7)
    subject = "".join(rng.choice("ab") for _ in range(VALIDATION_BYTES))
    keys = lambda n: {format(i, "x") + "!": 0 for i in range(n)}  # noqa: E731
    return [
        (f"pattern {CATASTROPHIC}, one string a…a!", {"pattern": CATASTROPHIC}, lambda n: "a" * n + "!"),
        (f"pattern {NFA_FALLBACK}, one string of a/b", {"pattern": NFA_FALLBACK}, lambda n: subject[:n]),
        (f'items.pattern {CATASTROPHIC}, strings "" (each fails)', {"items": {"pattern": CATASTROPHIC}}, _strings),
        (
            f"patternProperties {CATASTROPHIC} + additionalProperties:false, keys <hex>!",
            {"patternProperties": {CATASTROPHIC: {}}, "additionalProperties": False},
            keys,
        ),
        (
            f"patternProperties, {MANY_PATTERNS} patterns, keys <hex>!",
            {"patternProperties": {f"^{i}x+$": {} for i in range(MANY_PATTERNS)}},
            keys,
        ),
        (
            f"propertyNames.pattern {CATASTROPHIC}, keys <hex>! (each fails)",
            {"propertyNames": {"pattern": CATASTROPHIC}},
            keys,
        ),
        ("uniqueItems, distinct small objects", {"uniqueItems": True}, lambda n: [{"k": i} for i in range(n)]),
        ("uniqueItems, distinct small arrays", {"uniqueItems": True}, lambda n: [[i] for i in range(n)]),
        (
            "uniqueItems at every level ($ref), balanced tree of arrays",
            _recursive({"uniqueItems": True}),
            lambda n: _tree(0, n),
        ),
        (
            f"uniqueItems at every level ($ref), {chain_depth} arrays around one wide array",
            _recursive({"uniqueItems": True}),
            lambda n: _chain(chain_depth, list(range(n))),
        ),
        (
            f"enum at every level ($ref), {chain_depth} arrays around one wide array (each level fails)",
            _recursive({"enum": [0]}),
            lambda n: _chain(chain_depth, list(range(n))),
        ),
        (
            f"anyOf of {MANY_BRANCHES} per-item branches, integers (each branch fails)",
            {"anyOf": [{"items": {"type": "string", "minLength": i}} for i in range(MANY_BRANCHES)]},
            lambda n: [i % 10 for i in range(n)],
        ),
        (
            f"unevaluatedProperties after allOf of {MANY_BRANCHES} schemas, keys <hex>!",
            {
                "allOf": [
                    {"properties": {f"p{i}": {}}, "patternProperties": {"^[0-9a-f]+!$": {}}}
                    for i in range(MANY_BRANCHES)
                ],
                "unevaluatedProperties": False,
            },
            keys,
        ),
        (
            "multipleOf 0.001, numbers 1e999",
            {"items": {"multipleOf": Decimal("0.001")}},
            lambda n: [Decimal("1e999")] * n,
        ),
        (
            "reference: items.type integer, small integers",
            {"items": {"type": "integer"}},
            lambda n: [i % 10 for i in range(n)],
        ),
        ('reference: items.type integer, strings "" (each fails)', {"items": {"type": "integer"}}, _strings),
    ]


def _strings(n: int) -> list:
    return [""] * n


def _publishable(schema: dict) -> None:
    """The schema passes every check a definition's payload schema passes at publish."""
    document = {
        "name": "hostile",
        "steps": [
            {
                "key": "s",
                "type": "SIGNAL",
                "timeout_seconds": 60,
                "correlation": "/input/id",
                "signal": {"name": "x", "payload_version": "v1", "payload_schema": schema},
            }
        ],
    }
    schemas.validate("definition", document)
    assert definition_rules.problems(document) == [], definition_rules.problems(document)


def _outcome(errors: list[dict]) -> str:
    if any(e["message"] == str(budget.BudgetExceeded()) for e in errors):
        return "refused: budget"
    return f"{len(errors)} error(s)" if errors else "passes"


def _validation_ms(schema: dict, payload, runs: int) -> tuple[float, float, str]:
    """Median milliseconds (elapsed, and CPU of this process: the machine may be shared) of checking
    the payload exactly as a signal's is, and how the check ended."""
    payload_errors(schema, payload)  # untimed: builds and caches the validator
    elapsed, cpu, errors = [], [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        errors = payload_errors(schema, payload, "/payload")
        elapsed.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return median(elapsed) * 1000, median(cpu) * 1000, _outcome(errors)


def _largest_checked(build, schema: dict, most: int) -> int:
    """The largest n ≤ `most` whose payload the budget lets the check finish (passing or failing)."""
    refused = lambda n: _outcome(payload_errors(schema, build(n))) == "refused: budget"  # noqa: E731
    if not refused(most):
        return most
    low, high = 0, most  # refused(high) holds; refused(low) does not (an empty payload is cheap)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if refused(middle) else (middle, high)
    return low


STOCK_CHECK = """
import json, re, sys, time
from statistics import median
import jsonschema._keywords
from jsonschema import Draft202012Validator
assert jsonschema._keywords.re is re  # stock: Weave's RE2 is not installed in this process
case = json.load(sys.stdin)
validator, payload = Draft202012Validator(case["schema"]), json.loads(case["text"])
times = []
for _ in range(case["runs"]):
    started = time.perf_counter()
    list(validator.iter_errors(payload))
    times.append(time.perf_counter() - started)
print(median(times) * 1000)
"""


def _stock_ms(schema: dict, text: str, runs: int) -> float:
    """Median milliseconds of stock jsonschema (Python's `re`, pairwise uniqueItems) in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", STOCK_CHECK],
        input=json.dumps({"schema": schema, "text": text, "runs": runs}),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def bench_validation(
    size: int = VALIDATION_BYTES,
    runs: int = VALIDATION_RUNS,
    stock_pattern_chars: int = STOCK_PATTERN_CHARS,
    stock_unique_objects: int = STOCK_UNIQUE_OBJECTS,
    chain_depth: int = CHAIN_DEPTH,
) -> list[dict]:
    """Each hostile payload schema against the worst payloads for it, timed as a signal's payload is
    checked (validator from the cache, work budget and all): the largest payload of `size` bytes,
    and the largest one the budget lets the check finish (the most work a check can do). Beside it
    the same payload against `{}`. Medians of `runs`."""
    print(
        f"payload validation, payloads of at most {size:,} bytes, median of {runs} runs, "
        f"budget {budget.BUDGET_UNITS:,} units, target {VALIDATION_TARGET_MS:.0f} ms",
        flush=True,
    )
    results = []
    for label, schema, build in validation_cases(chain_depth):
        _publishable(schema)
        largest = _largest(build, size)
        checked = _largest_checked(build, schema, largest)
        full_ms, full_cpu, full_outcome = _validation_ms(schema, build(largest), runs)
        worst_ms, worst_cpu, worst_outcome = _validation_ms(schema, build(checked), runs)
        trivial, _, _ = _validation_ms({}, build(largest), runs)
        meets = max(full_ms, worst_ms) < VALIDATION_TARGET_MS
        print(
            f"  {label:<86} {_json_bytes(build(largest)):>7,} B {full_ms:6.1f} ms {full_outcome:<16} "
            f"largest checked {_json_bytes(build(checked)):>7,} B {worst_ms:6.1f} ms (CPU {worst_cpu:6.1f}) {worst_outcome:<14} "
            f"{{}} {trivial:5.2f} ms   {'meets' if meets else 'MISSES'} target",
            flush=True,
        )
        results.append(
            {
                "label": label,
                "bytes": _json_bytes(build(largest)),
                "weave_ms": round(full_ms, 2),
                "weave_cpu_ms": round(full_cpu, 2),
                "outcome": full_outcome,
                "largest_checked_bytes": _json_bytes(build(checked)),
                "largest_checked_ms": round(worst_ms, 2),
                "largest_checked_cpu_ms": round(worst_cpu, 2),
                "largest_checked_outcome": worst_outcome,
                "trivial_ms": round(trivial, 3),
                "meets_target": meets,
            }
        )
    small = [
        (
            f"pattern {CATASTROPHIC}, {stock_pattern_chars} characters a…a!",
            {"pattern": CATASTROPHIC},
            "a" * (stock_pattern_chars - 1) + "!",
        ),
        (
            f"uniqueItems, {stock_unique_objects} distinct small objects",
            {"uniqueItems": True},
            [{"k": i} for i in range(stock_unique_objects)],
        ),
    ]
    for label, schema, payload in small:
        text = json.dumps(payload, separators=(",", ":"))
        weave_ms, _, _ = _validation_ms(schema, payload, runs)
        stock = _stock_ms(schema, text, runs)
        print(
            f"  stock jsonschema, {label:<55} {stock:9.1f} ms   Weave {weave_ms:7.2f} ms ({len(text):,} bytes)",
            flush=True,
        )
        results.append(
            {
                "label": f"stock jsonschema: {label}",
                "bytes": len(text),
                "stock_ms": round(stock, 2),
                "weave_ms": round(weave_ms, 3),
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument(
        "--signals",
        type=int,
        default=3000,
        help=f"signals per acceptance run (one hot instance: at most {HOT_INSTANCE_SIGNALS}); DBOS sends per peer run",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating weave/baseline (or weave/DBOS) runs per signal figure"
    )
    parser.add_argument("--latency-signals", type=int, default=200)
    parser.add_argument(
        "--only",
        choices=("pulse", "e2e", "signals", "latency", "consumption", "peer", "scale", "validation", "hostile"),
    )
    parser.add_argument("--consumption-signals", type=int, default=2000, help="signals per consumption run")
    parser.add_argument(
        "--against",
        metavar="REF",
        help="signal acceptance: alternate this checkout's `weave serve` with git revision REF's "
        "(e.g. main: the cost of a change, such as metrics and request logs) instead of the raw baseline",
    )
    parser.add_argument(
        "--scale-signals",
        type=int,
        default=1_000_000,
        help=f"stored signals of the scale section's large figures (its reference: {SCALE_BASE:,})",
    )
    parser.add_argument("--validation-bytes", type=int, default=VALIDATION_BYTES, help="size of each hostile payload")
    parser.add_argument("--validation-runs", type=int, default=VALIDATION_RUNS, help="timed runs per validation figure")
    parser.add_argument(
        "--hostile-repeat",
        type=int,
        default=bench_hostile.HOSTILE_REPEAT,
        help="requests per worst case of the hostile section (RSS is read after the first and the last)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--server-threads",
        type=int,
        default=16,
        help="waitress threads per `weave serve` process (long-polling workers each hold one)",
    )
    parser.add_argument(
        "--server-processes", type=int, default=os.cpu_count(), help="`weave serve --processes` (default: one per core)"
    )
    args = parser.parse_args(argv)
    results = []
    if args.only in (None, "validation"):  # in this process, no server needed
        print(f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, load {_load()}", flush=True)
        results += bench_validation(args.validation_bytes, args.validation_runs)
        if args.only == "validation":
            return _write(args.json, results)
    header = (
        f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, weave serve "
        f"--processes {args.server_processes} --threads {args.server_threads}"
    )
    if args.only not in ("scale", "hostile"):
        with running_weave(args.server_threads, args.server_processes, args.against) as bench:
            print(header + (f", signal acceptance against {args.against}" if args.against else ""), flush=True)
            if args.only in (None, "pulse"):
                results += bench_pulse(bench, args.tasks)
            if args.only in (None, "e2e"):
                results += bench_e2e(bench, args.workflows)
            if args.only in (None, "signals"):
                results += bench_signals(bench, args.signals, args.repeat)
            if args.only in (None, "latency"):
                results += bench_latency(bench, args.latency_signals)
            if args.only in (None, "consumption"):
                results += bench_consumption(bench, args.consumption_signals)
            if args.only in (None, "peer"):
                results += bench_peer(bench, args.signals, args.repeat)
    if args.only in (None, "scale"):  # a server of its own: "10,000 stored" means that many
        with running_weave(args.server_threads, args.server_processes) as bench:
            print(f"{header}, load {_load()}", flush=True)
            started = time.monotonic()
            results += bench_scale(
                bench,
                args.scale_signals,
                per_run=args.signals,
                repeat=args.repeat,
                threads=args.server_threads,
                processes=args.server_processes,
            )
            print(f"scale section: {time.monotonic() - started:.0f} s of wall time", flush=True)
    if args.only in (None, "hostile"):  # one process: its CPU and RSS are the figures
        with running_weave(args.server_threads, processes=1) as bench:
            print(
                f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, weave serve --processes 1 "
                f"--threads {args.server_threads}, load {_load()}",
                flush=True,
            )
            results += bench_hostile.run(bench, args.hostile_repeat, sys.modules[__name__])
    return _write(args.json, results)


def _load() -> str:
    """The load averages (1, 5, 15 minutes): validation figures are single-threaded CPU time."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _write(path: Path | None, results: list[dict]) -> int:
    if path:
        path.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
