"""Every query of the request path uses an index: EXPLAIN names the key we built for it."""

import hashlib
import os
from datetime import datetime, timedelta

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
    # The wait by its key, the generation's signals through their own index (not the instance's
    # ≤1024), the acceptance record by the signal's key.
    assert ("w", "PRIMARY") in keys_used(matching)
    assert {key for key in keys_used(matching) if key[0] == "s"} == {("s", "ix_signals_generation")}
    some = database.run(lambda tx: tx.one("SELECT id FROM signals WHERE instance_id = %s LIMIT 1", (instance_id,)))
    candidate = explain(database, signals.SELECT_CANDIDATE, (some["id"],))
    assert ("s", "PRIMARY") in keys_used(candidate)
    assert ("audit_records", "ix_audit_signal") in keys_used(candidate)
    for page in (
        explain(database, signals.SELECT_SIGNAL_PAGE, (instance_id, 0, 50)),
        explain(database, signals.SELECT_SIGNAL_PAGE_BY_STATUS, (instance_id, "PENDING", 0, 50)),
    ):
        assert keys_used(page) == {("s", "uq_signals_idempotency")}
    expiry = explain(database, signals.DUE_EXPIRIES, (clock.now(), 100))
    assert ("signals", "ix_signals_next_look") in keys_used(expiry)
    replay = explain(database, signals.SELECT_TARGET_INSTANCE_AND_KEY, ("k1", namespace_id, "w7"))
    assert ("s", "uq_signals_idempotency") in keys_used(replay)


def test_workflow_list_queries_use_their_indexes(populated, other_tenant):
    """Each page of GET {N}/workflows is one backward range of a migration 0006 index, without a
    sort; read from some versions, one such range per version in one statement, whose merge sorts
    at most a page per version (issue 26, item 6), never the namespace."""
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
    versions = [
        row["id"]
        for row in database.run(
            lambda tx: tx.all("SELECT id FROM definitions WHERE namespace_id = %s AND version <= 3", (ns,))
        )
    ]
    cursor = database.run(lambda tx: tx.one("SELECT id FROM instances WHERE workflow_id = 'bulk-3-150'"))["id"]

    for after in (instances.NO_CURSOR, cursor):
        plans = {
            "ix_instances_namespace_recent": explain(database, instances.SELECT_NEWEST, (ns, after, 101)),
            "ix_instances_namespace_status": explain(
                database, instances.SELECT_NEWEST_BY_STATUS, (ns, "NEEDS_REVIEW", after, 101)
            ),
        }
        for index, plan in plans.items():
            assert ("i", index) in keys_used(plan), (index, plan)
            assert ("d", "PRIMARY") in keys_used(plan), plan  # the definition's name and version, by key
            assert not any("filesort" in (row["Extra"] or "") for row in plan), plan
        for index, status in (("ix_instances_definition_recent", None), ("ix_instances_definition_status", "FAILED")):
            plan = explain(database, *instances.newest_of_versions(versions, status, after, 101))
            ranges = [row for row in plan if row["table"] == "instances"]
            assert len(ranges) == len(versions), plan  # one range per version, from its index alone
            assert all((r["key"], r["type"]) == (index, "range") and "Using index" in r["Extra"] for r in ranges), plan
            assert {(r["table"], r["key"], r["type"]) for r in plan if r["table"] in ("i", "d")} == {
                ("i", "PRIMARY", "eq_ref"),  # then the page's rows by key
                ("d", "PRIMARY", "eq_ref"),
            }, plan
            sorted_ = [row for row in plan if "filesort" in (row["Extra"] or "")]
            assert sorted_ and all(row["table"].startswith("<derived") for row in sorted_), plan  # the merge
            assert full_scans(plan) == [], plan


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


# ---- every statement on a hot path (issue 17, target 4) -------------------------------------------------
#
# Acceptance, authentication, the scanner's candidate queries and the units it runs, task claim and
# complete, events and audit: each statement is EXPLAINed on tables crowded enough that the
# optimizer prefers an index to a scan, and must read through an index (no plan row of type ALL or
# `index`, i.e. no full scan of a table or of an index). `test_every_statement_of_sql_is_classified`
# keeps the list complete: a statement added to sql/ is either EXPLAINed here or listed as cold.

INSTANCES = 1000  # each with two activations, a wait, a task, its inbox event, two checkpoints and:
SIGNALS_PER_INSTANCE = 10  # signals, as many events and audit records


@pytest.fixture
def crowded(tenant, database):
    """Every table of the hot paths with thousands of rows, statuses mixed as in a live system
    (most rows settled, one in ten still open), statistics fresh. Returns ids of one row of each."""
    from helpers import insert_instances

    doc = {
        "name": "pay",
        "steps": [
            DOC["steps"][0],
            {
                "key": "payment",
                "type": "SIGNAL",
                "timeout_seconds": 60,
                "correlation": "/input/id",
                "signal": {"name": "paid", "payload_version": "v1", "payload_schema": {}},
            },
        ],
    }
    namespace_id = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = 'acme'"))["id"]
    definitions.publish_definition(database, namespace_id, doc, None, "t")
    insert_instances(
        database,
        "acme",
        "pay",
        1,
        [(f"w{i}", "RUNNING" if i % 10 == 0 else "SUCCEEDED", None) for i in range(INSTANCES)],
    )
    for i in range(20):
        tenant.token("workflows:signal", queues=("inventory",), actor=f"a{i}")

    def fill(tx):
        now = tx.now()
        instances_ = [row["id"] for row in tx.all("SELECT id FROM instances ORDER BY id")]
        queue_id = tx.one("SELECT id FROM queues WHERE name = 'inventory'")["id"]
        open_ = {instance_id for n, instance_id in enumerate(instances_) if n % 10 == 0}
        tx.executemany(
            "INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status,"
            " activated_at, deadline_at) VALUES (%s, %s, %s, 1, %s, %s, %s)",
            [(i, "reserve", 0, "SUCCEEDED", now, now) for i in instances_]
            + [(i, "payment", 1, "ACTIVE" if i in open_ else "SUCCEEDED", now, now) for i in instances_],
        )
        activation = {
            (row["instance_id"], row["step_key"]): row["id"]
            for row in tx.all("SELECT id, instance_id, step_key FROM step_activations")
        }
        tx.executemany(
            "INSERT INTO waits (instance_id, step_key, kind, name, payload_version, correlation, activation_id,"
            " activation_sequence, status, deadline_at, created_at, route_hash) VALUES (%s, 'payment', 'SIGNAL',"
            " 'paid', 'v1', 'c', %s, 1, %s, %s, %s, %s)",
            [
                (i, activation[i, "payment"], "WAITING" if i in open_ else "SATISFIED", now, now, i % 97)
                for i in instances_
            ],
        )
        statuses = ("SUCCEEDED",) * 8 + ("QUEUED", "RUNNING")
        tx.executemany(
            "INSERT INTO tasks (namespace_id, queue_id, instance_id, activation_id, kind, status, attempt,"
            " max_attempts, available_at, lease_expires_at, deadline_at, created_at)"
            " VALUES (%s, %s, %s, %s, 'TASK', %s, 1, 3, %s, %s, %s, %s)",
            [
                (namespace_id, queue_id, i, activation[i, "reserve"], statuses[n % 10], now, now, now, now)
                for n, i in enumerate(instances_)
            ],
        )
        tx.executemany(
            "INSERT INTO inbox_events (task_id, instance_id, outcome, completed_at, status, available_at)"
            " SELECT id, instance_id, 'SUCCEEDED', %s, %s, %s FROM tasks WHERE instance_id = %s",
            [(now, "PENDING" if i in open_ else "CONSUMED", now, i) for i in instances_],
        )
        tx.executemany(
            "INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, created_at)"
            " VALUES (%s, %s, NULL, %s, %s, %s)",
            [
                (i, kind, now, now + timedelta(minutes=n), now)
                for n, i in enumerate(instances_)
                for kind in ("ROOT", "WAIT")
            ],
        )
        tx.executemany(
            "INSERT INTO signals (instance_id, name, payload_version, target_step_key, target_activation_sequence,"
            " correlation, status, accepted_at, expires_at, available_at, created_at, idempotency_key)"
            " VALUES (%s, 'paid', 'v1', 'payment', 1, 'c', %s, %s, %s, %s, %s, %s)",
            [
                (i, "PENDING" if i in open_ else "REJECTED", now, now + timedelta(days=1), now, now, f"k{n}")
                for i in instances_
                for n in range(SIGNALS_PER_INSTANCE)
            ],
        )
        # facts sent by their business key (SPEC §14): parked ones of the namespace, one per key
        tx.executemany(
            "INSERT INTO signals (instance_id, namespace_id, route_key, route_hash, park_seconds, name,"
            " payload_version, correlation, status, accepted_at, expires_at, available_at, created_at)"
            " VALUES (NULL, %s, %s, %s, 60, 'paid', 'v1', 'c', %s, %s, %s, %s, %s)",
            [
                (namespace_id, f"r{n}", n, "PARKED" if n % 10 == 0 else "EXPIRED", now, now, now, now)
                for n in range(INSTANCES * 2)
            ],
        )
        tx.execute(
            "INSERT INTO events (instance_id, seq, type, at, data)"
            " SELECT instance_id, id, 'SIGNAL_ACCEPTED', accepted_at, '{}' FROM signals WHERE instance_id IS NOT NULL"
        )
        tx.execute(
            "INSERT INTO audit_records (namespace_id, instance_id, signal_id, actor, action, request_digest, at,"
            " details) SELECT %s, instance_id, id, 'bot', IF(instance_id IS NULL, 'signal.park', 'signal.send'),"
            " REPEAT('0', 64), accepted_at, '{}' FROM signals",
            (namespace_id,),
        )
        tx.executemany(
            "INSERT INTO signal_quota_windows (application_id, window_start, used) VALUES (%s, %s, 1)",
            [
                (application, now.replace(microsecond=0) - timedelta(minutes=m))
                for application in range(1, 26)
                for m in range(20)
            ],
        )
        tx.executemany(
            "INSERT INTO console_sessions (session_sha256, credential_id, created_at, expires_at) VALUES (%s, %s, %s, %s)",
            [(n.to_bytes(32, "big"), 1, now, now + timedelta(minutes=n)) for n in range(200)],
        )
        # the outbox (migration 0021): a delivered notification of every instance, with one attempt
        tx.execute(
            "INSERT INTO notifications (subscription_id, namespace_id, instance_id, event_type, webhook_id,"
            " occurred_at, body, status, attempts) SELECT 1, namespace_id, id, 'workflow.succeeded',"
            " CONCAT('msg_', id), %s, '{}', 'DELIVERED', 1 FROM instances",
            (now,),
        )
        tx.execute(
            "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, duration_ms)"
            " SELECT id, occurred_at, 200, 3 FROM notifications"
        )
        tx.execute(
            "ANALYZE TABLE notifications, notification_attempts, console_sessions, instances, step_activations, waits, tasks, inbox_events, checkpoints, signals, events,"
            " audit_records, signal_quota_windows, credentials, queues, definitions"
        )
        instance_id = instances_[500]  # a running one
        return {
            "namespace": namespace_id,
            "queue": queue_id,
            "instance": instance_id,
            "workflow": tx.one("SELECT workflow_id FROM instances WHERE id = %s", (instance_id,))["workflow_id"],
            "activation": activation[instance_id, "payment"],
            "wait": tx.one("SELECT id FROM waits WHERE instance_id = %s", (instance_id,))["id"],
            "task": tx.one("SELECT id FROM tasks WHERE instance_id = %s", (instance_id,))["id"],
            "inbox": tx.one("SELECT id FROM inbox_events WHERE instance_id = %s", (instance_id,))["id"],
            "checkpoint": tx.one("SELECT id FROM checkpoints WHERE instance_id = %s LIMIT 1", (instance_id,))["id"],
            "signal": tx.one("SELECT id FROM signals WHERE instance_id = %s LIMIT 1", (instance_id,))["id"],
            "token": tx.one("SELECT token_sha256 FROM credentials LIMIT 1")["token_sha256"],
            "credential": tx.one("SELECT id FROM credentials LIMIT 1")["id"],
            "application": tx.one("SELECT id FROM applications LIMIT 1")["id"],
            "now": now,
        }

    return database.run(fill)


def hot_statements(ids: dict) -> dict[str, tuple[str, object]]:
    """`module.NAME` -> (statement, parameters) of every statement on a hot path, with the ids of
    `crowded` rows (any ids will do to list the names)."""
    from weave.sql import (
        activations,
        audit,
        checkpoints,
        export,
        inbox,
        routing,
        scanners,
        signals,
        tasks,
        timeline,
        waits,
    )

    now, instance, activation = ids["now"], ids["instance"], ids["activation"]
    task, signal, wait = ids["task"], ids["signal"], ids["wait"]
    facts = {"instance": instance, "key": "k1", "step": "payment"}
    fact_page = {"namespace": ids["namespace"], "after": 2**63 - 1, "name": None, "key": None, "limit": 101}
    statements = {
        # authentication, every request
        "tenancy.SELECT_CURRENT_CREDENTIAL": (tenancy.SELECT_CURRENT_CREDENTIAL, (ids["token"],)),
        "tenancy.SELECT_IDENTITY": (tenancy.SELECT_IDENTITY, (ids["credential"],)),
        # signal acceptance: quota, then send_signal
        "signals.USED_IN_WINDOW": (signals.USED_IN_WINDOW, (ids["application"], now.replace(microsecond=0))),
        "signals.FORGET_OLD_WINDOWS": (signals.FORGET_OLD_WINDOWS, (ids["application"], now.replace(microsecond=0))),
        "signals.SELECT_TARGET_INSTANCE_AND_KEY": (
            signals.SELECT_TARGET_INSTANCE_AND_KEY,
            ("k1", ids["namespace"], ids["workflow"]),
        ),
        "signals.SELECT_TARGET_OF_TOKEN": (signals.SELECT_TARGET_OF_TOKEN, ("k1", ids["token"], ids["workflow"])),
        "definitions.SELECT_DOCUMENT": (definitions.SELECT_DOCUMENT, (1,)),
        # the definitions list (D5; its reads: test_D5_the_definitions_list_reads_the_index_of_the_pages_names_only)
        "definitions.SELECT_NEWEST_VERSIONS": (
            definitions.SELECT_NEWEST_VERSIONS,
            (ids["namespace"], "", 101, ids["namespace"]),
        ),
        "definitions.SELECT_NEWEST_VERSION_OF_NAME": (
            definitions.SELECT_NEWEST_VERSION_OF_NAME,
            (ids["namespace"], "flow", ""),
        ),
        "signals.SELECT_BY_IDEMPOTENCY_KEY": (signals.SELECT_BY_IDEMPOTENCY_KEY, (instance, "k1")),
        "signals.LOCK_QUEUES_SHARED": (signals.LOCK_QUEUES_SHARED, (ids["namespace"], ("inventory",))),
        "instances.MARK_DECIDING": (instances.MARK_DECIDING, (instance,)),
        "instances.COUNT_STORED_SIGNAL": (instances.COUNT_STORED_SIGNAL, (instance,)),
        "signals.FACTS_UNDER_LOCK": (signals.FACTS_UNDER_LOCK, facts),
        "events.APPEND_EVENT": (events.APPEND_EVENT, (instance, "X", now, "{}", instance)),
        # the scanner: candidates of each source, and the lag and counts its metrics read
        "checkpoints.DUE_CHECKPOINTS": (checkpoints.DUE_CHECKPOINTS, (now, 100)),
        "checkpoints.COUNT_DUE": (checkpoints.COUNT_DUE, (now,)),
        "inbox.DUE_INBOX_EVENTS": (inbox.DUE_INBOX_EVENTS, (now, 100)),
        "inbox.COUNT_DUE": (inbox.COUNT_DUE, (now,)),
        "signals.DUE_EXPIRIES": (signals.DUE_EXPIRIES, (now, 100)),
        "signals.COUNT_DUE_EXPIRIES": (signals.COUNT_DUE_EXPIRIES, (now,)),
        "routing.DUE_PARKED": (routing.DUE_PARKED, (now, 100)),
        "routing.COUNT_DUE_PARKED": (routing.COUNT_DUE_PARKED, (now,)),
        "tasks.SELECT_EXPIRED_LEASES": (tasks.SELECT_EXPIRED_LEASES, (now, 100)),
        "instances.NEEDS_REVIEW_BY_NAMESPACE": (instances.NEEDS_REVIEW_BY_NAMESPACE, ()),
        # process_checkpoint, and what advancing an instance reads and writes
        "checkpoints.CLAIM_CHECKPOINT": (checkpoints.CLAIM_CHECKPOINT, (ids["checkpoint"],)),
        "checkpoints.DELETE_CHECKPOINT": (checkpoints.DELETE_CHECKPOINT, (ids["checkpoint"],)),
        "instances.LOCK_INSTANCE": (instances.LOCK_INSTANCE, (instance,)),
        "instances.UPDATE_INSTANCE_STATE": (
            instances.UPDATE_INSTANCE_STATE,
            ("RUNNING", "OPEN", None, now, instance, "RUNNING", "OPEN"),
        ),
        # extend_deadline (R4)
        "instances.UPDATE_DEADLINE": (instances.UPDATE_DEADLINE, (now, now, instance, now)),
        "activations.SELECT_ACTIVATIONS": (activations.SELECT_ACTIVATIONS, (instance,)),
        "activations.LOCK_ACTIVATION": (activations.LOCK_ACTIVATION, (activation,)),
        "activations.SELECT_UNENDED_IDS": (activations.SELECT_UNENDED_IDS, (instance,)),
        "activations.SETTLE_ACTIVATION": (
            activations.SETTLE_ACTIVATION,
            ("SUCCEEDED", "{}", None, now, activation, "ACTIVE"),
        ),
        "instances.SELECT_STEP_RESULTS": (instances.SELECT_STEP_RESULTS, (instance,)),
        "tasks.SELECT_QUEUE_ID": (tasks.SELECT_QUEUE_ID, (ids["namespace"], "inventory")),
        # consume_wait: the wait, its generation's signals, the winner's proof
        "activations.LOCK_ACTIVATION_OF_WAIT": (activations.LOCK_ACTIVATION_OF_WAIT, (wait,)),
        "waits.LOCK_WAIT": (waits.LOCK_WAIT, (wait,)),
        "waits.LOCK_WAIT_OF_ACTIVATION": (waits.LOCK_WAIT_OF_ACTIVATION, (activation,)),
        "waits.SATISFY_WAIT": (waits.SATISFY_WAIT, (signal, now, wait)),
        "waits.SETTLE_WAIT": (waits.SETTLE_WAIT, ("EXPIRED", now, wait)),
        "waits.SUPERSEDE_WAIT": (waits.SUPERSEDE_WAIT, (now, wait)),
        "waits.SELECT_OPEN_FOR_GENERATION": (waits.SELECT_OPEN_FOR_GENERATION, (instance, "payment", 1)),
        "waits.LOCK_WAITING_OF_INSTANCE": (waits.LOCK_WAITING_OF_INSTANCE, (instance,)),
        "signals.LOCK_PENDING_OF_WAIT": (signals.LOCK_PENDING_OF_WAIT, (wait,)),
        "signals.REJECT_SIGNAL": (signals.REJECT_SIGNAL, ("WAIT_SETTLED", now, signal)),
        "signals.CONSUME_SIGNAL": (signals.CONSUME_SIGNAL, (wait, now, now, signal)),
        "signals.REJECT_PENDING_OF_GENERATION": (
            signals.REJECT_PENDING_OF_GENERATION,
            ("STEP_SETTLED", now, instance, "payment", 1),
        ),
        "signals.REJECT_PENDING_OF_INSTANCE": (signals.REJECT_PENDING_OF_INSTANCE, ("INSTANCE_SETTLED", now, instance)),
        "signals.SELECT_PAYLOAD": (signals.SELECT_PAYLOAD, (signal,)),
        "signals.SELECT_CANDIDATE": (signals.SELECT_CANDIDATE, (signal,)),
        "signals.LOCK_PENDING_OF_GENERATION": (signals.LOCK_PENDING_OF_GENERATION, (instance, "payment", 1)),
        # N2: what a bulk rejection settles, read only when the namespace subscribes; their views
        "signals.SELECT_PENDING_OF_GENERATION": (signals.SELECT_PENDING_OF_GENERATION, (instance, "payment", 1)),
        "signals.SELECT_PENDING_OF_INSTANCE": (signals.SELECT_PENDING_OF_INSTANCE, (instance,)),
        "signals.SELECT_SETTLED": (signals.SELECT_SETTLED, ((signal,),)),
        "waits.SELECT_WAIT": (waits.SELECT_WAIT, (wait,)),  # a NEAR checkpoint's look (N1)
        "inbox.SELECT_HELD_OF_TASK": (inbox.SELECT_HELD_OF_TASK, (task,)),
        "audit.SELECT_ACCEPTANCE_DIGEST": (audit.SELECT_ACCEPTANCE_DIGEST, (signal, instance)),
        # expiry of unmatched signals
        "signals.SELECT_SIGNAL_INSTANCE": (signals.SELECT_SIGNAL_INSTANCE, (signal,)),
        "signals.LOCK_PENDING_SIGNAL": (signals.LOCK_PENDING_SIGNAL, (signal,)),
        "signals.EXPIRE_SIGNAL": (signals.EXPIRE_SIGNAL, (now, signal)),
        "signals.LOOK_AGAIN_AT": (signals.LOOK_AGAIN_AT, (now, signal)),
        # the expiry of an unrouted fact (B5)
        "routing.LOCK_PARKED_FACT": (routing.LOCK_PARKED_FACT, (signal,)),
        "routing.EXPIRE_PARKED": (routing.EXPIRE_PARKED, (now, signal)),
        # inbox events
        "inbox.CLAIM_INBOX_EVENT": (inbox.CLAIM_INBOX_EVENT, (ids["inbox"],)),
        "inbox.MARK_CONSUMED": (inbox.MARK_CONSUMED, (now, ids["inbox"])),
        "inbox.CLAIM_OF_TASK": (inbox.CLAIM_OF_TASK, (task,)),
        # tasks: claim, heartbeat, complete, lease expiry, POLL rounds
        "tasks.LOCK_QUEUE_BY_NAME": (tasks.LOCK_QUEUE_BY_NAME, (ids["namespace"], "inventory")),
        "tasks.CLAIM_NEXT_TASK": (tasks.CLAIM_NEXT_TASK, (ids["queue"], now)),
        "tasks.START_TASK": (tasks.START_TASK, ("t" * 32, now, "w", task)),
        "tasks.TAKE_PERMIT": (tasks.TAKE_PERMIT, (ids["queue"],)),
        "tasks.SELECT_STARTED_WITH_TOKEN": (tasks.SELECT_STARTED_WITH_TOKEN, (ids["queue"], "t" * 32)),
        "tasks.SELECT_TASK_CONTEXT": (tasks.SELECT_TASK_CONTEXT, (activation,)),
        "tasks.SELECT_TASK_QUEUE": (tasks.SELECT_TASK_QUEUE, (task, ids["namespace"])),
        "tasks.LOCK_QUEUE": (tasks.LOCK_QUEUE, (ids["queue"],)),
        "tasks.LOCK_TASK": (tasks.LOCK_TASK, (task,)),
        "tasks.LOCK_TASK_SKIP_LOCKED": (tasks.LOCK_TASK_SKIP_LOCKED, (task,)),
        "tasks.EXTEND_LEASE": (tasks.EXTEND_LEASE, (now, task, "t" * 32)),
        "tasks.SELECT_REPORT": (tasks.SELECT_REPORT, (task,)),
        "tasks.SETTLE_TASK": (tasks.SETTLE_TASK, ("SUCCEEDED", "{}", None, now, task)),
        "tasks.REQUEUE_TASK": (tasks.REQUEUE_TASK, (now, None, task)),
        "tasks.RELEASE_PERMIT": (tasks.RELEASE_PERMIT, (ids["queue"],)),
        "tasks.REQUEST_CANCEL": (tasks.REQUEST_CANCEL, (now, task)),
        "tasks.LOCK_OPEN_TASKS_OF_ACTIVATION": (tasks.LOCK_OPEN_TASKS_OF_ACTIVATION, (activation,)),
        "tasks.LOCK_NEWEST_TASK": (tasks.LOCK_NEWEST_TASK, (activation,)),
        "tasks.SELECT_TASK": (tasks.SELECT_TASK, (task,)),
        "tasks.LOCK_CURRENT_ROUND": (tasks.LOCK_CURRENT_ROUND, (activation,)),
        # workflow start and read (read_facts)
        "instances.SELECT_INSTANCE": (instances.SELECT_INSTANCE, (ids["namespace"], ids["workflow"])),
        "instances.SELECT_ADDRESSED_INSTANCE": (
            instances.SELECT_ADDRESSED_INSTANCE,
            (ids["namespace"], ids["workflow"]),
        ),
        "instances.SELECT_LATEST_ACTIVATIONS": (instances.SELECT_LATEST_ACTIVATIONS, (instance,)),
        "instances.SELECT_ACTIVATION_TASKS": (instances.SELECT_ACTIVATION_TASKS, ((activation, activation + 1),)),
        "instances.SELECT_ACTIVATION_WAITS": (instances.SELECT_ACTIVATION_WAITS, ((activation, activation + 1),)),
        # the workflow search (issue 34, item 2): ids from an index alone, then a page of them by key
        "instances.IDS_BY_KEY": (
            instances.IDS_BY_KEY,
            (b"c", ids["namespace"], b"c", ids["namespace"], instances.SEARCH_MATCHES + 1),
        ),
        "instances.IDS_BY_PREFIX": (instances.IDS_BY_PREFIX, (ids["namespace"], "w1%", instances.SEARCH_MATCHES + 1)),
        "instances.SELECT_SEARCH_PAGE": (
            instances.SELECT_SEARCH_PAGE,
            ((instance, instance + 1), instances.NO_CURSOR, None, None, None, None, 26),
        ),
        # a control or review re-run after a lost COMMIT: its own audit record (issue 25, A)
        "instances.SELECT_RECORD_OF_CALL": (instances.SELECT_RECORD_OF_CALL, (instance, "workflow.cancel", "c" * 32)),
        "definitions.SELECT_VERSION": (definitions.SELECT_VERSION, (ids["namespace"], "pay", 1)),
        "definitions.SELECT_LATEST": (definitions.SELECT_LATEST, (ids["namespace"], "pay")),
        # reads of one workflow, its signals and history (API and console)
        "signals.SELECT_SIGNAL": (signals.SELECT_SIGNAL, (instance, signal)),
        "signals.SELECT_SIGNAL_PAGE": (signals.SELECT_SIGNAL_PAGE, (instance, 0, 100)),
        "signals.SELECT_SIGNAL_PAGE_BY_STATUS": (signals.SELECT_SIGNAL_PAGE_BY_STATUS, (instance, "PENDING", 0, 100)),
        "events.SELECT_EVENTS_PAGE": (events.SELECT_EVENTS_PAGE, (instance, 0, 100)),
        # the console's workflow page: one page of each list, values by their heads (issue 26, item 1)
        "timeline.SELECT_INSTANCE": (timeline.SELECT_INSTANCE, (4096, ids["namespace"], ids["workflow"])),
        "timeline.SELECT_ACTIVATIONS": (timeline.SELECT_ACTIVATIONS, (4096, instance)),
        "timeline.SELECT_WAITS": (timeline.SELECT_WAITS, (instance,)),
        "timeline.SELECT_NEWEST_TASKS": (timeline.SELECT_NEWEST_TASKS, ((activation, activation + 1),)),
        "timeline.SIGNAL_IDS_AFTER": (timeline.SIGNAL_IDS_AFTER, (instance, 0, 26)),
        "timeline.SIGNAL_IDS_BEFORE": (timeline.SIGNAL_IDS_BEFORE, (instance, signal + 5, 26)),
        "timeline.SELECT_SIGNALS": (timeline.SELECT_SIGNALS, (4096, (signal, signal + 1))),
        "timeline.SELECT_INBOUND_SOURCES": (timeline.SELECT_INBOUND_SOURCES, ((signal, signal + 1),)),
        "timeline.SELECT_NOTIFICATIONS": (timeline.SELECT_NOTIFICATIONS, (instance, timeline.NOTIFICATIONS_SHOWN)),
        "timeline.ROUND_IDS_AFTER": (timeline.ROUND_IDS_AFTER, ((activation, activation + 1), 0, 26)),
        "timeline.ROUND_IDS_BEFORE": (timeline.ROUND_IDS_BEFORE, ((activation, activation + 1), task + 5, 26)),
        "timeline.SELECT_ROUNDS": (timeline.SELECT_ROUNDS, (4096, 4096, (task, task + 1))),
        "timeline.COUNT_ROUNDS_BEFORE": (timeline.COUNT_ROUNDS_BEFORE, ((activation, activation + 1), task + 5)),
        "timeline.EVENTS_AFTER": (timeline.EVENTS_AFTER, (512, instance, 0, 51)),
        "timeline.EVENTS_BEFORE": (timeline.EVENTS_BEFORE, (512, instance, 5, 51)),
        # the export of one instance (L2): every row of each table, by the instance's index
        "export.SELECT_INSTANCE": (export.SELECT_INSTANCE, (ids["namespace"], ids["workflow"])),
        **{f"export.{name}": (getattr(export, name), (instance,)) for name in EXPORT_OF_INSTANCE},
        "export.SELECT_TASKS_OF_ACTIVATION": (export.SELECT_TASKS_OF_ACTIVATION, (activation,)),
        "export.SELECT_NOTIFICATION": (export.SELECT_NOTIFICATION, (1,)),
        # the workflow list's grants check (its pages: test_workflow_list_queries_use_their_indexes)
        "definitions.SELECT_QUEUE_NAMES": (definitions.SELECT_QUEUE_NAMES, (ids["namespace"],)),
        "definitions.SELECT_VERSIONS_OF_NAME": (definitions.SELECT_VERSIONS_OF_NAME, (ids["namespace"], "pay")),
        "definitions.SELECT_EVERY_VERSION": (definitions.SELECT_EVERY_VERSION, (ids["namespace"],)),
        # console sessions, every console page
        "sessions.SELECT_SESSION_TOKEN": (sessions.SELECT_SESSION_TOKEN, ((5).to_bytes(32, "big"), now)),
        "sessions.LOCK_SESSION": (sessions.LOCK_SESSION, ((5).to_bytes(32, "big"),)),
        "sessions.DELETE_SESSION": (sessions.DELETE_SESSION, (1,)),
        "sessions.DELETE_EXPIRED": (sessions.DELETE_EXPIRED, (now, 100)),
        # console sign-in: a credential's sessions beyond its cap, a refused token's credential
        "sessions.SELECT_BEYOND_CAP": (sessions.SELECT_BEYOND_CAP, (1, 5, 100)),
        "sessions.DELETE_SESSIONS": (sessions.DELETE_SESSIONS, ((1, 2),)),
        "tenancy.SELECT_CREDENTIAL_OF_TOKEN": (tenancy.SELECT_CREDENTIAL_OF_TOKEN, (ids["token"],)),
        # routing a fact by its business key (B1-B4): the route's reads, the take at a wait's opening
        "routing.SELECT_BY_ROUTE_KEY": (routing.SELECT_BY_ROUTE_KEY, (ids["namespace"], "r10")),
        "routing.SELECT_CANDIDATE_WAITS": (routing.SELECT_CANDIDATE_WAITS, (10, "paid", "v1", b"c", ids["namespace"])),
        "routing.LOCK_PARKED": (routing.LOCK_PARKED, (ids["namespace"], 10, "paid", "v1", b"c")),
        "routing.SELECT_STORED": (routing.SELECT_STORED, (instance,)),
        "routing.TAKE_PARKED": (routing.TAKE_PARKED, (instance, "payment", 1, signal)),
        "routing.REFUSE_PARKED": (routing.REFUSE_PARKED, ("SIGNAL_LIMIT_REACHED", now, signal)),
        # B6: one fact by its id; the namespace's facts of no instance, one status or all three
        "signals.SELECT_FACT": (signals.SELECT_FACT, (signal, ids["namespace"])),
        "signals.SELECT_FACT_PAGE": (signals.SELECT_FACT_PAGE, fact_page | {"status": "PARKED"}),
        "signals.SELECT_FACT_PAGE_ALL": (signals.SELECT_FACT_PAGE_ALL, fact_page | signals.EACH_STATUS),
    }
    # Each scanner source's backoff after a failed try (K2): its lock and its record.
    for name, module in (("checkpoints", checkpoints), ("inbox", inbox), ("signals", signals)):
        row = {"checkpoints": ids["checkpoint"], "inbox": ids["inbox"], "signals": signal}[name]
        statements[f"{name}.FAILURES.lock"] = (module.FAILURES.lock, (row,))
        statements[f"{name}.FAILURES.record"] = (module.FAILURES.record, ("boom", now, row))
    statements["routing.PARKED_FAILURES.lock"] = (routing.PARKED_FAILURES.lock, (signal,))
    statements["routing.PARKED_FAILURES.record"] = (routing.PARKED_FAILURES.record, ("boom", now, signal))
    # Scanner processes sharing the candidates: a heartbeat and the live members with each listing
    # (a table of one row per running scanner, read whole), a join and a clean stop.
    statements["scanners.HEARTBEAT"] = (scanners.HEARTBEAT, (now, 1))
    statements["scanners.LIVE_MEMBERS"] = (scanners.LIVE_MEMBERS, (now,))
    statements["scanners.FORGET_DEAD"] = (scanners.FORGET_DEAD, (now,))
    statements["scanners.LEAVE"] = (scanners.LEAVE, (1,))
    statements.update(lifecycle_statements(ids))
    return statements


def lifecycle_statements(ids: dict) -> dict[str, tuple[str, object]]:
    """Retention and purge (L1, L3): the three sources' listings, each chunk's reads and deletes
    (by the instance's keys, a page of ids at most), the audit sweep, the backlog's reads."""
    from weave.sql import retention

    now, instance, namespace = ids["now"], ids["instance"], ids["namespace"]
    tasks_, few = (ids["task"],), (1, 2, 3)
    return {
        f"retention.{name}": (getattr(retention, name), params)
        for name, params in {
            "LOCK_NAMESPACE_RETENTION": ("acme",),
            "UPDATE_RETENTION": (3, None, namespace),
            "NO_CANDIDATES": (),
            "PURGEABLE_RANGE": (3, namespace, "SUCCEEDED", now, 25),
            "LOCK_ENDED_INSTANCE": (instance,),
            "COUNT_LIVE": {"id": instance},
            "SELECT_NOTIFICATION_IDS": (instance, 500),
            "DELETE_NOTIFICATION_ATTEMPTS": (few,),
            "DELETE_NOTIFICATIONS": (few,),
            "SELECT_TASK_IDS": (instance, 500),
            "DELETE_INBOX_EVENTS": (tasks_,),
            "DELETE_TASKS": (tasks_,),
            "DELETE_CHECKPOINTS": (instance, 500),
            "DELETE_WAITS": (instance, 500),
            "DELETE_SIGNALS": (instance, 500),
            "DELETE_EVENTS": (instance, 500),
            "DELETE_ACTIVATIONS": (instance, 500),
            "DELETE_SWEPT_AUDIT": (instance, 10, 500),
            "UPDATE_PURGE_COUNTS": ("{}", instance),
            "DELETE_INSTANCE": (instance, "SUCCEEDED"),
            # several instances purged in one transaction: each statement reads by IN lists of keys
            "LOCK_ENDED_INSTANCES": (few,),
            "COUNT_ROWS_OF_INSTANCES": (few,),
            "DELETE_ATTEMPTS_OF_INSTANCES": (few,),
            "DELETE_INBOX_EVENTS_OF_INSTANCES": (few,),
            "DELETE_TASKS_OF_INSTANCES": (few,),
            "DELETE_SWEPT_AUDIT_OF": (few, 10),
            "DELETE_INSTANCES": (few,),
            "PURGEABLE_FACT_HEADS": (now, 25),
            "SELECT_FACT_RANGE": (ids["signal"],),
            "LOCK_FACT_RUN": (namespace, "EXPIRED", 500),
            "DELETE_FACTS": (few, "EXPIRED"),
            "AUDIT_SWEPT_NAMESPACES": (),
            "NEXT_UNSWEPT": (namespace, 3, 10, now),
            "LOCK_SWEEP": (namespace,),
            "SELECT_AUDIT_AFTER": (0, 500),
            "SELECT_KEPT_INSTANCES": (few,),
            "SELECT_PARKED_FACTS": (few,),
            "DELETE_AUDIT_RECORDS": (few,),
            "ADVANCE_AUDIT_SWEEP": (10, namespace),
            "OLDEST_ENDED": (),
            "COUNT_PURGEABLE": (now,),
        }.items()
    }


# Statements that no request or scanner batch runs: operators' commands (namespaces, queues,
# applications, credentials) and publishing a definition.
COLD = {
    "tenancy.SELECT_NAMESPACE",
    "tenancy.SELECT_QUEUE",
    "tenancy.SELECT_APPLICATION",
    "tenancy.UPDATE_APPLICATION_STATUS",
    "tenancy.SELECT_CREDENTIAL_IN_NAMESPACE",
    "tenancy.REVOKE_CREDENTIAL",
    "definitions.LOCK_NAMESPACE",
}
# Tested with the workflow list's own rows (test_workflow_list_queries_use_their_indexes).
LISTED_ELSEWHERE = {
    "instances.SELECT_NEWEST",
    "instances.SELECT_NEWEST_BY_STATUS",
    "instances.SELECT_NEWEST_OF_VERSIONS",
}
# Inbound webhooks (W1, W5), the delivery path's reads and the operator's units: tested with rows
# of their own tables (test_W1_W5_inbound_statements_read_through_their_indexes).
INBOUND_KEYS = {
    "inbound.SELECT_DELIVERY_SOURCE": {("n", "uq_namespaces_name"), ("s", "uq_inbound_sources_name")},
    "inbound.SELECT_DELIVERY_SECRETS": {("s", "uq_inbound_sources_name"), ("x", "ix_inbound_secrets_source")},
    "inbound.SELECT_SOURCE": {("inbound_sources", "uq_inbound_sources_name")},
    "inbound.SELECT_DELIVERY_PAGE": {("s", "uq_inbound_sources_name"), ("d", "ix_inbound_deliveries_source")},
    "inbound.SELECT_DELIVERY_PAGE_BY_OUTCOME": {
        ("s", "uq_inbound_sources_name"),
        ("d", "ix_inbound_deliveries_outcome"),
    },
    "inbound.LOCK_SOURCE": {("inbound_sources", "uq_inbound_sources_name")},
    "inbound.UPDATE_MAPPING": {("inbound_sources", "PRIMARY")},
    "inbound.DELETE_SOURCE": {("inbound_sources", "PRIMARY")},
    "inbound.DELETE_SECRETS": {("inbound_secrets", "ix_inbound_secrets_source")},
    "inbound.SELECT_SOURCES": {("s", "uq_inbound_sources_name"), ("x", "ix_inbound_secrets_source")},
    "inbound.COUNT_VALID_SECRETS": {("inbound_secrets", "ix_inbound_secrets_source")},
    "inbound.SELECT_ADDED_SECRET": {("inbound_secrets", "ix_inbound_secrets_source")},
    "inbound.SELECT_VALID_SECRETS": {("inbound_secrets", "ix_inbound_secrets_source")},
    "inbound.SELECT_SECRET": {("inbound_secrets", "PRIMARY")},
    "inbound.REMOVE_SECRET": {("inbound_secrets", "PRIMARY")},
    "inbound.SELECT_SECRETS_AFTER": {("x", "PRIMARY"), ("s", "PRIMARY"), ("n", "PRIMARY")},
    "inbound.REWRITE_SECRET": {("inbound_secrets", "PRIMARY")},
}
LISTED_ELSEWHERE |= set(INBOUND_KEYS)
# Outbound notifications (N1-N3), the change's outbox write and the operator's units: tested with
# rows of their own tables (test_N1_N3_notification_statements_read_through_their_indexes).
NOTIFY_KEYS = {
    "notifications.INSERT_NOTIFICATIONS": {("s", "ix_notify_subscriptions_namespace")},
    "notifications.SELECT_SUBSCRIPTION": {("notify_subscriptions", "uq_notify_subscriptions_name")},
    "notifications.LOCK_SUBSCRIPTION": {("notify_subscriptions", "uq_notify_subscriptions_name")},
    "notifications.SELECT_CREATED": {("notify_subscriptions", "uq_notify_subscriptions_name")},
    "notifications.DISABLE_SUBSCRIPTION": {("notify_subscriptions", "PRIMARY")},
    "notifications.DROP_PENDING": {("notifications", "ix_notifications_subscription")},
    "notifications.DELETE_ATTEMPTS": {
        ("n", "ix_notifications_subscription"),
        ("a", "ix_notification_attempts_notification"),
    },
    "notifications.DELETE_NOTIFICATIONS": {("notifications", "ix_notifications_subscription")},
    "notifications.DELETE_SUBSCRIPTION": {("notify_subscriptions", "PRIMARY")},
    "notifications.SELECT_SUBSCRIPTIONS": {("s", "uq_notify_subscriptions_name")},
    "notifications.SELECT_DELIVERY_PAGE": {
        ("s", "uq_notify_subscriptions_name"),
        ("n", "ix_notifications_subscription"),
    },
    "notifications.SELECT_ATTEMPTS": {("notification_attempts", "ix_notification_attempts_notification")},
    "notifications.SELECT_SECRETS_AFTER": {("s", "PRIMARY"), ("n", "PRIMARY")},
    "notifications.REWRITE_SECRET": {("notify_subscriptions", "PRIMARY")},
    "notifications.SELECT_REWRITTEN": {("notify_subscriptions", "PRIMARY")},
}
LISTED_ELSEWHERE |= set(NOTIFY_KEYS)
# The index each scanner source and the task claim must range over (a plan may change its mind
# about the rest as long as it uses some index).
EXPECTED_KEYS = {
    "checkpoints.DUE_CHECKPOINTS": ("checkpoints", "ix_checkpoints_available"),
    "inbox.DUE_INBOX_EVENTS": ("inbox_events", "ix_inbox_available"),
    "signals.DUE_EXPIRIES": ("signals", "ix_signals_next_look"),
    "routing.DUE_PARKED": ("signals", "ix_signals_next_look"),
    "tasks.SELECT_EXPIRED_LEASES": ("tasks", "ix_tasks_lease"),
    "tasks.CLAIM_NEXT_TASK": ("tasks", "ix_tasks_claim"),
    "tenancy.SELECT_CURRENT_CREDENTIAL": ("c", "uq_credentials_token"),
    "signals.SELECT_TARGET_INSTANCE_AND_KEY": ("s", "uq_signals_idempotency"),
    "signals.SELECT_TARGET_OF_TOKEN": ("s", "uq_signals_idempotency"),
    "audit.SELECT_ACCEPTANCE_DIGEST": ("audit_records", "ix_audit_signal"),
    "sessions.SELECT_BEYOND_CAP": ("console_sessions", "ix_console_sessions_credential"),
    "tenancy.SELECT_CREDENTIAL_OF_TOKEN": ("credentials", "uq_credentials_token"),
    "routing.SELECT_BY_ROUTE_KEY": ("s", "uq_signals_route"),
    "routing.SELECT_CANDIDATE_WAITS": ("w", "ix_waits_route"),
    "routing.LOCK_PARKED": ("s", "ix_signals_route"),
    "signals.SELECT_FACT_PAGE": ("s", "ix_signals_unrouted"),
    "signals.SELECT_FACT_PAGE_ALL": ("s", "ix_signals_unrouted"),
    "timeline.SIGNAL_IDS_AFTER": ("s", "uq_signals_idempotency"),
    "timeline.SIGNAL_IDS_BEFORE": ("s", "uq_signals_idempotency"),
    "timeline.SELECT_SIGNALS": ("s", "PRIMARY"),
    "timeline.SELECT_INBOUND_SOURCES": ("d", "ix_inbound_deliveries_signal"),
    "timeline.SELECT_NOTIFICATIONS": ("n", "ix_notifications_instance"),
    "timeline.ROUND_IDS_AFTER": ("tasks", "ix_tasks_activation"),
    "timeline.ROUND_IDS_BEFORE": ("tasks", "ix_tasks_activation"),
    "timeline.EVENTS_AFTER": ("events", "uq_events_instance_seq"),
    "timeline.EVENTS_BEFORE": ("events", "uq_events_instance_seq"),
    "instances.IDS_BY_PREFIX": ("instances", "uq_instances_workflow"),
    "instances.SELECT_SEARCH_PAGE": ("i", "PRIMARY"),
    # L1: the ended instances of a namespace past its retention, a range of the index built for it
    "retention.PURGEABLE_RANGE": ("instances", "ix_instances_ended"),
    "retention.COUNT_PURGEABLE": ("i", "ix_instances_ended"),
    "retention.PURGEABLE_FACT_HEADS": ("f", "ix_signals_unrouted"),
    "retention.LOCK_FACT_RUN": ("signals", "ix_signals_unrouted"),
    "retention.NEXT_UNSWEPT": ("audit_records", "PRIMARY"),
}
EXPORT_OF_INSTANCE = ("SELECT_ACTIVATION_IDS", "SELECT_ACTIVATIONS", "SELECT_WAITS", "SELECT_SIGNALS")
EXPORT_OF_INSTANCE += ("SELECT_EVENTS", "SELECT_AUDIT", "SELECT_AUDIT_OF_PARKED", "SELECT_CHECKPOINTS")
EXPORT_OF_INSTANCE += ("SELECT_NOTIFICATION_IDS",)
EXPECTED_KEYS |= {
    "export.SELECT_INSTANCE": ("i", "uq_instances_workflow"),
    "export.SELECT_ACTIVATIONS": ("step_activations", "uq_activations_step_sequence"),
    "export.SELECT_WAITS": ("waits", "ix_waits_instance_step"),
    "export.SELECT_SIGNALS": ("signals", "uq_signals_idempotency"),
    "export.SELECT_TASKS_OF_ACTIVATION": ("t", "ix_tasks_activation"),
    "export.SELECT_EVENTS": ("events", "uq_events_instance_seq"),
    "export.SELECT_AUDIT": ("audit_records", "ix_audit_instance"),
    "export.SELECT_AUDIT_OF_PARKED": ("a", "ix_audit_signal"),
    "export.SELECT_CHECKPOINTS": ("checkpoints", "ix_checkpoints_instance"),
    "export.SELECT_NOTIFICATION_IDS": ("notifications", "ix_notifications_instance"),
}
# The console's pages find their rows' keys from an index alone, which a sort may then order
# without carrying a row, let alone a value (the rows follow by primary key).
INDEX_ONLY = (
    "instances.IDS_BY_PREFIX",
    "timeline.SIGNAL_IDS_AFTER",
    "timeline.SIGNAL_IDS_BEFORE",
    "timeline.ROUND_IDS_AFTER",
)
INDEX_ONLY += ("timeline.ROUND_IDS_BEFORE", "timeline.COUNT_ROUNDS_BEFORE")
# One row per namespace by design (the metrics' review gauge): each reads its count from an index.
WHOLE_BY_DESIGN = {("instances.NEEDS_REVIEW_BY_NAMESPACE", "n")}
# The purge sources go through the namespaces (a few rows), then one index range of each.
WHOLE_BY_DESIGN |= {
    (f"retention.{name}", "n") for name in ("PURGEABLE_FACT_HEADS", "OLDEST_ENDED", "COUNT_PURGEABLE")
} | {("retention.AUDIT_SWEPT_NAMESPACES", "namespaces")}
# One row per running scanner process: read whole by each listing, swept whole by each join.
WHOLE_BY_DESIGN |= {("scanners.LIVE_MEMBERS", "scanner_processes"), ("scanners.FORGET_DEAD", "scanner_processes")}


def sql_statements() -> dict[str, str]:
    """`module.NAME` -> text of every statement sql/ defines as a module constant (a scanner
    source's backoff `Source` holds two: `.lock` and `.record`)."""
    import importlib
    import pkgutil
    import re

    import weave.sql
    from weave.sql.backoff import Source

    found = {}
    for info in pkgutil.iter_modules(weave.sql.__path__):
        module = importlib.import_module(f"weave.sql.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Source):
                found[f"{info.name}.{name}.lock"], found[f"{info.name}.{name}.record"] = value.lock, value.record
            elif name.isupper() and isinstance(value, str) and re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE)\b", value):
                found[f"{info.name}.{name}"] = value
    return found


def reads_nothing(text: str) -> bool:
    """An INSERT … VALUES reads no table (EXPLAIN shows it as ALL all the same); ON DUPLICATE KEY
    finds its row by the unique key it collided with."""
    return text.lstrip().upper().startswith("INSERT") and "SELECT" not in text.upper()


def test_every_statement_of_sql_is_explained_or_listed_as_cold():
    """A statement added to sql/ must join `hot_statements` (or COLD); a removed one must leave it."""
    statements = sql_statements()
    explained = set(hot_statements({"now": datetime(2026, 1, 1), "token": b"t" * 32} | dict.fromkeys(IDS, 1)))
    writes = {name for name, text in statements.items() if reads_nothing(text)}
    assert sorted(set(statements) - explained - COLD - LISTED_ELSEWHERE - writes) == []
    assert sorted((explained | COLD | LISTED_ELSEWHERE) - set(statements)) == []


IDS = ("namespace", "queue", "instance", "workflow", "activation", "wait", "task", "inbox", "checkpoint", "signal")
IDS += ("credential", "application")


def full_scans(plan: list[dict]) -> list[dict]:
    """Plan rows that read a whole table (ALL) or a whole index (`index`) of a stored table."""
    return [row for row in plan if row["type"] in ("ALL", "index") and not (row["table"] or "<").startswith("<")]


def test_every_hot_path_statement_reads_through_an_index(crowded, database):
    plans = {name: explain(database, sql, params) for name, (sql, params) in hot_statements(crowded).items()}
    if os.environ.get("WEAVE_SHOW_PLANS"):
        for name, plan in plans.items():
            print(name, [(r["table"], r["type"], r["key"], r["rows"], r["Extra"]) for r in plan])
    scans = {
        name: [row for row in full_scans(plan) if (name, row["table"]) not in WHOLE_BY_DESIGN]
        for name, plan in plans.items()
    }
    assert {name: rows for name, rows in scans.items() if rows} == {}
    for name, (table, key) in EXPECTED_KEYS.items():
        assert (table, key) in keys_used(plans[name]), (name, plans[name])
    for name in INDEX_ONLY:
        assert all("Using index" in (row["Extra"] or "") for row in plans[name]), (name, plans[name])


def test_D5_the_definitions_list_reads_the_index_of_the_pages_names_only(populated, other_tenant):
    """GET {N}/definitions: `uq_definitions_name_version` read in order from the cursor, without a
    sort, stopping once the page has its names (the entries of those names only: every version of
    each), then each listed row by that key; and the newest of one name by the same key."""
    database = populated
    versions, page = 8, 10
    for owner in ("acme", "globex"):  # another namespace's definitions, interleaved by name
        namespace_id = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = %s", (owner,)))["id"]
        rows = [(namespace_id, f"def-{n:03d}", v) for n in range(200) for v in range(1, versions + 1)]
        database.run(
            lambda tx: tx.executemany(
                "INSERT INTO definitions (namespace_id, name, version, digest, document, queues, created_at)"
                " VALUES (%s, %s, %s, REPEAT('0', 64), '{}', '', NOW(6))",
                rows,
            )
        )
    database.run(lambda tx: tx.execute("ANALYZE TABLE definitions"))
    ns = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = 'acme'"))["id"]
    for after in ("", "def-050"):
        params = (ns, after, page + 1, ns)
        plan = explain(database, definitions.SELECT_NEWEST_VERSIONS, params)
        (scan,) = [row for row in plan if row["table"] == "definitions"]
        assert (scan["key"], scan["type"]) == ("uq_definitions_name_version", "range"), plan
        assert "Using index" in scan["Extra"] and "filesort" not in scan["Extra"], plan
        assert {(row["table"], row["key"], row["type"]) for row in plan if row["table"] == "d"} == {
            ("d", "uq_definitions_name_version", "eq_ref")
        }

        def handler_reads(tx):
            tx.execute("FLUSH STATUS")
            listed = tx.all(definitions.SELECT_NEWEST_VERSIONS, params)
            status = tx.all("SHOW SESSION STATUS LIKE 'Handler_read_next'")
            return listed, int(status[0]["Value"])

        listed, read_next = database.run(handler_reads)
        assert len(listed) == page + 1 and {row["version"] for row in listed} == {versions}
        assert read_next <= (page + 1) * versions, read_next  # not the namespace's 1,600 entries
    one = explain(database, definitions.SELECT_NEWEST_VERSION_OF_NAME, (ns, "def-007", ""))
    assert keys_used(one) == {("definitions", "uq_definitions_name_version")}, one


def test_B6_the_namespace_list_of_facts_reads_its_index_backwards_without_a_sort(crowded, database):
    """GET {N}/signals: each status is a backward range of `ix_signals_unrouted` from the cursor,
    in index order (no sort of the facts); all three statuses are three such ranges, of a page each,
    merged (the merge sorts at most three pages, in a derived table)."""
    page = {"namespace": crowded["namespace"], "after": 2**63 - 1, "name": None, "key": None, "limit": 101}
    from weave.sql import signals

    for sql, params, ranges in (
        (signals.SELECT_FACT_PAGE, page | {"status": "EXPIRED"}, 1),
        (signals.SELECT_FACT_PAGE_ALL, page | signals.EACH_STATUS, 3),
    ):
        reads = [row for row in explain(database, sql, params) if row["table"] == "s"]
        assert len(reads) == ranges, reads
        for row in reads:
            assert row["key"] == "ix_signals_unrouted" and "filesort" not in (row["Extra"] or ""), row


def test_W1_W5_inbound_statements_read_through_their_indexes(tenant, other_tenant, database):
    """The delivery path finds its source and secrets by unique keys, a deliveries page is a
    backward range of one index without a sort, and the operator's units touch only their rows;
    on tables holding two namespaces' hundreds of sources and thousands of deliveries."""
    from weave.sql import inbound

    for _ in range(20):
        tenant.token("workflows:signal", queues=("inventory",))

    def fill(tx):
        now = tx.now()
        namespaces = [row["id"] for row in tx.all("SELECT id FROM namespaces ORDER BY id")]
        # each source with its credential, as create_source makes them
        tx.executemany(
            "INSERT INTO credentials (token_sha256, namespace_id, application_id, actor, scopes, created_at)"
            " SELECT %s, %s, id, 'hook', 'workflows:signal', %s FROM applications WHERE namespace_id = %s",
            [
                (hashlib.sha256(f"{ns}:{n}".encode()).digest(), ns, now, ns)
                for ns, count in zip(namespaces, (30, 570))  # a namespace's sources are few of all
                for n in range(count)
            ],
        )
        rows = tx.all("SELECT id, namespace_id FROM credentials WHERE actor = 'hook' ORDER BY id")
        credentials = {(row["namespace_id"], n): row["id"] for n, row in enumerate(rows)}
        tx.executemany(
            "INSERT INTO inbound_sources (namespace_id, name, credential_id, scheme, mapping, created_at, updated_at)"
            " VALUES (%s, %s, %s, 'stripe', '{}', %s, %s)",
            [(ns, f"s{n:03d}", credential, now, now) for (ns, n), credential in credentials.items()],
        )
        sources = [row["id"] for row in tx.all("SELECT id FROM inbound_sources ORDER BY id")]
        tx.executemany(
            "INSERT INTO inbound_secrets (source_id, ciphertext, created_at, removed_at) VALUES (%s, %s, %s, %s)",
            [(source, b"c" * 100, now, now if n else None) for source in sources for n in range(4)],
        )
        outcomes = ("ROUTED", "PARKED", "IGNORED", "UNMAPPABLE", "AMBIGUOUS")
        tx.executemany(
            "INSERT INTO inbound_deliveries (namespace_id, source_id, received_at, event_id, event_type, outcome)"
            " VALUES (%s, %s, %s, %s, 't', %s)",
            [(namespaces[0], sources[n % 40], now, f"e{n}", outcomes[n % 5]) for n in range(20000)],
        )
        tx.execute("ANALYZE TABLE namespaces, inbound_sources, inbound_secrets, inbound_deliveries, credentials")
        secret = tx.one("SELECT MIN(id) AS id FROM inbound_secrets WHERE source_id = %s", (sources[7],))["id"]
        return namespaces[0], sources[7], secret

    namespace_id, source_id, secret_id = database.run(fill)
    page = {"namespace": namespace_id, "source": "s007", "outcome": "IGNORED", "after": 15000, "limit": 51}
    params = {
        "inbound.SELECT_DELIVERY_SOURCE": ("s007", "acme"),
        "inbound.SELECT_DELIVERY_SECRETS": ("s007", "acme"),
        "inbound.SELECT_SOURCE": (namespace_id, "s007"),
        "inbound.SELECT_DELIVERY_PAGE": page,
        "inbound.SELECT_DELIVERY_PAGE_BY_OUTCOME": page,
        "inbound.LOCK_SOURCE": (namespace_id, "s007"),
        "inbound.UPDATE_MAPPING": ("{}", datetime(2026, 1, 1), source_id),
        "inbound.DELETE_SOURCE": (source_id,),
        "inbound.DELETE_SECRETS": (source_id,),
        "inbound.SELECT_SOURCES": (namespace_id,),
        "inbound.COUNT_VALID_SECRETS": (source_id,),
        "inbound.SELECT_ADDED_SECRET": (source_id, b"c" * 100),
        "inbound.SELECT_VALID_SECRETS": (source_id,),
        "inbound.SELECT_SECRET": (secret_id, source_id),
        "inbound.REMOVE_SECRET": (datetime(2026, 1, 1), secret_id),
        "inbound.SELECT_SECRETS_AFTER": (secret_id, 100),
        "inbound.REWRITE_SECRET": (b"d" * 100, secret_id, b"c" * 100),
    }
    assert set(params) == set(INBOUND_KEYS)
    for name, keys in INBOUND_KEYS.items():
        plan = explain(database, getattr(inbound, name.split(".")[1]), params[name])
        assert keys <= keys_used(plan), (name, plan)
        assert full_scans(plan) == [], (name, plan)
        if name.startswith("inbound.SELECT_DELIVERY_PAGE") or name == "inbound.SELECT_SOURCES":
            assert not any("filesort" in (row["Extra"] or "") for row in plan), (name, plan)


def test_issue_34_2_a_search_by_key_reads_both_key_indexes_and_a_page_by_primary_key(crowded, database):
    """The waits and the signals of a key are found through migration 0023's prefix indexes, each
    joined to its instance by primary key (the namespace checked there)."""
    namespace = crowded["namespace"]
    plan = explain(database, instances.IDS_BY_KEY, (b"c", namespace, b"c", namespace, 10_001))
    used = keys_used(plan)
    assert {("w", "ix_waits_correlation"), ("s", "ix_signals_correlation"), ("i", "PRIMARY")} <= used, plan
    assert full_scans(plan) == [], plan


# Outbound notifications' delivery (N2, N3): the scanner's listing, the claim and the record of an
# attempt find their rows by key; the scrape's oldest-undelivered read ranges over the due index.
OUTBOX_KEYS = {
    "outbox.DUE": {("notifications", "ix_notifications_due")},
    "outbox.COUNT_DUE": {("notifications", "ix_notifications_due")},
    "outbox.LOCK_NOTIFICATION": {("notifications", "PRIMARY")},
    "outbox.SELECT_SUBSCRIPTION": {("notify_subscriptions", "PRIMARY")},
    "outbox.DROP": {("notifications", "PRIMARY")},
    "outbox.LEASE": {("notifications", "PRIMARY")},
    "outbox.LOCK_FOR_RECORD": {("notifications", "PRIMARY")},
    "outbox.DELIVER": {("notifications", "PRIMARY")},
    "outbox.RETRY": {("notifications", "PRIMARY")},
    "outbox.HEALTHY": {("notify_subscriptions", "PRIMARY")},
    "outbox.FAILING": {("notify_subscriptions", "PRIMARY")},
    "outbox.OLDEST_UNDELIVERED": {("notifications", "ix_notifications_due")},
    # one row per subscription, which operators make: read whole at most once a second per scrape
    "outbox.COUNT_FAILING": set(),
}
LISTED_ELSEWHERE |= set(OUTBOX_KEYS)


def test_N2_outbox_statements_read_through_their_indexes(database):
    """On an outbox of thousands of delivered rows and a few hundred pending ones."""
    from weave.sql import outbox

    def fill(tx):
        now = tx.now()
        tx.executemany(
            "INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at,"
            " updated_at) VALUES (1, %s, 'http://h/', 63, 'ENABLED', 'c', %s, %s)",
            [(f"s{n}", now, now) for n in range(50)],
        )
        first = tx.one("SELECT MIN(id) AS id FROM notify_subscriptions")["id"]
        tx.executemany(
            "INSERT INTO notifications (subscription_id, namespace_id, event_type, webhook_id, occurred_at, body,"
            " status, due_at) VALUES (%s, 1, 'workflow.succeeded', %s, %s, '{}', %s, %s)",
            [
                (
                    first + n % 50,
                    f"msg_{n}",
                    now,
                    "PENDING" if n % 20 == 0 else "DELIVERED",
                    now if n % 20 == 0 else None,
                )
                for n in range(6000)
            ],
        )
        tx.execute("ANALYZE TABLE notifications, notify_subscriptions")
        return first, tx.one("SELECT MIN(id) AS id FROM notifications")["id"]

    subscription, notification = database.run(fill)
    now = datetime(2026, 11, 30, 7, 0)
    params = {
        # passing over two subscriptions that hold their share of the delivery threads
        "outbox.DUE": outbox.listing_due(now, 100, (subscription, subscription + 1))[1],
        "outbox.COUNT_DUE": (now,),
        "outbox.LOCK_NOTIFICATION": (notification,),
        "outbox.SELECT_SUBSCRIPTION": (subscription,),
        "outbox.DROP": (notification,),
        "outbox.LEASE": (now, notification),
        "outbox.LOCK_FOR_RECORD": (notification,),
        "outbox.DELIVER": (now, notification),
        "outbox.RETRY": (now, "HTTP 500", notification),
        "outbox.HEALTHY": (now, subscription),
        "outbox.FAILING": (now, now, subscription),
        "outbox.OLDEST_UNDELIVERED": (),
        "outbox.COUNT_FAILING": (),
    }
    assert set(params) == set(OUTBOX_KEYS)
    for name, keys in OUTBOX_KEYS.items():
        plan = explain(database, getattr(outbox, name.split(".")[1]), params[name])
        assert keys <= keys_used(plan), (name, plan)
        if keys:
            assert full_scans(plan) == [], (name, plan)
    for due in (params["outbox.DUE"], outbox.listing_due(now, 100)[1]):  # passing over none
        plan = explain(database, outbox.DUE, due)
        assert keys_used(plan) == {("notifications", "ix_notifications_due")} and full_scans(plan) == [], plan
        assert not any("filesort" in (row["Extra"] or "") for row in plan), plan


def test_N1_N3_notification_statements_read_through_their_indexes(tenant, other_tenant, database):
    """The change's outbox write reads one namespace's enabled subscriptions by index, a deliveries
    page is a backward range of one index without a sort, its attempts are found by theirs, and the
    operator's units touch only their rows; on tables holding two namespaces' hundreds of
    subscriptions and thousands of notifications."""
    from weave.sql import notifications

    def fill(tx):
        now = tx.now()
        namespaces = [row["id"] for row in tx.all("SELECT id FROM namespaces ORDER BY id")]
        tx.executemany(
            "INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at,"
            " updated_at) VALUES (%s, %s, 'https://h.example/', %s, %s, %s, %s, %s)",
            [
                (ns, f"s{n:03d}", 1 + n % 63, "ENABLED" if n % 4 else "DISABLED", b"c" * 100, now, now)
                for ns, count in zip(namespaces, (30, 570))
                for n in range(count)
            ],
        )
        subscriptions = [row["id"] for row in tx.all("SELECT id FROM notify_subscriptions ORDER BY id")]
        statuses = ("PENDING", "DELIVERED", "DELIVERED", "DROPPED")
        tx.executemany(
            "INSERT INTO notifications (subscription_id, namespace_id, event_type, webhook_id, occurred_at, body,"
            " status, due_at) VALUES (%s, %s, 'workflow.failed', %s, %s, '{}', %s, %s)",
            [
                (subscriptions[n % 40], namespaces[0], f"msg_{n}", now, statuses[n % 4], now if n % 4 == 0 else None)
                for n in range(20000)
            ],
        )
        tx.execute(
            "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, duration_ms)"
            " SELECT id, occurred_at, 500, 10 FROM notifications WHERE MOD(id, 3) = 0"
        )
        tx.execute("ANALYZE TABLE namespaces, notify_subscriptions, notifications, notification_attempts")
        return namespaces[0], subscriptions[7]

    namespace_id, subscription_id = database.run(fill)
    now = datetime(2026, 1, 1)
    page = {"namespace": namespace_id, "name": "s007", "status": "PENDING", "after": 15000, "limit": 51}
    params = {
        "notifications.INSERT_NOTIFICATIONS": (None, "workflow.failed", "msg_x_", now, "{}", now, namespace_id, 4),
        "notifications.SELECT_SUBSCRIPTION": (namespace_id, "s007"),
        "notifications.LOCK_SUBSCRIPTION": (namespace_id, "s007"),
        "notifications.SELECT_CREATED": (namespace_id, "s007", b"c" * 100),
        "notifications.DISABLE_SUBSCRIPTION": (now, subscription_id),
        "notifications.DROP_PENDING": ("disabled", subscription_id),
        "notifications.DELETE_ATTEMPTS": (subscription_id,),
        "notifications.DELETE_NOTIFICATIONS": (subscription_id,),
        "notifications.DELETE_SUBSCRIPTION": (subscription_id,),
        "notifications.SELECT_SUBSCRIPTIONS": (namespace_id,),
        "notifications.SELECT_DELIVERY_PAGE": page,
        "notifications.SELECT_ATTEMPTS": ((3, 6, 9, 300),),
        "notifications.SELECT_SECRETS_AFTER": (subscription_id, 100),
        "notifications.REWRITE_SECRET": (b"d" * 100, subscription_id, b"c" * 100),
        "notifications.SELECT_REWRITTEN": (subscription_id, b"c" * 100),
    }
    assert set(params) == set(NOTIFY_KEYS)
    for name, keys in NOTIFY_KEYS.items():
        plan = explain(database, getattr(notifications, name.split(".")[1]), params[name])
        if os.environ.get("WEAVE_SHOW_PLANS"):
            print(name, [(r["table"], r["type"], r["key"], r["rows"], r["Extra"]) for r in plan])
        assert keys <= keys_used(plan), (name, plan)
        assert full_scans(plan) == [], (name, plan)
        if name in ("notifications.SELECT_DELIVERY_PAGE", "notifications.SELECT_SUBSCRIPTIONS"):
            assert not any("filesort" in (row["Extra"] or "") for row in plan), (name, plan)
    # the page without a status is the same range
    plan = explain(database, notifications.SELECT_DELIVERY_PAGE, page | {"status": None})
    assert ("n", "ix_notifications_subscription") in keys_used(plan) and full_scans(plan) == []


def test_L1_the_purge_listing_reads_as_many_index_entries_as_it_lists_however_many_instances_are_kept(
    crowded, database, clock
):
    """The purge's candidates: one index dive per (namespace, ended status) for the oldest end, then
    a range of `ix_instances_ended` in order, stopped at the limit. With 900 ended instances kept
    (not yet past retention) the listing reads none of them; with all past it, 25 per range."""
    from weave.sql import retention

    def handler_reads(tx):
        tx.execute("FLUSH STATUS")
        ranges = retention.purgeable_ranges(tx)
        listed = tx.all(*retention.listing_purgeable(tx.now(), 100, ranges))
        status = {
            row["Variable_name"]: int(row["Value"]) for row in tx.all("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        }
        return ranges, listed, status["Handler_read_next"] + status["Handler_read_prev"]

    namespace = crowded["namespace"]
    database.run(lambda tx: tx.execute("UPDATE namespaces SET retention_days = 30 WHERE id = %s", (namespace,)))
    ranges, listed, read = database.run(handler_reads)
    assert (ranges, listed) == ([], []) and read <= 3, read  # kept: the three dives read no range
    database.run(lambda tx: tx.execute("UPDATE namespaces SET retention_days = 0 WHERE id = %s", (namespace,)))
    ranges, listed, read = database.run(handler_reads)
    assert [r.status for r in ranges] == ["SUCCEEDED"] and len(listed) == retention.PER_BATCH
    assert read <= retention.PER_BATCH + 3, read  # not the 900 SUCCEEDED instances of the range
    plan = explain(database, *retention.listing_purgeable(crowded["now"], 100, ranges))
    assert {(row["key"], row["type"]) for row in plan} == {("ix_instances_ended", "range")}, plan
    assert all("filesort" not in (row["Extra"] or "") for row in plan), plan
