"""The `purge` section (L1, L3): whether `weave scan`'s purge of ended workflows keeps up with what
acceptance writes, while acceptance runs beside it (a namespace at steady state does not grow), and
acceptance's p99 with that purge running beside it without one; in rows, from one run."""

from __future__ import annotations

import json
import time
from statistics import median

from benchmarks.harness import NS, Bench, Http, count_of, cpu_seconds, percentile, report, scanners
from benchmarks.workload import (
    SIGNAL_DEFINITION,
    http_sender,
    pending,
    signal_each,
    start_signal_targets,
    timed_sends,
    waiting_workflows,
)
from weave.sql import retention

PREFIX = "pur"
# What a namespace stores, of its instances and of the facts and records of them: a row added to
# any of these is growth the purge must take away (the tables it counts, as it purges them).
STORED = ("instances", *retention.COUNTED_TABLES)


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


def stored_rows(bench: Bench) -> int:
    return count_of(bench, "SELECT " + " + ".join(f"(SELECT COUNT(*) FROM {table})" for table in STORED) + " AS n")


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


def run(
    bench: Bench, workflows: int, signals: int, clients: int = 8, instances: int = 200, pairs: int = 3
) -> list[dict]:
    """`workflows` ended workflows wait for their purge, one `weave scan` running (its purge paced
    by `WEAVE_PURGE_SHARE`, as in production). Then `pairs` pairs of acceptance runs (`signals`
    early signals to `instances` fresh running workflows, `clients` clients): one alone, the
    namespace's retention forever, measuring the rows acceptance adds a second; one while the
    scanner purges, the retention 0 from just before its sends to their end, measuring the rows
    purged a second over that window. The figures are the medians of the pairs' ratios (the
    machine is shared: a pair's two runs are seconds apart), beside the pooled rates and p99s; the
    backlog must last every purging window, else its rate is a lower bound (said so). At the end
    the purge runs to the last workflow."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    per_client = max(1, signals // clients)
    (scanner,) = scanners(bench, 1)
    alone: list[float] = []
    during: list[float] = []
    rates: dict[str, list[float]] = {"alone": [], "during": []}
    written: list[float] = []  # rows a second, alone
    purged: list[float] = []  # rows a second, while accepting
    p99s: list[tuple[float, float]] = []
    # CPU a signal accepted of the API and the database (`timed_sends`), and of the scanner a
    # second (it purges, and lists every batch), by window: what the purge costs, whatever else
    # runs on the machine.
    cpu: dict[str, list[list[float]]] = {"alone": [], "during": []}
    still_purging = workflows
    try:
        ended_workflows(bench, workflows, clients)
        for pair in range(pairs):
            targets = start_signal_targets(bench, f"spa{pair}", instances)
            stored_before = stored_rows(bench)
            started, scanner_cpu = time.monotonic(), cpu_seconds(scanner.pid)
            rate, latencies, split = timed_sends(bench, http_sender, targets, clients, per_client, f"pa{pair}")
            cpu["alone"].append(
                [split[0], split[2], (cpu_seconds(scanner.pid) - scanner_cpu) / (time.monotonic() - started)]
            )
            written.append((stored_rows(bench) - stored_before) / (len(latencies) / rate))
            rates["alone"].append(rate)
            alone += latencies
            p99_alone = percentile(latencies, 99)
            targets = start_signal_targets(bench, f"spd{pair}", instances)
            purged_before = rows_removed(bench)
            retention.set_retention(bench.database, NS, 0)
            started, scanner_cpu = time.monotonic(), cpu_seconds(scanner.pid)
            # Nothing watches the purge during the sends: a count every few milliseconds would load
            # the database in this window only.
            rate, latencies, split = timed_sends(bench, http_sender, targets, clients, per_client, f"pd{pair}")
            window = time.monotonic() - started
            cpu["during"].append([split[0], split[2], (cpu_seconds(scanner.pid) - scanner_cpu) / window])
            retention.set_retention(bench.database, NS, None)  # the purge stops at its next look
            purged.append((rows_removed(bench) - purged_before) / window)
            rates["during"].append(rate)
            during += latencies
            p99s.append((p99_alone, percentile(latencies, 99)))
            still_purging = left(bench)  # workflows left when the window ended
            if not still_purging:
                break
        retention.set_retention(bench.database, NS, 0)
        deadline = time.monotonic() + 600
        while left(bench) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left(bench), "the purge did not finish"
    finally:
        retention.set_retention(bench.database, NS, None)
        scanner.terminate()
        scanner.wait(10)
    rows = rows_removed(bench)
    lasted = (
        "the backlog lasted every window"
        if still_purging
        else "the backlog ran out in the last window: its rate is a lower bound"
    )
    runs = len(purged)
    results = [
        report(
            "purge: rows/s purged while accepting, beside written alone",
            median(purged),
            median(written),
            "rows/s",
            f"   (median of {runs} pairs; pair ratios {' '.join(f'{p / w:.2f}' for p, w in zip(purged, written))};"
            f" {lasted}; acceptance alone {median(rates['alone']):.1f} signals/s, {clients} clients;"
            f" {workflows} workflows, {rows} rows purged in all)",
            ratio=median(p / w for p, w in zip(purged, written)),
            baseline_name="written",
        )
        | {
            "rows": rows,
            "workflows": workflows,
            "pairs": runs,
            "purged_rows_per_second": [round(p, 1) for p in purged],
            "written_rows_per_second": [round(w, 1) for w in written],
            "backlog_lasted": bool(still_purging),
            "accepted_alone": round(median(rates["alone"]), 1),
        },
    ]
    pooled_alone, pooled_during = percentile(alone, 99) * 1000, percentile(during, 99) * 1000
    api, database, scanning = (
        [median(each[part] for each in cpu[window]) for window in ("alone", "during")] for part in range(3)
    )
    results.append(
        report(
            "purge: acceptance p99 ms while purging, beside without",
            median(d for _, d in p99s) * 1000,
            median(a for a, _ in p99s) * 1000,
            "ms",
            f"   (median of {runs} pairs; pair ratios {' '.join(f'{d / a:.2f}' for a, d in p99s)};"
            f" pooled p99 {pooled_during:.1f} and {pooled_alone:.1f} ms;"
            f" rates {median(rates['during']):.1f} and {median(rates['alone']):.1f} signals/s;"
            f" CPU ms a signal, API {api[1]:.2f} and {api[0]:.2f}, MariaDB {database[1]:.2f} and {database[0]:.2f};"
            f" the scanner {scanning[1] * 100:.1f} % and {scanning[0] * 100:.1f} % of a core)",
            ratio=median(d / a for a, d in p99s),
            baseline_name="alone",
        )
        | {
            "pair_ratios": [round(d / a, 3) for a, d in p99s],
            "pooled_p99_ms": {"during": round(pooled_during, 1), "alone": round(pooled_alone, 1)},
            "accepted_while_purging": round(median(rates["during"]), 1),
            "cpu_ms_per_signal": {
                "api": {"during": round(api[1], 3), "alone": round(api[0], 3)},
                "database": {"during": round(database[1], 3), "alone": round(database[0], 3)},
            },
            "scanner_cpu_share": {"during": round(scanning[1], 4), "alone": round(scanning[0], 4)},
        }
    )
    return results
