"""How scanner processes share the due candidates instead of colliding on them (issue 31, item 3;
docs/decisions.md, "Scanners that share work").

Each running scanner process is a member (`scanner_processes`) with a heartbeat; its rank is its
place among the live members' ids. Every member lists the oldest due candidates of every source
as before, `listing_limit` of them, and takes those whose partition key (the candidate's instance,
else the candidate itself) hashes to its rank, so two members rarely claim the same row and one
instance's work stays with one member. Nothing is left behind when a member dies or hangs: the
candidates of a member whose heartbeat is older than `STALLED` (a member writes one a second while
it runs batches) are taken at once by their backup (a second hash over the other members, so that
the survivors of a dead member split its share rather than collide on it); and a candidate a
member has seen listed for `GRACE` without anyone taking it, it takes itself whatever its hash (the
backup is stuck too, or the members disagree for a moment while one joins or leaves). A member
silent for `LIVE` is no longer counted: the others split everything between them again. Alone
(or not a member: a one-off batch) a scanner takes every candidate, oldest first, as it always
did.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# Fibonacci hashing: 2**64 over the golden ratio. Multiplying spreads consecutive ids (instances are
# created in order) evenly over the members; the top bits of the product pick the member.
HASH_MULTIPLIER = 0x9E3779B97F4A7C15
BACKUP_MULTIPLIER = 0xC2B2AE3D27D4EB4F  # another odd constant: the backup does not follow the owner
WORD = 2**64

# A member writes its heartbeat (with a listing, or between the candidates of a batch) at most this often.
HEARTBEAT_EVERY = timedelta(seconds=1)
LIVE = timedelta(seconds=10)  # a member whose heartbeat is older is no longer counted
STALLED = timedelta(seconds=3)  # a member whose heartbeat is older: its backups take its share
GRACE = timedelta(seconds=5)  # a candidate listed that long without anyone taking it: taken by whoever lists it
FORGOTTEN_AFTER = timedelta(minutes=10)  # rows of members dead that long are deleted by the next to join
MAX_LISTED_SHARES = 8  # the listing is `batch_size` per member, up to this many members' worth


@dataclass(frozen=True)
class Membership:
    rank: int
    members: int
    stalled: frozenset[int] = frozenset()  # ranks of the members whose heartbeat is older than `STALLED`


ALONE = Membership(0, 1)


def _pick(partition_key: int, multiplier: int, members: int) -> int:
    return ((partition_key * multiplier) % WORD * members) // WORD


def owner(partition_key: int, members: int) -> int:
    """The rank, in [0, members), of the member whose share `partition_key` is."""
    return _pick(partition_key, HASH_MULTIPLIER, members)


def backup(partition_key: int, members: int) -> int | None:
    """The rank of the member that takes `partition_key`'s candidates when its owner leaves them
    past the grace: one of the others, spread evenly; None when there are no others."""
    if members < 2:
        return None
    first = owner(partition_key, members)
    picked = _pick(partition_key, BACKUP_MULTIPLIER, members - 1)
    return picked if picked < first else picked + 1


def membership(member_id: int, live: Mapping[int, datetime], now: datetime) -> Membership:
    """A member's rank among the live members (id -> heartbeat, each within `LIVE`), and which of
    the others are stalled; itself counted even if its own row was not read (it joins again: the
    others count it from their next listing)."""
    ids = sorted(set(live) | {member_id})
    stalled = frozenset(rank for rank, other in enumerate(ids) if other != member_id and now - live[other] >= STALLED)
    return Membership(ids.index(member_id), len(ids), stalled)


def listing_limit(batch_size: int, members: int) -> int:
    """How many candidates a member lists from each source: about a batch of its own share."""
    return batch_size * max(1, min(members, MAX_LISTED_SHARES))


def heartbeat_due(last: datetime | None, now: datetime) -> bool:
    return last is None or now - last >= HEARTBEAT_EVERY


@dataclass(frozen=True)
class Share:
    taken: list[Hashable]  # the candidates this member processes now, in the listing's order
    waiting: dict[Hashable, datetime]  # those it leaves to their owners, with when it first listed each
    taken_over: int  # of `taken`, how many were another member's share, listed past the grace


def share(
    listed: Sequence[tuple[Hashable, int]],
    member: Membership,
    waiting_since: Mapping[Hashable, datetime],
    now: datetime,
    batch_size: int,
    grace: timedelta = GRACE,
) -> Share:
    """Of `listed` ((candidate, partition key), oldest first), the at most `batch_size` this member
    takes: its own share; of the others', those of a stalled member whose backup it is, and those it
    has seen listed for `grace` (`waiting_since`, from its previous listings). A candidate that is
    not taken keeps the time it was first seen; one that no longer appears (processed, or not due
    any more) is forgotten."""
    taken: list[Hashable] = []
    waiting: dict[Hashable, datetime] = {}
    taken_over = 0
    for candidate, key in listed:
        since = waiting_since.get(candidate, now)
        first = owner(key, member.members)
        own = first == member.rank
        overdue = not own and (
            now - since >= grace or (first in member.stalled and backup(key, member.members) == member.rank)
        )
        if (own or overdue) and len(taken) < batch_size:
            taken.append(candidate)
            taken_over += overdue
        elif not own:
            waiting[candidate] = since
    return Share(taken, waiting, taken_over)
