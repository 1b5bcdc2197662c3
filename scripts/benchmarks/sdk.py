"""The `sdk` section: `weave.sdk.Client.send_signal` from one thread over its kept-alive connection
beside the same calls each on a new connection (issue 31, target 4: >= 1.3x).

The SDK before issue 31 opened a connection per call and closed it once the answer was read; a
Client whose connections are closed after each call (`Client.close()`) does exactly that, with
the SDK's code otherwise unchanged. (A `Connection: close` header instead would have the server
close the connection, which the old SDK never asked for.)
"""

from __future__ import annotations

import itertools
import time
from functools import partial

from benchmarks.harness import NS, Bench, Http, alternate, pair_row
from benchmarks.workload import SIGNAL_DEFINITION, WARM_UP_SIGNALS, signal_body, signal_run
from weave.sdk import Client


def sdk_sender(kept_alive: bool):
    """A sender for `signal_run`: each client thread calls `send_signal` of a Client of its own,
    closing the Client's connections after each call unless `kept_alive`."""

    def sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list):
        clients: dict[int, Client] = {}

        def send_one(client: Client, workflow_id: str, key: str) -> float:
            started = time.perf_counter()
            client.send_signal(workflow_id, **signal_body("o"), idempotency_key=key)
            if not kept_alive:
                client.close()
            return time.perf_counter() - started

        def prepare(i):
            clients[i] = Client(bench.base, bench.client_token, NS)
            for n in range(WARM_UP_SIGNALS):
                send_one(clients[i], warm_up, f"warm-c{i}-{n}")

        def send(i):
            for n in range(per_client):
                latencies.append(send_one(clients[i], targets[(i * per_client + n) % len(targets)], f"c{i}-{n}"))
            clients[i].close()

        return prepare, send

    return sender


def run(bench: Bench, per_run: int, repeat: int, instances: int = 200) -> list[dict]:
    """`per_run` signals from one thread over `instances` fresh instances, kept alive and a new
    connection per call in `repeat` alternating pairs."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)  # 200 once published
    runs = (f"sdk{n}" for n in itertools.count())
    measured = alternate(
        {
            "weave": partial(signal_run, bench, sdk_sender(kept_alive=True), instances, 1, per_run),
            "per_call": partial(signal_run, bench, sdk_sender(kept_alive=False), instances, 1, per_run),
        },
        repeat,
        runs,
    )
    row, _ = pair_row(
        "SDK send_signal kept alive vs a connection per call, 1 thread",
        measured,
        "per_call",
        {"weave": "kept alive", "per_call": "a connection per call"},
        {"weave": "server, load, db", "per_call": "server, load, db"},
        "   (target >= 1.3)",
    )
    return [row]
