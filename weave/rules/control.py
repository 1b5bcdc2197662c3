"""R1: which control action is allowed from which instance status, and where it leads."""

from __future__ import annotations

from dataclasses import dataclass

from weave.statuses import Gate, InstanceStatus


@dataclass(frozen=True)
class Transition:
    status: str
    gate: str


# action -> (statuses it may start from, where it leads)
RUNNING, PAUSED, NEEDS_REVIEW = InstanceStatus.RUNNING, InstanceStatus.PAUSED, InstanceStatus.NEEDS_REVIEW
TRANSITIONS: dict[str, tuple[tuple[str, ...], Transition]] = {
    "pause": ((RUNNING,), Transition(PAUSED, Gate.CLOSED)),
    "resume": ((PAUSED,), Transition(RUNNING, Gate.OPEN)),
    "cancel": ((RUNNING, PAUSED, NEEDS_REVIEW), Transition(InstanceStatus.CANCELLED, Gate.CLOSED)),
}


def transition(action: str, status: str, deadline_passed: bool = False) -> Transition | None:
    """Where `action` takes an instance in `status`, or None when it is not allowed (409). A resume
    past the total deadline leaves the gate closed (I3, I6): the deadline still holds it."""
    allowed_from, target = TRANSITIONS[action]
    if status not in allowed_from:
        return None
    if target.gate == Gate.OPEN and deadline_passed:
        return Transition(target.status, Gate.CLOSED)
    return target
