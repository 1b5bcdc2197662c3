"""R2, R4: which review action an operator may take on an instance now, why not (and what to do
instead), and where extending the total deadline leaves the instance."""

from __future__ import annotations

from dataclasses import dataclass

from weave.rules import gate
from weave.rules.control import Transition
from weave.statuses import InstanceStatus

RETRY_STEP, COMPLETE_STEP, FAIL, CANCEL = "retry_step", "complete_step", "fail", "cancel"
EXTEND_DEADLINE = "extend_deadline"
ACTIONS = (RETRY_STEP, COMPLETE_STEP, FAIL, CANCEL, EXTEND_DEADLINE)
STEP_ACTIONS = (RETRY_STEP, COMPLETE_STEP)  # the actions that name the step under review
RUNNING, PAUSED, NEEDS_REVIEW = InstanceStatus.RUNNING, InstanceStatus.PAUSED, InstanceStatus.NEEDS_REVIEW
# R4: the total deadline of an instance that has not ended may be set again, whatever holds it
EXTENDABLE = (RUNNING, PAUSED, NEEDS_REVIEW)
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # the review reason of I4


@dataclass(frozen=True)
class ReviewFacts:
    action: str
    instance_status: str
    step_key: str | None  # the step the action names (None when it names none)
    step_status: str | None  # its latest activation; None when it has none (or none is named)
    task_running: bool  # that activation has a RUNNING task: its outcome is not known yet
    new_work: str  # what the gate would say of new work once the instance runs again (I3, I4)
    under_review: str | None = None  # the step whose latest activation is NEEDS_REVIEW, if any
    review_reason: str | None = None  # the instance's


@dataclass(frozen=True)
class Refusal:
    code: str  # a problem code: INVALID_STATE or TASK_IN_FLIGHT
    detail: str


def refusal(facts: ReviewFacts) -> Refusal | None:
    """Why the action is refused (409), or None when it may be taken. A refusal says what the
    operator can do instead where there is something (issue 28, item 9)."""
    if facts.action == EXTEND_DEADLINE:
        if facts.instance_status in EXTENDABLE:
            return None
        return Refusal("INVALID_STATE", f"the workflow is {facts.instance_status}: it has ended, no deadline is left")
    if facts.instance_status != NEEDS_REVIEW:
        return Refusal("INVALID_STATE", f"the workflow is {facts.instance_status}; review is for NEEDS_REVIEW")
    if facts.action not in STEP_ACTIONS:
        return None  # fail and cancel end the instance whatever its steps are doing (P5 for running tasks)
    if facts.step_status != NEEDS_REVIEW:
        return Refusal("INVALID_STATE", _not_under_review(facts))
    if facts.task_running:
        return Refusal("TASK_IN_FLIGHT", "the step's task is still running; its outcome is not known yet")
    if facts.action == RETRY_STEP and facts.new_work == gate.DEADLINE_EXCEEDED:
        return Refusal(
            "INVALID_STATE",
            "the workflow's total deadline has passed: no new work can start; "
            "extend_deadline first (with deadline_seconds), then retry_step",
        )
    if facts.action == RETRY_STEP and facts.new_work != gate.GO:
        return Refusal("INVALID_STATE", "the workflow's application is disabled: no new work can start")
    return None


def _not_under_review(facts: ReviewFacts) -> str:
    """The refusal of retry_step/complete_step for a step that is not under review, with what the
    operator can do instead: review the step that is, or, when the workflow stopped before it
    (a total deadline passed between two steps), extend the deadline or end the workflow."""
    said = f"step {facts.step_key!r} is {facts.step_status or 'NOT_STARTED'}, not under review"
    if facts.under_review is not None:
        return f"{said}; the step under review is {facts.under_review!r}"
    if facts.review_reason == DEADLINE_EXCEEDED:
        return (
            f"{said}: the workflow stopped at its total deadline before starting its next step "
            "(DEADLINE_EXCEEDED), and no step is under review; extend_deadline (with deadline_seconds) "
            "lets it go on, or fail or cancel it"
        )
    return f"{said}, and no step is under review: fail or cancel the workflow"


def after_extension(status: str, review_reason: str | None, under_review: str | None) -> Transition:
    """R4: where a new total deadline (in the future) leaves an instance in `status`: the gate
    reopens if nothing else holds it closed. A pause still holds it; so does a step under review
    (retry_step or complete_step then). An instance stopped by the deadline alone (I4: no step
    under review) runs on."""
    if status == RUNNING or (status == NEEDS_REVIEW and review_reason == DEADLINE_EXCEEDED and under_review is None):
        return Transition(RUNNING, gate.OPEN)
    return Transition(status, gate.CLOSED)
