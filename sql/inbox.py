"""The inbox: final task outcomes reported by Pulse, consumed by the workflow side (P6, P7).

Consumption claims the inbox row (`SKIP LOCKED`, so scanners share the work), then takes the
instance lock, then the activation; the task row is final and only read. The row is marked
CONSUMED in the same transaction that applies it, so an outcome is applied exactly once.
"""

from __future__ import annotations

from weave.sql import backoff, events, instances, steps
from weave.db import Tx, unit_of_work
from weave.rules import progress

CLAIM_INBOX_EVENT = """
SELECT id, task_id, instance_id, outcome, result, completed_at, available_at
FROM inbox_events WHERE id = %s AND status = 'PENDING'
FOR UPDATE SKIP LOCKED
"""
SELECT_SETTLED_TASK = "SELECT id, activation_id, kind, status, attempt FROM tasks WHERE id = %s"
MARK_CONSUMED = "UPDATE inbox_events SET status = 'CONSUMED', consumed_at = %s WHERE id = %s AND status = 'PENDING'"
FAILURES = backoff.Source(
    lock="SELECT attempts FROM inbox_events WHERE id = %s AND status = 'PENDING' FOR UPDATE",
    record="UPDATE inbox_events SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)
DUE_INBOX_EVENTS = """
SELECT id, available_at AS due_at FROM inbox_events
WHERE status = 'PENDING' AND available_at <= %s
ORDER BY available_at, id
LIMIT %s
"""


def due_candidates(tx: Tx, limit: int) -> list[dict]:
    return tx.all(DUE_INBOX_EVENTS, (tx.now(), limit))


@unit_of_work
def consume_inbox_event(tx: Tx, inbox_id: int) -> str | None:
    """Apply one task outcome to its step; returns what happened, or None when there was nothing to do."""
    event = tx.one(CLAIM_INBOX_EVENT, (inbox_id,))
    if event is None:
        return None  # another scanner has it, or it is consumed
    instance = instances.lock(tx, event["instance_id"])
    if event["available_at"] > tx.now():
        return None  # backed off after a failure: not due yet
    task = tx.one(SELECT_SETTLED_TASK, (event["task_id"],))
    activation = steps.lock_activation(tx, task["activation_id"])
    tx.execute(MARK_CONSUMED, (tx.now(), inbox_id))
    if task["kind"] != "TASK" or activation["status"] != "ACTIVE":
        # The step moved on without this task (deadline review, cancellation, recovery): keep the fact.
        events.append(tx, instance["id"], "TASK_OUTCOME_RECORDED",
                      {"task_id": str(task["id"]), "outcome": event["outcome"], "step": activation["step_key"],
                       "activation_status": activation["status"]})
        return "RECORDED"
    if event["outcome"] == "SUCCEEDED":
        if activation["deadline_at"] is not None and event["completed_at"] >= activation["deadline_at"]:
            steps.settle(tx, instance, activation, "NEEDS_REVIEW", None, progress.STEP_DEADLINE_EXCEEDED, steps.SCANNER)
            return "LATE"
        steps.settle(tx, instance, activation, "SUCCEEDED", event["result"], None, steps.SCANNER)
        steps.advance(tx, instance)
        return "SUCCEEDED"
    steps.settle(tx, instance, activation, "NEEDS_REVIEW", None, progress.TASK_REVIEW_REASONS[event["outcome"]],
                 steps.SCANNER)
    return event["outcome"]
