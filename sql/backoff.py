"""Failed tries of scanner sources (K2): count them, keep the error, move `available_at` only.

A source row (checkpoint, inbox event, signal) that failed to process is left in place with
`attempts + 1`, `last_error` and a backed-off `available_at`; its facts (`due_at`, `completed_at`,
`expires_at`, …) never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave.db import unit_of_work
from weave.rules import pulse
from weave.tx import Tx

MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class Source:
    lock: str  # SELECT attempts … WHERE id = %s FOR UPDATE
    record: str  # UPDATE … SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s


@unit_of_work
def record_failure(tx: Tx, source: Source, source_id: int, error: str) -> datetime | None:
    """Returns the new `available_at`, or None when the row is gone (it was processed after all).

    A re-run after a COMMIT whose answer was lost (`Tx.maybe_committed`) tells its earlier
    attempt's count by what that attempt wrote, not by arithmetic alone: the count one above the
    one it read *and* the `available_at` it chose (a time to the microsecond) mean it committed
    and nothing counted since. One above with another `available_at` is another scanner's failure
    on the same row, counted while ours rolled back: ours is counted now (issue 25; the fault
    tests found the count one short). Two or more above: ours and others', or others' alone; it
    is taken as committed, and if it was not, the count is one short: a backoff that grows one
    step slower once is the harmless side of the doubt."""
    row = tx.one(source.lock, (source_id,))
    if row is None:
        return None
    seen = tx.memo.get("seen")
    if tx.maybe_committed and seen is not None:
        ours = row["attempts"] == seen["attempts"] + 1 and row["available_at"] == seen["available_at"]
        if ours or row["attempts"] > seen["attempts"] + 1:
            return seen["available_at"]
    available_at = tx.now() + pulse.retry_delay(row["attempts"] + 1)
    tx.memo["seen"] = {"attempts": row["attempts"], "available_at": available_at}
    tx.transition(source.record, (error[:MAX_ERROR_CHARS], available_at, source_id), f"back off source row {source_id}")
    return available_at
