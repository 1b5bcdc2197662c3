"""Checkpoints: due times at which the scanner must look at an instance (ROOT) or a wait (WAIT).

`due_at` is when the look is due and never moves; `available_at` is the next try and moves only
by backoff after a failed try.
"""

from __future__ import annotations

from datetime import datetime

from weave.sql import backoff, instances, steps, waits
from weave.db import Tx, unit_of_work

INSERT_CHECKPOINT = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
VALUES (%s, %s, %s, %s, %s, 0, %s)
"""


def schedule_root(tx: Tx, instance_id: int, due_at: datetime) -> int:
    """Ask the scanner to advance the instance at `due_at`."""
    return tx.insert(INSERT_CHECKPOINT, (instance_id, "ROOT", None, due_at, due_at, tx.now()))


def schedule_wait(tx: Tx, instance_id: int, wait_id: int, due_at: datetime) -> int:
    """Ask the scanner to look at one wait at `due_at` (its signals, or its deadline)."""
    return tx.insert(INSERT_CHECKPOINT, (instance_id, "WAIT", wait_id, due_at, due_at, tx.now()))


DUE_CHECKPOINTS = """
SELECT id, available_at AS due_at FROM checkpoints
WHERE available_at <= %s
ORDER BY available_at, id
LIMIT %s
"""
CLAIM_CHECKPOINT = """
SELECT id, instance_id, kind, wait_id, due_at, available_at FROM checkpoints WHERE id = %s
FOR UPDATE SKIP LOCKED
"""
DELETE_CHECKPOINT = "DELETE FROM checkpoints WHERE id = %s"
FAILURES = backoff.Source(
    lock="SELECT attempts FROM checkpoints WHERE id = %s FOR UPDATE",
    record="UPDATE checkpoints SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)


def due_candidates(tx: Tx, limit: int) -> list[dict]:
    return tx.all(DUE_CHECKPOINTS, (tx.now(), limit))


@unit_of_work
def process_checkpoint(tx: Tx, checkpoint_id: int) -> str | None:
    """Look at an instance at a due checkpoint; the checkpoint is deleted in the same transaction."""
    checkpoint = tx.one(CLAIM_CHECKPOINT, (checkpoint_id,))
    if checkpoint is None:
        return None  # another scanner has it, or it is done
    instance = instances.lock(tx, checkpoint["instance_id"])
    if checkpoint["available_at"] > tx.now():
        return None
    tx.execute(DELETE_CHECKPOINT, (checkpoint_id,))
    if checkpoint["kind"] == "WAIT":
        return waits.look(tx, instance, checkpoint["wait_id"], steps.SCANNER)
    return steps.advance(tx, instance)
