"""The scanner processes that share the candidates (`scanner_processes`, migration 0020): a member
joins, writes its heartbeat with its listings (or alone, during a long batch), reads the live
members with them, and leaves on a clean stop (`weave.rules.sharing`; docs/decisions.md, "Scanners
that share work"). Only this small table is locked, one row at a time.
"""

from __future__ import annotations

from datetime import datetime

from weave.db import unit_of_work
from weave.rules.sharing import FORGOTTEN_AFTER
from weave.tx import Tx

FORGET_DEAD = "DELETE FROM scanner_processes WHERE heartbeat_at < %s"
JOIN = "INSERT INTO scanner_processes (host, pid, started_at, heartbeat_at) VALUES (%s, %s, %s, %s)"
HEARTBEAT = "UPDATE scanner_processes SET heartbeat_at = %s WHERE id = %s"
LIVE_MEMBERS = "SELECT id, heartbeat_at FROM scanner_processes WHERE heartbeat_at >= %s"
LEAVE = "DELETE FROM scanner_processes WHERE id = %s"


@unit_of_work
def join(tx: Tx, host: str, pid: int) -> int:
    """A new member, live from now; the rows of members long dead go (the table stays as small as
    the scanners running)."""
    now = tx.now()
    tx.execute(FORGET_DEAD, (now - FORGOTTEN_AFTER,))
    return tx.insert(JOIN, (host, pid, now, now))


def heartbeat(tx: Tx, member_id: int, now: datetime) -> None:
    """Queue the member's heartbeat: it travels with the listing that follows (`Tx.all_together`)."""
    tx.later(HEARTBEAT, (now, member_id))


@unit_of_work
def beat(tx: Tx, member_id: int) -> datetime:
    """The member's heartbeat on its own, between the candidates of a long batch; its time."""
    now = tx.now()
    tx.later(HEARTBEAT, (now, member_id))
    return now


def listing_live(since: datetime) -> tuple[str, tuple]:
    """The read of the members whose heartbeat is at or after `since`, for `Tx.all_together`."""
    return LIVE_MEMBERS, (since,)


@unit_of_work
def leave(tx: Tx, member_id: int) -> None:
    tx.execute(LEAVE, (member_id,))
