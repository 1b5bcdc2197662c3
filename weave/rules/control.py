"""R1: which control action is allowed from which instance status, and where it leads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transition:
    status: str
    gate: str


# action -> (statuses it may start from, where it leads)
TRANSITIONS: dict[str, tuple[tuple[str, ...], Transition]] = {
    "pause": (("RUNNING",), Transition("PAUSED", "CLOSED")),
    "resume": (("PAUSED",), Transition("RUNNING", "OPEN")),
    "cancel": (("RUNNING", "PAUSED", "NEEDS_REVIEW"), Transition("CANCELLED", "CLOSED")),
}


def transition(action: str, status: str) -> Transition | None:
    """Where `action` takes an instance in `status`, or None when it is not allowed (409)."""
    allowed_from, target = TRANSITIONS[action]
    return target if status in allowed_from else None
