"""Issue 14.6: many processes. `weave serve --processes 2`, three `weave scan` processes and SDK
workers run TASK -> SIGNAL -> TASK workflows while senders fire signals at them over HTTP: early
ones, concurrent ones, duplicates (some racing their original), mismatches and late ones.

Every workflow is `reserve` (TASK) -> `payment` (SIGNAL on the order id) -> `ship` (TASK). Nine in
ten run version 1 (payment waits an hour); one in ten run version 2, whose payment wait lasts
LATE_WAIT seconds and gets no matching signal in time. Each workflow receives ten signal requests
in three phases:

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
`WEAVE_SOAK=N scripts/test tests/processes/test_many_processes.py -s` runs 5·N times as many. `-s` prints
the rate and the dispositions reached.
"""

from __future__ import annotations

import collections
import json
import os
import random
import threading
import time

import load
import pytest
from helpers import batch_lines, make_tenant, signal_flow_definition, wait_until

from weave.devdb import free_port
from weave.sdk import Client, Worker

pytestmark = pytest.mark.slow

SOAK = int(os.environ.get("WEAVE_SOAK") or 0)
WORKFLOWS = 1000 * (5 * SOAK if SOAK else 1)
LATE_EVERY = 10  # every tenth workflow runs version 2
LATE_WAIT = 2  # seconds: version 2's payment wait
SENDERS = 8
SCANNERS = 3
NS = "load"


def plan(index: int) -> dict[str, list[tuple[str, dict]]]:
    """Phase -> the (idempotency key, body) requests of workflow `index`, repeats included."""
    order = f"o-{index}"
    match, mismatch = load.payment_body(order, order, 12.5), load.payment_body(order, f"{order}-elsewhere", 12.5)
    late = index % LATE_EVERY == 0
    first = mismatch if late else match
    busy = mismatch if late else match
    return {
        "early": [("a", first), ("b", mismatch), ("a", first)],
        "busy": [("c1", busy), ("c2", busy), ("c3", busy), ("d", mismatch), ("c1", busy)],
        "late": [("e", match), ("e", match)],
    }


class Senders:
    """SENDERS threads sending signal requests over `api` (a 503 is sent again, with the same key,
    as clients do), keeping every answer's bytes by (workflow, key)."""

    def __init__(self, api: load.Api, token: str):
        self.api, self.token = api, token
        self.answers: dict[tuple[str, str], list[tuple[bytes, bool]]] = collections.defaultdict(list)
        self.sent = 0
        self.seconds = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def send_all(self, requests: list[tuple[str, str, dict]]) -> None:
        failures = []

        def run(share):
            try:
                for workflow_id, key, request in share:
                    self.send_one(workflow_id, key, request)
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                failures.append(exc)

        started = time.monotonic()
        threads = [threading.Thread(target=run, args=(requests[i::SENDERS],)) for i in range(SENDERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.seconds += time.monotonic() - started
        assert not failures, failures[:3]

    def send_one(self, workflow_id: str, key: str, request: dict) -> None:
        answer = self.api.until_answered(
            self.stop,
            "signal",
            "POST",
            f"/workflows/{workflow_id}/signals",
            self.token,
            request,
            {"Idempotency-Key": key},
        )
        assert answer.status == 201, (workflow_id, key, answer.status, answer.body)
        with self.lock:
            self.sent += 1
            self.answers[(workflow_id, key)].append((answer.body, answer.headers.get("idempotent-replayed") == "true"))


# ---- the test -------------------------------------------------------------------------------------------


def test_issue_14_6_many_processes(config, database, tmp_path):
    tenant = make_tenant(database, NS, {"inventory": 32, "carrier": 32})
    queues = ("inventory", "carrier")
    client_token = tenant.token(
        "definitions:write", "workflows:start", "workflows:read", "workflows:signal", queues=queues
    )
    worker_token = tenant.token("tasks:work", queues=queues, actor="worker")
    port = free_port()
    began = time.monotonic()
    server = load.weave_process(
        config.database_url, tmp_path / "serve.log", "serve", "--port", str(port), "--processes", "2", "--threads", "16"
    )
    scanners = [load.scan_process(config.database_url, tmp_path / f"scan-{i}.log") for i in range(SCANNERS)]
    sdk = Client(f"http://127.0.0.1:{port}", worker_token, NS, timeout=30)
    workers = [
        Worker(sdk, "inventory", {"reserve": reserve}, threads=4, poll_seconds=1, grace_seconds=5),
        Worker(sdk, "carrier", {"ship": ship}, threads=4, poll_seconds=1, grace_seconds=5),
    ]
    worker_threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    try:
        load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(port, NS, calls)
        for version, wait_seconds in ((1, 3600), (2, LATE_WAIT)):
            published = api.call("publish", "POST", "/definitions", client_token, signal_flow_definition(wait_seconds))
            assert (published.status, published.json()["version"]) == (201, version), published.body
        start_all(api, client_token)

        senders = Senders(api, client_token)
        plans = {f"w-{i}": plan(i) for i in range(WORKFLOWS)}

        def phase(name: str, shuffle: bool) -> None:
            requests = [(wid, f"{key}-{wid}", request) for wid, p in plans.items() for key, request in p[name]]
            if shuffle:  # repeats race their originals across the senders
                random.Random(14).shuffle(requests)
            senders.send_all(requests)

        phase("early", shuffle=False)
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
        scanners_running = [s.poll() is None for s in scanners]
        load.stop_processes(scanners)
        assert scanners_running == [True] * SCANNERS and [s.returncode for s in scanners] == [0] * SCANNERS
        assert server.poll() is None
    finally:
        for worker in workers:
            worker.stop()
        load.stop_processes([server, *scanners])

    assert not calls.bad, calls.bad[:5]  # no 5xx but 503 (with Retry-After), every call answered in time
    check_rows(database, plans)
    check_answers(senders)
    done = [sum(b["done"] for b in batch_lines((tmp_path / f"scan-{i}.log").read_text())) for i in range(SCANNERS)]
    assert all(done), f"a scanner did no work: {done}"
    print(
        f"\nmany processes: {WORKFLOWS} workflows, {senders.sent} signal requests "
        f"({count_signals(database)} signals stored) in {elapsed:.1f} s; "
        f"{senders.sent / senders.seconds:.0f} signal requests/s while sending "
        f"({senders.seconds:.1f} s over {SENDERS} senders), {WORKFLOWS / elapsed:.1f} workflows/s end to end; "
        f"scanner units done per process {done}; answers by status {calls.summary()}"
    )


def start_all(api: load.Api, token: str) -> None:
    def start(indexes):
        for index in indexes:
            body = {
                "definition": "flow",
                "version": 2 if index % LATE_EVERY == 0 else 1,
                "workflow_id": f"w-{index}",
                "input": {"order_id": f"o-{index}"},
                "deadline_seconds": 3600,
            }
            answer = api.until_answered(threading.Event(), "start", "POST", "/workflows", token, body=body)
            assert answer.status == 201, answer.body

    threads = [threading.Thread(target=start, args=(range(i, WORKFLOWS, SENDERS),)) for i in range(SENDERS)]
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


def check_answers(senders: Senders) -> None:
    for (wid, key), answers in senders.answers.items():
        texts = {text for text, _ in answers}
        assert len(texts) == 1, (wid, key, answers)  # every repeat answered the first receipt's bytes
        assert [replayed for _, replayed in answers].count(False) == 1, (wid, key, answers)
