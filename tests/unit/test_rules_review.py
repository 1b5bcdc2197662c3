"""R2, R4 without a database: which review action is allowed, what a refusal says to do instead
(issue 28, item 9), and where extend_deadline leaves an instance."""

import pytest

from weave.rules import gate
from weave.rules.control import Transition
from weave.rules.review import ReviewFacts, after_extension, refusal


def facts(action, status="NEEDS_REVIEW", step_status="NEEDS_REVIEW", **kwargs) -> ReviewFacts:
    return ReviewFacts(
        action=action,
        instance_status=status,
        step_key=kwargs.pop("step_key", "ship"),
        step_status=step_status,
        task_running=kwargs.pop("task_running", False),
        new_work=kwargs.pop("new_work", gate.GO),
        under_review=kwargs.pop("under_review", "ship" if step_status == "NEEDS_REVIEW" else None),
        review_reason=kwargs.pop("review_reason", "TASK_FAILED"),
    )


@pytest.mark.parametrize("status", ["RUNNING", "PAUSED", "NEEDS_REVIEW"])
def test_R4_extend_deadline_is_allowed_until_the_workflow_ends(status):
    assert refusal(facts("extend_deadline", status, None)) is None


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_R4_extend_deadline_is_refused_once_the_workflow_has_ended(status):
    refused = refusal(facts("extend_deadline", status, None))
    assert refused.code == "INVALID_STATE" and status in refused.detail


def test_R2_R4_retry_past_the_deadline_points_at_extend_deadline():
    refused = refusal(facts("retry_step", new_work=gate.DEADLINE_EXCEEDED))
    assert refused.code == "INVALID_STATE" and "extend_deadline first" in refused.detail


def test_R2_complete_past_the_deadline_is_allowed():
    assert refusal(facts("complete_step", new_work=gate.DEADLINE_EXCEEDED)) is None


@pytest.mark.parametrize("action", ["retry_step", "complete_step"])
def test_R2_a_step_not_started_when_time_stopped_the_workflow_says_extend_fail_or_cancel(action):
    refused = refusal(facts(action, step_status=None, review_reason="DEADLINE_EXCEEDED"))
    assert refused.code == "INVALID_STATE"
    assert refused.detail.startswith("step 'ship' is NOT_STARTED, not under review: the workflow stopped")
    assert "extend_deadline (with deadline_seconds) lets it go on, or fail or cancel it" in refused.detail


def test_R2_a_step_not_under_review_names_the_one_that_is():
    refused = refusal(facts("retry_step", step_status="SUCCEEDED", step_key="reserve", under_review="ship"))
    assert refused.detail == "step 'reserve' is SUCCEEDED, not under review; the step under review is 'ship'"


def test_R2_no_step_under_review_for_another_reason_says_fail_or_cancel():
    refused = refusal(facts("retry_step", step_status=None, review_reason="SOMETHING_NEW"))
    assert refused.detail.endswith("no step is under review: fail or cancel the workflow")


EXTENSIONS = [
    # (status, review reason, step under review, where extend_deadline leaves the instance)
    ("RUNNING", None, None, Transition("RUNNING", "OPEN")),  # reopened if the deadline had closed it
    ("PAUSED", None, None, Transition("PAUSED", "CLOSED")),  # the pause still holds it
    ("NEEDS_REVIEW", "DEADLINE_EXCEEDED", None, Transition("RUNNING", "OPEN")),  # time alone stopped it
    ("NEEDS_REVIEW", "WAIT_EXPIRED", "payment", Transition("NEEDS_REVIEW", "CLOSED")),  # retry or complete then
    ("NEEDS_REVIEW", "DEADLINE_EXCEEDED", "payment", Transition("NEEDS_REVIEW", "CLOSED")),
]


@pytest.mark.parametrize("status, reason, under_review, expected", EXTENSIONS)
def test_R4_the_gate_reopens_only_if_nothing_else_holds_it_closed(status, reason, under_review, expected):
    assert after_extension(status, reason, under_review) == expected
