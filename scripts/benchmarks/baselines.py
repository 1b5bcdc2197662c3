"""The baselines Weave's figures are divided by, measured in the same run: the statements of
Weave's units on bare PyMySQL connections (claim and complete, send_signal), the units themselves
in-process (end to end), and the lean and spec floors of signal acceptance (issue 17, target 1).

They run the production statements, imported from `weave.sql` (so they cannot drift from what
Weave sends), without Weave's code around them: no HTTP, authentication, validation or retries."""

from __future__ import annotations

import os
import time

from benchmarks.harness import QUEUE, Bench
from benchmarks.workload import e2e_input, on_connections, signal_body
from weave import auth, jsontext
from weave.db import connect
from weave.resources.signals import signal_request
from weave.rules import signals as signal_rules
from weave.sql import audit as audit_sql
from weave.sql import checkpoints as checkpoint_sql
from weave.sql import engine, tenancy
from weave.sql import events as event_sql
from weave.sql import inbox as inbox_sql
from weave.sql import instances as instance_sql
from weave.sql import signals as sig_sql
from weave.sql import tasks as task_sql
from weave.tx import SELECT_NOW


def raw_pulse_worker(bench: Bench, done: list):
    """The same statements as claim_task and complete_task, on a bare PyMySQL connection."""

    def work(i):
        conn = connect(bench.url)
        cur = conn.cursor()
        while True:
            cur.execute(task_sql.LOCK_QUEUE_BY_NAME, (bench.namespace_id, QUEUE))
            queue = cur.fetchone()
            cur.execute(SELECT_NOW)
            now = cur.fetchone()["now"]
            cur.execute(task_sql.CLAIM_NEXT_TASK, (queue["id"], now))
            task = cur.fetchone()
            if task is None:
                conn.rollback()
                break
            token = os.urandom(16).hex()
            cur.execute(task_sql.START_TASK, (token, now, f"w{i}", task["id"]))
            cur.execute(task_sql.TAKE_PERMIT, (queue["id"],))
            cur.execute(task_sql.SELECT_TASK_CONTEXT, (task["activation_id"],))
            cur.execute(instance_sql.SELECT_STEP_RESULTS, (task["instance_id"],))
            cur.execute(audit_sql.INSERT_AUDIT, _audit_row(bench, task, "task.claim", now))
            conn.commit()
            cur.execute(task_sql.SELECT_TASK_QUEUE, (task["id"], bench.namespace_id))
            cur.execute(task_sql.LOCK_QUEUE, (queue["id"],))
            cur.execute(task_sql.LOCK_TASK, (task["id"],))
            cur.execute(SELECT_NOW)
            cur.execute(task_sql.SETTLE_TASK, ("SUCCEEDED", '{"i":1}', None, now, task["id"]))
            cur.execute(task_sql.RELEASE_PERMIT, (queue["id"],))
            cur.execute(inbox_sql.INSERT_INBOX, (task["id"], task["instance_id"], "SUCCEEDED", '{"i":1}', now, now))
            cur.execute(audit_sql.INSERT_AUDIT, _audit_row(bench, task, "task.complete", now))
            conn.commit()
            done.append(1)
        conn.close()

    return work


def _audit_row(bench: Bench, task: dict, action: str, now) -> tuple:
    """INSERT_AUDIT's row for a task's claim or completion, leaner than Weave's: no credential, no details."""
    return (bench.namespace_id, task["instance_id"], None, None, "w", action, None, now, "{}")


def in_process_e2e(bench: Bench, workflows: int, signal: bool = False) -> float:
    """Seconds to start `workflows` e2e workflows (with `signal`, TASK -> SIGNAL -> TASK ones, each
    sent its signal right after its start) and run them to the end in this thread, calling the
    units the API, the workers and the scanner call, with no HTTP and no scanner process."""
    db = bench.database
    starter = tenancy.authenticate(db, auth.token_hash(bench.client_token))
    run_id = time.time_ns()
    started = time.perf_counter()
    for i in range(workflows):
        workflow_id = f"raw-{run_id}-{i}"
        definition = "e2e-signal" if signal else "e2e"
        document = jsontext.compact(e2e_input(i, signal))
        instance_sql.start_workflow(
            db, starter, instance_sql.StartRequest(workflow_id, definition, 1, document, 3600, f"{i:064d}")
        )
        if signal:
            sig_sql.send_signal(db, starter, workflow_id, signal_request(f"e2e-{i}", signal_body(f"o-{i}")))
    while True:
        did = 0
        for row in db.run(checkpoint_sql.due_candidates, 100):
            did += engine.process_checkpoint(db, row["id"]) is not None
        while (claimed := task_sql.claim_task(db, bench.namespace_id, QUEUE, "w", 60, 1, "w")) is not None:
            task_sql.complete_task(
                db,
                bench.namespace_id,
                claimed.task_id,
                claimed.lease_token,
                task_sql.Completion("SUCCEEDED", '{"ok":true}'),
                frozenset({QUEUE}),
                1,
                "w",
            )
            did += 1
        for row in db.run(inbox_sql.due_candidates, 100):
            did += engine.consume_inbox_event(db, row["id"]) is not None
        if not did:
            break
    return time.perf_counter() - started


# The bench's signals are all early: accepted PENDING, no disposition.
PENDING = signal_rules.Acceptance(signal_rules.PENDING)


def _receipt_rest(workflow_id: str, key: str, digest: str, now, deadline_at) -> str:
    """The receipt's stored rest that `send_signal` writes for the bench's signal, by its builder."""
    return sig_sql.receipt_rest(workflow_id, PENDING.status, PENDING.disposition, now, deadline_at, key, digest)


def _event_and_audit_texts(signal_id: int, key: str, now, deadline_at) -> tuple[str, str]:
    """The event data and the audit details that `send_signal` writes for the bench's signal."""
    data, details = sig_sql.accepted_texts(signal_id, signal_body("o"), PENDING, "raw", key, now, deadline_at)
    return jsontext.compact(data), jsontext.compact(details)


def _signal_row(instance_id: int, key: str, digest: str, now, deadline_at, receipt_rest: str) -> tuple:
    body = signal_body("o")
    payload_text = jsontext.compact(body["payload"])
    return (
        instance_id,
        body["name"],
        body["payload_version"],
        body["target_step_key"],
        body["target_activation_sequence"],
        body["correlation_key"].encode(),
        payload_text,
        jsontext.sha256_text(payload_text),
        1,
        body["reason"],
        None,
        "raw",
        1,
        key,
        digest,
        PENDING.status,
        PENDING.disposition,
        now,
        deadline_at,
        deadline_at,  # available_at: a PENDING signal's first look is at its expiry, as Weave writes it
        None,
        now,
        receipt_rest,
        None,  # namespace_id, route_key, route_hash, park_seconds: a fact sent to an instance has no route
        None,
        None,
        None,
    )


def raw_sender(
    bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list, open_connection=connect
):
    """The statements of `send_signal` on a bare PyMySQL connection, one transaction per signal, in
    the same round trips (`weave.tx.Tx` sends queued writes with the next statement or COMMIT),
    writing the same rows with the same contents (receipt, event data, audit details); without
    authentication, HTTP, JSON parsing, schema validation or the contract check. `open_connection`:
    another driver's connection with the same cursor methods (scripts/benchmarks/drivers.py)."""
    body = signal_body("o")

    def send_one(cur, workflow_id: str, key: str) -> float:
        started = time.perf_counter()
        digest = jsontext.digest(body)
        cur.execute(sig_sql.SELECT_TARGET_INSTANCE_AND_KEY, (key, bench.namespace_id, workflow_id))
        instance_id = cur.fetchone()["id"]
        facts = {"instance": instance_id, "key": key, "step": "payment"}
        cur.execute(
            ";\n".join(
                (
                    cur.mogrify(sig_sql.LOCK_QUEUES_SHARED, (bench.namespace_id, (QUEUE,))),
                    cur.mogrify(instance_sql.MARK_DECIDING, (instance_id,)),
                    cur.mogrify(sig_sql.FACTS_UNDER_LOCK, facts),
                )
            )
        )
        cur.nextset()
        cur.nextset()
        instance = cur.fetchone()
        now, deadline_at = instance["now"], instance["deadline_at"]
        receipt_rest = _receipt_rest(workflow_id, key, digest, now, deadline_at)
        cur.execute(sig_sql.INSERT_SIGNAL, _signal_row(instance_id, key, digest, now, deadline_at, receipt_rest))
        signal_id = cur.lastrowid
        data, details = _event_and_audit_texts(signal_id, key, now, deadline_at)
        audit_row = (bench.namespace_id, instance_id, signal_id, 1, "raw", "signal.send", digest, now, details)
        cur.execute(
            ";\n".join(
                (
                    cur.mogrify(instance_sql.COUNT_STORED_SIGNAL, (instance_id,)),
                    cur.mogrify(event_sql.APPEND_EVENT, (instance_id, "SIGNAL_ACCEPTED", now, data, instance_id)),
                    cur.mogrify(audit_sql.INSERT_AUDIT, audit_row),
                    "COMMIT",
                )
            )
        )
        while cur.nextset():
            pass
        return time.perf_counter() - started

    return on_connections(bench, send_one, targets, warm_up, per_client, latencies, "raw", open_connection)


# The lean floor (issue 17, target 1): the durable work of accepting one signal as the issue
# defines it, and nothing else, on tables with only the indexes that work needs. Seven statements,
# one per round trip as a plain PyMySQL program sends them: lock the instance (by its workflow id),
# look the key up, insert the signal, a checkpoint (due now, found by its due-time index), the
# event, the audit record and the receipt (its own table: the signal row leaves it NULL); commit.
# Its tables have Weave's columns (the same row sizes), made with CREATE TABLE … LIKE; its
# instances are copies of the run's instances, with their ids.
#
# The spec floor adds to it what the specification and the owner require of any implementation,
# one statement each, as the same plain program would send them: the current credential read on
# every request (S1.1; no staleness window), the definition's queues locked before the instance
# (S1.3), and the target step's latest activation with its wait read under the lock (S1.10 decides
# the signal's disposition from them). Weave over the spec floor is what Weave's own code costs.
FLOOR_TABLES = (
    """CREATE TABLE IF NOT EXISTS floor_instances (
         id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, namespace_id BIGINT UNSIGNED NOT NULL,
         workflow_id VARCHAR(128) NOT NULL, deadline_at DATETIME(6) NOT NULL,
         PRIMARY KEY (id), UNIQUE KEY uq_floor_instances (namespace_id, workflow_id)
       ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS floor_receipts (
         signal_id BIGINT UNSIGNED NOT NULL, body TEXT NOT NULL, PRIMARY KEY (signal_id)
       ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    "CREATE TABLE IF NOT EXISTS floor_signals LIKE signals",
    "CREATE TABLE IF NOT EXISTS floor_checkpoints LIKE checkpoints",
    "CREATE TABLE IF NOT EXISTS floor_events LIKE events",
    "CREATE TABLE IF NOT EXISTS floor_audit LIKE audit_records",
)
FLOOR_INSTANCES = """
INSERT IGNORE INTO floor_instances (id, namespace_id, workflow_id, deadline_at)
SELECT id, namespace_id, workflow_id, deadline_at FROM instances WHERE namespace_id = %s AND workflow_id IN %s
"""
FLOOR_INDEXES_KEPT = {
    "floor_signals": {"PRIMARY", "uq_signals_idempotency"},
    "floor_checkpoints": {"PRIMARY", "ix_checkpoints_available"},
    "floor_audit": {"PRIMARY"},
}
FLOOR_LOCK = """
SELECT id, deadline_at, UTC_TIMESTAMP(6) AS now FROM floor_instances WHERE namespace_id = %s AND workflow_id = %s
FOR UPDATE
"""
FLOOR_LOOKUP = "SELECT receipt FROM floor_signals WHERE instance_id = %s AND idempotency_key = %s"
FLOOR_RECEIPT = "INSERT INTO floor_receipts (signal_id, body) VALUES (%s, %s)"
SPEC_FLOOR_ACTIVATION = """
SELECT a.activation_sequence, a.status, w.id, w.status, w.deadline_at, w.correlation
FROM step_activations a LEFT JOIN waits w ON w.activation_id = a.id
WHERE a.instance_id = %s AND a.step_key = %s ORDER BY a.activation_sequence DESC LIMIT 1
"""


def floor_tables(bench: Bench) -> None:
    def create(tx):
        for statement in FLOOR_TABLES:
            tx.execute(statement)
        for table, kept in FLOOR_INDEXES_KEPT.items():
            for name in {row["Key_name"] for row in tx.all("SHOW INDEX FROM " + table)} - kept:
                tx.execute(f"ALTER TABLE {table} DROP INDEX {name}")

    bench.database.run(create)


def floor_sender(bench: Bench, targets: list[str], warm_up: str, per_client: int, latencies: list, spec: bool = False):
    """The lean floor (FLOOR_TABLES): one transaction of 7 statements per signal; with `spec`, the
    spec floor: 10 statements, the credential's read, the queue lock and the activation's read
    besides."""
    body = signal_body("o")
    token_sha256 = auth.token_hash(bench.client_token)
    insert_signal = sig_sql.INSERT_SIGNAL.replace("INSERT INTO signals", "INSERT INTO floor_signals")
    insert_checkpoint = checkpoint_sql.INSERT_CHECKPOINT.replace(
        "INSERT INTO checkpoints", "INSERT INTO floor_checkpoints"
    )
    append_event = event_sql.APPEND_EVENT.replace("events", "floor_events")
    insert_audit = audit_sql.INSERT_AUDIT.replace("INSERT INTO audit_records", "INSERT INTO floor_audit")

    def send_one(cur, workflow_id: str, key: str) -> float:
        started = time.perf_counter()
        digest = jsontext.digest(body)
        if spec:
            cur.execute(tenancy.SELECT_CURRENT_CREDENTIAL, (token_sha256,))
            assert cur.fetchone() is not None
            cur.execute(sig_sql.LOCK_QUEUES_SHARED, (bench.namespace_id, (QUEUE,)))
        cur.execute(FLOOR_LOCK, (bench.namespace_id, workflow_id))
        instance = cur.fetchone()
        instance_id, now, deadline_at = instance["id"], instance["now"], instance["deadline_at"]
        if spec:
            cur.execute(SPEC_FLOOR_ACTIVATION, (instance_id, "payment"))
            cur.fetchall()
        cur.execute(FLOOR_LOOKUP, (instance_id, key))
        assert cur.fetchone() is None
        cur.execute(insert_signal, _signal_row(instance_id, key, digest, now, deadline_at, None))
        signal_id = cur.lastrowid
        receipt_rest = _receipt_rest(workflow_id, key, digest, now, deadline_at)
        data, details = _event_and_audit_texts(signal_id, key, now, deadline_at)
        cur.execute(insert_checkpoint, (instance_id, "WAIT", 1, now, now, now))
        cur.execute(append_event, (instance_id, "SIGNAL_ACCEPTED", now, data, instance_id))
        cur.execute(
            insert_audit, (bench.namespace_id, instance_id, signal_id, 1, "raw", "signal.send", digest, now, details)
        )
        cur.execute(FLOOR_RECEIPT, (signal_id, sig_sql.receipt_text(signal_id, receipt_rest)))
        cur.connection.commit()
        return time.perf_counter() - started

    # The floor's own instances, untimed: copies of the run's, ids included (the spec floor reads
    # their activations by id).
    bench.database.run(lambda tx: tx.execute(FLOOR_INSTANCES, (bench.namespace_id, (*targets, warm_up))))
    label = "spec" if spec else "floor"
    return on_connections(bench, send_one, targets, warm_up, per_client, latencies, label)
