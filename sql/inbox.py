"""The inbox: final task outcomes reported by Pulse, consumed by the workflow side (P6, P7).

Pulse appends one row per final task outcome in the transaction that settles the task
(`tasks`). The engine claims a row (`SKIP LOCKED`, so scanners share the work), applies it to its
step and marks it CONSUMED in the same transaction, so an outcome is applied exactly once
(`engine.consume_inbox_event`).
"""

from __future__ import annotations

from datetime import datetime

from weave.sql import backoff
from weave.tx import Tx

INSERT_INBOX = """
INSERT INTO inbox_events (task_id, instance_id, outcome, result, completed_at, status, available_at, attempts)
VALUES (%s, %s, %s, %s, %s, 'PENDING', %s, 0)
"""
CLAIM_INBOX_EVENT = """
SELECT id, task_id, instance_id, outcome, result, completed_at, available_at
FROM inbox_events WHERE id = %s AND status = 'PENDING'
FOR UPDATE SKIP LOCKED
"""
MARK_CONSUMED = "UPDATE inbox_events SET status = 'CONSUMED', consumed_at = %s WHERE id = %s AND status = 'PENDING'"
FAILURES = backoff.Source(
    lock="SELECT attempts, available_at FROM inbox_events WHERE id = %s AND status = 'PENDING' FOR UPDATE",
    record="UPDATE inbox_events SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)
DUE_INBOX_EVENTS = """
SELECT id, available_at AS due_at, instance_id FROM inbox_events
WHERE status = 'PENDING' AND available_at <= %s
ORDER BY available_at, id
LIMIT %s
"""


def append(
    tx: Tx, task_id: int, instance_id: int, outcome: str, result_text: str | None, completed_at: datetime
) -> None:
    """The one inbox event of a task's final outcome; due at once."""
    tx.execute(INSERT_INBOX, (task_id, instance_id, outcome, result_text, completed_at, completed_at))


COUNT_DUE = "SELECT COUNT(*) AS n FROM inbox_events WHERE status = 'PENDING' AND available_at <= %s"


def listing_due(now: datetime, limit: int) -> tuple[str, tuple]:
    """The read of the inbox events due at `now`, oldest first, for `Tx.all_together`."""
    return DUE_INBOX_EVENTS, (now, limit)


def due_candidates(tx: Tx, limit: int) -> list[dict]:
    return tx.all(*listing_due(tx.now(), limit))


def count_due(tx: Tx) -> int:
    return tx.one(COUNT_DUE, (tx.now(),))["n"]


def claim(tx: Tx, inbox_id: int) -> dict | None:
    """The PENDING event, locked, or None when another scanner has it or it is consumed."""
    return tx.one(CLAIM_INBOX_EVENT, (inbox_id,))


def mark_consumed(tx: Tx, inbox_id: int) -> None:
    tx.transition(MARK_CONSUMED, (tx.now(), inbox_id), f"consume inbox event {inbox_id}")


CLAIM_OF_TASK = """
SELECT id, task_id, instance_id, outcome, result, completed_at, attempts, available_at
FROM inbox_events WHERE task_id = %s AND status = 'PENDING'
FOR UPDATE SKIP LOCKED
"""


def claim_of_task(tx: Tx, task_id: int) -> dict | None:
    """The task's PENDING inbox event, locked; None when it is consumed, or held by a scanner that
    is about to apply it (it waits for the instance lock the caller holds: skipped, never waited on)."""
    return tx.one(CLAIM_OF_TASK, (task_id,))


SELECT_HELD_OF_TASK = "SELECT id FROM inbox_events WHERE task_id = %s AND status = 'PENDING'"


def held_of_task(tx: Tx, task_id: int) -> bool:
    """Whether the task has a PENDING inbox event (read, not locked): after `claim_of_task` found
    none, one that exists is held by another unit. No unit can consume it while the caller holds
    the instance lock, so what this read finds stands until the caller commits."""
    return tx.one(SELECT_HELD_OF_TASK, (task_id,)) is not None
