"""Where an instance stands on its list of steps (D3), and what a task outcome means for its step (P7)."""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATE = "ACTIVATE"  # the step at `index` has no activation yet: start it (if the gate allows)
BUSY = "BUSY"  # the step at `index` is ACTIVE: wait for it
STUCK = "STUCK"  # the step at `index` needs review, failed or was cancelled: nothing moves by itself
FINISHED = "FINISHED"  # every step succeeded


@dataclass(frozen=True)
class Frontier:
    move: str
    index: int | None = None


def frontier(step_keys: list[str], latest_status: dict[str, str]) -> Frontier:
    """The first step, in list order, whose latest activation has not succeeded."""
    for index, key in enumerate(step_keys):
        status = latest_status.get(key)
        if status == "SUCCEEDED":
            continue
        if status is None:
            return Frontier(ACTIVATE, index)
        if status == "ACTIVE":
            return Frontier(BUSY, index)
        return Frontier(STUCK, index)
    return Frontier(FINISHED)


# Review reasons for a TASK step whose task did not succeed (P7).
TASK_REVIEW_REASONS = {
    "FAILED": "TASK_FAILED",
    "UNKNOWN": "TASK_OUTCOME_UNKNOWN",
    "CANCELLED": "TASK_CANCELLED",
}
STEP_DEADLINE_EXCEEDED = "STEP_DEADLINE_EXCEEDED"
