"""I6: a ROOT checkpoint at the total deadline closes the gate and records DEADLINE_PASSED; R4: the
review action extend_deadline; and what a refused review says to do instead (issue 28, items 7-9).
On a real database."""

import threading
from datetime import timedelta

import pytest
from helpers import payment, signal_flow_definition, task_steps
from test_review import review, steps

from weave.scanner import Scanner
from weave.sql import engine

QUEUES = ("inventory", "carrier")


@pytest.fixture
def reviewer(tenant):
    return tenant.headers("workflows:review", "workflows:read", queues=QUEUES, actor="ops-alice")


def history(flow, workflow_id="order-1", kind=None) -> list[dict]:
    answer = flow.client.simulate_get(
        f"{flow.ns}/workflows/{workflow_id}/events", query_string="limit=1000", headers=flow.headers
    )
    return [e for e in answer.json["events"] if kind is None or e["type"] == kind]


def shown(flow, workflow_id="order-1") -> tuple:
    workflow = flow.workflow(workflow_id)
    return workflow["status"], workflow["gate"], workflow["review_reason"]


def control(flow, action, workflow_id="order-1"):
    headers = flow.tenant.headers("workflows:control", queues=QUEUES, actor="ops-bob")
    return flow.client.simulate_post(
        f"{flow.ns}/workflows/{workflow_id}/{action}", json={"reason": "ticket OPS-2"}, headers=headers
    )


def race(order: str, look, other) -> None:
    """Run the deadline's look and another call: the look first (`order` "look"), the other first,
    or both at once from a barrier ("together": the instance lock decides the order)."""
    if order != "together":
        for call in (look, other) if order == "look" else (other, look):
            call()
        return
    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=lambda call=call: (barrier.wait(), call())) for call in (look, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.fixture
def working(flow):
    """order-1 (reserve -> ship, steps of an hour) with a total deadline of 100 s; reserve's task is
    claimed for an hour. Returns the claimed task."""
    flow.publish(task_steps("reserve", "ship", timeout=3600))
    flow.start("order-1", deadline_seconds=100)
    flow.scan()
    return flow.claim(lease_seconds=3600).json


# ---- I6: the deadline's checkpoint ------------------------------------------------------------------


def test_I6_start_writes_a_root_checkpoint_due_now_and_one_at_the_total_deadline(flow, clock):
    flow.publish(task_steps("reserve"))
    started = flow.start("order-1", deadline_seconds=100)
    rows = flow.rows("SELECT kind, due_at, available_at FROM checkpoints ORDER BY due_at")
    now = clock.now()
    assert rows == [
        {"kind": "ROOT", "due_at": now, "available_at": now},
        {"kind": "ROOT", "due_at": now + timedelta(seconds=100), "available_at": now + timedelta(seconds=100)},
    ]
    assert started["deadline_at"] == (now + timedelta(seconds=100)).isoformat(timespec="microseconds") + "Z"


def test_I6_the_deadline_closes_the_gate_and_records_it_while_started_work_goes_on(flow, clock, working):
    clock.advance(99)
    flow.scan()
    assert shown(flow) == ("RUNNING", "OPEN", None)
    clock.advance(1)  # equal to the deadline is past it (I4)
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    (passed,) = history(flow, kind="DEADLINE_PASSED")
    assert passed["data"] == {
        "status": "RUNNING",
        "gate": "CLOSED",
        "review_reason": None,
        "deadline_at": flow.workflow("order-1")["deadline_at"],
    }
    # The started task's result is collected (I3, S2.4); the next step needs new work: review (I4).
    assert flow.heartbeat(working).json["cancel_requested"] is False
    assert flow.complete(working, result={"reservation_id": "r-1"}).status_code == 200
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
    assert [(s["key"], s["status"]) for s in flow.workflow("order-1")["steps"]] == [
        ("reserve", "SUCCEEDED"),
        ("ship", "NOT_STARTED"),
    ]
    assert len(history(flow, kind="DEADLINE_PASSED")) == 1


def test_I6_a_workflow_between_steps_at_its_deadline_goes_to_review_in_the_same_look(flow, clock):
    flow.publish(task_steps("reserve", "ship"))
    flow.start("order-1", deadline_seconds=100)  # its first look has not run when the deadline passes
    clock.advance(100)
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
    assert flow.rows("SELECT id FROM step_activations") == []
    assert flow.rows("SELECT id FROM checkpoints") == []


def test_I6_the_checkpoint_of_an_ended_workflow_decides_nothing_and_goes(flow, clock):
    flow.publish(task_steps("reserve"))
    flow.start("order-1", deadline_seconds=100)
    flow.scan()
    flow.finish_task({})
    assert shown(flow) == ("SUCCEEDED", "CLOSED", None)
    events = history(flow)
    clock.advance(100)
    flow.scan()
    assert history(flow) == events
    assert flow.rows("SELECT id FROM checkpoints WHERE due_at <= %s", (clock.now(),)) == []


def test_I6_a_workflow_paused_over_its_deadline_resumes_with_its_gate_closed(flow, clock, working):
    assert control(flow, "pause").status_code == 200
    clock.advance(100)
    flow.scan()
    assert shown(flow) == ("PAUSED", "CLOSED", None)
    resumed = control(flow, "resume")
    assert (resumed.json["status"], resumed.json["gate"]) == ("RUNNING", "CLOSED")
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    assert flow.complete(working, result={}).status_code == 200
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")


def test_I6_K2_a_look_cut_before_its_commit_is_backed_off_and_closes_the_gate_once_on_its_rerun(
    flow, database, clock, cut_connection, working
):
    clock.advance(100)
    killed = cut_connection("process_checkpoint")
    report = Scanner(database).run_once()
    database.before_commit = None
    assert killed == ["process_checkpoint"] and report.failed == 1
    assert shown(flow) == ("RUNNING", "OPEN", None)  # rolled back: nothing of the look stands
    assert history(flow, kind="DEADLINE_PASSED") == []
    clock.advance(1)
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    assert len(history(flow, kind="DEADLINE_PASSED")) == 1


def test_I6_a_look_whose_commit_answer_is_lost_is_not_taken_twice(flow, clock, proxied, proxy, working):
    clock.advance(100)
    (checkpoint,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'ROOT' AND due_at <= %s", (clock.now(),))
    proxied.run(lambda tx: tx.one("SELECT 1"))  # a warm pool: the COMMIT cut is the look's
    proxy.lose_reply_to(b"COMMIT")
    engine.process_checkpoint(proxied, checkpoint["id"])  # committed; its re-run finds the look done
    assert proxy.counts["cut_reply_lost"] == 1
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    flow.scan()
    assert len(history(flow, kind="DEADLINE_PASSED")) == 1


def test_I6_two_scanners_at_the_deadline_close_the_gate_once(flow, database, clock, working):
    clock.advance(100)
    (checkpoint,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'ROOT' AND due_at <= %s", (clock.now(),))
    answers = []

    def look():
        answers.append(engine.process_checkpoint(database, checkpoint["id"]))

    race("together", look, look)
    assert answers.count(None) >= 1  # the other one found it taken (SKIP LOCKED) or done
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    assert len(history(flow, kind="DEADLINE_PASSED")) == 1


@pytest.mark.parametrize("first", ["look", "signal", "together"])
def test_I6_the_deadline_racing_a_signal_keeps_the_signal_and_sends_the_successor_to_review(flow, clock, first):
    flow.publish(signal_flow_definition(timeout=3600))
    deadline = clock.now() + timedelta(seconds=100)
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=100)
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    (checkpoint,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'ROOT' AND due_at = %s", (deadline,))
    clock.set(deadline)
    sent = []
    race(
        first,
        lambda: engine.process_checkpoint(flow.database, checkpoint["id"]),
        lambda: sent.append(flow.send("order-1", "k1", payment()).json),
    )
    flow.scan()
    # Sent while the wait was open (the wait's deadline is an hour away), the signal counts (S2.3,
    # S2.4) whichever took the instance first; the next step is new work past the deadline (I4).
    (receipt,) = sent
    assert flow.signal("order-1", receipt["signal_id"]).json["status"] == "CONSUMED"
    assert steps(flow)["payment"]["status"] == "SUCCEEDED"
    assert steps(flow)["ship"]["status"] == "NOT_STARTED"
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
    assert len(history(flow, kind="DEADLINE_PASSED")) <= 1


# ---- R4: extend_deadline ----------------------------------------------------------------------------


def extend(flow, reviewer, seconds, workflow_id="order-1"):
    return review(flow, reviewer, workflow_id, action="extend_deadline", deadline_seconds=seconds)


def test_R4_extend_deadline_rescues_a_workflow_stopped_by_time_alone(flow, clock, reviewer, working):
    clock.advance(100)
    flow.scan()
    flow.complete(working, result={"reservation_id": "r-1"})
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
    clock.advance(50)
    extended = extend(flow, reviewer, 600)
    assert extended.status_code == 200, extended.text
    new_deadline = (clock.now() + timedelta(seconds=600)).isoformat(timespec="microseconds") + "Z"
    assert (extended.json["status"], extended.json["gate"], extended.json["deadline_at"]) == (
        "RUNNING",
        "OPEN",
        new_deadline,
    )
    assert steps(flow)["ship"]["status"] == "ACTIVE"  # the step time held back starts at once
    assert flow.finish_task({}, queue="inventory")
    assert shown(flow) == ("SUCCEEDED", "CLOSED", None)


def test_R4_extend_deadline_then_retry_step_for_a_step_whose_only_fault_was_time(flow, clock, reviewer):
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=300)
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    clock.advance(600)
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "WAIT_EXPIRED")
    refused = review(flow, reviewer, action="retry_step", step_key="payment")
    assert (refused.status_code, refused.json["code"]) == (409, "INVALID_STATE")
    assert "extend_deadline" in refused.json["detail"]

    extended = extend(flow, reviewer, 3600)
    assert (extended.json["status"], extended.json["gate"], extended.json["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "WAIT_EXPIRED",
    )  # the step under review still holds the gate closed
    retried = review(flow, reviewer, action="retry_step", step_key="payment")
    assert retried.status_code == 200, retried.text
    assert (retried.json["status"], retried.json["gate"]) == ("RUNNING", "OPEN")
    assert steps(flow)["payment"]["activation_sequence"] == 2


def test_R4_on_a_running_workflow_past_its_deadline_the_gate_reopens(flow, clock, reviewer, working):
    clock.advance(100)
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    extended = extend(flow, reviewer, 600)
    assert (extended.json["status"], extended.json["gate"]) == ("RUNNING", "OPEN")
    flow.complete(working, result={})
    flow.scan()
    assert steps(flow)["ship"]["status"] == "ACTIVE"
    # The new deadline has its checkpoint (I6): the gate closes again at it.
    clock.advance(600)
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    assert len(history(flow, kind="DEADLINE_PASSED")) == 2


def test_R4_on_a_paused_workflow_the_pause_still_holds_the_gate(flow, clock, reviewer, working):
    assert control(flow, "pause").status_code == 200
    clock.advance(100)
    flow.scan()
    extended = extend(flow, reviewer, 600)
    assert (extended.json["status"], extended.json["gate"]) == ("PAUSED", "CLOSED")
    resumed = control(flow, "resume")
    assert (resumed.json["status"], resumed.json["gate"]) == ("RUNNING", "OPEN")


def test_R4_a_shorter_deadline_closes_the_gate_at_its_own_time(flow, clock, reviewer, working):
    extended = extend(flow, reviewer, 10)
    assert (extended.json["status"], extended.json["gate"]) == ("RUNNING", "OPEN")
    clock.advance(10)
    flow.scan()
    assert shown(flow) == ("RUNNING", "CLOSED", None)
    clock.advance(90)
    flow.scan()  # the first deadline's checkpoint finds the gate closed: nothing more
    assert len(history(flow, kind="DEADLINE_PASSED")) == 1


def test_R4_extend_deadline_is_audited_in_the_history_and_leaves_signals_expires_at(flow, clock, reviewer):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=100)
    early = flow.send("order-1", "k1", payment())  # PENDING before its step starts
    assert early.json["status"] == "PENDING"
    before = flow.workflow("order-1")["deadline_at"]
    extended = extend(flow, reviewer, 600)
    assert extended.status_code == 200, extended.text
    (event,) = history(flow, kind="DEADLINE_EXTENDED")
    assert event["data"] == {
        "action": "extend_deadline",
        "reason": "ticket OPS-1",
        "previous_deadline_at": before,
        "deadline_at": extended.json["deadline_at"],
    }
    (record,) = flow.rows("SELECT actor, details FROM audit_records WHERE action = 'workflow.review'")
    assert record["actor"] == "ops-alice" and extended.json["deadline_at"] in record["details"]
    assert flow.signal("order-1", early.json["signal_id"]).json["expires_at"] == before  # S2.7
    assert flow.rows(
        "SELECT COUNT(*) AS n FROM checkpoints WHERE kind = 'ROOT' AND due_at = %s",
        (clock.now() + timedelta(seconds=600),),
    ) == [{"n": 1}]


@pytest.mark.parametrize(
    "body, pointer",
    [
        ({}, ""),
        ({"deadline_seconds": 0}, "/deadline_seconds"),
        ({"deadline_seconds": 31622401}, "/deadline_seconds"),
        ({"deadline_seconds": "60"}, "/deadline_seconds"),
        ({"deadline_seconds": 1.5}, "/deadline_seconds"),
    ],
    ids=["missing", "zero", "over_366_days", "text", "fraction"],
)
def test_R4_a_bad_deadline_is_refused_and_changes_nothing(flow, reviewer, working, body, pointer):
    before = (flow.workflow("order-1"), history(flow))
    refused = review(flow, reviewer, action="extend_deadline", **body)
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED"), refused.text
    assert refused.json["errors"][0]["pointer"] == pointer
    assert (flow.workflow("order-1"), history(flow)) == before


def test_R4_an_ended_workflow_has_no_deadline_to_extend(flow, reviewer, working):
    assert control(flow, "cancel").status_code == 200
    refused = extend(flow, reviewer, 60)
    assert (refused.status_code, refused.json["code"]) == (409, "INVALID_STATE")
    assert "CANCELLED" in refused.json["detail"]


def test_R4_extend_deadline_needs_the_review_scope(flow, tenant, working):
    operator = tenant.headers("workflows:control", "workflows:read", queues=QUEUES)
    refused = review(flow, operator, action="extend_deadline", deadline_seconds=60)
    assert (refused.status_code, refused.json["code"]) == (403, "FORBIDDEN")


@pytest.mark.parametrize("first", ["look", "extend", "together"])
def test_I6_R4_the_deadline_racing_an_extension_leaves_the_gate_open_under_the_new_deadline(
    flow, clock, reviewer, working, first
):
    clock.advance(100)
    (checkpoint,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'ROOT' AND due_at <= %s", (clock.now(),))
    answers = {}
    race(
        first,
        lambda: engine.process_checkpoint(flow.database, checkpoint["id"]),
        lambda: answers.setdefault("extend", extend(flow, reviewer, 600)),
    )
    assert answers["extend"].status_code == 200
    # Whichever took the instance first, the deadline in force is the new one and its gate open.
    assert shown(flow) == ("RUNNING", "OPEN", None)
    assert flow.workflow("order-1")["deadline_at"] == answers["extend"].json["deadline_at"]
    passed = len(history(flow, kind="DEADLINE_PASSED"))
    assert passed == 1 if first == "look" else passed <= 1  # the look closes the gate only before
    flow.complete(working, result={})
    flow.scan()
    assert steps(flow)["ship"]["status"] == "ACTIVE"


# ---- issue 28, item 9: a step that has not started ---------------------------------------------------


def test_R2_a_step_not_started_is_refused_with_what_to_do_instead(flow, clock, reviewer):
    flow.publish(task_steps("reserve", "ship"))
    flow.start("order-1", deadline_seconds=100)
    clock.advance(100)
    flow.scan()
    assert shown(flow) == ("NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
    for action in ("retry_step", "complete_step"):
        refused = review(flow, reviewer, action=action, step_key="reserve", result={})
        assert (refused.status_code, refused.json["code"]) == (409, "INVALID_STATE")
        detail = refused.json["detail"]
        assert "'reserve' is NOT_STARTED" in detail and "no step is under review" in detail
        assert "extend_deadline" in detail and "fail or cancel" in detail
    assert extend(flow, reviewer, 600).json["status"] == "RUNNING"
    assert steps(flow)["reserve"]["status"] == "ACTIVE"


def test_R2_a_step_not_under_review_names_the_one_that_is(expired, reviewer):
    refused = review(expired, reviewer, action="retry_step", step_key="ship")
    assert (refused.status_code, refused.json["code"]) == (409, "INVALID_STATE")
    assert refused.json["detail"] == "step 'ship' is NOT_STARTED, not under review; the step under review is 'payment'"
