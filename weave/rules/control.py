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


def transition(action: str, status: str) -> Transition | None:
    """Where `action` takes an instance in `status`, or None when it is not allowed (409)."""
    allowed_from, target = TRANSITIONS[action]
    return target if status in allowed_from else None
