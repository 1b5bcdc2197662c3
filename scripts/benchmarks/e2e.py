"""The `e2e` section: 2-step TASK workflows end to end (HTTP workers, `weave scan` processes),
beside the same units called in-process; with `signal=True` (`--e2e-signal`), TASK -> SIGNAL -> TASK
workflows, each sent its signal (early, over HTTP) right after it starts (issue 31, target 5)."""

from __future__ import annotations

import os
import tempfile
import threading
import time

from benchmarks.baselines import in_process_e2e
from benchmarks.harness import QUEUE, Bench, Http, report, run_threads, stop_scanners, weave_command
from benchmarks.workload import e2e_input, signal_body
from weave.cli.demo import PAYMENT_STEP

E2E_DEFINITION = {
    "name": "e2e",
    "steps": [
        {"key": "a", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
        {"key": "b", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
    ],
}
# TASK -> SIGNAL -> TASK: the demo's payment step between two tasks (its correlation: /input/order_id).
E2E_SIGNAL_DEFINITION = {
    "name": "e2e-signal",
    "steps": [E2E_DEFINITION["steps"][0], PAYMENT_STEP, E2E_DEFINITION["steps"][1]],
}


def run(bench: Bench, workflows: int, workers: int = 8, scanner_count: int = 1, signal: bool = False) -> list[dict]:
    """`workflows` workflows started by one thread, their tasks done by `workers` HTTP workers,
    their steps moved by `scanner_count` `weave scan` processes; with `signal`, each workflow's
    signal is sent by the starting thread right after its start. Printed beside the same units
    in-process (one thread), with the scanners' wasted claims."""
    definition = E2E_SIGNAL_DEFINITION if signal else E2E_DEFINITION
    client = Http(bench, bench.client_token)
    client.post("/definitions", definition)
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.yoyo_url()}
    logs = [tempfile.TemporaryFile() for _ in range(scanner_count)]
    running = [weave_command(env, "scan", "--idle-seconds", "0.02", log=log) for log in logs]
    run_id = time.time_ns()
    finished = threading.Event()
    try:
        # Earlier sections leave inbox events behind (their tasks' outcomes): drain them first, so
        # that this measures these workflows, not a backlog.
        while bench.database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbox_events WHERE status = 'PENDING'"))[
            "n"
        ]:
            time.sleep(0.2)

        def start_all(_):
            c = Http(bench, bench.client_token)
            for i in range(workflows):
                workflow_id = f"e2e-{run_id}-{i}"
                c.post(
                    "/workflows",
                    {
                        "definition": definition["name"],
                        "version": 1,
                        "input": e2e_input(i, signal),
                        "deadline_seconds": 3600,
                        "workflow_id": workflow_id,
                    },
                )
                if signal:
                    c.headers["Idempotency-Key"] = f"e2e-{i}"
                    status, _ = c.post(f"/workflows/{workflow_id}/signals", signal_body(f"o-{i}"))
                    assert status == 201, status

        def work(i):
            if i == 0:
                return start_all(i)
            c = Http(bench, bench.worker_token)
            while not finished.is_set():
                status, task = c.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "wait_seconds": 1})
                if status == 200:
                    c.post(
                        f"/tasks/{task['task_id']}/complete",
                        {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"ok": True}},
                    )

        def watch():
            while (
                bench.database.run(
                    lambda tx: tx.one(
                        "SELECT COUNT(*) AS n FROM instances WHERE workflow_id LIKE %s AND status = 'SUCCEEDED'",
                        (f"e2e-{run_id}-%",),
                    )
                )["n"]
                < workflows
            ):
                time.sleep(0.05)
            finished.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        seconds = run_threads(workers + 1, work)
        watcher.join()
    finally:
        skipped, claimed = stop_scanners(running, logs)
    weave_rate = workflows / seconds
    baseline_rate = workflows / in_process_e2e(bench, workflows, signal)
    shape = "TASK -> SIGNAL -> TASK" if signal else "2-step TASK"
    row = report(
        f"{shape} workflows end to end, {workers} workers, {scanner_count} scanner(s)",
        weave_rate,
        baseline_rate,
        "wf/s",
        "  (baseline: the same units in-process, no HTTP, no scanner process)"
        f"   wasted claims {skipped} of {claimed} ({skipped / claimed if claimed else 0:.1%})",
    )
    row["wasted_claims"] = round(skipped / claimed, 3) if claimed else 0.0
    return [row]
