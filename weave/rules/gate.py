"""The execution gate (I3, I4): may an instance start new work now?"""

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
    if facts.status != InstanceStatus.RUNNING or facts.gate != OPEN or facts.application_status != "ACTIVE":
        return HOLD
    if facts.now >= facts.deadline_at:
        return DEADLINE_EXCEEDED
    return GO
