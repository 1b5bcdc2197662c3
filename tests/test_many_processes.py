"""Issue 14.6: many processes. `weave serve --processes 2`, three `weave scan` processes and SDK
workers run TASK -> SIGNAL -> TASK workflows while senders fire signals at them over HTTP: early
ones, concurrent ones, duplicates (some racing their original), mismatches and late ones.

Every workflow is `reserve` (TASK) -> `payment` (SIGNAL on the order id) -> `ship` (TASK). Nine in
ten run version 1 (payment waits an hour); one in ten run version 2, whose payment wait lasts
LATE_WAIT seconds and gets no matching signal in time. Each workflow receives SENDS_PER_WORKFLOW
signal requests in three phases:

| phase | when | version 1 | version 2 |
| --- | --- | --- | --- |
| early | before any worker runs (reserve cannot finish: payment is not active) | match `a` (the one that must win), mismatch `b`, `a` again | mismatches `a`, `b`, `a` again |
| busy | while workers, scanners and the other senders run, shuffled over the senders | matches `c1`-`c3`, mismatch `d`, `c1` again (racing it) | mismatches `c1`-`c3`, `d`, `c1` again |
| late | once every workflow has settled | match `e`, `e` again | match `e` (late), `e` again |

Afterwards, read from the rows: every signal has exactly one final disposition (its status, and
exactly one settling event unless it was rejected at acceptance); every wait at most one winner,
and for version 1 it is `a`; every workflow is SUCCEEDED (version 1) or NEEDS_REVIEW with
WAIT_EXPIRED (version 2); nothing is left for a scanner (no due checkpoint, inbox event, pending
signal, open task or permit in use, no candidate backed off); every repeated key was answered
the first receipt's bytes, and exactly one of its answers was not a replay. No answer was a 5xx
other than a 503 (which the senders retry with the same key, as clients do).

CI runs the full size, 1,000 workflows and 10,000 signal requests (about 40 s here);
`WEAVE_SOAK=N scripts/test tests/test_many_processes.py -s` runs 5·N times as many. `-s` prints
the rate and the dispositions reached.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager

import pytest
from helpers import batch_lines, make_tenant, signal_flow_definition, wait_until

from weave.sdk import Client, Worker

pytestmark = pytest.mark.slow

SOAK = int(os.environ.get("WEAVE_SOAK") or 0)
WORKFLOWS = 1000 * (5 * SOAK if SOAK else 1)
SENDS_PER_WORKFLOW = 10
LATE_EVERY = 10  # every tenth workflow runs version 2
LATE_WAIT = 2  # seconds: version 2's payment wait
SENDERS = 8
SCANNERS = 3
NS = "load"


# ---- processes ----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def process(args: list[str], env: dict, log_path) -> subprocess.Popen:
    """A `weave` command with its stderr in a file (a pipe nobody reads would fill and block it);
    stopped with SIGTERM at the end (SIGKILL if it does not stop)."""
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "weave.cli", *args], env=env, stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)


class Http:
    """A keep-alive HTTP client for one thread; a dropped connection (the server's idle timeout)
    is opened again and the request repeated (every request here is safe to repeat)."""

    def __init__(self, port: int, token: str):
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def request(self, method: str, path: str, body=None, headers=None) -> http.client.HTTPResponse:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(3):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers={**self.headers, **(headers or {})})
                response = self.conn.getresponse()
                response.text = response.read().decode()
                return response
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                self.reconnects += 1
        raise AssertionError(f"{method} {path}: the connection kept dropping")


def body(order_id: str, correlation: str, sequence: int = 1) -> dict:
    return {
        "name": "payment.settled",
        "payload_version": "v1",
        "target_step_key": "payment",
        "target_activation_sequence": sequence,
        "correlation_key": correlation,
        "payload": {"amount": 12.5, "order": order_id},
        "reason": "PSP webhook",
    }


def plan(index: int) -> dict[str, list[tuple[str, dict]]]:
    """Phase -> the (idempotency key, body) requests of workflow `index`, repeats included."""
    order = f"o-{index}"
    match, mismatch = body(order, order), body(order, f"{order}-elsewhere")
    late = index % LATE_EVERY == 0
    first = mismatch if late else match
    busy = mismatch if late else match
    return {
        "early": [("a", first), ("b", mismatch), ("a", first)],
        "busy": [("c1", busy), ("c2", busy), ("c3", busy), ("d", mismatch), ("c1", busy)],
        "late": [("e", match), ("e", match)],
    }


class Senders:
    """SENDERS threads sending signal requests, recording every answer by (workflow, key)."""

    def __init__(self, port: int, token: str):
        self.port, self.token = port, token
        self.answers: dict[tuple[str, str], list[tuple[str, bool]]] = collections.defaultdict(list)
        self.statuses = collections.Counter()
        self.retried_503 = self.reconnects = self.sent = 0
        self.seconds = 0.0
        self.lock = threading.Lock()

    def send_all(self, requests: list[tuple[str, str, dict]]) -> None:
        shares = [requests[i::SENDERS] for i in range(SENDERS)]
        failures = []

        def run(share):
            http_ = Http(self.port, self.token)
            try:
                for workflow_id, key, request in share:
                    self.send_one(http_, workflow_id, key, request)
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                failures.append(exc)
            with self.lock:
                self.reconnects += http_.reconnects

        started = time.monotonic()
        threads = [threading.Thread(target=run, args=(share,)) for share in shares]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.seconds += time.monotonic() - started
        assert not failures, failures[:3]

    def send_one(self, http_: Http, workflow_id: str, key: str, request: dict) -> None:
        path = f"/v1/namespaces/{NS}/workflows/{workflow_id}/signals"
        for _ in range(20):
            answer = http_.request("POST", path, request, {"Idempotency-Key": key})
            if answer.status != 503:
                break
            with self.lock:
                self.retried_503 += 1
            time.sleep(float(answer.getheader("Retry-After") or 1) * random.random())
        with self.lock:
            self.sent += 1
            self.statuses[answer.status] += 1
        assert answer.status == 201, (workflow_id, key, answer.status, answer.text)
        with self.lock:
            self.answers[(workflow_id, key)].append((answer.text, answer.getheader("Idempotent-Replayed") == "true"))


# ---- the test -------------------------------------------------------------------------------------------


def test_issue_14_6_many_processes(config, database, tmp_path):
    tenant = make_tenant(database, NS, {"inventory": 32, "carrier": 32})
    queues = ("inventory", "carrier")
    client_token = tenant.token(
        "definitions:write", "workflows:start", "workflows:read", "workflows:signal", queues=queues
    )
    worker_token = tenant.token("tasks:work", queues=queues, actor="worker")
    env = {**os.environ, "WEAVE_DATABASE_URL": config.database_url}
    port = free_port()
    began = time.monotonic()

    with ExitStack() as stack:
        server = stack.enter_context(
            process(["serve", "--port", str(port), "--processes", "2", "--threads", "16"], env, tmp_path / "serve.log")
        )
        wait_until(lambda: ready(port), timeout=30)
        scanners = [
            stack.enter_context(process(["scan", "--idle-seconds", "0.05"], env, tmp_path / f"scan-{i}.log"))
            for i in range(SCANNERS)
        ]
        setup = Http(port, client_token)
        for version, wait_seconds in ((1, 3600), (2, LATE_WAIT)):
            published = setup.request("POST", f"/v1/namespaces/{NS}/definitions", signal_flow_definition(wait_seconds))
            assert (published.status, json.loads(published.text)["version"]) == (201, version), published.text
        workflow_ids = [f"w-{i}" for i in range(WORKFLOWS)]
        start_all(port, client_token, workflow_ids)

        senders = Senders(port, client_token)
        plans = {f"w-{i}": plan(i) for i in range(WORKFLOWS)}

        def phase(name: str, shuffle: bool) -> None:
            requests = [(wid, f"{key}-{wid}", request) for wid, p in plans.items() for key, request in p[name]]
            if shuffle:  # repeats race their originals across the senders
                random.Random(14).shuffle(requests)
            senders.send_all(requests)

        phase("early", shuffle=False)
        sdk = Client(f"http://127.0.0.1:{port}", worker_token, NS, timeout=30)
        workers = [
            Worker(sdk, "inventory", {"reserve": reserve}, threads=4, poll_seconds=1, grace_seconds=5),
            Worker(sdk, "carrier", {"ship": ship}, threads=4, poll_seconds=1, grace_seconds=5),
        ]
        worker_threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
        for t in worker_threads:
            t.start()
        phase("busy", shuffle=True)
        settled_query = "SELECT COUNT(*) AS n FROM instances WHERE status IN ('SUCCEEDED', 'NEEDS_REVIEW')"
        wait_until(lambda: rows(database, settled_query)[0]["n"] == WORKFLOWS, timeout=600, pause=0.5)
        phase("late", shuffle=True)
        wait_until(lambda: nothing_left(database), timeout=120, pause=0.5)
        elapsed = time.monotonic() - began
        for worker in workers:
            worker.stop()
        for t in worker_threads:
            t.join(30)
        for scanner in scanners:
            scanner.send_signal(signal.SIGTERM)
        assert [s.wait(30) for s in scanners] == [0] * SCANNERS  # K3: a clean stop
        assert server.poll() is None

    check_rows(database, plans)
    check_answers(senders, plans)
    done = [sum(b["done"] for b in batch_lines((tmp_path / f"scan-{i}.log").read_text())) for i in range(SCANNERS)]
    assert all(done), f"a scanner did no work: {done}"
    print(
        f"\nmany processes: {WORKFLOWS} workflows, {senders.sent} signal requests "
        f"({count_signals(database)} signals stored) in {elapsed:.1f} s; "
        f"{senders.sent / senders.seconds:.0f} signal requests/s while sending "
        f"({senders.seconds:.1f} s over {SENDERS} senders), {WORKFLOWS / elapsed:.1f} workflows/s end to end; "
        f"scanner units done per process {done}; 503s retried {senders.retried_503}, "
        f"reconnects {senders.reconnects}"
    )


def ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def start_all(port: int, token: str, workflow_ids: list[str]) -> None:
    def start(share):
        http_ = Http(port, token)
        for wid in share:
            index = int(wid.split("-")[1])
            answer = http_.request(
                "POST",
                f"/v1/namespaces/{NS}/workflows",
                {
                    "definition": "flow",
                    "version": 2 if index % LATE_EVERY == 0 else 1,
                    "workflow_id": wid,
                    "input": {"order_id": f"o-{index}"},
                    "deadline_seconds": 3600,
                },
            )
            assert answer.status == 201, answer.text

    threads = [threading.Thread(target=start, args=(workflow_ids[i::SENDERS],)) for i in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def reserve(task):
    return {"reservation_id": f"r-{task.input['workflow_id']}"}


def ship(task):
    return {"tracking": f"t-{task.input['workflow_id']}", "paid": task.input["steps"]["payment"]["result"]}


def rows(database, sql: str, params=()) -> list[dict]:
    return database.run(lambda tx: tx.all(sql, params))


def count_signals(database) -> int:
    return rows(database, "SELECT COUNT(*) AS n FROM signals")[0]["n"]


NOTHING_LEFT = """
SELECT (SELECT COUNT(*) FROM checkpoints WHERE available_at <= UTC_TIMESTAMP(6)) AS due_checkpoints,
       (SELECT COUNT(*) FROM inbox_events WHERE status = 'PENDING') AS inbox,
       (SELECT COUNT(*) FROM signals WHERE status = 'PENDING') AS pending_signals,
       (SELECT COUNT(*) FROM tasks WHERE status IN ('QUEUED', 'RUNNING')) AS open_tasks,
       (SELECT COALESCE(SUM(permits_in_use), 0) FROM queues) AS permits
"""


def nothing_left(database) -> bool:
    return not any(rows(database, NOTHING_LEFT)[0].values())


def check_rows(database, plans: dict) -> None:
    assert nothing_left(database), rows(database, NOTHING_LEFT)
    # K2: a candidate whose try failed is backed off and tried again; none may be left waiting.
    backed_off = rows(
        database,
        "SELECT (SELECT COUNT(*) FROM checkpoints WHERE attempts > 0) + (SELECT COUNT(*) FROM inbox_events"
        " WHERE attempts > 0 AND status = 'PENDING') + (SELECT COUNT(*) FROM signals WHERE attempts > 0"
        " AND status = 'PENDING') AS n",
    )[0]["n"]
    assert backed_off == 0, f"{backed_off} candidates are still backed off after a failure (K2)"

    instances = {
        r["workflow_id"]: r for r in rows(database, "SELECT id, workflow_id, status, review_reason FROM instances")
    }
    for wid, instance in instances.items():
        late = int(wid.split("-")[1]) % LATE_EVERY == 0
        expected = ("NEEDS_REVIEW", "WAIT_EXPIRED") if late else ("SUCCEEDED", None)
        assert (instance["status"], instance["review_reason"]) == expected, instance

    signals = rows(
        database,
        "SELECT s.id, s.instance_id, s.idempotency_key, s.status, s.disposition, s.consumed_wait_id, s.accepted_at,"
        " s.correlation FROM signals s",
    )
    assert len(signals) == sum(len({key for key, _ in p[phase]}) for p in plans.values() for phase in p)
    settling = collections.Counter()
    for event in rows(
        database,
        "SELECT type, data FROM events WHERE type IN ('SIGNAL_CONSUMED', 'SIGNAL_REJECTED', 'SIGNAL_EXPIRED')",
    ):
        settling[int(json.loads(event["data"])["signal_id"])] += 1
    at_acceptance = {
        int(json.loads(e["data"])["signal_id"]): json.loads(e["data"])["status"]
        for e in rows(database, "SELECT data FROM events WHERE type = 'SIGNAL_ACCEPTED'")
    }
    assert len(at_acceptance) == len(signals)
    for s in signals:  # exactly one final disposition each
        assert s["status"] in ("CONSUMED", "REJECTED", "EXPIRED"), s
        assert (s["status"] == "CONSUMED") == (s["disposition"] is None), s
        assert settling[s["id"]] == (0 if at_acceptance[s["id"]] == "REJECTED" else 1), s

    waits = rows(database, "SELECT id, instance_id, status, winner_signal_id FROM waits")
    assert len(waits) == len(instances)
    consumed = collections.defaultdict(list)
    for s in signals:
        if s["status"] == "CONSUMED":
            consumed[s["consumed_wait_id"]].append(s)
    by_instance = {i["id"]: wid for wid, i in instances.items()}
    for wait in waits:  # at most one winner; version 1's is its early match `a`
        wid = by_instance[wait["instance_id"]]
        winners = consumed[wait["id"]]
        if int(wid.split("-")[1]) % LATE_EVERY == 0:
            assert (wait["status"], wait["winner_signal_id"], winners) == ("EXPIRED", None, []), wait
        else:
            assert wait["status"] == "SATISFIED" and len(winners) == 1, (wait, winners)
            assert winners[0]["id"] == wait["winner_signal_id"] and winners[0]["idempotency_key"] == f"a-{wid}"

    dispositions = collections.Counter(
        (int(by_instance[s["instance_id"]].split("-")[1]) % LATE_EVERY == 0, s["idempotency_key"][0], s["disposition"])
        for s in signals
    )
    # The late phase's match: INSTANCE_SETTLED for a finished workflow, LATE for an expired wait.
    assert {d for (late, key, d) in dispositions if key == "e"} <= {"INSTANCE_SETTLED", "LATE"}
    assert all(d == "LATE" for (late, key, d) in dispositions if key == "e" and late)
    print("\ndispositions (version 2?, key, disposition):", dict(sorted(dispositions.items(), key=str)))


def check_answers(senders: Senders, plans: dict) -> None:
    assert set(senders.statuses) == {201}, senders.statuses
    for (wid, key), answers in senders.answers.items():
        texts = {text for text, _ in answers}
        assert len(texts) == 1, (wid, key, answers)  # every repeat answered the first receipt's bytes
        assert [replayed for _, replayed in answers].count(False) == 1, (wid, key, answers)
