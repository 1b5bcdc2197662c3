"""The signal workload several sections share: the `pay` definition (a TASK, then the demo's
payment step), the signal it waits for, its instances started over HTTP, and one timed run of
senders (HTTP clients, or a baseline's connections) over them."""

from __future__ import annotations

import time

from benchmarks.harness import QUEUE, Bench, Http, count_of, cpu_split, run_threads
from weave.cli.demo import PAYMENT_STEP, payment_signal
from weave.db import connect

# The demo's payment step behind a TASK that no worker finishes here: the signals sent are early
# ones, accepted PENDING (as a PSP's webhook may come before the order waits for it).
SIGNAL_DEFINITION = {
    "name": "pay",
    "steps": [{"key": "reserve", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600}, PAYMENT_STEP],
}


def signal_body(order: str) -> dict:
    return payment_signal(order, reason="benchmark")


def e2e_input(i: int, signal: bool) -> dict:
    """The input of the e2e section's i-th workflow; with `signal` (TASK -> SIGNAL -> TASK), its
    order id too: its signal's correlation key (`signal_body(f"o-{i}")`)."""
    return {"i": i, "order_id": f"o-{i}"} if signal else {"i": i}


def start_signal_targets(bench: Bench, prefix: str, count: int) -> list[str]:
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


def http_sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list):
    clients: dict[int, Http] = {}

    def send_one(client: Http, workflow_id: str, key: str) -> float:
        client.headers["Idempotency-Key"] = key
        started = time.perf_counter()
        status, _ = client.post(f"/workflows/{workflow_id}/signals", signal_body("o"))
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


def on_connections(
    bench: Bench,
    send_one,
    targets: list[str],
    warm_up: str,
    per_client: int,
    latencies: list,
    label: str,
    open_connection=connect,
):
    """(prepare, send) for `run_threads` of a sender on bare connections, one per client (Weave's
    PyMySQL connections, or `open_connection(url)`'s): `send_one(cursor, workflow_id, key)` sends
    one signal and answers its seconds."""
    connections: dict[int, object] = {}

    def prepare(i):
        connections[i] = open_connection(bench.url)
        for n in range(WARM_UP_SIGNALS):
            send_one(connections[i].cursor(), warm_up, f"{label}-warm-c{i}-{n}")

    def send(i):
        cur = connections[i].cursor()
        for n in range(per_client):
            latencies.append(send_one(cur, targets[(i * per_client + n) % len(targets)], f"{label}-c{i}-{n}"))
        connections[i].close()

    return prepare, send


def signal_run(bench: Bench, sender, targets: int, clients: int, per_client: int, run: str) -> tuple:
    """One timed run over `targets` fresh instances: (signals per second, latencies in seconds, [CPU
    ms per signal of the server, this load generator, the database])."""
    return timed_sends(bench, sender, start_signal_targets(bench, f"s{run}", targets), clients, per_client, run)


def timed_sends(bench: Bench, sender, targets: list[str], clients: int, per_client: int, run: str) -> tuple:
    """`signal_run` to the instances `targets`: client i sends its n-th signal to
    `targets[(i * per_client + n) % len(targets)]`."""
    warm_up = start_signal_targets(bench, f"warm{run}", 1)[0]
    latencies: list[float] = []
    prepare, send = sender(bench, targets, warm_up, per_client, latencies)
    before: list[float] = []
    seconds = run_threads(clients, send, prepare, at_start=lambda: before.extend(cpu_split(bench)))
    cpu = [(after - first) * 1000 / len(latencies) for first, after in zip(before, cpu_split(bench))]
    return len(latencies) / seconds, latencies, cpu


def waiting_workflows(bench: Bench, prefix: str, count: int, key_prefix: str = "o") -> list[str]:
    """`count` workflows `{prefix}-{i}` of one SIGNAL step (definition `wait`, order id and key
    `{key_prefix}-{i}`), started over HTTP; their ids once the scanners running have opened every wait."""
    client = Http(bench, bench.client_token)  # its own: the server closes a connection idle for 10 s
    client.post("/definitions", {"name": "wait", "steps": [PAYMENT_STEP]})  # 200 once published
    ids = [f"{prefix}-{i}" for i in range(count)]
    for i, workflow_id in enumerate(ids):
        body = {
            "definition": "wait",
            "version": 1,
            "input": {"order_id": f"{key_prefix}-{i}"},
            "deadline_seconds": 86400,
        }
        client.post("/workflows", {**body, "workflow_id": workflow_id})
    waiting = (
        "SELECT COUNT(*) AS n FROM waits w JOIN instances i ON i.id = w.instance_id "
        "WHERE w.status = 'WAITING' AND i.workflow_id LIKE %s"
    )
    deadline = time.monotonic() + 120
    while count_of(bench, waiting, f"{prefix}-%") < count:
        assert time.monotonic() < deadline, "waits did not activate"
        time.sleep(0.1)
    return ids


def signal_each(bench: Bench, ids: list[str], prefix: str, clients: int, order_prefix: str = "o") -> float:
    """One signal to each workflow of `ids` (the order id `{order_prefix}-{i}` its wait froze, the
    idempotency key `{prefix}-{i}`), sent by `clients` clients; the seconds it took."""
    senders: dict[int, Http] = {}
    per_client = -(-len(ids) // clients)

    def prepare(i: int) -> None:
        senders[i] = Http(bench, bench.client_token)

    def send(i: int) -> None:
        for k in range(i * per_client, min(len(ids), (i + 1) * per_client)):
            senders[i].headers["Idempotency-Key"] = f"{prefix}-{k}"
            status, _ = senders[i].post(f"/workflows/{ids[k]}/signals", signal_body(f"{order_prefix}-{k}"))
            assert status == 201, status

    return run_threads(clients, send, prepare)


def pending(bench: Bench, prefix: str) -> int:
    return count_of(
        bench, "SELECT COUNT(*) AS n FROM signals WHERE status = 'PENDING' AND idempotency_key LIKE %s", f"{prefix}-%"
    )
