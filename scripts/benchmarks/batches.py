"""The `batches` section: signals sent in batches (`POST {N}/signal-batches`, B8) beside the same
signals sent one per request, and beside DBOS Transact's `send` where the peer can run (issue 31,
targets 1 and 2).

Batches, single signals and DBOS run in alternating pairs of the same run (`alternate`), over the
same kind of fresh instances (`signal_run`), from the same number of clients. Printed: the rate of
batches beside the single-signal rate (target >= 3x) and beside DBOS's (target >= 1.5x per
message), and the database CPU and the API CPU per signal of batches beside the single signal's
(targets <= 0.7x and <= 0.3x), each read from /proc for the whole server as the `signals` section
reads them.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks import peers
from benchmarks.harness import Bench, Http, alternate, pair_row, report
from benchmarks.workload import SIGNAL_DEFINITION, WARM_UP_SIGNALS, http_sender, signal_body, signal_run

BATCH_SIZE = 100  # B8's largest batch


def batch_sender(size: int):
    """A sender for `signal_run` whose clients send their signals in batches of `size` (the last one
    shorter), each item addressed to the instance the single sender would send it to, with the key
    it would use. Each signal's latency is its batch's: `signal_run` counts signals by latencies."""

    def sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list):
        clients: dict[int, Http] = {}

        def send_batch(client: Http, addressed: list[tuple[str, str]]) -> float:
            items = [
                {**signal_body("o"), "workflow_id": workflow_id, "idempotency_key": key}
                for workflow_id, key in addressed
            ]
            started = time.perf_counter()
            status, answer = client.post("/signal-batches", {"signals": items})
            seconds = time.perf_counter() - started
            assert status == 200, status
            assert [result["status"] for result in answer["results"]] == [201] * len(items), answer["results"][:3]
            return seconds

        def prepare(i):
            clients[i] = Http(bench, bench.client_token)
            send_batch(clients[i], [(warm_up, f"warm-c{i}-{n}") for n in range(WARM_UP_SIGNALS)])

        def send(i):
            addressed = [(targets[(i * per_client + n) % len(targets)], f"c{i}-{n}") for n in range(per_client)]
            for first in range(0, per_client, size):
                batch = addressed[first : first + size]
                latencies.extend([send_batch(clients[i], batch)] * len(batch))

        return prepare, send

    return sender


def run(bench: Bench, per_run: int, repeat: int, clients: int = 8, size: int = BATCH_SIZE) -> list[dict]:
    """`clients` clients each send about `per_run // clients` signals over `clients * size` fresh
    instances: in batches of `size`, one per request, and (where PostgreSQL and the peer's venv are
    found) as DBOS `send`s from as many threads over as many destination workflows; `repeat`
    alternating runs of each.

    Client i sends its n-th signal to instance (i * per_client + n) mod instances (`signal_run`'s
    senders). Each client's share is a whole number of batches prime to the number of clients, so
    that the clients start at distinct multiples of `size`: at any moment each batch holds instances
    no other client's batch holds (a batch locks all of its instances at once; batches in lockstep
    over the same instances would measure lock waits, not batches)."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)  # 200 once published
    instances = clients * size
    batches = max(1, per_run // clients // size)
    while math.gcd(batches, clients) != 1:
        batches -= 1
    per_client = batches * size
    contenders = {
        "weave": partial(signal_run, bench, batch_sender(size), instances, clients, per_client),
        "singles": partial(signal_run, bench, http_sender, instances, clients, per_client),
    }
    runs = (f"batch{n}" for n in itertools.count())
    try:
        binaries, python = peers.postgres_binaries(), peers.dbos_python()
    except peers.PeerUnavailable as missing:
        print(f"DBOS peer skipped: {missing}", flush=True)
        return figures(alternate(contenders, repeat, runs), clients, size)
    with (
        tempfile.TemporaryDirectory(prefix="weave-bench-pg-") as folder,
        peers.private_postgres(Path(folder), binaries) as postgres,
    ):
        contenders["dbos"] = partial(peers.dbos_run, postgres, python, clients, per_client, instances)
        measured = alternate(contenders, repeat, runs)
    return figures(measured, clients, size)


def figures(measured: tuple, clients: int, size: int) -> list[dict]:
    """The printed rows: batches beside single signals (rate, database CPU, API CPU per signal), and
    beside DBOS when it ran."""
    shown = {"weave": f"batches (latency per batch of {size})", "singles": "singles"}
    parts = {"weave": "server, load, db", "singles": "server, load, db", "dbos": "driver, postgres"}
    row, mean_cpu = pair_row(
        f"batches of {size} vs single signals, {clients} clients", measured, "singles", shown, parts, "   (target >= 3)"
    )
    rows = [row]
    for label, column, target in (("database", 2, "<= 0.7"), ("API", 0, "<= 0.3")):
        # In microseconds, so that the printed one decimal shows the difference.
        batch, single = mean_cpu["weave"][column] * 1000, mean_cpu["singles"][column] * 1000
        rows.append(
            report(
                f"{label} CPU per signal, batches vs singles",
                batch,
                single,
                "us/sig",
                f"   (target {target})",
                baseline_name="singles",
            )
        )
    if "dbos" in measured[0]:
        shown = {"weave": shown["weave"], "dbos": "dbos"}
        row, _ = pair_row(
            f"batches of {size} vs DBOS send, {clients} clients", measured, "dbos", shown, parts, "   (target >= 1.5)"
        )
        row["peer"] = f"dbos=={peers.DBOS_VERSION}"
        rows.append(row)
    return rows
