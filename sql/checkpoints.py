"""Checkpoints: due times at which the scanner must look at an instance (ROOT) or a wait (WAIT).

`due_at` is when the look is due and never moves; `available_at` is the next try and moves only
by backoff after a failed try.
"""

from __future__ import annotations

from datetime import datetime

from weave.db import Tx

INSERT_CHECKPOINT = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
VALUES (%s, %s, %s, %s, %s, 0, %s)
"""


def schedule_root(tx: Tx, instance_id: int, due_at: datetime) -> int:
    """Ask the scanner to advance the instance at `due_at`."""
    return tx.insert(INSERT_CHECKPOINT, (instance_id, "ROOT", None, due_at, due_at, tx.now()))
