"""The execution gate (I3, I4, I6): may an instance start new work now, and which gate is in force?"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave.statuses import Gate, InstanceStatus

OPEN = Gate.OPEN
CLOSED = Gate.CLOSED
# instance statuses nothing ever leaves
TERMINAL = (InstanceStatus.SUCCEEDED, InstanceStatus.FAILED, InstanceStatus.CANCELLED)


@dataclass(frozen=True)
class GateFacts:
    status: str  # instance status
    gate: str
    application_status: str
    deadline_at: datetime  # total deadline
    now: datetime


# What a ROOT look decides about new work.
GO = "GO"  # start it
HOLD = "HOLD"  # not now (paused, in review, disabled application); someone will look again
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # I4: keep the facts, send the instance to review
SETTLED = "SETTLED"  # terminal instance: nothing more will ever start


def new_work(facts: GateFacts) -> str:
    if facts.status in TERMINAL:
        return SETTLED
    if facts.status != InstanceStatus.RUNNING or facts.application_status != "ACTIVE":
        return HOLD
    # Before the gate: a running instance whose gate its deadline's look has closed (I6) goes to
    # review when it needs new work (I4), as one whose look has not run yet does.
    if facts.now >= facts.deadline_at:
        return DEADLINE_EXCEEDED
    if facts.gate != OPEN:
        return HOLD
    return GO


def in_force(status: str, deadline_at: datetime, now: datetime) -> str:
    """The gate of an instance that is (or goes) `status` at `now` (I3): open only while it runs
    before its total deadline. A disabled application holds new work back without closing the gate:
    nothing announces its re-enabling, so it is asked again at each look."""
    return OPEN if status == InstanceStatus.RUNNING and now < deadline_at else CLOSED


def passes_deadline(facts: GateFacts) -> bool:
    """I6: the look finds a running instance whose gate is open past its total deadline; it closes
    the gate and records DEADLINE_PASSED (once: the gate is then closed)."""
    return facts.status == InstanceStatus.RUNNING and facts.gate == OPEN and facts.now >= facts.deadline_at
