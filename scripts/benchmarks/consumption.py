"""The `consumption` section: the scanner keeping up with signals accepted at full speed."""

from __future__ import annotations

import tempfile
import threading
import time

from benchmarks.harness import Bench, Http, run_threads, scanners, stop_scanners
from benchmarks.workload import pending, signal_body, waiting_workflows


def run(bench: Bench, signals: int, scanner_counts: tuple[int, ...] = (1, 3), clients: int = 8) -> list[dict]:
    """The scanner keeping up: `signals` workflows wait on their one SIGNAL step; `clients` clients
    send their signals as fast as Weave accepts them while 1 (then 3) `weave scan` processes
    consume them. Printed: the acceptance rate, the consumption rate (signals over the time from
    the first acceptance to the last consumption, database times) and the backlog of accepted,
    not yet consumed signals, sampled every 50 ms: its largest value and its value when sending ended;
    and the scanners' wasted claims (issue 31, target 5: under 10 % with three), from their logs."""
    results = []
    for count in scanner_counts:
        prefix = f"con{count}-{int(time.time())}"
        logs = [tempfile.TemporaryFile() for _ in range(count)]
        running = scanners(bench, count, logs)
        try:
            ids = waiting_workflows(bench, prefix, signals)
            backlog: list[int] = []
            sending = threading.Event()
            sending.set()

            def sample() -> None:
                while sending.is_set():
                    backlog.append(pending(bench, prefix))
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            senders: dict[int, Http] = {}
            per_client = max(1, signals // clients)

            def prepare(i: int) -> None:
                senders[i] = Http(bench, bench.client_token)

            def send(i: int) -> None:
                for n in range(per_client):
                    k = i * per_client + n
                    senders[i].headers["Idempotency-Key"] = f"{prefix}-{k}"
                    status, _ = senders[i].post(f"/workflows/{ids[k]}/signals", signal_body(f"o-{k}"))
                    assert status == 201, status

            sampler.start()
            seconds = run_threads(clients, send, prepare)
            sent = per_client * clients
            at_end = pending(bench, prefix)
            deadline = time.monotonic() + 120
            while pending(bench, prefix):
                assert time.monotonic() < deadline, "signals were not consumed"
                time.sleep(0.05)
            sending.clear()
            sampler.join()
            span = bench.database.read(
                lambda tx: tx.one(
                    "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(accepted_at), MAX(consumed_at)) AS us FROM signals "
                    "WHERE idempotency_key LIKE %s",
                    (f"{prefix}-%",),
                )
            )["us"]
        finally:
            skipped, claimed = stop_scanners(running, logs)
        row = {
            "label": f"signals consumed while accepted at full speed, {count} scanner(s)",
            "signals": sent,
            "accepted_per_second": round(sent / seconds, 1),
            "consumed_per_second": round(sent / (span / 1e6), 1),
            "max_backlog": max(backlog, default=0),
            "backlog_when_sending_ended": at_end,
            "wasted_claims": round(skipped / claimed, 3) if claimed else 0.0,
        }
        print(
            f"{row['label']:<62} accepted {row['accepted_per_second']:7.1f}/s   consumed {row['consumed_per_second']:7.1f}/s"
            f"   backlog max {row['max_backlog']}, {at_end} when sending ended ({sent} signals, {clients} clients)"
            f"   wasted claims {skipped} of {claimed} ({row['wasted_claims']:.1%})",
            flush=True,
        )
        results.append(row)
    return results
