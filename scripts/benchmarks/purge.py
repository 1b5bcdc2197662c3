"""The `purge` section (L1, L3): how fast `weave scan` purges ended workflows, beside the signal
acceptance rate measured in the same run (a namespace at steady state does not grow when the purge
keeps up with what is accepted), and acceptance's p99 with a purge running beside it without one."""

from __future__ import annotations

import json
import threading
import time

from benchmarks.harness import NS, Bench, Http, count_of, percentile, report, scanners
from benchmarks.workload import SIGNAL_DEFINITION, http_sender, pending, signal_each, signal_run, waiting_workflows
from weave.sql import retention

PREFIX = "pur"


def ended_workflows(bench: Bench, count: int, clients: int) -> None:
    """`count` workflows `pur-{i}` of one SIGNAL step, started, signalled and consumed (SUCCEEDED):
    each holds its instance, activation, wait, signal, history events and checkpoints."""
    ids = waiting_workflows(bench, PREFIX, count, key_prefix="p")
    signal_each(bench, ids, PREFIX, clients, order_prefix="p")
    deadline = time.monotonic() + 300
    while pending(bench, PREFIX) or left(bench, "status <> 'SUCCEEDED'"):
        assert time.monotonic() < deadline, "the workflows did not end"
        time.sleep(0.1)


def left(bench: Bench, condition: str = "TRUE") -> int:
    return count_of(
        bench, f"SELECT COUNT(*) AS n FROM instances WHERE workflow_id LIKE %s AND {condition}", f"{PREFIX}-%"
    )


def rows_removed(bench: Bench) -> int:
    """The rows the `workflow.purged` records of this section's workflows say went."""
    records = bench.database.read(
        lambda tx: tx.all("SELECT details FROM audit_records WHERE action = 'workflow.purged'")
    )
    return sum(
        sum(details["rows"].values())
        for details in map(lambda row: json.loads(row["details"]), records)
        if details["workflow_id"].startswith(f"{PREFIX}-")
    )


def run(bench: Bench, workflows: int, signals: int, clients: int = 8, instances: int = 200) -> list[dict]:
    """`workflows` ended workflows wait for their purge (retention forever), one `weave scan`
    running. Acceptance is measured alone (`signals` early signals to `instances` running
    workflows, `clients` clients), then the namespace's retention is set to 0 and acceptance is
    measured again while the scanner purges; the purge's time runs from that moment to the last
    workflow gone."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    per_client = max(1, signals // clients)
    (scanner,) = scanners(bench, 1)
    try:
        ended_workflows(bench, workflows, clients)
        rate_alone, latencies_alone, _ = signal_run(bench, http_sender, instances, clients, per_client, "pa")
        retention.set_retention(bench.database, NS, 0)
        started = time.monotonic()
        finished: list[float] = []

        def watch() -> None:  # the purge's end, while the sends go on or after them
            while left(bench) and time.monotonic() < started + 600:
                time.sleep(0.02)
            finished.append(time.monotonic())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rate_during, latencies_during, _ = signal_run(bench, http_sender, instances, clients, per_client, "pd")
        still_purging = left(bench)  # workflows left when the measured sends ended
        watcher.join(600)
        assert not left(bench), "the purge did not finish"
        seconds = finished[0] - started
    finally:
        retention.set_retention(bench.database, NS, None)
        scanner.terminate()
        scanner.wait(10)
    rows = rows_removed(bench)
    purged_per_second, rows_per_second = workflows / seconds, rows / seconds
    results = [
        report(
            "purge: workflows purged beside signals accepted",
            purged_per_second,
            rate_alone,
            "/s",
            f"   ({workflows} workflows, {rows} rows in {seconds:.1f} s: {rows_per_second:.0f} rows/s;"
            f" acceptance {clients} clients, alone)",
            baseline_name="accepted",
        )
        | {"rows_per_second": round(rows_per_second, 1), "workflows": workflows, "rows": rows},
    ]
    p99_alone, p99_during = percentile(latencies_alone, 99) * 1000, percentile(latencies_during, 99) * 1000
    results.append(
        report(
            "purge: acceptance p99 ms while purging, beside without",
            p99_during,
            p99_alone,
            "ms",
            f"   (rates {rate_during:.1f} and {rate_alone:.1f} signals/s;"
            f" {still_purging} of {workflows} workflows still to purge when the sends ended)",
            baseline_name="alone",
        )
        | {"still_purging_at_end": still_purging, "accepted_while_purging": round(rate_during, 1)}
    )
    return results
