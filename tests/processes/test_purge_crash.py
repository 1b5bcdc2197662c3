"""L3: a `weave scan` SIGKILLed in the middle of a purge; the next one finishes it, with one audit
record counting every row."""

import json

import pytest
from helpers import scanner_process, task_steps, use_real_time, wait_until

from weave.sql import retention

pytestmark = pytest.mark.slow
EVENTS = 30_000  # 60 chunks of 500: a purge that takes a while


def test_L3_a_scanner_killed_mid_purge_leaves_a_purge_the_next_one_finishes_with_one_whole_count(
    flow, database, clock, config
):
    use_real_time(database, clock)
    flow.publish(task_steps("a", "b"))
    flow.start("w-1")
    flow.scan()
    flow.finish_task()
    flow.finish_task()
    (instance,) = flow.rows("SELECT id FROM instances WHERE workflow_id = 'w-1'")

    def many_events(tx):
        first = tx.one("SELECT MAX(seq) AS n FROM events WHERE instance_id = %s", (instance["id"],))["n"]
        tx.executemany(
            "INSERT INTO events (instance_id, seq, type, at, data) VALUES (%s, %s, 'NOTE', UTC_TIMESTAMP(6), '{}')",
            [(instance["id"], first + n) for n in range(1, EVENTS + 1)],
        )

    database.run(many_events)
    rows = {
        table: flow.rows(f"SELECT COUNT(*) AS n FROM {table} WHERE instance_id = %s", (instance["id"],))[0]["n"]
        for table in ("step_activations", "tasks", "inbox_events", "events")
    }
    retention.set_retention(database, "acme", 0)

    def counted() -> int:
        row = flow.rows("SELECT purge_counts FROM instances WHERE id = %s", (instance["id"],))
        return sum(json.loads(row[0]["purge_counts"]).values()) if row and row[0]["purge_counts"] else 0

    scanner = scanner_process(config)
    try:
        wait_until(lambda: counted() > 0, pause=0.005)
    finally:
        scanner.kill()  # SIGKILL: between two chunks, or in the middle of one
        scanner.communicate()
    left = flow.rows("SELECT id FROM instances WHERE id = %s", (instance["id"],))
    assert left, "the purge finished before the kill: make it longer"
    assert 0 < counted() < EVENTS
    scanner = scanner_process(config)
    try:
        wait_until(lambda: not flow.rows("SELECT id FROM instances WHERE id = %s", (instance["id"],)))
    finally:
        scanner.kill()
        scanner.communicate()
    records = flow.rows("SELECT details FROM audit_records WHERE action = 'workflow.purged'")
    assert len(records) == 1
    removed = json.loads(records[0]["details"])["rows"]
    assert {table: removed[table] for table in rows} == rows
    for table in rows:
        assert flow.rows(f"SELECT COUNT(*) AS n FROM {table} WHERE instance_id = %s", (instance["id"],))[0]["n"] == 0
