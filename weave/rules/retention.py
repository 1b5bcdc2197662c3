"""Retention (L1, L3): how long a namespace keeps what ended, and what a purge pass may take.

A namespace keeps its ended instances and its settled facts of no instance `retention_days` after
they ended (0: until the next pass; None: forever), and its audit records
`audit_retention_days`, but never fewer days than the instances they tell of: the effective audit
retention is the larger of the two, and forever when either is forever (an instance kept forever
keeps the records of it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

# The rows of each table one purge transaction removes at most (a chunk): enough that a small instance goes in
# one transaction, few enough that its locks are held for milliseconds.
CHUNK_ROWS = 500
# The instance statuses nothing leaves: only these are ever purged (weave.rules.gate.TERMINAL).
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
# The facts of no instance that are settled for good (§14): a PARKED one may still be taken.
SETTLED_FACTS = ("EXPIRED", "REJECTED")
MAX_DAYS = 36_500  # a hundred years: beyond it, say forever
# How long a purge waits for a notification of the instance still to be sent (N2), from the change
# it tells of: long enough for a delivery to a working endpoint (seconds) and a day of its retries;
# bounded, so that an endpoint down for good does not keep a namespace's ended workflows forever
# (the purge takes the oldest first: those it waits for hold back the rest of their range).
NOTIFICATION_GRACE = timedelta(days=1)


def waits(live_tasks: int, unsent_at: datetime | None, now: datetime) -> bool:
    """Whether an ended instance's purge waits: a task of it still QUEUED or RUNNING (it holds its
    queue's permit), or a notification still to be sent of a change less than NOTIFICATION_GRACE
    ago (`unsent_at`: the newest such change; None when none is unsent)."""
    return bool(live_tasks) or (unsent_at is not None and now - unsent_at < NOTIFICATION_GRACE)


def audit_days(retention_days: int | None, audit_retention_days: int | None) -> int | None:
    """The days audit records are kept in fact: max(M, N); None (forever) when either is None."""
    if retention_days is None or audit_retention_days is None:
        return None
    return max(retention_days, audit_retention_days)


def cutoff(now: datetime, days: int) -> datetime:
    """What ended at or before this time is past a retention of `days`."""
    return now - timedelta(days=days)


def retention_ends(ended_at: datetime, days: int) -> datetime:
    """When what ended at `ended_at` is past a retention of `days`."""
    return ended_at + timedelta(days=days)


def past_retention(ended_at: datetime, days: int | None, now: datetime) -> bool:
    return days is not None and ended_at <= cutoff(now, days)


def leading_past(times: list[datetime], limit: datetime) -> int:
    """How many of `times`, in the order of their ids, come before the first one after `limit`:
    a pass takes facts and audit records in id order and stops at the first one it must keep, so
    that its cursor never passes over one (ids grow with time, nearly: the first kept is the end)."""
    for index, when in enumerate(times):
        if when > limit:
            return index
    return len(times)


def fitting(rows: list[dict[str, int]], chunk_rows: int) -> int:
    """How many of the instances whose rows are counted in `rows` (table -> rows, one dict per
    instance, in the order they are taken) one purge transaction takes together: the leading ones
    that hold at most `chunk_rows` rows of each table between them, like one chunk of one instance."""
    total: dict[str, int] = {}
    for taken, counts in enumerate(rows):
        for table, n in counts.items():
            total[table] = total.get(table, 0) + n
            if total[table] > chunk_rows:
                return taken
    return len(rows)


# ---- pacing (docs/decisions.md, "A paced purge") ----------------------------------------------------


def rest_after(work_seconds: float, share: float) -> float:
    """The rest after a purge transaction that took `work_seconds`, so that work is at most
    `share` of the wall time (pt-archiver's `--sleep-coef`, with the coefficient (1 - share) /
    share): a transaction slowed down by a busy server is followed by a longer rest. A share of 1
    (or more): no rest."""
    if share >= 1:
        return 0.0
    return work_seconds * (1 - share) / share
