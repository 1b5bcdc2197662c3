"""M2, M3: the signal-identity migration upgrades a database filled at the previous schema version;
S1.12: so does the migration that gives audit records their signal_id (0007)."""

from contextlib import contextmanager
from datetime import datetime, timedelta

import falcon.testing
import pytest
from helpers import Flow, make_tenant, payment, signal_flow_definition
from yoyo import get_backend, read_migrations

from weave import migrate
from weave.app import create_app
from weave.config import Config
from weave.db import Database, connect
from weave.sql import audit

PREVIOUS = "0004.signals_minimal"
T0 = datetime(2026, 1, 5, 10, 0, 0, 123456)
LONG_KEY = "\U0001f600" * 191  # 191 characters of 4 bytes: the most an old VARCHAR(191) utf8mb4 held
DOC = (
    '{"name":"legacy","steps":[{"key":"payment","type":"SIGNAL","timeout_seconds":3600,'
    '"signal":{"name":"payment.settled","payload_version":"v1","payload_schema":{}},"correlation":"/input/id"}]}'
)


@pytest.fixture
def old_database(scratch_database):
    url = scratch_database("upgrade")
    migrate.ensure_database(url)
    migrate.apply(url, upto=PREVIOUS)
    return url


def fill_previous_schema(url) -> dict:
    conn = connect(url)
    ids = {}
    with conn.cursor() as cur:
        cur.execute("INSERT INTO namespaces (name, created_at) VALUES ('old', %s)", (T0,))
        cur.execute(
            "INSERT INTO applications (namespace_id, name, status, created_at, updated_at) "
            "VALUES (1, 'app', 'ACTIVE', %s, %s)",
            (T0, T0),
        )
        cur.execute(
            "INSERT INTO definitions (namespace_id, name, version, digest, document, created_at) "
            "VALUES (1, 'legacy', 1, %s, %s, %s)",
            ("0" * 64, DOC, T0),
        )

        def instance(name, status="RUNNING"):
            cur.execute(
                "INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, "
                "request_digest, status, gate, deadline_at, created_at, updated_at) VALUES "
                "(1, %s, 1, 1, '{}', %s, %s, 'OPEN', %s, %s, %s)",
                (name, "0" * 64, status, T0 + timedelta(days=1), T0, T0),
            )
            return cur.lastrowid

        def activation(instance_id, sequence, status):
            cur.execute(
                "INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, "
                "status, activated_at) VALUES (%s, 'payment', 0, %s, %s, %s)",
                (instance_id, sequence, status, T0),
            )
            return cur.lastrowid

        def wait(instance_id, name="payment.settled", correlation="order-1", deadline=T0 + timedelta(hours=1)):
            cur.execute(
                "INSERT INTO waits (instance_id, step_key, name, correlation, status, deadline_at, created_at) "
                "VALUES (%s, 'payment', %s, %s, 'WAITING', %s, %s)",
                (instance_id, name, correlation, deadline, T0),
            )
            return cur.lastrowid

        def signal(instance_id, correlation, status, payload='{ "b": 1.10, "a": 2 }'):
            cur.execute(
                "INSERT INTO signals (instance_id, name, correlation, payload, status, created_at) "
                "VALUES (%s, 'payment.settled', %s, %s, %s, %s)",
                (instance_id, correlation, payload, status, T0),
            )
            return cur.lastrowid

        ids["current"] = instance("current")
        activation(ids["current"], 1, "ACTIVE")
        ids["current_wait"] = wait(ids["current"])
        ids["null_meta"] = instance("null-meta")
        activation(ids["null_meta"], 1, "ACTIVE")
        ids["null_meta_wait"] = wait(ids["null_meta"], name=None, correlation=None)
        ids["terminal"] = instance("terminal", status="SUCCEEDED")
        activation(ids["terminal"], 1, "ACTIVE")
        ids["terminal_wait"] = wait(ids["terminal"])
        ids["old_generation"] = instance("old-generation")
        activation(ids["old_generation"], 1, "SUPERSEDED")
        ids["old_wait"] = wait(ids["old_generation"])
        ids["has_checkpoint"] = instance("has-checkpoint")
        activation(ids["has_checkpoint"], 1, "ACTIVE")
        ids["kept_wait"] = wait(ids["has_checkpoint"])
        cur.execute(
            "INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, created_at) "
            "VALUES (%s, 'WAIT', %s, %s, %s, %s)",
            (ids["has_checkpoint"], ids["kept_wait"], T0, T0, T0),
        )

        ids["long_pending"] = signal(ids["current"], LONG_KEY, "PENDING")
        ids["space_pending"] = signal(ids["current"], "order-1 ", "PENDING")
        ids["consumed"] = signal(ids["current"], "order-1", "CONSUMED", payload='{"done":true}')
    conn.commit()
    conn.close()
    return ids


def test_m2_m3_upgrade_of_a_populated_database(old_database):
    ids = fill_previous_schema(old_database)
    assert migrate.apply(old_database, upto="0005.signal_identity") == ["0005.signal_identity"]
    conn = connect(old_database)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT id, name, correlation, payload, status, disposition, accepted_at, created_at, "
            "payload_version, idempotency_key FROM signals ORDER BY id"
        )
        signals = {row["id"]: row for row in cur.fetchall()}
        cur.execute("SELECT id, payload_version, activation_id, activation_sequence, name, correlation FROM waits")
        waits = {row["id"]: row for row in cur.fetchall()}
        cur.execute("SELECT wait_id, due_at, available_at FROM checkpoints WHERE kind = 'WAIT' ORDER BY wait_id")
        checkpoints = cur.fetchall()
        cur.execute("SELECT COUNT(*) AS n FROM signals WHERE correlation = %s", (b"order-1",))
        exact_matches = cur.fetchone()["n"]
    conn.close()

    long_pending = signals[ids["long_pending"]]
    # M2: a 764-byte legacy correlation survives byte for byte in VARBINARY(764).
    assert long_pending["correlation"] == LONG_KEY.encode("utf-8") and len(long_pending["correlation"]) == 764
    # M3: older PENDING signals are rejected as unverified, payload and times kept.
    assert (long_pending["status"], long_pending["disposition"]) == ("REJECTED", "LEGACY_UNVERIFIED")
    assert long_pending["payload"] == '{ "b": 1.10, "a": 2 }'
    assert long_pending["accepted_at"] == long_pending["created_at"] == T0
    assert long_pending["payload_version"] is None and long_pending["idempotency_key"] is None
    # Trailing spaces are bytes like any other: 'order-1 ' is not 'order-1'.
    space = signals[ids["space_pending"]]
    assert space["correlation"] == b"order-1 " and space["disposition"] == "LEGACY_UNVERIFIED"
    assert exact_matches == 1
    # Consumed history is not reinterpreted.
    consumed = signals[ids["consumed"]]
    assert (consumed["status"], consumed["disposition"], consumed["payload"]) == ("CONSUMED", None, '{"done":true}')

    # Older waits never become valid contracts: no payload version, whatever else they hold.
    assert all(w["payload_version"] is None for w in waits.values())
    assert waits[ids["null_meta_wait"]]["name"] is None and waits[ids["null_meta_wait"]]["correlation"] is None
    assert waits[ids["current_wait"]]["correlation"] == b"order-1"
    assert waits[ids["current_wait"]]["activation_sequence"] == 1
    assert waits[ids["old_wait"]]["activation_id"] is None  # its activation is an old generation
    # Current waits get a WAIT checkpoint at their original deadline; existing ones are kept, not doubled;
    # terminal instances and old activations get none.
    assert [(c["wait_id"], c["due_at"]) for c in checkpoints] == sorted(
        [
            (ids["current_wait"], T0 + timedelta(hours=1)),
            (ids["null_meta_wait"], T0 + timedelta(hours=1)),
            (ids["kept_wait"], T0),
        ]
    )


def test_m3_upgrade_steps_survive_a_crash_and_re_run(old_database):
    """A crash after some steps: yoyo re-runs them all; every step must tolerate that."""
    ids = fill_previous_schema(old_database)
    migrate.apply(old_database)
    conn = connect(old_database)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM _yoyo_migration WHERE migration_id = '0005.signal_identity'")
    conn.commit()
    conn.close()
    assert migrate.apply(old_database) == ["0005.signal_identity"]
    conn = connect(old_database)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) AS n FROM checkpoints WHERE kind = 'WAIT'")
        assert cur.fetchone()["n"] == 3
        cur.execute("SELECT status FROM signals WHERE id = %s", (ids["long_pending"],))
        assert cur.fetchone()["status"] == "REJECTED"
    conn.close()


# ---- 0007: the acceptance record of a signal is found by its signal_id (S1.12) ----------------------

BEFORE_SIGNAL_ID = "0006.workflow_listing"
SIGNAL_ID = "0007.audit_signal_id"


def fill_audit_records_before_signal_id(url) -> dict:
    """Audit records as Weave wrote them before 0007: the accepted signal's id only in `details`."""
    conn = connect(url)
    records = {}
    with conn.cursor() as cur:

        def record(instance_id, action, details, digest=None):
            cur.execute(
                "INSERT INTO audit_records (namespace_id, instance_id, actor, action, request_digest, at, details) "
                "VALUES (1, %s, 'payments-bot', %s, %s, %s, %s)",
                (instance_id, action, digest, T0, details),
            )
            return cur.lastrowid

        records["start"] = record(1, "workflow.start", '{"workflow_id":"w1","definition":"legacy","version":1}')
        for instance_id, signal_id in ((1, 11), (1, 12), (2, 111)):
            records[signal_id] = record(
                instance_id,
                "signal.send",
                f'{{"signal_id":"{signal_id}","name":"payment.settled","target_step_key":"payment",'
                f'"target_activation_sequence":1,"status":"PENDING","disposition":null,"actor":"payments-bot",'
                f'"idempotency_key":"k{signal_id}","accepted_at":"2026-01-05T10:00:00.123456Z"}}',
                f"{signal_id:064d}",
            )
        records["control"] = record(1, "workflow.pause", '{"reason":"ops freeze"}')
    conn.commit()
    conn.close()
    return records


def signal_ids_by_record(url) -> dict:
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT id, signal_id FROM audit_records")
        found = {row["id"]: row["signal_id"] for row in cur.fetchall()}
    conn.close()
    return found


def test_s1_12_acceptance_records_of_the_previous_schema_are_found_after_the_upgrade(scratch_database):
    url = scratch_database("audit_upgrade")
    migrate.ensure_database(url)
    migrate.apply(url, upto=BEFORE_SIGNAL_ID)
    records = fill_audit_records_before_signal_id(url)
    assert migrate.apply(url, upto=SIGNAL_ID) == [SIGNAL_ID]

    assert signal_ids_by_record(url) == {
        records["start"]: None,
        records[11]: 11,
        records[12]: 12,
        records[111]: 111,
        records["control"]: None,
    }
    database = Database(url)
    try:
        digest = database.run(
            lambda tx: {s: audit.acceptance_digest(tx, i, s) for i, s in ((1, 11), (1, 12), (2, 111))}
        )
        assert digest == {11: f"{11:064d}", 12: f"{12:064d}", 111: f"{111:064d}"}
        # Only the signal's own instance's acceptance counts; an unknown signal has none.
        assert database.run(lambda tx: (audit.acceptance_digest(tx, 2, 11), audit.acceptance_digest(tx, 1, 1))) == (
            None,
            None,
        )
    finally:
        database.close()


def test_s1_12_the_signal_id_migration_survives_a_crash_between_its_steps(scratch_database):
    """As if the process died after adding the column, before the fill and the index."""
    url = scratch_database("audit_crash")
    migrate.ensure_database(url)
    migrate.apply(url, upto=BEFORE_SIGNAL_ID)
    records = fill_audit_records_before_signal_id(url)
    migrate.apply(url, upto=SIGNAL_ID)
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("UPDATE audit_records SET signal_id = NULL WHERE id <> %s", (records[11],))
        cur.execute("ALTER TABLE audit_records DROP INDEX ix_audit_signal")
        cur.execute("DELETE FROM _yoyo_migration WHERE migration_id = '0007.audit_signal_id'")
    conn.commit()
    conn.close()
    assert migrate.apply(url, upto=SIGNAL_ID) == [SIGNAL_ID]
    assert migrate.apply(url, upto=SIGNAL_ID) == []
    found = signal_ids_by_record(url)
    assert [found[records[s]] for s in (11, 12, 111)] == [11, 12, 111]
    assert found[records["start"]] is None
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("SHOW INDEX FROM audit_records WHERE Key_name = 'ix_audit_signal'")
        assert [row["Column_name"] for row in cur.fetchall()] == ["signal_id", "instance_id"]
    conn.close()


def test_s1_12_a_signal_accepted_before_the_upgrade_is_consumed_after_it(scratch_database):
    """Through the API and the scanner: a signal accepted and left PENDING, then the audit column
    taken away (0007 rolled back: the previous schema, with what Weave wrote then) and the upgrade
    applied; the consumer finds the acceptance proof and the workflow goes on."""
    url = scratch_database("audit_flow")
    with migrated_flow(url) as flow:
        flow.start("order-1", input={"order_id": "o-1"})
        flow.scan()
        flow.finish_task()  # reserve: the payment step now waits
        sent = flow.send("order-1", "psp-1", payment())
        assert (sent.status_code, sent.json["status"]) == (201, "PENDING")

        roll_back(url, "0007.audit_signal_id")
        assert not flow.rows(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND table_name = 'audit_records' AND column_name = 'signal_id'"
        )
        assert migrate.apply(url, upto="0007.audit_signal_id") == ["0007.audit_signal_id"]

        flow.scan()
        workflow = flow.workflow("order-1")
        assert workflow["status"] == "RUNNING" and workflow["review_reason"] is None
        assert [s["status"] for s in workflow["steps"]] == ["SUCCEEDED", "SUCCEEDED", "ACTIVE"]
        assert flow.signal("order-1", sent.json["signal_id"]).json["status"] == "CONSUMED"


@contextmanager
def migrated_flow(url):
    """A Flow (the API in process and the scanner) on the database at `url`, migrated to the newest
    version, with a tenant and the signal flow's definition published."""
    migrate.ensure_database(url)
    migrate.apply(url)
    database = Database(url)
    try:
        tenant = make_tenant(database, "acme", {"inventory": 4, "carrier": 2})
        flow = Flow(falcon.testing.TestClient(create_app(Config(url.yoyo_url()), database)), tenant, database)
        flow.publish(signal_flow_definition())
        yield flow
    finally:
        database.close()


def forget_applied(url, migration_id: str) -> None:
    """yoyo forgets that `migration_id` was applied, its changes kept: a crash before it recorded it."""
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM _yoyo_migration WHERE migration_id = %s", (migration_id,))
    conn.commit()
    conn.close()


def fills_again(flow, url, migration_id: str, read: str, expected: list[dict]) -> None:
    """The migration just applied filled what `read` reads as `expected`; after a crash before yoyo
    recorded it, it runs again and the rows are the same."""
    assert flow.rows(read) == expected
    forget_applied(url, migration_id)
    assert migrate.apply(url) == [migration_id]
    assert flow.rows(read) == expected


def roll_back(url, migration_id: str) -> None:
    """Roll back one applied migration (the newest), as `yoyo rollback` would."""
    backend = get_backend(url.yoyo_url())
    try:
        with backend.lock():
            todo = backend.to_rollback(read_migrations(str(migrate.migrations_dir())))
            backend.rollback_migrations(todo.filter(lambda m: m.id == migration_id))
    finally:
        backend.connection.close()


def test_s1_6_the_signal_count_migration_counts_the_signals_stored_before_it(scratch_database):
    """0010: instances get `signals_stored`, filled from their rows; the fill can run again (a
    crash before yoyo records the migration) and gives the same counts; acceptance goes on from it."""
    url = scratch_database("signal_count")
    with migrated_flow(url) as flow:
        for workflow_id, sends in (("order-1", 3), ("order-2", 1), ("order-3", 0)):
            flow.start(workflow_id, input={"order_id": workflow_id})
            for i in range(sends):
                assert flow.send(workflow_id, f"k-{i}", payment()).status_code == 201

        roll_back(url, "0010.instance_signal_count")
        assert migrate.apply(url) == ["0010.instance_signal_count"]
        stored = "SELECT workflow_id, signals_stored FROM instances ORDER BY workflow_id"
        expected = [
            {"workflow_id": "order-1", "signals_stored": 3},
            {"workflow_id": "order-2", "signals_stored": 1},
            {"workflow_id": "order-3", "signals_stored": 0},
        ]
        assert flow.rows(stored) == expected
        forget_applied(url, "0010.instance_signal_count")  # as if the process died before yoyo recorded the migration
        assert migrate.apply(url) == ["0010.instance_signal_count"]
        assert flow.rows(stored) == expected
        assert flow.send("order-3", "k-0", payment()).status_code == 201
        assert flow.rows(stored)[2]["signals_stored"] == 1


def test_the_definition_queues_migration_fills_the_definitions_published_before_it(scratch_database):
    """0013 (issue 26, item 6): definitions get `queues`, filled from their documents (numbers left
    unread, however many digits); the fill can run again after a crash, and the list reads from it."""
    url = scratch_database("definition_queues")
    with migrated_flow(url) as flow:  # `flow` (1) runs on inventory and carrier
        flow.publish({"name": "only-signals", "steps": [signal_flow_definition()["steps"][1]]})
        roll_back(url, "0013.definition_queues")
        many_digits = '{"name":"big","steps":[{"key":"t","type":"TASK","queue":"inventory","timeout_seconds":1'
        many_digits += "0" * 4400 + "}]}"  # more digits than Python's int() reads
        flow.database.run(
            lambda tx: tx.execute(
                "INSERT INTO definitions (namespace_id, name, version, digest, document, created_at) "
                "SELECT id, 'big', 1, %s, %s, UTC_TIMESTAMP(6) FROM namespaces WHERE name = 'acme'",
                ("0" * 64, many_digits),
            )
        )
        assert migrate.apply(url) == ["0013.definition_queues"]
        stored = "SELECT name, queues FROM definitions ORDER BY name"
        expected = [
            {"name": "big", "queues": "inventory"},
            {"name": "flow", "queues": "carrier inventory"},
            {"name": "only-signals", "queues": ""},
        ]
        fills_again(flow, url, "0013.definition_queues", stored, expected)
        flow.start("order-1", input={"order_id": "o-1"})
        listed = flow.client.simulate_get(
            "/v1/namespaces/acme/workflows", headers=flow.tenant.headers("workflows:read", queues=("inventory",))
        )
        assert listed.json["workflows"] == []  # `flow` runs on carrier too
        listed = flow.client.simulate_get(
            "/v1/namespaces/acme/workflows",
            headers=flow.tenant.headers("workflows:read", queues=("inventory", "carrier")),
        )
        assert [item["workflow_id"] for item in listed.json["workflows"]] == ["order-1"]


def test_I6_the_deadline_checkpoint_migration_gives_every_live_instance_a_look_at_its_deadline(scratch_database):
    """0016 (issue 28, item 7): instances started before it get a ROOT checkpoint at their total
    deadline, those that have ended none; it can run again without a second one; a deadline
    already past closes the gate at the next scan."""
    url = scratch_database("deadline_checkpoints")
    with migrated_flow(url) as flow:
        for workflow_id in ("order-1", "order-2", "order-3"):
            flow.start(workflow_id, input={"order_id": workflow_id})
        flow.scan()  # each has started its first step
        control = flow.tenant.headers("workflows:control", queues=("inventory", "carrier"))
        for workflow_id, action in (("order-2", "pause"), ("order-3", "cancel")):
            answer = flow.client.simulate_post(
                f"{flow.ns}/workflows/{workflow_id}/{action}", json={"reason": "r"}, headers=control
            )
            assert answer.status_code == 200
        roll_back(url, "0016.deadline_checkpoints")
        flow.rows("DELETE FROM checkpoints WHERE kind = 'ROOT'")  # as before this version
        flow.rows(
            "UPDATE instances SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE workflow_id = 'order-1'"
        )
        looks = """
            SELECT i.workflow_id FROM checkpoints c JOIN instances i ON i.id = c.instance_id
            WHERE c.kind = 'ROOT' AND c.due_at = i.deadline_at AND c.available_at = i.deadline_at
            ORDER BY i.workflow_id
        """
        assert flow.rows(looks) == []
        assert migrate.apply(url) == ["0016.deadline_checkpoints"]
        expected = [{"workflow_id": "order-1"}, {"workflow_id": "order-2"}]  # not the cancelled one
        fills_again(flow, url, "0016.deadline_checkpoints", looks, expected)
        flow.scan()
        workflow = flow.workflow("order-1")
        assert (workflow["status"], workflow["gate"]) == ("RUNNING", "CLOSED")
        assert "DEADLINE_PASSED" in flow.events("order-1")
        assert flow.workflow("order-2")["status"] == "PAUSED"
