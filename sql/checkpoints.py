"""Checkpoints: due times at which the scanner must look at an instance (ROOT) or a wait (WAIT),
or tell subscribers that a wait's deadline is near (NEAR, docs/rules.md#notifications, N1).

`due_at` is when the look is due and never moves; `available_at` is the next try and moves only
by backoff after a failed try. What a look does is the engine's (`engine.process_checkpoint`).
"""

from __future__ import annotations

from datetime import datetime

from weave.sql import backoff
from weave.tx import Tx

INSERT_CHECKPOINT = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
VALUES (%s, %s, %s, %s, %s, 0, %s)
"""


def schedule_root(tx: Tx, instance_id: int, due_at: datetime) -> None:
    """Ask the scanner to advance the instance at `due_at` (queued, like every write nothing reads back)."""
    tx.later(INSERT_CHECKPOINT, (instance_id, "ROOT", None, due_at, due_at, tx.now()))


def schedule_wait(tx: Tx, instance_id: int, wait_id: int, due_at: datetime) -> None:
    """Ask the scanner to look at one wait at `due_at` (its signals, or its deadline); queued."""
    tx.later(INSERT_CHECKPOINT, (instance_id, "WAIT", wait_id, due_at, due_at, tx.now()))


def schedule_near(tx: Tx, instance_id: int, wait_id: int, due_at: datetime) -> None:
    """Ask the scanner to notify `wait.deadline_near` at `due_at` if the wait has no winner then; queued."""
    tx.later(INSERT_CHECKPOINT, (instance_id, "NEAR", wait_id, due_at, due_at, tx.now()))


def look_again(tx: Tx, instance_id: int, due_at: datetime) -> None:
    """A ROOT look at `due_at` for a unit that defers without deciding: it stands whether the unit
    commits or is rolled back as undecided (`Tx.afterwards`)."""
    tx.afterwards(INSERT_CHECKPOINT, (instance_id, "ROOT", None, due_at, due_at, tx.now()))


DUE_CHECKPOINTS = """
SELECT id, available_at AS due_at, instance_id FROM checkpoints
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
    lock="SELECT attempts, available_at FROM checkpoints WHERE id = %s FOR UPDATE",
    record="UPDATE checkpoints SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)


COUNT_DUE = "SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= %s"


def listing_due(now: datetime, limit: int) -> tuple[str, tuple]:
    """The read of the checkpoints due at `now`, oldest first, for `Tx.all_together`."""
    return DUE_CHECKPOINTS, (now, limit)


def due_candidates(tx: Tx, limit: int) -> list[dict]:
    return tx.all(*listing_due(tx.now(), limit))


def count_due(tx: Tx) -> int:
    return tx.one(COUNT_DUE, (tx.now(),))["n"]


def claim(tx: Tx, checkpoint_id: int) -> dict | None:
    """The checkpoint, locked, or None when another scanner has it or it is done."""
    return tx.one(CLAIM_CHECKPOINT, (checkpoint_id,))


def delete(tx: Tx, checkpoint_id: int) -> None:
    """A look that was done: the claimed checkpoint goes with the look's decision, or alone when
    the look decided nothing (`Tx.afterwards`: the unit is then rolled back)."""
    tx.afterwards(DELETE_CHECKPOINT, (checkpoint_id,), f"delete checkpoint {checkpoint_id}")
