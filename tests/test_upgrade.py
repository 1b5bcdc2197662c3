"""M2, M3: the signal-identity migration upgrades a database filled at the previous schema version."""

from datetime import datetime, timedelta

import pytest

from weave import migrate
from weave.db import connect

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
