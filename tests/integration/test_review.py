"""R2, R3: an operator repairs a workflow in NEEDS_REVIEW through POST …/review, on a real database."""

import json
import threading

import pytest
from helpers import payment, signal_flow_definition, task_steps
from test_poll import claim_round, final, final_signal, poll_definition, report, track

QUEUES = ("inventory", "carrier")


@pytest.fixture
def reviewer(tenant):
    return tenant.headers("workflows:review", "workflows:read", queues=QUEUES, actor="ops-alice")


def review(flow, reviewer, workflow_id="order-1", **body):
    return flow.client.simulate_post(
        f"{flow.ns}/workflows/{workflow_id}/review", json={"reason": "ticket OPS-1", **body}, headers=reviewer
    )


def steps(flow, workflow_id="order-1"):
    return {s["key"]: s for s in flow.workflow(workflow_id)["steps"]}


def test_r2_retry_step_starts_a_new_generation_and_only_its_signals_count(expired, reviewer, clock):
    retried = review(expired, reviewer, action="retry_step", step_key="payment")
    assert retried.status_code == 200, retried.text
    assert (retried.json["status"], retried.json["gate"], retried.json["review_reason"]) == ("RUNNING", "OPEN", None)
    step = steps(expired)["payment"]
    assert (step["activation_sequence"], step["status"], step["wait"]["status"]) == (2, "ACTIVE", "WAITING")
    assert step["wait"]["deadline_at"] > retried.json["created_at"]
    old = expired.rows(
        "SELECT a.status AS a, w.status AS w FROM step_activations a JOIN waits w "
        "ON w.activation_id = a.id WHERE a.step_key = 'payment' AND a.activation_sequence = 1"
    )
    assert old == [{"a": "SUPERSEDED", "w": "SUPERSEDED"}]

    stale = expired.send("order-1", "k1", payment(sequence=1))
    assert (stale.json["status"], stale.json["disposition"]) == ("REJECTED", "STALE_ACTIVATION")
    too_new = expired.send("order-1", "k2", payment(sequence=3))
    assert (too_new.status_code, too_new.json["code"]) == (409, "ACTIVATION_NOT_FOUND")
    current = expired.send("order-1", "k3", payment(sequence=2))
    assert current.json["status"] == "PENDING"
    expired.scan()
    assert expired.signal("order-1", current.json["signal_id"]).json["status"] == "CONSUMED"
    expired.finish_task({"shipped": True}, queue="carrier")
    assert expired.workflow("order-1")["status"] == "SUCCEEDED"


@pytest.fixture
def tampered(flow, database):
    """order-1 in review with its payment signal still PENDING: the proof check refused the
    tampered winner (S1.12). Returns the signal's id."""
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    signal_id = flow.send("order-1", "k1", payment()).json["signal_id"]
    database.run(lambda tx: tx.execute("UPDATE signals SET reason = 'edited' WHERE id = %s", (signal_id,)))
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "ACCEPTANCE_PROOF_MISMATCH"
    return signal_id


def test_r2_retry_step_rejects_the_old_generations_pending_signals_as_stale(flow, reviewer, tampered):
    assert review(flow, reviewer, action="retry_step", step_key="payment").status_code == 200
    assert flow.signal("order-1", tampered).json["disposition"] == "STALE_ACTIVATION"


def test_r2_r3_a_retried_poll_step_keeps_polling_and_a_final_signal_of_the_new_generation_wins(flow, reviewer):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    task = claim_round(flow)
    flow.complete(task, outcome="FAILED", error={"message": "carrier gone", "retryable": False})
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "QUERY_FAILED"
    assert review(flow, reviewer, action="retry_step", step_key="track").status_code == 200
    step = track(flow)
    assert (step["activation_sequence"], step["status"], step["task"]["status"]) == (2, "ACTIVE", "QUEUED")
    task = claim_round(flow)
    assert task["activation_sequence"] == 2
    old = flow.send("order-1", "k1", final_signal())
    assert (old.json["status"], old.json["disposition"]) == ("REJECTED", "STALE_ACTIVATION")
    sent = flow.send("order-1", "k2", {**final_signal(), "target_activation_sequence": 2})
    assert sent.json["status"] == "PENDING"
    flow.scan()
    assert flow.heartbeat(task).json["cancel_requested"] is True  # C2.4 in the new generation
    report(flow, task, {"state": "PENDING"})
    flow.scan()
    assert track(flow)["status"] == "SUCCEEDED"
    assert flow.signal("order-1", sent.json["signal_id"]).json["status"] == "CONSUMED"


def test_r2_task_in_flight_while_a_query_is_still_running(flow, reviewer, clock):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    task = claim_round(flow, lease_seconds=3600)
    clock.advance(600)
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "QUERY_DEADLINE_EXCEEDED"  # C2.7, the query runs on
    for action in ("retry_step", "complete_step"):
        refused = review(flow, reviewer, action=action, step_key="track", result={"status": "delivered"})
        assert (refused.status_code, refused.json["code"]) == (409, "TASK_IN_FLIGHT")
    report(flow, task, final())
    flow.scan()
    assert review(flow, reviewer, action="retry_step", step_key="track").status_code == 200


def test_r2_complete_step_succeeds_with_a_valid_result_and_the_successor_starts(expired, reviewer):
    done = review(expired, reviewer, action="complete_step", step_key="payment", result={"amount": 12.5})
    assert done.status_code == 200, done.text
    step = steps(expired)["payment"]
    assert (step["status"], step["result"], step["activation_sequence"]) == ("SUCCEEDED", {"amount": 12.5}, 1)
    assert steps(expired)["ship"]["status"] == "ACTIVE"
    assert expired.claim("carrier").json["input"]["steps"]["payment"] == {"result": {"amount": 12.5}}


@pytest.mark.parametrize(
    "body, code, pointer",
    [
        ({"action": "complete_step", "step_key": "payment", "result": {"amount": "twelve"}}, 422, "/result/amount"),
        ({"action": "complete_step", "step_key": "payment", "result": {}}, 422, "/result"),
        ({"action": "complete_step", "step_key": "payment"}, 422, ""),
        (
            {"action": "complete_step", "step_key": "payment", "result": {"amount": 1, "pad": "x" * 262144}},
            413,
            "/result",
        ),
        ({"action": "retry_step"}, 422, ""),
        ({"action": "retry_step", "step_key": "nope"}, 422, "/step_key"),
        ({"action": "undo"}, 422, "/action"),
    ],
    ids=["schema", "required_member", "no_result", "over_256_kib", "no_step", "unknown_step", "unknown_action"],
)
def test_r2_a_refused_review_changes_nothing(expired, reviewer, body, code, pointer):
    before = (expired.workflow("order-1"), expired.events("order-1"))
    refused = review(expired, reviewer, **body)
    assert refused.status_code == code, refused.text
    assert refused.json["errors"][0]["pointer"] == pointer or (not pointer and refused.json["errors"])
    assert (expired.workflow("order-1"), expired.events("order-1")) == before


def test_r2_reason_is_required(expired, reviewer):
    refused = expired.client.simulate_post(
        f"{expired.ns}/workflows/order-1/review", json={"action": "fail"}, headers=reviewer
    )
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")


def test_r2_only_a_workflow_in_review_and_only_the_step_under_review(expired, reviewer):
    refused = review(expired, reviewer, action="retry_step", step_key="reserve")
    assert (refused.status_code, refused.json["code"]) == (409, "INVALID_STATE")
    assert review(expired, reviewer, action="retry_step", step_key="payment").status_code == 200
    for action in ("retry_step", "fail", "cancel"):
        again = review(expired, reviewer, action=action, step_key="payment")
        assert (again.status_code, again.json["code"]) == (409, "INVALID_STATE")


def test_r2_fail_ends_the_instance_and_what_hangs_off_it(flow, reviewer, clock):
    flow.publish(task_steps("reserve", timeout=60))
    flow.start("order-1")
    flow.scan()
    task = flow.claim(lease_seconds=3600).json
    clock.advance(60)
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "STEP_DEADLINE_EXCEEDED"
    failed = review(flow, reviewer, action="fail")
    assert (failed.json["status"], failed.json["gate"]) == ("FAILED", "CLOSED")
    assert steps(flow)["reserve"]["status"] == "FAILED"
    assert flow.heartbeat(task).json["cancel_requested"] is True  # the running task is asked to stop (P5)


def test_r2_fail_rejects_pending_signals_and_cancels_waits(flow, reviewer, tampered):
    assert review(flow, reviewer, action="fail").json["status"] == "FAILED"
    assert flow.signal("order-1", tampered).json["disposition"] == "INSTANCE_SETTLED"
    assert flow.rows("SELECT status FROM waits") == [{"status": "CANCELLED"}]


def test_r2_cancel_is_r1_cancel(expired, reviewer):
    cancelled = review(expired, reviewer, action="cancel")
    assert (cancelled.json["status"], cancelled.json["gate"]) == ("CANCELLED", "CLOSED")
    assert steps(expired)["payment"]["status"] == "CANCELLED"


def test_r2_every_action_is_audited_with_actor_reason_and_generations_and_is_in_the_history(expired, reviewer):
    review(expired, reviewer, action="retry_step", step_key="payment")
    (record,) = expired.rows("SELECT actor, details FROM audit_records WHERE action = 'workflow.review'")
    details = json.loads(record["details"])
    assert record["actor"] == "ops-alice"
    assert (details["action"], details["reason"], details["from_sequence"], details["to_sequence"]) == (
        "retry_step",
        "ticket OPS-1",
        1,
        2,
    )
    history = expired.events("order-1")
    assert history[-3:] == ["STEP_SUPERSEDED", "WORKFLOW_RUNNING", "STEP_ACTIVATED"]


def test_r2_a_review_and_a_signal_racing_leave_one_consistent_outcome(expired, reviewer):
    outcomes = {}
    barrier = threading.Barrier(2)

    def retry():
        barrier.wait()
        outcomes["review"] = review(expired, reviewer, action="retry_step", step_key="payment").status_code

    def signal():
        barrier.wait()
        outcomes["signal"] = expired.send("order-1", "k1", payment(sequence=1)).json

    threads = [threading.Thread(target=retry), threading.Thread(target=signal)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes["review"] == 200
    # Whichever took the instance lock first, the generation-1 signal can never count: the wait it
    # aimed at expired (LATE) or was superseded (STALE_ACTIVATION).
    assert outcomes["signal"]["status"] == "REJECTED"
    assert outcomes["signal"]["disposition"] in ("LATE", "STALE_ACTIVATION")
    assert steps(expired)["payment"]["activation_sequence"] == 2
    assert expired.rows("SELECT COUNT(*) AS n FROM signals WHERE status = 'CONSUMED'")[0]["n"] == 0
