"""Units of work: which duplicate keys replay, and state changes that must change one row."""

from __future__ import annotations

import pytest

from weave.db import DuplicateKey, TransitionFailed, connect, unit_of_work
from weave.sql import instances

INSERT_NAMESPACE = "INSERT INTO namespaces (name, created_at) VALUES (%s, %s)"
SELECT_NAMESPACE = "SELECT id FROM namespaces WHERE name = %s"


def test_a_duplicate_on_a_key_the_unit_did_not_declare_surfaces_at_once(database):
    runs = []

    @unit_of_work
    def insert_twice(tx):
        runs.append(1)
        tx.insert(INSERT_NAMESPACE, ("twin", tx.now()))
        tx.insert(INSERT_NAMESPACE, ("twin", tx.now()))

    with pytest.raises(DuplicateKey) as caught:
        insert_twice(database)
    assert caught.value.key == "uq_namespaces_name"
    assert len(runs) == 1  # not retried: a bug must not turn into a 503 after six tries
    assert database.run(lambda tx: tx.one(SELECT_NAMESPACE, ("twin",))) is None  # rolled back


def test_a_duplicate_on_a_declared_key_re_runs_the_unit_which_then_replays(database):
    database.run(lambda tx: tx.insert(INSERT_NAMESPACE, ("taken", tx.now())))
    runs = []

    @unit_of_work(replay_on=("uq_namespaces_name",))
    def create_once(tx):
        runs.append(1)
        if len(runs) > 1:  # the second run looks its identity up first, as real units do
            return "replayed", tx.one(SELECT_NAMESPACE, ("taken",))["id"]
        tx.insert(INSERT_NAMESPACE, ("taken", tx.now()))
        return "created", None

    outcome, namespace_id = create_once(database)
    assert outcome == "replayed" and namespace_id is not None
    assert len(runs) == 2


def test_a_duplicate_on_another_key_than_the_declared_one_surfaces(database):
    runs = []

    @unit_of_work(replay_on=("uq_signals_idempotency",))
    def wrong_key(tx):
        runs.append(1)
        tx.insert(INSERT_NAMESPACE, ("again", tx.now()))
        tx.insert(INSERT_NAMESPACE, ("again", tx.now()))

    with pytest.raises(DuplicateKey):
        wrong_key(database)
    assert len(runs) == 1


def test_a_transition_that_changes_no_row_fails_the_unit_and_keeps_nothing(database, flow):
    flow.publish({"name": "flow", "steps": [{"key": "a", "type": "TASK", "queue": "inventory", "timeout_seconds": 60}]})
    flow.start("wf-1")
    instance_id = flow.rows("SELECT id FROM instances WHERE workflow_id = 'wf-1'")[0]["id"]
    events_before = flow.rows("SELECT COUNT(*) AS n FROM events")[0]["n"]

    def move_from_a_state_it_is_not_in(tx):
        instance = instances.lock(tx, instance_id)
        tx.execute(
            "INSERT INTO events (instance_id, seq, type, at, data) VALUES (%s, 99, 'X', %s, '{}')",
            (instance_id, tx.now()),
        )
        instances.move(tx, {**instance, "status": "PAUSED"}, "RUNNING", "OPEN", None)

    with pytest.raises(TransitionFailed, match=f"move instance {instance_id} from PAUSED to RUNNING"):
        database.run(move_from_a_state_it_is_not_in)
    assert flow.rows("SELECT status, gate FROM instances WHERE id = %s", (instance_id,)) == [
        {"status": "RUNNING", "gate": "OPEN"}
    ]
    assert flow.rows("SELECT COUNT(*) AS n FROM events")[0]["n"] == events_before


def test_a_transition_that_changes_its_row_returns_the_moved_instance_and_leaves_the_read_one(database, flow):
    flow.publish({"name": "flow", "steps": [{"key": "a", "type": "TASK", "queue": "inventory", "timeout_seconds": 60}]})
    flow.start("wf-1")
    instance_id = flow.rows("SELECT id FROM instances WHERE workflow_id = 'wf-1'")[0]["id"]

    def pause(tx):
        instance = instances.lock(tx, instance_id)
        return instance, instances.move(tx, instance, "PAUSED", "CLOSED", None)

    read, moved = database.run(pause)
    assert (read["status"], read["gate"]) == ("RUNNING", "OPEN")
    assert (moved["status"], moved["gate"]) == ("PAUSED", "CLOSED")
    assert flow.rows("SELECT status, gate FROM instances WHERE id = %s", (instance_id,)) == [
        {"status": "PAUSED", "gate": "CLOSED"}
    ]


@pytest.mark.parametrize("matching", ["id = -1", "id > 0"], ids=["none", "several"])
def test_a_guard_stops_its_batch_so_writes_after_it_and_commit_never_run(database, flow, matching):
    """The guarded change, a write queued after it and COMMIT travel in one round trip: the server
    checks the guard and runs nothing after a failed one."""
    flow.publish({"name": "flow", "steps": [{"key": "a", "type": "TASK", "queue": "inventory", "timeout_seconds": 60}]})
    flow.start("wf-1")
    flow.start("wf-2")
    before = flow.rows("SELECT id, version FROM instances ORDER BY id")
    sent = []

    def guarded_then_more(tx):
        tx.later(f"UPDATE instances SET version = version + 1 WHERE {matching}", expect_one="bump the version")
        tx.later("UPDATE instances SET version = version + 100")
        sent.append(len(tx._queued))

    with pytest.raises(TransitionFailed, match="bump the version: expected to change one row"):
        database.run(guarded_then_more)
    assert sent == [3]  # the change, its guard, the later write: all left for COMMIT's round trip
    assert flow.rows("SELECT id, version FROM instances ORDER BY id") == before


def test_a_unit_that_only_read_leaves_no_transaction_open_on_its_pooled_connection(database, migrated_url):
    """A unit that read and decided nothing is rolled back, so its connection goes back to the pool
    with no transaction open: no metadata lock is left for a later DDL to wait on. (With autocommit
    off a SELECT opens a transaction, and PyMySQL's `server_status` is not updated by a result set:
    a rollback skipped on that flag left open transactions on pooled connections, and a migration
    or a test's TRUNCATE then waited for `lock_wait_timeout`, a year by default.)"""

    def names(tx):
        return [row["name"] for row in tx.all("SELECT name FROM namespaces ORDER BY name")]

    database.run(lambda tx: tx.insert(INSERT_NAMESPACE, ("before", tx.now())))  # its COMMIT: no transaction
    assert database.run(names) == ["before"]
    other = connect(migrated_url, autocommit=True)
    try:
        with other.cursor() as cursor:
            cursor.execute("SET SESSION lock_wait_timeout = 2")
            cursor.execute("ALTER TABLE namespaces COMMENT = 'probed'")
            cursor.execute("ALTER TABLE namespaces COMMENT = ''")
    finally:
        other.close()
