"""The `latency` section: a signal's acceptance to its consumption, one `weave scan` running."""

from __future__ import annotations

import time

from benchmarks.harness import Bench, Http, cpu_seconds, percentile, scanners
from benchmarks.workload import pending, signal_body, waiting_workflows

# Sends that wake an idle scanner, before the measured ones: at 37 ms apart, the scanner's longest
# sleep (0.25 s) takes up to 7 of them.
LATENCY_WARM_UP = 10


def run(bench: Bench, signals: int, idle_window: float = 5.0) -> list[dict]:
    """Acceptance to consumption with one `weave scan` running and active waits (database times)."""
    (scanner,) = scanners(bench, 1)
    try:
        ids = waiting_workflows(bench, "lat", signals + LATENCY_WARM_UP)
        time.sleep(1)
        cpu_before = cpu_seconds(scanner.pid)
        time.sleep(idle_window)
        idle_cpu = (cpu_seconds(scanner.pid) - cpu_before) / idle_window
        client = Http(bench, bench.client_token)
        for i, workflow_id in enumerate(ids):
            client.headers["Idempotency-Key"] = f"lat-{i}"
            client.post(f"/workflows/{workflow_id}/signals", signal_body(f"o-{i}"))
            time.sleep(0.037)  # spread the sends over the scanner's sleep cycle
        while pending(bench, "lat"):
            time.sleep(0.1)
        rows = bench.database.run(
            lambda tx: tx.all(
                "SELECT TIMESTAMPDIFF(MICROSECOND, accepted_at, consumed_at) AS us"
                " FROM signals WHERE idempotency_key LIKE 'lat-%%' ORDER BY id"
            )
        )
    finally:
        scanner.terminate()
        scanner.wait(10)
    # The first sends find the scanner in its idle sleep (up to IDLE_SECONDS): they wait for it to
    # wake, by design. The steady-state figures are those of the sends after them.
    first = rows[0]["us"] / 1000
    millis = [row["us"] / 1000 for row in rows[LATENCY_WARM_UP:]]
    p50, p99 = percentile(millis, 50), percentile(millis, 99)
    print(
        f"signal accepted -> consumed ({len(millis)} signals, one scanner, after {LATENCY_WARM_UP} sent first)   "
        f"p50 {p50:.1f} ms   p99 {p99:.1f} ms   max {max(millis):.1f} ms   the first after idling {first:.1f} ms   "
        f"idle scanner CPU {idle_cpu * 100:.1f}% of a core",
        flush=True,
    )
    return [
        {
            "label": "signal accepted -> consumed",
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
            "max_ms": round(max(millis), 1),
            "first_after_idle_ms": round(first, 1),
            "idle_scanner_cpu_percent": round(idle_cpu * 100, 2),
        }
    ]
