"""A mixed workload against real `weave serve` and `weave scan` processes, and what must hold after
it, for the tests that break the database under it (test_database_crash.py, test_fault_injection.py).

`Workload` runs, in threads, over HTTP: a starter (instances of reserve TASK -> payment SIGNAL ->
ship TASK, one after the other), a signaller (per instance: the matching signal, a replay of it, a
second matching one that must lose and a mismatched one, some before the step is active), and
workers that claim and complete both queues. A request answered 503 is sent again, the same
request with the same idempotency key, as a client would; every answer is recorded (`Calls`).
`check_outcome` then proves, from the rows and the API: every acknowledged write is there (a
signal's replay answers the same bytes), every wait has one winner, nothing was decided twice,
and everything drained.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers import make_tenant, signal_flow_definition, wait_until

from weave.db import Database
from weave.processes import die_with_parent
from weave.sql import definitions

CLIENT_TIMEOUT_SECONDS = 30  # the SDK's default: no answer may take longer
RETRY_PAUSE_SECONDS = 0.2  # a workload client's pause after a 503 (Retry-After is 1 s; tests are impatient)


@dataclass
class Answer:
    status: int
    headers: dict
    body: bytes
    seconds: float

    def json(self):
        return json.loads(self.body)


class Calls:
    """Every answer of the workload, by route, with what must never happen among them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses: collections.Counter = collections.Counter()
        self.slowest = 0.0
        self.bad: list[str] = []  # a 5xx other than 503, a 503 without Retry-After, no answer in time

    def record(self, route: str, answer: Answer | None, error: str = "") -> None:
        with self.lock:
            if answer is None:
                self.bad.append(f"{route}: no answer ({error})")
                return
            self.statuses[(route, answer.status)] += 1
            self.slowest = max(self.slowest, answer.seconds)
            if answer.status >= 500 and answer.status != 503:
                self.bad.append(f"{route}: {answer.status} {answer.body[:300]!r}")
            if answer.status == 503 and not answer.headers.get("retry-after"):
                self.bad.append(f"{route}: 503 without Retry-After")

    def count(self, status: int) -> int:
        return sum(n for (_, s), n in self.statuses.items() if s == status)

    def summary(self) -> dict:
        by_status = collections.Counter()
        for (_, status), n in self.statuses.items():
            by_status[status] += n
        return dict(sorted(by_status.items()))


class Api:
    """Calls to one API process, or to one of several at random (`ports`: processes on the nodes of
    a cluster, where a client's requests may land on any of them)."""

    def __init__(self, port: int | list[int], namespace: str, calls: Calls):
        self.ports = port if isinstance(port, list) else [port]
        self.ns = f"/v1/namespaces/{namespace}"
        self.calls = calls

    def call(self, route: str, method: str, path: str, token: str, body=None, headers=None) -> Answer | None:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Authorization": f"Bearer {token}", **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        port = self.ports[0] if len(self.ports) == 1 else random.choice(self.ports)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_SECONDS)
        started = time.monotonic()
        try:
            conn.request(method, self.ns + path, body=data, headers=sent)
            response = conn.getresponse()
            answer = Answer(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read(),
                time.monotonic() - started,
            )
        except (OSError, http.client.HTTPException) as exc:
            self.calls.record(route, None, f"{type(exc).__name__}: {exc}")
            return None
        finally:
            conn.close()
        self.calls.record(route, answer)
        return answer

    def until_answered(self, stop: threading.Event, *args, **kwargs):
        """`call(*args, **kwargs)`, sent again while it answers 503 (or not at all); None if `stop` came first."""
        while not stop.is_set():
            answer = self.call(*args, **kwargs)
            if answer is not None and answer.status != 503:
                return answer
            stop.wait(RETRY_PAUSE_SECONDS)
        return None


def payment_body(order: str, correlation: str, amount: float) -> dict:
    return {
        "name": "payment.settled",
        "payload_version": "v1",
        "target_step_key": "payment",
        "target_activation_sequence": 1,
        "correlation_key": correlation,
        "payload": {"amount": amount},
        "reason": "PSP webhook",
    }


@dataclass
class Workload:
    api: Api
    tokens: dict
    instances: int
    seed: int = 1
    start_pause: float = 0.05  # between starts, so that the load lasts while faults come and go
    workers: int = 3
    signallers: int = 3
    started: dict = field(default_factory=dict)  # workflow id -> first acknowledged answer body
    receipts: dict = field(default_factory=dict)  # (workflow id, key) -> (body sent, receipt bytes)
    completions: dict = field(default_factory=dict)  # task id -> acknowledged status
    lease_lost: int = 0
    signalled: int = 0  # instances whose four signals were all acknowledged
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._to_signal: list[str] = []
        self._threads: list[threading.Thread] = []

    def run(self) -> None:
        targets = [self._start_all] + [self._signal_some] * self.signallers + [self._work] * self.workers
        self._threads = [threading.Thread(target=t, daemon=True) for t in targets]
        for thread in self._threads:
            thread.start()

    def finish(self, database: Database, timeout: float) -> None:
        """Wait until every workflow of the workload succeeded, then stop and join its threads; on
        a timeout, say how far it got (a workload thread that died leaves its workflows waiting)."""
        try:
            wait_until(lambda: all_succeeded(database, self.instances), timeout=timeout, pause=0.5)
        except AssertionError:
            statuses = database.read(lambda tx: tx.all("SELECT status, COUNT(*) AS n FROM instances GROUP BY status"))
            raise AssertionError(
                f"the workload did not finish in {timeout} s: instances by status"
                f" { ({row['status']: row['n'] for row in statuses}) }, {len(self.started)} of {self.instances}"
                f" started, {self.signalled} signalled, threads alive"
                f" {sum(thread.is_alive() for thread in self._threads)} of {len(self._threads)};"
                f" where the first unfinished ones stand: {database.read(unfinished)}"
            ) from None
        self.join()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT_SECONDS + 5)
        assert not any(t.is_alive() for t in self._threads), "a workload thread did not end"

    def _start_all(self) -> None:
        for i in range(self.instances):
            order = f"o-{i}"
            body = {"definition": "flow", "version": 1, "input": {"order_id": order}, "deadline_seconds": 3600}
            answer = self.api.until_answered(
                self.stop, "start", "POST", "/workflows", self.tokens["starter"], body={**body, "workflow_id": order}
            )
            if answer is None:
                return
            assert answer.status in (200, 201), answer.body
            with self._lock:
                self.started[order] = answer.body
                self._to_signal.append(order)
            self.stop.wait(self.start_pause)

    def signal_call(self, route: str, order: str, key: str, body: dict) -> tuple:
        """The arguments of `Api.call` that send `body` to `order` with the idempotency key `key`."""
        return route, "POST", f"/workflows/{order}/signals", self.tokens["signaller"], body, {"Idempotency-Key": key}

    def _signal_some(self) -> None:
        """Take started instances, oldest first, and send each one's signals, until all are sent."""
        while not self.stop.is_set() and self.signalled < self.instances:
            with self._lock:
                order = self._to_signal.pop(0) if self._to_signal else None
            if order is None:
                self.stop.wait(0.05)
                continue
            # the winner, a replay of it, a second matching one that loses, a mismatched one
            sends = [("pay-1", order, 10.0), ("pay-1", order, 10.0), ("pay-2", order, 20.0), ("other", "x", 1.0)]
            for key, correlation, amount in sends:
                body = payment_body(order, correlation, amount)
                answer = self.api.until_answered(self.stop, *self.signal_call("signal", order, key, body))
                if answer is None:
                    return
                assert answer.status == 201, answer.body
                with self._lock:
                    first = self.receipts.setdefault((order, key), (body, answer.body))
                assert first[1] == answer.body, f"a replay of {order}/{key} answered other bytes"
            with self._lock:
                self.signalled += 1

    def _work(self) -> None:
        queues = ["inventory", "carrier"]
        while not self.stop.is_set():
            queue = self._rng.choice(queues)
            claimed = self.api.call(
                "claim",
                "POST",
                f"/queues/{queue}/claim",
                self.tokens["worker"],
                body={"worker_id": "w", "lease_seconds": 10, "wait_seconds": 1},
            )
            if claimed is None or claimed.status != 200:
                if claimed is not None and claimed.status == 503:
                    self.stop.wait(RETRY_PAUSE_SECONDS)
                continue
            task = claimed.json()
            body = {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"by": task["step_key"]}}
            done = self.api.until_answered(
                self.stop, "complete", "POST", f"/tasks/{task['task_id']}/complete", self.tokens["worker"], body=body
            )
            if done is None:
                return
            if done.status == 409:
                with self._lock:
                    self.lease_lost += 1
                continue
            assert done.status == 200, done.body
            with self._lock:
                self.completions[task["task_id"]] = done.json()["status"]


# ---- setting up and checking ---------------------------------------------------------------------


def prepare(database: Database) -> dict:
    """The namespace, the definition and the workload's tokens."""
    tenant = make_tenant(database, "acme", {"inventory": 8, "carrier": 8})
    queues = ("inventory", "carrier")
    publisher = tenant.principal("definitions:write", queues=queues)
    definitions.publish_definition(
        database, publisher.namespace_id, signal_flow_definition(), publisher.credential_id, publisher.actor
    )
    return {
        "starter": tenant.token("workflows:start", "workflows:read", queues=queues, actor="shop"),
        "signaller": tenant.token("workflows:signal", "workflows:read", queues=queues, actor="payments-bot"),
        "worker": tenant.token("tasks:work", queues=queues, actor="worker"),
    }


def weave_process(database_url: str, log: Path, *args: str) -> subprocess.Popen:
    """`weave serve …` or `weave scan …` on `database_url`, logging into the file `log` (a pipe
    nobody reads would fill up and stop the process in the middle of a write)."""
    env = {**os.environ, "WEAVE_DATABASE_URL": database_url}
    with open(log, "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "weave.cli", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            preexec_fn=die_with_parent,  # a killed test run leaves no process behind
        )


def serve_process(database_url: str, port: int, log: Path) -> subprocess.Popen:
    return weave_process(database_url, log, "serve", "--port", str(port), "--threads", "16")


def scan_process(database_url: str, log: Path) -> subprocess.Popen:
    return weave_process(database_url, log, "scan", "--idle-seconds", "0.05")


def wait_for_api(port: int) -> None:
    def answers() -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    wait_until(answers, timeout=30, pause=0.1)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each process that is still running, and wait for it."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


OUTCOME_SQL = {
    "instances": "SELECT id, workflow_id, status FROM instances ORDER BY id",
    "waits": "SELECT id, instance_id, status, winner_signal_id FROM waits",
    "signals": "SELECT id, instance_id, idempotency_key, status, disposition FROM signals",
    "tasks": "SELECT id, status, attempt FROM tasks",
    "inbox": "SELECT task_id, status FROM inbox_events",
    "queues": "SELECT name, permits_in_use FROM queues",
    # due ones; those of the steps' deadlines (5 min and 1 h ahead) stay, and will find nothing to do
    "checkpoints": "SELECT id, kind, attempts, last_error FROM checkpoints WHERE available_at <= UTC_TIMESTAMP(6)",
    "events": "SELECT instance_id, type, COUNT(*) AS n FROM events GROUP BY instance_id, type",
}
ONCE_PER_INSTANCE = {
    "WORKFLOW_STARTED": 1,
    "STEP_ACTIVATED": 3,
    "STEP_SUCCEEDED": 3,
    "SIGNAL_CONSUMED": 1,
    "WORKFLOW_SUCCEEDED": 1,
}


# Where an unfinished instance stands, table by table: what the next step of its progress would be
# (a due checkpoint or inbox event, a task to claim, a wait and the signals for it).
WHERE_IT_STANDS = {
    "activations": "SELECT * FROM step_activations WHERE instance_id = %s ORDER BY id",
    "waits": "SELECT * FROM waits WHERE instance_id = %s ORDER BY id",
    "signals": "SELECT * FROM signals WHERE instance_id = %s ORDER BY id",
    "tasks": "SELECT t.* FROM tasks t JOIN step_activations a ON a.id = t.activation_id WHERE a.instance_id = %s",
    "inbox_events": "SELECT e.* FROM inbox_events e JOIN tasks t ON t.id = e.task_id"
    " JOIN step_activations a ON a.id = t.activation_id WHERE a.instance_id = %s",
    "checkpoints": "SELECT * FROM checkpoints WHERE instance_id = %s ORDER BY id",
    "events": "SELECT seq, type FROM events WHERE instance_id = %s ORDER BY seq",
}


def unfinished(tx, count: int = 2) -> list[dict]:
    """The first `count` instances not SUCCEEDED, each with its rows of WHERE_IT_STANDS (a timed-out
    workload's report: where the progress of a workflow stopped)."""
    found = []
    for instance in tx.all("SELECT * FROM instances WHERE status <> 'SUCCEEDED' ORDER BY id LIMIT %s", (count,)):
        rows = {name: tx.all(sql, (instance["id"],)) for name, sql in WHERE_IT_STANDS.items()}
        found.append({"instance": instance, **rows})
    return found


def all_succeeded(database: Database, count: int) -> bool:
    rows = database.read(lambda tx: tx.all("SELECT status, COUNT(*) AS n FROM instances GROUP BY status"))
    return {r["status"]: r["n"] for r in rows} == {"SUCCEEDED": count}


def check_outcome(database: Database, api: Api, workload: Workload) -> dict:
    """Everything that must hold once the workload drained, the answers of every call included;
    the figures to print."""
    rows = {name: database.read(lambda tx, sql=sql: tx.all(sql)) for name, sql in OUTCOME_SQL.items()}
    instances = {r["workflow_id"]: r for r in rows["instances"]}
    # every acknowledged start is there, and finished
    assert set(workload.started) == set(instances) and len(instances) == workload.instances
    assert {r["status"] for r in rows["instances"]} == {"SUCCEEDED"}
    # every acknowledged signal is there: its replay answers the same bytes
    by_key = {(r["instance_id"], r["idempotency_key"]): r for r in rows["signals"]}
    assert len(by_key) == len(rows["signals"]) == len(workload.receipts)
    for (order, key), (body, receipt) in workload.receipts.items():
        replay = api.call(*workload.signal_call("replay", order, key, body))
        assert replay.status == 201 and replay.body == receipt, (order, key, replay.body, receipt)
        assert replay.headers.get("idempotent-replayed") == "true"
        stored = by_key[(instances[order]["id"], key)]
        assert str(stored["id"]) == json.loads(receipt)["signal_id"]
    # every wait has exactly one winner: the one consumed signal of its instance
    consumed = collections.defaultdict(list)
    for s in rows["signals"]:
        consumed[s["instance_id"]] += [s["id"]] if s["status"] == "CONSUMED" else []
    assert len(rows["waits"]) == len(instances)
    for wait in rows["waits"]:
        assert wait["status"] == "SATISFIED" and consumed[wait["instance_id"]] == [wait["winner_signal_id"]], wait
    # the first matching signal wins (S2.2); the later one and the mismatched one are turned down,
    # at acceptance when the step had settled already, else when the wait took the winner
    dispositions = collections.Counter((s["idempotency_key"], s["status"], s["disposition"]) for s in rows["signals"])
    settled = {"STEP_SETTLED", "INSTANCE_SETTLED"}
    assert dispositions[("pay-1", "CONSUMED", None)] == len(instances), dispositions
    assert set(dispositions) <= {
        ("pay-1", "CONSUMED", None),
        *(("pay-2", "REJECTED", d) for d in {"WAIT_SETTLED", *settled}),
        *(("other", "REJECTED", d) for d in {"CORRELATION_MISMATCH", *settled}),
    }, dispositions
    # nothing decided twice
    events = collections.defaultdict(dict)
    for e in rows["events"]:
        events[e["instance_id"]][e["type"]] = e["n"]
    for instance_id, counts in events.items():
        assert {t: counts.get(t, 0) for t in ONCE_PER_INSTANCE} == ONCE_PER_INSTANCE, (instance_id, counts)
    # every acknowledged completion is what the task shows; every task ended once, with its event
    tasks = {str(t["id"]): t for t in rows["tasks"]}
    assert len(tasks) == 2 * len(instances) and {t["status"] for t in rows["tasks"]} == {"SUCCEEDED"}
    assert all(tasks[task_id]["status"] == status for task_id, status in workload.completions.items())
    assert sorted(str(e["task_id"]) for e in rows["inbox"]) == sorted(tasks)
    assert {e["status"] for e in rows["inbox"]} == {"CONSUMED"}
    # drained: no permit held, nothing due
    assert {q["permits_in_use"] for q in rows["queues"]} == {0}
    assert rows["checkpoints"] == [], rows["checkpoints"]
    # no 5xx but 503, every 503 with Retry-After, every call answered in time (the replays above too)
    assert api.calls.bad == [], api.calls.bad[:10]
    return {
        "instances": len(instances),
        "signals": len(rows["signals"]),
        "tasks": len(tasks),
        "task_attempts": sum(t["attempt"] for t in rows["tasks"]),
        "lease_lost": workload.lease_lost,
    }
