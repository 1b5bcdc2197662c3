"""B4's race across real processes (issue 29, the second of the three race proofs): hundreds of
facts routed by their business key through two `weave serve` processes while three `weave scan`
processes and an SDK worker open the waits they are meant for.

Every workflow is `reserve` (TASK, completed by a worker) -> `payment` (SIGNAL on the order id).
The facts (`POST {N}/signals`, by key only) are sent in a shuffled order over both API processes
from the moment the workflows start, so that some arrive long before their wait opens (PARKED,
taken at the activation), some after (ROUTED), and many while the activation is being committed
by one of the scanners: the race of docs/decisions.md, "Routing by business key: the race".

Afterwards, from the rows: every fact is CONSUMED by exactly its own instance's payment wait (the
wait's winner), none is left PARKED or PENDING, no fact is in two places (one signal row per
fact, one winner per wait, one SIGNAL_CONSUMED per instance) and every instance SUCCEEDED.

CI runs 200 facts (about 30 s here); `WEAVE_STRESS_FACTS=N` runs N.
"""

from __future__ import annotations

import os
import random
import threading
import time

import load
import pytest
from helpers import make_tenant, signal_flow_definition, wait_until

from weave.devdb import free_port
from weave.sdk import Client, Worker

pytestmark = pytest.mark.slow

FACTS = int(os.environ.get("WEAVE_STRESS_FACTS") or 200)
SENDERS = 4
SCANNERS = 3
NS = "routes"


def fact(order: str) -> dict:
    return {
        "name": "payment.settled",
        "payload_version": "v1",
        "correlation_key": order,
        "payload": {"amount": 12.5},
        "reason": "PSP webhook settled the payment",
    }


def reserve(task):
    return {"reservation_id": f"r-{task.input['workflow_id']}"}


def in_threads(work: list, count: int, fn) -> list:
    """`fn(item)` for every item of `work`, shared over `count` threads; the results, in no order."""
    results, failures = [], []

    def run(share):
        try:
            for item in share:
                results.append(fn(item))
        except Exception as exc:  # noqa: BLE001 - reported by the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(work[i::count],)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    return results


def rows(database, sql: str) -> list[dict]:
    return database.run(lambda tx: tx.all(sql))


def test_B4_hundreds_of_facts_race_their_activations_across_two_api_processes_and_three_scanners(
    config, database, tmp_path
):
    tenant = make_tenant(database, NS, {"inventory": 32})
    client_token = tenant.token(
        "definitions:write", "workflows:start", "workflows:read", "workflows:signal", queues=("inventory",)
    )
    worker_token = tenant.token("tasks:work", queues=("inventory",), actor="worker")
    ports = [free_port(), free_port()]
    servers = [
        load.weave_process(config.database_url, tmp_path / f"serve-{i}.log", "serve", "--port", str(port))
        for i, port in enumerate(ports)
    ]
    scanners = [load.scan_process(config.database_url, tmp_path / f"scan-{i}.log") for i in range(SCANNERS)]
    worker = Worker(
        Client(f"http://127.0.0.1:{ports[0]}", worker_token, NS, timeout=30),
        "inventory",
        {"reserve": reserve},
        threads=4,
        poll_seconds=1,
        grace_seconds=5,
    )
    worker_thread = threading.Thread(target=worker.run, daemon=True)
    stop = threading.Event()
    began = time.monotonic()
    try:
        for port in ports:
            load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(ports, NS, calls)  # each request to one of the two processes, at random
        definition = signal_flow_definition()
        definition["steps"] = definition["steps"][:2]  # reserve -> payment
        published = api.call("publish", "POST", "/definitions", client_token, definition)
        assert published.status == 201, published.body
        worker_thread.start()

        orders = list(range(FACTS))
        random.Random(29).shuffle(orders)

        def start(n: int) -> None:
            body = {"definition": "flow", "version": 1, "workflow_id": f"w-{n}", "input": {"order_id": f"o-{n}"}}
            body["deadline_seconds"] = 3600
            answer = api.until_answered(stop, "start", "POST", "/workflows", client_token, body=body)
            assert answer.status == 201, answer.body

        def send(n: int) -> tuple[int, dict]:
            headers = {"Idempotency-Key": f"pay-{n}"}
            answer = api.until_answered(stop, "route", "POST", "/signals", client_token, fact(f"o-{n}"), headers)
            assert answer.status == 201, (n, answer.status, answer.body)
            return n, answer.json()

        # The starts and the facts go out together: the first facts of the shuffled order find no
        # instance yet, later ones race the scanners' activations, the last find their waits open.
        started: list = []
        starting = threading.Thread(target=lambda: started.append(in_threads(list(range(FACTS)), SENDERS, start)))
        starting.start()
        receipts = dict(in_threads(orders, SENDERS, send))
        starting.join()
        assert started, "a start failed (its thread printed why)"
        wait_until(
            lambda: rows(database, "SELECT COUNT(*) AS n FROM instances WHERE status = 'SUCCEEDED'")[0]["n"] == FACTS,
            timeout=120,
            pause=0.5,
        )
        elapsed = time.monotonic() - began
        worker.stop()
        worker_thread.join(30)
        running = [p.poll() is None for p in [*servers, *scanners]]
    finally:
        stop.set()
        worker.stop()
        load.stop_processes([*servers, *scanners])

    assert running == [True] * (len(servers) + SCANNERS)
    assert not calls.bad, calls.bad[:5]  # no 5xx but 503, every call answered in time
    routes = sorted({r["route"] for r in receipts.values()})
    assert set(routes) <= {"ROUTED", "PARKED"}, routes
    assert len(receipts) == FACTS

    signals = rows(
        database,
        "SELECT s.id, s.status, s.route_key, s.target_step_key, i.workflow_id"
        " FROM signals s LEFT JOIN instances i ON i.id = s.instance_id",
    )
    assert len(signals) == FACTS  # one row per fact: none stored twice
    by_key = {s["route_key"]: s for s in signals}
    assert sorted(by_key) == sorted(f"pay-{n}" for n in range(FACTS))
    wrong = [
        s
        for s in signals
        if (s["status"], s["workflow_id"], s["target_step_key"])
        != (
            "CONSUMED",
            "w-" + s["route_key"][4:],
            "payment",
        )
    ]
    assert not wrong, wrong[:5]  # none parked, pending or rejected; each in its own instance
    assert all(receipts[n]["signal_id"] == str(by_key[f"pay-{n}"]["id"]) for n in range(FACTS))

    waits = rows(
        database,
        "SELECT w.status, w.winner_signal_id, i.workflow_id FROM waits w JOIN instances i ON i.id = w.instance_id"
        " WHERE w.step_key = 'payment'",
    )
    assert len(waits) == FACTS and {w["status"] for w in waits} == {"SATISFIED"}
    signal_of = {s["id"]: s for s in signals}  # the waits name their winners by id
    assert all(signal_of[w["winner_signal_id"]]["workflow_id"] == w["workflow_id"] for w in waits)
    assert len({w["winner_signal_id"] for w in waits}) == FACTS  # no fact won two waits
    consumed = rows(
        database, "SELECT instance_id, COUNT(*) AS n FROM events WHERE type = 'SIGNAL_CONSUMED' GROUP BY instance_id"
    )
    assert len(consumed) == FACTS and {c["n"] for c in consumed} == {1}

    by_route = {route: sum(r["route"] == route for r in receipts.values()) for route in routes}
    print(
        f"\nrouting across processes: {FACTS} facts in {elapsed:.1f} s; receipts {by_route}; answers {calls.summary()}"
    )
