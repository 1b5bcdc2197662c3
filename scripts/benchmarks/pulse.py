"""The `pulse` section: tasks claimed and completed over HTTP, 1 and 8 workers, beside the same
statements on bare connections."""

from __future__ import annotations

import time

from benchmarks.baselines import raw_pulse_worker
from benchmarks.harness import QUEUE, Bench, Http, report, run_threads
from weave.sql import activations as activation_sql
from weave.sql import definitions
from weave.sql import instances as instance_sql
from weave.sql import tasks as task_sql


def seed_tasks(bench: Bench, count: int) -> None:
    """Insert QUEUED tasks (and the activations they belong to) straight into the tables."""
    app_id = bench.database.run(lambda tx: tx.one("SELECT id FROM applications LIMIT 1"))["id"]
    definition = {"name": "one", "steps": [{"key": "s", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600}]}
    definitions.publish_definition(bench.database, bench.namespace_id, definition, 1, "bench")

    def insert(tx, start):
        queue_id = tx.one("SELECT id FROM queues WHERE name = %s", (QUEUE,))["id"]
        definition_id = tx.one("SELECT id FROM definitions WHERE name = 'one'")["id"]
        now = tx.now()
        for i in range(start, min(count, start + 500)):
            instance_id = tx.insert(
                instance_sql.INSERT_INSTANCE,
                (
                    bench.namespace_id,
                    f"t-{time.time_ns()}-{i}",
                    definition_id,
                    app_id,
                    "{}",
                    "0" * 64,
                    now.replace(year=now.year + 1),
                    now,
                    now,
                ),
            )
            activation_id = tx.insert(activation_sql.INSERT_ACTIVATION, (instance_id, "s", 0, 1, now, None))
            tx.execute(
                task_sql.INSERT_TASK,
                (
                    bench.namespace_id,
                    queue_id,
                    instance_id,
                    activation_id,
                    "TASK",
                    3,
                    now,
                    now.replace(year=now.year + 1),
                    now,
                ),
            )

    for start in range(0, count, 500):
        bench.database.run(insert, start)


def http_pulse_worker(bench: Bench, done: list):
    def work(i):
        client = Http(bench, bench.worker_token)
        while True:
            status, task = client.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "lease_seconds": 60})
            if status == 204:
                return
            status, _ = client.post(
                f"/tasks/{task['task_id']}/complete",
                {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"i": i}},
            )
            assert status == 200, status
            done.append(1)

    return work


def run(bench: Bench, tasks: int) -> list[dict]:
    results = []
    for workers in (1, 8):
        rates = {}
        for name, make in (("weave", http_pulse_worker), ("baseline", raw_pulse_worker)):
            seed_tasks(bench, tasks)
            done: list = []
            seconds = run_threads(workers, make(bench, done))
            assert len(done) == tasks, (name, len(done))
            rates[name] = tasks / seconds
        results.append(
            report(f"tasks claimed+completed, {workers} worker(s)", rates["weave"], rates["baseline"], "tasks/s")
        )
    return results
