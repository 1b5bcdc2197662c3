"""The `routing` section: a fact sent by its business key (`POST {N}/signals`, B1-B3) to a wait that
is open, so that each one is ROUTED, beside the same fact sent to its workflow by id (`POST
{N}/workflows/{id}/signals`), in alternating pairs of the same run; printed as the ratio routed /
addressed (issue 29 asks for routing within 1.2x of addressed acceptance)."""

from __future__ import annotations

import itertools
import time
from functools import partial

from benchmarks.harness import (
    Bench,
    Http,
    alternate,
    cpu_split,
    report_pairs,
    run_threads,
    scanners,
    summary,
    tails_text,
)
from benchmarks.workload import signal_body, waiting_workflows


def run(bench: Bench, per_run: int, repeat: int, client_counts: tuple[int, ...] = (1, 8)) -> list[dict]:
    """Each run: `per_run` fresh workflows wait on their one SIGNAL step (each its own key), and
    `clients` clients send one fact to each, routed by key or addressed by id; no scanner runs
    while they are timed, so both kinds are only accepted (the next run's scanner, opening its
    waits, consumes them)."""
    runs = map(str, itertools.count(1))
    results = []
    for clients in client_counts:
        per_client = max(1, per_run // clients)
        contenders = {"weave": partial(one_run, bench, True, clients, per_client)}
        contenders["addressed"] = partial(one_run, bench, False, clients, per_client)
        rates, latencies, cpu = alternate(contenders, repeat, runs)
        ratios, tails, mean_cpu = summary(rates, latencies, cpu, "weave", "addressed")
        extra = tails_text(
            tails, {"weave": "routed", "addressed": "addressed"}
        ) + "   CPU ms/signal (server, load, db) routed %.2f, %.2f, %.2f addressed %.2f, %.2f, %.2f" % (
            *mean_cpu["weave"],
            *mean_cpu["addressed"],
        )
        row = report_pairs(
            f"signals routed by key, {clients} client(s)", rates, ratios, "addressed", extra, "addressed"
        )
        row["run_ratios"] = [round(r, 3) for r in ratios]
        row["cpu_ms_per_signal"] = {name: [round(v, 2) for v in split] for name, split in mean_cpu.items()}
        results.append(row)
    return results


def one_run(bench: Bench, routed: bool, clients: int, per_client: int, run: str) -> tuple:
    """(facts per second, latencies in seconds, [CPU ms per fact of the server, this load generator,
    the database]) of `clients * per_client` facts, one to each open wait of this run's workflows."""
    prefix = f"{'r' if routed else 'a'}{run}"
    opening = scanners(bench, 1)  # opens the waits; stopped before the timed sends
    try:
        ids = waiting_workflows(bench, prefix, clients * per_client, key_prefix=f"{prefix}-o")
    finally:
        for scanner in opening:
            scanner.terminate()
            scanner.wait(30)
    latencies: list[float] = []
    senders: dict[int, Http] = {}

    def prepare(i):
        senders[i] = Http(bench, bench.client_token)

    def send(i):
        client = senders[i]
        for n in range(per_client):
            k = i * per_client + n
            body = signal_body(f"{prefix}-o-{k}")
            client.headers["Idempotency-Key"] = f"{prefix}-{k}"
            started = time.perf_counter()
            if routed:
                del body["target_step_key"], body["target_activation_sequence"]
                status, answer = client.post("/signals", body)
                assert status == 201 and answer["route"] == "ROUTED", (status, answer)
            else:
                status, answer = client.post(f"/workflows/{ids[k]}/signals", body)
                assert status == 201, (status, answer)
            latencies.append(time.perf_counter() - started)

    before: list[float] = []
    seconds = run_threads(clients, send, prepare, at_start=lambda: before.extend(cpu_split(bench)))
    cpu = [(after - first) * 1000 / len(latencies) for first, after in zip(before, cpu_split(bench))]
    return len(latencies) / seconds, latencies, cpu
