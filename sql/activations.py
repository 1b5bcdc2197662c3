"""Step activations: one row per (instance, step, activation sequence) with its status and result.

Read, lock, insert and settle; what an activation's settling means for the instance (review,
the successor) is the engine's. Lock order: instance -> activation (the caller holds the
instance lock).
"""

from __future__ import annotations

from datetime import datetime

from weave.tx import Tx

SELECT_ACTIVATIONS = """
SELECT id, step_key, step_index, activation_sequence, status, result, deadline_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
LOCK_ACTIVATION = """
SELECT id, instance_id, step_key, step_index, activation_sequence, status, deadline_at
FROM step_activations WHERE id = %s FOR UPDATE
"""
# The activation of a wait, found through the wait's row: under READ COMMITTED a subquery of a
# locking read reads without locking, so the wait is still locked after its activation (lock order).
LOCK_ACTIVATION_OF_WAIT = """
SELECT id, instance_id, step_key, step_index, activation_sequence, status, deadline_at
FROM step_activations WHERE id = (SELECT activation_id FROM waits WHERE id = %s) FOR UPDATE
"""
# An activation that is ACTIVE or waits for an operator has not ended yet.
SELECT_UNENDED_IDS = """
SELECT id FROM step_activations WHERE instance_id = %s AND status IN ('ACTIVE', 'NEEDS_REVIEW') ORDER BY id
"""
INSERT_ACTIVATION = """
INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status, activated_at,
                              deadline_at)
VALUES (%s, %s, %s, %s, 'ACTIVE', %s, %s)
"""
SETTLE_ACTIVATION = """
UPDATE step_activations SET status = %s, result = %s, review_reason = %s, settled_at = %s
WHERE id = %s AND status = %s
"""


def latest(tx: Tx, instance_id: int) -> dict[str, dict]:
    """step_key -> its latest activation (rows come in sequence order, so the last one stays)."""
    return {row["step_key"]: row for row in tx.all(SELECT_ACTIVATIONS, (instance_id,))}


def lock(tx: Tx, activation_id: int) -> dict:
    return tx.one(LOCK_ACTIVATION, (activation_id,))


def locking_of_wait(wait_id: int) -> tuple[str, tuple]:
    """For `Tx.all_together`: lock the activation of wait `wait_id` (none when there is no such wait)."""
    return LOCK_ACTIVATION_OF_WAIT, (wait_id,)


def lock_unended(tx: Tx, instance_id: int) -> list[dict]:
    """The instance's ACTIVE and NEEDS_REVIEW activations, locked in id order."""
    return [lock(tx, row["id"]) for row in tx.all(SELECT_UNENDED_IDS, (instance_id,))]


def insert(tx: Tx, instance_id: int, step_key: str, step_index: int, sequence: int, deadline_at: datetime) -> dict:
    """A new ACTIVE activation; returns its row (as `lock` would read it)."""
    activation_id = tx.insert(INSERT_ACTIVATION, (instance_id, step_key, step_index, sequence, tx.now(), deadline_at))
    return {
        "id": activation_id,
        "instance_id": instance_id,
        "step_key": step_key,
        "step_index": step_index,
        "activation_sequence": sequence,
        "status": "ACTIVE",
        "deadline_at": deadline_at,
    }


def settle(
    tx: Tx,
    activation_id: int,
    status: str,
    result_text: str | None,
    review_reason: str | None,
    from_status: str = "ACTIVE",
) -> None:
    """`from_status` (ACTIVE, or NEEDS_REVIEW for an operator's action) -> `status`; the caller holds
    the activation lock."""
    tx.transition(
        SETTLE_ACTIVATION,
        (status, result_text, review_reason, tx.now(), activation_id, from_status),
        f"settle activation {activation_id} from {from_status} as {status}",
    )
