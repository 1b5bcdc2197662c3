"""The `e2e` section: 2-step TASK workflows end to end (HTTP workers, a `weave scan` process),
beside the same units called in-process."""

from __future__ import annotations

import os
import threading
import time

from benchmarks.baselines import in_process_e2e
from benchmarks.harness import QUEUE, Bench, Http, report, run_threads, weave_command

E2E_DEFINITION = {
    "name": "e2e",
    "steps": [
        {"key": "a", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
        {"key": "b", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
    ],
}


def run(bench: Bench, workflows: int, workers: int = 8) -> list[dict]:
    client = Http(bench, bench.client_token)
    client.post("/definitions", E2E_DEFINITION)
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.yoyo_url()}
    scanner = weave_command(env, "scan", "--idle-seconds", "0.02")
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
                c.post(
                    "/workflows",
                    {
                        "definition": "e2e",
                        "version": 1,
                        "input": {"i": i},
                        "deadline_seconds": 3600,
                        "workflow_id": f"e2e-{run_id}-{i}",
                    },
                )

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
        scanner.terminate()
        scanner.wait(10)
    weave_rate = workflows / seconds
    baseline_rate = workflows / in_process_e2e(bench, workflows)
    return [
        report(
            f"2-step TASK workflows end to end, {workers} workers",
            weave_rate,
            baseline_rate,
            "wf/s",
            "  (baseline: the same units in-process, no HTTP, no scanner process)",
        )
    ]
