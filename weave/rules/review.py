"""R2: which review action an operator may take on an instance now, and why not."""

from __future__ import annotations

from dataclasses import dataclass

from weave.rules import gate

RETRY_STEP, COMPLETE_STEP, FAIL, CANCEL = "retry_step", "complete_step", "fail", "cancel"
ACTIONS = (RETRY_STEP, COMPLETE_STEP, FAIL, CANCEL)
STEP_ACTIONS = (RETRY_STEP, COMPLETE_STEP)  # the actions that name the step under review


@dataclass(frozen=True)
class ReviewFacts:
    action: str
    instance_status: str
    step_status: str | None  # the named step's latest activation; None when it has none (or none is named)
    task_running: bool  # that activation has a RUNNING task: its outcome is not known yet
    new_work: str  # what the gate would say of new work once the instance runs again (I3, I4)


@dataclass(frozen=True)
class Refusal:
    code: str  # a problem code: INVALID_STATE or TASK_IN_FLIGHT
    detail: str


def refusal(facts: ReviewFacts) -> Refusal | None:
    """Why the action is refused (409), or None when it may be taken."""
    if facts.instance_status != "NEEDS_REVIEW":
        return Refusal("INVALID_STATE", f"the workflow is {facts.instance_status}; review is for NEEDS_REVIEW")
    if facts.action not in STEP_ACTIONS:
        return None  # fail and cancel end the instance whatever its steps are doing (P5 for running tasks)
    if facts.step_status != "NEEDS_REVIEW":
        return Refusal("INVALID_STATE", f"the step is {facts.step_status or 'NOT_STARTED'}, not the one under review")
    if facts.task_running:
        return Refusal("TASK_IN_FLIGHT", "the step's task is still running; its outcome is not known yet")
    if facts.action == RETRY_STEP and facts.new_work == gate.DEADLINE_EXCEEDED:
        return Refusal("INVALID_STATE", "the workflow's total deadline has passed: no new work can start")
    if facts.action == RETRY_STEP and facts.new_work != gate.GO:
        return Refusal("INVALID_STATE", "the workflow's application is disabled: no new work can start")
    return None
