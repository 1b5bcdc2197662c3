"""Everything Weave holds of one instance, read for its export (L2, docs/export.md).

One read-only unit in one consistent snapshot (`Database.snapshot`): the instance, then each of
its tables in turn, every row of it, so that the sections agree with each other (a wait's
`winner_signal_id` is a signal of the document, the history has no gap, a task's inbox event is
the one its status says). Rows are streamed one at a time from an unbuffered cursor to the
`ExportSink` the caller passes, which writes them out: the unit holds one row in memory whatever
the instance holds, and no lock (docs/decisions.md, "Export").

Every statement reads by the instance's own index (`ix_*_instance`, the unique keys that start
with `instance_id`), ordered as the history is read: activations by step (in the definition's
order) then generation, tasks by activation (the same order) then key, events by seq, everything
else by key. What a table holds of one instance is small enough to sort (at most 1,024 signals,
S1.6; a few activations and waits), except tasks (a POLL step's rounds), events and audit
records, which come in their index's order without a sort. Tasks have no index of their own on
the instance: they are found through their activations (`ix_tasks_activation`), one activation
at a time, each task with its inbox event (`uq_inbox_task`). Notifications come one at a time
with their delivery attempts, one row per attempt (the sink groups them). A signal's receipt is
stored without its first member, the row's own key (`weave.sql.signals.receipt_text`): it is
exported whole, as every replay answers it.

Columns are the table's own, under their own names, so that the export is the rows as stored;
the one column left out is `tasks.lease_token`, the secret of a live lease (it lets its holder
report the task's outcome, which a reader of the instance must not be able to do).
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Iterator, Protocol

from weave.auth import Principal
from weave.db import snapshot_read
from weave.sql import instances
from weave.tx import Tx


class ExportSink(Protocol):
    """Where the rows go, section by section in the document's order. `begin` starts the document afresh: a unit
    re-run after a retryable error writes it again from the start."""

    def begin(self, workflow: dict, exported_at: datetime) -> None: ...

    def section(self, name: str, rows: Iterator[dict]) -> None: ...

    def end(self) -> None: ...


SELECT_INSTANCE = """
SELECT i.id, i.namespace_id, n.name AS namespace, i.workflow_id, i.definition_id, d.name AS definition,
       d.version AS definition_version, d.digest AS definition_digest, d.document AS definition_document,
       i.application_id, i.input, i.request_digest, i.status, i.gate, i.review_reason, i.deadline_at,
       i.created_at, i.updated_at, i.version, i.signals_stored, i.purge_counts
FROM instances i
JOIN definitions d ON d.id = i.definition_id
JOIN namespaces n ON n.id = i.namespace_id
WHERE i.namespace_id = %s AND i.workflow_id = %s
"""
SELECT_ACTIVATIONS = """
SELECT id, instance_id, step_key, step_index, activation_sequence, status, result, review_reason, activated_at,
       deadline_at, settled_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
SELECT_WAITS = """
SELECT id, instance_id, step_key, kind, name, correlation, payload_version, activation_id, activation_sequence,
       status, deadline_at, created_at, winner_signal_id, settled_at, route_hash
FROM waits FORCE INDEX (ix_waits_instance_step) WHERE instance_id = %s ORDER BY id
"""
SELECT_SIGNALS = """
SELECT id, instance_id, namespace_id, name, correlation, route_key, route_hash, payload_version, target_step_key,
       target_activation_sequence, payload, payload_present, payload_sha256, idempotency_key, request_digest,
       credential_id, actor, reason, evidence_ref, status, disposition, created_at, accepted_at, expires_at,
       park_seconds, available_at, attempts, last_error, consumed_wait_id, consumed_at, settled_at,
       CONCAT('{"signal_id":"', id, '",', receipt) AS receipt
FROM signals FORCE INDEX (uq_signals_idempotency) WHERE instance_id = %s ORDER BY id
"""
SELECT_ACTIVATION_IDS = """
SELECT id FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
# One activation's tasks (a TASK step's one, a POLL step's rounds) in the order of
# `ix_tasks_activation` (activation_id, id): no sort, however many rounds.
SELECT_TASKS_OF_ACTIVATION = """
SELECT t.id, t.namespace_id, t.queue_id, q.name AS queue, t.instance_id, t.activation_id, t.kind, t.status,
       t.attempt, t.max_attempts, t.available_at, t.lease_expires_at, t.worker_id, t.cancel_requested,
       t.cancel_requested_at, t.deadline_at, t.result, t.error, t.created_at, t.completed_at,
       e.id AS inbox_id, e.task_id AS inbox_task_id, e.instance_id AS inbox_instance_id, e.outcome AS inbox_outcome,
       e.result AS inbox_result, e.completed_at AS inbox_completed_at, e.status AS inbox_status,
       e.available_at AS inbox_available_at, e.attempts AS inbox_attempts, e.last_error AS inbox_last_error,
       e.consumed_at AS inbox_consumed_at
FROM tasks t FORCE INDEX (ix_tasks_activation)
JOIN queues q ON q.id = t.queue_id
LEFT JOIN inbox_events e ON e.task_id = t.id
WHERE t.activation_id = %s ORDER BY t.id
"""
SELECT_EVENTS = "SELECT id, instance_id, seq, type, at, data FROM events WHERE instance_id = %s ORDER BY seq"
SELECT_AUDIT = """
SELECT id, namespace_id, instance_id, signal_id, credential_id, actor, action, request_digest, at, details
FROM audit_records FORCE INDEX (ix_audit_instance) WHERE instance_id = %s ORDER BY id
"""
# The records written about the instance's signals before they were its own: a fact sent by its
# business key and parked (`signal.park`, B2) belongs to no instance until a wait takes it; its
# acceptance record keeps instance_id NULL. Found through the instance's signals (at most 1,024,
# S1.6) and `ix_audit_signal`, after the instance's own records; the sort carries only those
# records, one per fact that was parked.
SELECT_AUDIT_OF_PARKED = """
SELECT a.id, a.namespace_id, a.instance_id, a.signal_id, a.credential_id, a.actor, a.action, a.request_digest, a.at,
       a.details
FROM signals s FORCE INDEX (uq_signals_idempotency)
JOIN audit_records a FORCE INDEX (ix_audit_signal) ON a.signal_id = s.id AND a.instance_id IS NULL
WHERE s.instance_id = %s ORDER BY a.id
"""
SELECT_CHECKPOINTS = """
SELECT id, instance_id, kind, wait_id, due_at, available_at, attempts, last_error, created_at
FROM checkpoints FORCE INDEX (ix_checkpoints_instance) WHERE instance_id = %s ORDER BY id
"""
SELECT_NOTIFICATION_IDS = "SELECT id FROM notifications WHERE instance_id = %s ORDER BY id"
# One notification with its attempts, one row each (at least one row: the attempts are outer-joined).
SELECT_NOTIFICATION = """
SELECT n.id, n.subscription_id, s.name AS subscription, n.namespace_id, n.instance_id, n.event_type, n.webhook_id,
       n.occurred_at, n.body, n.status, n.due_at, n.attempts, n.delivered_at, n.last_error,
       a.id AS attempt_id, a.notification_id AS attempt_notification_id, a.attempted_at AS attempt_attempted_at,
       a.http_status AS attempt_http_status, a.error AS attempt_error, a.duration_ms AS attempt_duration_ms
FROM notifications n
LEFT JOIN notify_subscriptions s ON s.id = n.subscription_id
LEFT JOIN notification_attempts a FORCE INDEX (ix_notification_attempts_notification) ON a.notification_id = n.id
WHERE n.id = %s ORDER BY a.id
"""


def _each(tx: Tx, statement: str, keys: list[int]) -> Iterator[dict]:
    """The rows of `statement` for each key in turn, each statement streamed after the last ended."""
    for key in keys:
        yield from tx.stream(statement, (key,))


@snapshot_read
def export_workflow(tx: Tx, principal: Principal, workflow_id: str, sink: ExportSink) -> None:
    """Write every row of the instance `workflow_id` to `sink`, after the grant check of every read
    of an instance: WORKFLOW_NOT_FOUND (nothing written) when the namespace holds no such instance."""
    instance = tx.one(SELECT_INSTANCE, (principal.namespace_id, workflow_id))
    instances.require_grants(tx, principal, workflow_id, instance)
    sink.begin(instance, tx.now())  # the snapshot's time, by the clock seam
    # Keys only (a few activations; a notification per change and subscription), read before any
    # stream is open: a connection carries one statement at a time.
    activation_ids = [row["id"] for row in tx.all(SELECT_ACTIVATION_IDS, (instance["id"],))]
    notification_ids = [row["id"] for row in tx.all(SELECT_NOTIFICATION_IDS, (instance["id"],))]
    of_instance = (instance["id"],)
    sink.section("activations", tx.stream(SELECT_ACTIVATIONS, of_instance))
    sink.section("waits", tx.stream(SELECT_WAITS, of_instance))
    sink.section("signals", tx.stream(SELECT_SIGNALS, of_instance))
    sink.section("tasks", _each(tx, SELECT_TASKS_OF_ACTIVATION, activation_ids))
    sink.section("events", tx.stream(SELECT_EVENTS, of_instance))
    # A stream starts when the one before it has ended (generators run as they are read).
    own, before_it_was_theirs = tx.stream(SELECT_AUDIT, of_instance), tx.stream(SELECT_AUDIT_OF_PARKED, of_instance)
    sink.section("audit", itertools.chain(own, before_it_was_theirs))
    sink.section("checkpoints", tx.stream(SELECT_CHECKPOINTS, of_instance))
    sink.section("notifications", _each(tx, SELECT_NOTIFICATION, notification_ids))
    sink.end()
