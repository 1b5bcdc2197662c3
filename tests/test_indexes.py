"""Every query of the request path uses an index: EXPLAIN names the key we built for it."""

from datetime import datetime

import pytest

from weave.sql import definitions, events, instances, sessions, tenancy

DOC = {"name": "order", "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}]}


@pytest.fixture
def populated(client, tenant, database):
    headers = tenant.headers("definitions:write", "workflows:start", queues=("inventory",))
    for timeout in range(1, 6):
        client.simulate_post(
            "/v1/namespaces/acme/definitions",
            headers=headers,
            json={**DOC, "steps": [{**DOC["steps"][0], "timeout_seconds": timeout}]},
        )
    for i in range(60):
        client.simulate_post(
            "/v1/namespaces/acme/workflows",
            headers=headers,
            json={
                "definition": "order",
                "version": 1 + i % 5,
                "input": {},
                "deadline_seconds": 60,
                "workflow_id": f"w{i}",
            },
        )
    for i in range(40):
        tenant.token("workflows:read")

    def activations(tx):
        for row in tx.all("SELECT id FROM instances"):
            for seq in (1, 2):
                tx.execute(
                    "INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence,"
                    " status, activated_at) VALUES (%s, 'reserve', 0, %s, 'ACTIVE', %s)",
                    (row["id"], seq, tx.now()),
                )
        for activation in tx.all("SELECT id, instance_id FROM step_activations"):
            tx.execute(
                "INSERT INTO tasks (namespace_id, queue_id, instance_id, activation_id, kind, status,"
                " max_attempts, available_at, deadline_at, created_at)"
                " VALUES (1, 1, %s, %s, 'TASK', 'QUEUED', 3, %s, %s, %s)",
                (activation["instance_id"], activation["id"], tx.now(), tx.now(), tx.now()),
            )
        tx.execute("ANALYZE TABLE instances, events, step_activations, credentials, definitions, tasks")

    database.run(activations)
    return database


def explain(database, sql, params):
    return database.run(lambda tx: tx.all("EXPLAIN " + sql, params))


def keys_used(plan):
    return {(row["table"], row["key"]) for row in plan}


def test_request_path_queries_use_their_indexes(populated):
    database = populated
    ids = database.run(lambda tx: tx.one("SELECT namespace_id, id FROM instances WHERE workflow_id = 'w7'"))
    ns, instance_id = ids["namespace_id"], ids["id"]

    token_sha256 = database.run(lambda tx: tx.one("SELECT token_sha256 FROM credentials LIMIT 1"))["token_sha256"]
    # A unique-key lookup is resolved while planning ("const"): EXPLAIN then names the key.
    plan = explain(database, tenancy.SELECT_CURRENT_CREDENTIAL, (token_sha256,))
    assert ("c", "uq_credentials_token") in keys_used(plan)
    credential_id = database.run(lambda tx: tx.one("SELECT id FROM credentials LIMIT 1"))["id"]
    assert ("c", "PRIMARY") in keys_used(explain(database, tenancy.SELECT_IDENTITY, (credential_id,)))
    assert ("i", "uq_instances_workflow") in keys_used(explain(database, instances.SELECT_INSTANCE, (ns, "w7")))
    # Every console page finds its session by the id's hash, then the credential as above.
    database.run(
        lambda tx: tx.execute(
            "INSERT INTO console_sessions (session_sha256, credential_id, created_at, expires_at) "
            "VALUES (%s, %s, %s, %s)",
            (b"s" * 32, credential_id, datetime(2026, 1, 1), datetime(2027, 1, 1)),
        )
    )
    session = explain(database, sessions.SELECT_SESSION_TOKEN, (b"s" * 32, datetime(2026, 6, 1)))
    assert ("s", "uq_console_sessions_session") in keys_used(session)
    assert ("definitions", "uq_definitions_name_version") in keys_used(
        explain(database, definitions.SELECT_LATEST, (ns, "order"))
    )
    assert ("definitions", "uq_definitions_name_version") in keys_used(
        explain(database, definitions.SELECT_VERSION, (ns, "order", 3))
    )
    assert ("events", "uq_events_instance_seq") in keys_used(
        explain(database, events.SELECT_EVENTS_PAGE, (instance_id, 0, 10))
    )
    assert ("i", "uq_instances_workflow") in keys_used(
        explain(database, instances.SELECT_ADDRESSED_INSTANCE, (ns, "w7"))
    )
    assert ("step_activations", "uq_activations_step_sequence") in keys_used(
        explain(database, instances.SELECT_LATEST_ACTIVATIONS, (instance_id,))
    )
    assert ("tasks", "ix_tasks_activation") in keys_used(
        explain(database, instances.SELECT_ACTIVATION_TASKS, ((1, 2, 3),))
    )


def test_signal_queries_use_their_indexes(populated, clock):
    from weave.sql import signals

    database = populated
    row = database.run(lambda tx: tx.one("SELECT id, namespace_id FROM instances WHERE workflow_id = 'w7'"))
    instance_id, namespace_id = row["id"], row["namespace_id"]

    def fill(tx):
        rows = tx.all("SELECT id FROM instances")
        for row in rows:
            for n in range(6):
                tx.execute(
                    "INSERT INTO signals (instance_id, name, payload_version, target_step_key,"
                    " target_activation_sequence, correlation, status, accepted_at, expires_at, available_at,"
                    " created_at, idempotency_key) VALUES (%s, 'n', 'v1', 'payment', 1, 'c', %s, %s, %s, %s, %s, %s)",
                    (row["id"], "PENDING" if n % 3 else "REJECTED", tx.now(), tx.now(), tx.now(), tx.now(), f"k{n}"),
                )
        tx.execute("ANALYZE TABLE signals")

    database.run(fill)
    wait_id = database.run(
        lambda tx: tx.insert(
            "INSERT INTO waits (instance_id, step_key, kind, activation_sequence, status, deadline_at, created_at)"
            " VALUES (%s, 'payment', 'SIGNAL', 1, 'WAITING', %s, %s)",
            (instance_id, clock.now(), clock.now()),
        )
    )
    matching = explain(database, signals.LOCK_PENDING_OF_WAIT, (wait_id,))
    # The wait by its key; any index led by instance_id narrows the signals to one instance's ≤1024
    # rows (which one is the planner's call); the acceptance record by the signal's key.
    assert ("w", "PRIMARY") in keys_used(matching)
    assert {key for key in keys_used(matching) if key[0] == "s"} <= {
        ("s", "ix_signals_generation"),
        ("s", "uq_signals_idempotency"),
    }
    assert ("ar", "ix_audit_signal") in keys_used(matching)
    for page in (
        explain(database, signals.SELECT_SIGNAL_PAGE, (instance_id, 0, 50)),
        explain(database, signals.SELECT_SIGNAL_PAGE_BY_STATUS, (instance_id, "PENDING", 0, 50)),
    ):
        assert keys_used(page) == {("s", "uq_signals_idempotency")}
    expiry = explain(database, signals.DUE_EXPIRIES, (clock.now(), clock.now(), 100))
    assert ("signals", "ix_signals_expiry") in keys_used(expiry)
    replay = explain(database, signals.SELECT_TARGET_INSTANCE_AND_KEY, ("k1", namespace_id, "w7"))
    assert ("s", "uq_signals_idempotency") in keys_used(replay)


def test_workflow_list_queries_use_their_indexes(populated, other_tenant):
    """Each page of GET {N}/workflows is one backward range of a migration 0006 index, without a sort."""
    from helpers import insert_instances

    database = populated
    publisher = other_tenant.principal("definitions:write")
    for name in ("invoice", "refund", "audit"):  # another tenant's definitions and instances, interleaved
        for timeout in range(1, 11):
            document = {**DOC, "name": name, "steps": [{**DOC["steps"][0], "timeout_seconds": timeout}]}
            definitions.publish_definition(database, publisher.namespace_id, document, publisher.credential_id, "t")
    statuses = ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "RUNNING", "FAILED", "NEEDS_REVIEW")
    for version in range(1, 6):
        rows = [(f"bulk-{version}-{i}", statuses[i % len(statuses)], None) for i in range(300)]
        insert_instances(database, "acme", "order", version, rows)
        insert_instances(database, "globex", "invoice", version, [(f"g-{wid}", *rest) for wid, *rest in rows])
    database.run(lambda tx: tx.execute("ANALYZE TABLE instances, definitions"))
    ns = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = 'acme'"))["id"]
    version = database.run(lambda tx: tx.one("SELECT id FROM definitions WHERE version = 3"))["id"]
    cursor = database.run(lambda tx: tx.one("SELECT id FROM instances WHERE workflow_id = 'bulk-3-150'"))["id"]

    for after in (instances.NO_CURSOR, cursor):
        plans = {
            "ix_instances_namespace_recent": explain(database, instances.SELECT_NEWEST, (ns, after, 101)),
            "ix_instances_namespace_status": explain(
                database, instances.SELECT_NEWEST_BY_STATUS, (ns, "NEEDS_REVIEW", after, 101)
            ),
            "ix_instances_definition_recent": explain(
                database, instances.SELECT_NEWEST_OF_VERSION, (version, after, 101)
            ),
            "ix_instances_definition_status": explain(
                database, instances.SELECT_NEWEST_OF_VERSION_BY_STATUS, (version, "NEEDS_REVIEW", after, 101)
            ),
        }
        for index, plan in plans.items():
            assert ("i", index) in keys_used(plan), (index, plan)
            assert ("d", "PRIMARY") in keys_used(plan), plan  # the definition's name and version, by key
            assert not any("filesort" in (row["Extra"] or "") for row in plan), plan


def test_the_acceptance_proof_is_found_by_the_signal_id_index(populated):
    """S1.12: the consumer finds a signal's acceptance record by key, not by searching details."""
    from weave.sql import audit

    database = populated

    def fill(tx):
        for row in tx.all("SELECT id, namespace_id FROM instances"):
            for n in range(8):
                signal_id = row["id"] * 100 + n
                details = f'{{"signal_id":"{signal_id}","name":"n"}}'
                tx.execute(
                    "INSERT INTO audit_records (namespace_id, instance_id, signal_id, actor, action, request_digest,"
                    " at, details) VALUES (%s, %s, %s, 'bot', 'signal.send', REPEAT('0', 64), %s, %s)",
                    (row["namespace_id"], row["id"], signal_id, tx.now(), details),
                )
        tx.execute("ANALYZE TABLE audit_records")

    database.run(fill)
    instance_id = database.run(lambda tx: tx.one("SELECT id FROM instances WHERE workflow_id = 'w7'"))["id"]
    plan = explain(database, audit.SELECT_ACCEPTANCE_DIGEST, (instance_id * 100 + 3, instance_id))
    assert keys_used(plan) == {("audit_records", "ix_audit_signal")}
    assert not any("filesort" in (row["Extra"] or "") for row in plan), plan
    found = database.run(lambda tx: audit.acceptance_digest(tx, instance_id, instance_id * 100 + 3))
    assert found == "0" * 64
    assert database.run(lambda tx: audit.acceptance_digest(tx, instance_id + 1, instance_id * 100 + 3)) is None
