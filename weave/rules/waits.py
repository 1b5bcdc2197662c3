"""Who wins a wait (S2.2, S2.3, S2.5, S2.6): decided by the facts' times, never by who runs first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class WaitFacts:
    name: str | None
    payload_version: str | None  # None: a wait older than signal identity; it matches nothing
    correlation: bytes | None
    deadline_at: datetime


@dataclass(frozen=True)
class PendingSignal:
    id: int
    name: str
    payload_version: str | None
    correlation: bytes
    accepted_at: datetime


@dataclass
class Verdict:
    winner: int | None = None
    rejected: dict[int, str] = field(default_factory=dict)  # signal id -> disposition
    expire: bool = False  # the deadline passed with no on-time match


def adjudicate(wait: WaitFacts, pending: list[PendingSignal], now: datetime) -> Verdict:
    """`pending`: the PENDING signals of the wait's generation (step and activation sequence)."""
    verdict = Verdict()
    for signal in sorted(pending, key=lambda s: (s.accepted_at, s.id)):
        # A mismatch is a mismatch wherever it stands; WAIT_SETTLED is only for matching losers.
        if (
            wait.payload_version is None
            or signal.name != wait.name
            or signal.payload_version != wait.payload_version
            or signal.correlation != wait.correlation
        ):
            verdict.rejected[signal.id] = "CORRELATION_MISMATCH"
        elif verdict.winner is not None:
            verdict.rejected[signal.id] = "WAIT_SETTLED"
        elif signal.accepted_at >= wait.deadline_at:
            verdict.rejected[signal.id] = "LATE"  # equal to the deadline is late
        else:
            verdict.winner = signal.id  # accepted on time: it counts even if we look late
    verdict.expire = verdict.winner is None and now >= wait.deadline_at
    return verdict


NEAR_FRACTION = 0.8  # `wait.deadline_near` (N1): this far from the wait's activation to its deadline


def near_deadline(activated_at: datetime, deadline_at: datetime) -> datetime:
    """When a wait opened at `activated_at` is 80 % of the way to its deadline (N1)."""
    return activated_at + (deadline_at - activated_at) * NEAR_FRACTION
