"""P7, D3, I3, I4: TASK steps move an instance from start to SUCCEEDED or to review."""

from datetime import timedelta

import pytest
from helpers import task_steps

from weave.scanner import SOURCES
from weave.sql import tenancy


def test_p7_d3_three_step_task_workflow_runs_to_succeeded(flow):
    flow.publish(task_steps("reserve", "charge", "ship"))
    flow.start("order-1", input={"order_id": "o-1"})
    assert flow.claim().status_code == 204  # nothing before the scanner activates the first step
    flow.scan()
    results = {"reserve": {"reservation_id": "r-9"}, "charge": {"amount": 12.50}, "ship": {"tracking": "T1"}}
    for key in ("reserve", "charge", "ship"):
        claimed = flow.claim()
        assert claimed.status_code == 200, claimed.text
        task = claimed.json
        assert (task["step_key"], task["kind"], task["attempt"], task["max_attempts"]) == (key, "TASK", 1, 3)
        assert task["workflow_id"] == "order-1" and task["activation_sequence"] == 1
        assert task["input"]["input"] == {"order_id": "o-1"}
        done_before = {
            k: {"result": results[k]} for k in ("reserve", "charge", "ship")[: ("reserve", "charge", "ship").index(key)]
        }
        assert task["input"]["steps"] == done_before
        assert flow.complete(task, result=results[key]).json["status"] == "SUCCEEDED"
        flow.scan()
    workflow = flow.workflow("order-1")
    assert (workflow["status"], workflow["gate"]) == ("SUCCEEDED", "CLOSED")
    assert [(s["key"], s["status"], s["result"]) for s in workflow["steps"]] == [
        ("reserve", "SUCCEEDED", {"reservation_id": "r-9"}),
        ("charge", "SUCCEEDED", {"amount": 12.50}),
        ("ship", "SUCCEEDED", {"tracking": "T1"}),
    ]
    assert all(s["task"]["status"] == "SUCCEEDED" for s in workflow["steps"])
    assert flow.events("order-1") == ["WORKFLOW_STARTED"] + ["STEP_ACTIVATED", "STEP_SUCCEEDED"] * 3 + [
        "WORKFLOW_SUCCEEDED"
    ]
    assert (
        flow.rows("SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= %s", (flow.database.clock.now(),))[0][
            "n"
        ]
        == 0
    )


def test_p7_failed_task_sends_step_and_instance_to_review_with_gate_closed(flow):
    flow.publish(task_steps("reserve", "charge", max_attempts=1))
    flow.start("order-2")
    flow.scan()
    task = flow.claim().json
    assert (
        flow.complete(task, "FAILED", error={"message": "card declined", "retryable": True}).json["status"] == "FAILED"
    )
    flow.scan()
    workflow = flow.workflow("order-2")
    assert (workflow["status"], workflow["gate"], workflow["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "TASK_FAILED",
    )
    assert workflow["steps"][0]["status"] == "NEEDS_REVIEW"
    assert workflow["steps"][0]["review_reason"] == "TASK_FAILED"
    assert workflow["steps"][1]["status"] == "NOT_STARTED"
    assert flow.events("order-2")[-2:] == ["STEP_NEEDS_REVIEW", "WORKFLOW_NEEDS_REVIEW"]
    audit = flow.rows("SELECT actor, action FROM audit_records WHERE action IN ('step.settle', 'workflow.state')")
    assert {(a["actor"], a["action"]) for a in audit} == {
        ("system:scanner", "step.settle"),
        ("system:scanner", "workflow.state"),
    }


def test_p7_step_deadline_without_outcome_goes_to_review_and_cancels_the_queued_task(flow, clock):
    flow.publish(task_steps("reserve", timeout=30))
    flow.start("order-3")
    flow.scan()
    clock.advance(30)
    flow.scan()
    workflow = flow.workflow("order-3")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "STEP_DEADLINE_EXCEEDED")
    assert workflow["steps"][0]["task"]["status"] == "CANCELLED"
    assert flow.claim().status_code == 204
    # The cancelled task's inbox event is collected and recorded, without reopening the step.
    assert flow.events("order-3")[-1] == "TASK_OUTCOME_RECORDED"


def test_p7_task_finished_before_the_step_deadline_counts_even_when_consumed_late(flow, clock):
    flow.publish(task_steps("reserve", timeout=30))
    flow.start("order-4")
    flow.scan()
    task = flow.claim().json
    clock.advance(29.999999)
    flow.complete(task, result={"ok": True})
    clock.advance(3600)  # the scanner was down past the step deadline
    flow.scan()
    assert flow.workflow("order-4")["status"] == "SUCCEEDED"


@pytest.mark.parametrize("outcome", ["FAILED", "CANCELLED", "SUCCEEDED"])
@pytest.mark.parametrize("first", ["inbox", "checkpoint"])
def test_p7_an_outcome_reported_after_the_step_deadline_is_late_whichever_unit_looks_first(
    flow, clock, database, outcome, first
):
    """Found by tests/integration/test_signal_model.py: a failure reported after the deadline went to review as
    TASK_FAILED when its inbox event was consumed before the deadline's checkpoint, and as
    STEP_DEADLINE_EXCEEDED the other way round. The deadline passed first: it is the reason."""
    flow.publish(task_steps("reserve", timeout=30))
    flow.start("order-5")
    flow.scan()
    task = flow.claim(lease_seconds=3600).json
    clock.advance(30)
    report = {"FAILED": {"error": {"message": "carrier down", "retryable": False}}, "SUCCEEDED": {"result": {}}}
    assert flow.complete(task, outcome, **report.get(outcome, {})).status_code == 200
    for source in sorted(SOURCES, key=lambda s: s.name != first):
        for row in database.read(source.due, 100):
            source.process(database, row["id"])
    flow.scan()
    workflow = flow.workflow("order-5")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "STEP_DEADLINE_EXCEEDED")
    assert workflow["steps"][0]["review_reason"] == "STEP_DEADLINE_EXCEEDED"


def test_i4_total_deadline_passed_when_new_work_is_due_goes_to_review(flow, clock):
    flow.publish(task_steps("reserve", "charge"))
    flow.start("order-5", deadline_seconds=60)
    flow.scan()
    task = flow.claim(lease_seconds=300).json
    clock.advance(60)
    assert flow.complete(task, result={"r": 1}).status_code == 200  # results of started work are collected
    flow.scan()
    workflow = flow.workflow("order-5")
    assert (workflow["status"], workflow["gate"], workflow["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "DEADLINE_EXCEEDED",
    )
    assert [s["status"] for s in workflow["steps"]] == ["SUCCEEDED", "NOT_STARTED"]
    assert workflow["steps"][0]["result"] == {"r": 1}


def test_i3_disabled_application_blocks_new_work_until_enabled(flow, database, clock):
    flow.publish(task_steps("reserve"))
    flow.start("order-6")
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    flow.scan()
    assert flow.workflow("order-6")["steps"][0]["status"] == "NOT_STARTED"
    tenancy.create_application(database, "acme", "workers", None)
    other_worker = flow.tenant.headers("tasks:work", queues=("inventory",), application="workers")
    claimed = flow.client.simulate_post(
        f"{flow.ns}/queues/inventory/claim", headers=other_worker, json={"worker_id": "w", "lease_seconds": 60}
    )
    assert claimed.status_code == 204  # no task was created
    tenancy.set_application_status(database, "acme", "app", "ACTIVE")
    clock.advance(timedelta(seconds=60).total_seconds())
    flow.scan()
    assert flow.workflow("order-6")["steps"][0]["status"] == "ACTIVE"
    assert flow.claim().status_code == 200
