"""POLL steps end to end (SPEC §7, C1-C5): query rounds claimed and reported by a worker over HTTP,
final signals sent over HTTP, and the scanner's units run in both orders (a round's inbox event
first, or the wait's checkpoint first), which must not change the outcome."""

from datetime import timedelta

import pytest
from helpers import Flow

from weave.scanner import LEASE_EXPIRY, Scanner
from weave.sql import checkpoints, engine, inbox

TIMEOUT = 600
INTERVAL = 60
RESULT = {"status": "delivered", "at": "2026-11-30T09:00:00Z"}


def poll_definition(final_signal: bool = True) -> dict:
    track = {
        "key": "track",
        "type": "POLL",
        "queue": "carrier",
        "interval_seconds": INTERVAL,
        "timeout_seconds": TIMEOUT,
        "max_attempts": 2,
    }
    if final_signal:
        track["final_signal"] = {
            "name": "shipment.final",
            "payload_version": "v1",
            "payload_schema": {"type": "object", "required": ["status"]},
        }
        track["correlation"] = "/input/order_id"
    notify = {"key": "notify", "type": "TASK", "queue": "inventory", "timeout_seconds": 300}
    return {"name": "flow", "steps": [track, notify]}


def final_signal(result=None, key: str = "o-1") -> dict:
    return {
        "name": "shipment.final",
        "payload_version": "v1",
        "target_step_key": "track",
        "target_activation_sequence": 1,
        "correlation_key": key,
        "payload": {"state": "FINAL", "result": RESULT if result is None else result},
        "reason": "carrier webhook",
    }


PENDING = {"state": "PENDING"}


def final(result=None) -> dict:
    return {"state": "FINAL", "result": RESULT if result is None else result}


@pytest.fixture
def wf(flow):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    return flow


ORDERS = ["inbox_first", "checkpoint_first"]


def process(flow: Flow, order: str, rounds: int = 20) -> list[str]:
    """Run the scanner's two workflow sources in one order until neither finds anything due."""
    db = flow.database
    sources = [
        (inbox.due_candidates, engine.consume_inbox_event),
        (checkpoints.due_candidates, engine.process_checkpoint),
    ]
    if order == "checkpoint_first":
        sources.reverse()
    outcomes = []
    for _ in range(rounds):
        did = 0
        for due, unit in sources:
            for row in db.read(due, 100):
                outcome = unit(db, row["id"])
                if outcome is not None:
                    outcomes.append(outcome)
                    did += 1
        if not did:
            return outcomes
    raise AssertionError("processing did not settle")


def track(flow: Flow, workflow_id: str = "order-1") -> dict:
    return flow.workflow(workflow_id)["steps"][0]


def claim_round(flow: Flow, lease_seconds: int = 60) -> dict:
    claimed = flow.claim("carrier", lease_seconds=lease_seconds)
    assert claimed.status_code == 200, claimed.text
    assert claimed.json["kind"] == "QUERY" and claimed.json["step_key"] == "track"
    return claimed.json


def report(flow: Flow, task: dict, result) -> None:
    done = flow.complete(task, result=result)
    assert done.status_code == 200, done.text


def send_final(flow: Flow, key: str = "k1", **kwargs):
    sent = flow.send("order-1", key, final_signal(**kwargs))
    assert sent.status_code == 201, sent.text
    return sent.json


def signal_state(flow: Flow, signal_id: str) -> tuple:
    state = flow.signal("order-1", signal_id).json
    return state["status"], state["disposition"]


def permits_in_use(flow: Flow) -> int:
    return flow.rows("SELECT permits_in_use FROM queues WHERE name = 'carrier'")[0]["permits_in_use"]


def decisions(flow: Flow) -> list[dict]:
    import json

    return [
        json.loads(r["data"]) for r in flow.rows("SELECT data FROM events WHERE type = 'POLL_DECIDED' ORDER BY seq")
    ]


# ---- activation and rounds (C1) ---------------------------------------------------------------------------


def test_c1_activation_creates_the_wait_and_round_one_a_query_task_with_the_instance_context(wf):
    step = track(wf)
    assert (step["type"], step["status"], step["activation_sequence"]) == ("POLL", "ACTIVE", 1)
    assert step["wait"]["status"] == "WAITING" and step["wait"]["correlation_key"] == "o-1"
    assert step["task"]["status"] == "QUEUED"
    task = claim_round(wf)
    assert task["input"] == {"workflow_id": "order-1", "input": {"order_id": "o-1"}, "steps": {}}
    assert track(wf)["task"] == {"task_id": task["task_id"], "status": "RUNNING", "attempt": 1}
    assert "QUERY_ROUND_STARTED" in wf.events("order-1")


@pytest.mark.parametrize("order", ORDERS)
def test_c1_pending_is_an_observation_the_next_round_is_claimable_an_interval_later(wf, clock, order):
    first = claim_round(wf)
    report(wf, first, PENDING)
    process(wf, order)
    assert track(wf)["status"] == "ACTIVE"
    second_round = track(wf)["task"]
    assert second_round["task_id"] != first["task_id"] and second_round["status"] == "QUEUED"
    assert wf.claim("carrier").status_code == 204  # not before the interval
    clock.advance(INTERVAL - 1)
    assert wf.claim("carrier").status_code == 204
    clock.advance(1)
    assert claim_round(wf)["task_id"] == second_round["task_id"]
    assert wf.events("order-1").count("QUERY_ROUND_STARTED") == 2


def test_c1_a_failed_request_is_retried_inside_the_round_and_opens_no_new_round(wf, clock):
    first = claim_round(wf)
    failed = wf.complete(first, outcome="FAILED", error={"message": "carrier 503", "retryable": True})
    assert failed.json["status"] == "QUEUED"
    wf.scan()
    clock.advance(5)
    again = claim_round(wf)
    assert (again["task_id"], again["attempt"]) == (first["task_id"], 2)
    assert wf.events("order-1").count("QUERY_ROUND_STARTED") == 1


def test_c1_attempts_exhausted_with_no_answer_and_no_signal_needs_review(wf):
    task = claim_round(wf)
    wf.complete(task, outcome="FAILED", error={"message": "gone", "retryable": False})
    wf.scan()
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["gate"], workflow["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "QUERY_FAILED",
    )
    assert track(wf)["status"] == "NEEDS_REVIEW"
    assert permits_in_use(wf) == 0


def test_c1_a_final_report_without_a_signal_settles_the_step_and_the_successor_starts(wf):
    report(wf, claim_round(wf), final())
    wf.scan()
    assert track(wf)["status"] == "SUCCEEDED" and track(wf)["result"] == RESULT
    assert wf.workflow("order-1")["steps"][1]["status"] == "ACTIVE"
    assert wf.claim("inventory").json["input"]["steps"]["track"] == {"result": RESULT}


# ---- C2.1 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("gap", [1, 0], ids=["query_first", "equal_times"])
def test_c2_1_a_final_report_before_the_signal_wins_and_the_signal_is_query_settled(wf, clock, order, gap):
    report(wf, claim_round(wf), final({"status": "delivered", "by": "query"}))
    clock.advance(gap)
    sent = send_final(wf)
    assert sent["status"] == "PENDING"  # nothing was decided yet when it arrived
    process(wf, order)
    assert track(wf)["result"] == {"status": "delivered", "by": "query"}
    assert signal_state(wf, sent["signal_id"]) == ("REJECTED", "QUERY_SETTLED")
    wait = track(wf)["wait"]
    assert (wait["status"], wait["winner_signal_id"]) == ("SATISFIED", None)
    assert [d["rule"] for d in decisions(wf)] == ["C2.1"]
    late = send_final(wf, key="k2")
    assert (late["status"], late["disposition"]) == ("REJECTED", "STEP_SETTLED")


# ---- C2.2 / C2.3 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_c2_2_a_signal_after_a_pending_report_settles_with_the_signal_and_no_round_runs(wf, clock, order):
    report(wf, claim_round(wf), PENDING)
    clock.advance(1)
    sent = send_final(wf)
    process(wf, order)
    assert track(wf)["status"] == "SUCCEEDED" and track(wf)["result"] == RESULT
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)
    assert decisions(wf)[-1]["decision"] == "SIGNAL_WINS"
    clock.advance(INTERVAL)
    assert wf.claim("carrier").status_code == 204  # no round left to run
    assert permits_in_use(wf) == 0


def test_c2_3_signal_first_with_the_round_not_started_the_signal_wins_and_pulse_cancels_the_round(wf):
    sent = send_final(wf)
    outcomes = process(wf, "checkpoint_first")
    assert "SIGNAL_WON" in outcomes
    assert track(wf)["status"] == "SUCCEEDED" and track(wf)["result"] == RESULT
    assert wf.rows("SELECT status FROM tasks WHERE kind = 'QUERY'") == [{"status": "CANCELLED"}]
    assert wf.rows("SELECT status FROM inbox_events") == [{"status": "CONSUMED"}]  # collected (C2.3)
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)
    assert [d["rule"] for d in decisions(wf)] == ["C2.3"]
    assert permits_in_use(wf) == 0


def test_s2_1_an_early_final_signal_wins_at_activation(flow):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    sent = flow.send("order-1", "k1", final_signal()).json
    assert sent["status"] == "PENDING"  # the step has not started
    flow.scan()
    assert track(flow)["status"] == "SUCCEEDED"
    assert signal_state(flow, sent["signal_id"]) == ("CONSUMED", None)
    assert flow.claim("carrier").status_code == 204


# ---- C2.4 / C2.5 / C2.6 (C3, C4) ------------------------------------------------------------------------------


def test_c2_4_c3_signal_first_with_the_round_running_the_winner_is_saved_and_the_step_stays_active(wf):
    task = claim_round(wf)
    sent = send_final(wf)
    wf.scan()
    step = track(wf)
    assert step["status"] == "ACTIVE"  # C3: CONSUMED means the wait took it, not that the step is done
    assert (step["wait"]["status"], step["wait"]["winner_signal_id"]) == ("SATISFIED", sent["signal_id"])
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)
    assert wf.heartbeat(task).json["cancel_requested"] is True
    assert step["task"]["status"] == "RUNNING" and permits_in_use(wf) == 1  # C4: Pulse keeps task and permit
    assert [d["rule"] for d in decisions(wf)] == ["C2.4"]
    wf.scan()  # a restart re-reads the stored winner and never re-chooses it
    assert track(wf)["wait"]["winner_signal_id"] == sent["signal_id"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "outcome",
    ["PENDING", "SAME_FINAL", "FAILED", "CANCELLED"],
)
def test_c2_5_the_running_round_ends_harmlessly_and_the_signal_settles_the_step(wf, clock, order, outcome):
    task = claim_round(wf)
    sent = send_final(wf)
    if order == "checkpoint_first":
        process(wf, order)  # C2.4 first: the winner is saved while the round runs
    clock.advance(1)
    if outcome == "PENDING":
        report(wf, task, PENDING)
    elif outcome == "SAME_FINAL":
        report(wf, task, final({"at": "2026-11-30T09:00:00Z", "status": "delivered"}))  # member order differs
    elif outcome == "FAILED":  # a known failure: the worker says the request failed for good
        wf.complete(task, outcome="FAILED", error={"message": "carrier says no such parcel", "retryable": False})
    else:
        wf.complete(task, outcome="CANCELLED")
    process(wf, order)
    assert track(wf)["status"] == "SUCCEEDED" and track(wf)["result"] == RESULT
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)
    assert decisions(wf)[-1]["rule"] == "C2.5"
    assert wf.rows("SELECT COUNT(*) AS n FROM tasks WHERE kind = 'QUERY'")[0]["n"] == 1  # no new round
    assert permits_in_use(wf) == 0


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "outcome, reason",
    [
        ("UNKNOWN", "QUERY_OUTCOME_UNKNOWN"),
        ("INVALID", "QUERY_RESULT_INVALID"),
        ("OTHER_FINAL", "QUERY_RESULT_CONFLICT"),
    ],
)
def test_c2_6_an_unknown_invalid_or_different_report_keeps_both_facts_and_needs_review(
    wf, clock, order, outcome, reason
):
    task = claim_round(wf)
    sent = send_final(wf)
    if order == "checkpoint_first":
        process(wf, order)
    clock.advance(1)
    if outcome == "UNKNOWN":
        # No report within the lease: re-queued while attempts are left (unless cancel was asked),
        # then UNKNOWN when the last attempt's lease expires too.
        for _ in range(3):
            clock.advance(61)
            Scanner(wf.database, sources=(LEASE_EXPIRY,)).run_once()  # lease expiry alone
            if (again := wf.claim("carrier")).status_code == 200:
                task = again.json
        assert wf.rows("SELECT status FROM tasks")[0]["status"] == "UNKNOWN"
    elif outcome == "INVALID":
        report(wf, task, {"state": "SHIPPED"})
    else:
        report(wf, task, final({"status": "lost"}))
    process(wf, order)
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", reason)
    assert track(wf)["status"] == "NEEDS_REVIEW"
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)  # the signal's fact is kept …
    assert track(wf)["wait"]["winner_signal_id"] == sent["signal_id"]
    kept = wf.rows("SELECT status, result FROM tasks WHERE kind = 'QUERY'")
    assert len(kept) == 1 and kept[0]["status"] == (
        "UNKNOWN" if outcome == "UNKNOWN" else "SUCCEEDED"
    )  # … and so is the query's
    assert decisions(wf)[-1]["rule"] == "C2.6" and decisions(wf)[-1]["review_reason"] == reason
    assert permits_in_use(wf) == 0


@pytest.mark.parametrize("order", ORDERS)
def test_c2_6_decided_after_the_deadline_the_signal_is_taken_and_both_facts_kept(wf, clock, order):
    # The signal came on time while the round ran; nobody looked before the deadline passed (the
    # scanner was down) and the round then reported another result: S2.3 still counts the signal.
    task = claim_round(wf, lease_seconds=TIMEOUT * 2)
    sent = send_final(wf)
    clock.advance(TIMEOUT)
    report(wf, task, final({"status": "lost"}))
    process(wf, order)
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "QUERY_RESULT_CONFLICT")
    assert signal_state(wf, sent["signal_id"]) == ("CONSUMED", None)
    wait = track(wf)["wait"]
    assert (wait["status"], wait["winner_signal_id"]) == ("SATISFIED", sent["signal_id"])
    assert [d["rule"] for d in decisions(wf)] == ["C2.6"]


# ---- C2.7 ---------------------------------------------------------------------------------------------------


def test_c2_7_the_deadline_with_a_query_in_flight_closes_the_gate_and_keeps_the_task(wf, clock):
    task = claim_round(wf, lease_seconds=TIMEOUT * 2)
    clock.advance(TIMEOUT)
    wf.scan()
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["gate"], workflow["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "QUERY_DEADLINE_EXCEEDED",
    )
    assert track(wf)["task"]["status"] == "RUNNING" and permits_in_use(wf) == 1
    assert wf.heartbeat(task).json["cancel_requested"] is True  # asked to stop, never sent round again
    assert track(wf)["wait"]["status"] == "EXPIRED"
    late = send_final(wf)
    assert (late["status"], late["disposition"]) == ("REJECTED", "LATE")
    report(wf, task, final())  # a later result is recorded …
    wf.scan()
    assert wf.workflow("order-1")["review_reason"] == "QUERY_DEADLINE_EXCEEDED"  # … and does not clear the review
    assert track(wf)["status"] == "NEEDS_REVIEW"
    assert "QUERY_RESULT_RECORDED" in wf.events("order-1")
    assert permits_in_use(wf) == 0


def test_c2_7_the_deadline_with_the_next_round_not_started_cancels_it(wf, clock):
    report(wf, claim_round(wf), PENDING)
    wf.scan()
    clock.advance(TIMEOUT)
    wf.scan()
    assert wf.workflow("order-1")["review_reason"] == "QUERY_DEADLINE_EXCEEDED"
    assert [r["status"] for r in wf.rows("SELECT status FROM tasks ORDER BY id")] == ["SUCCEEDED", "CANCELLED"]


# ---- C5 and S1.12 ----------------------------------------------------------------------------------------------


def test_c5_a_checkpoint_waits_for_a_report_in_failure_backoff_instead_of_deciding_without_it(wf, clock):
    report(wf, claim_round(wf), final({"status": "delivered", "by": "query"}))
    wf.rows("UPDATE inbox_events SET attempts = 1, available_at = %s", (clock.now() + timedelta(seconds=30),))
    clock.advance(1)
    send_final(wf)
    assert process(wf, "checkpoint_first") == ["DEFERRED"]
    assert track(wf)["status"] == "ACTIVE"
    clock.advance(30)
    process(wf, "checkpoint_first")
    assert track(wf)["result"] == {"status": "delivered", "by": "query"}  # the report decided (C2.1)


def test_s1_12_a_tampered_final_signal_is_not_used(wf):
    sent = send_final(wf)
    wf.rows(
        "UPDATE signals SET payload = %s WHERE id = %s",
        ('{"state":"FINAL","result":{"status":"x"}}', sent["signal_id"]),
    )
    wf.scan()
    assert wf.workflow("order-1")["review_reason"] == "ACCEPTANCE_PROOF_MISMATCH"
    assert signal_state(wf, sent["signal_id"])[0] == "PENDING"


def test_c1_a_poll_step_without_a_final_signal_polls_until_an_answer_or_its_deadline(flow, clock):
    flow.publish(poll_definition(final_signal=False))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    assert track(flow)["wait"] is None
    report(flow, claim_round(flow), PENDING)
    flow.scan()
    clock.advance(TIMEOUT)
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "QUERY_DEADLINE_EXCEEDED"


@pytest.mark.parametrize("order", ORDERS)
def test_c1_the_history_records_every_report_before_what_it_decided(wf, clock, order):
    report(wf, claim_round(wf), PENDING)
    process(wf, order)
    clock.advance(INTERVAL)
    report(wf, claim_round(wf), final())
    process(wf, order)
    history = [
        e
        for e in wf.client.simulate_get(
            f"{wf.ns}/workflows/order-1/events", query_string="limit=1000", headers=wf.headers
        ).json["events"]
        if e["type"].startswith(("QUERY_", "POLL_"))
    ]
    assert [e["type"] for e in history] == [
        "QUERY_ROUND_STARTED",
        "QUERY_RESULT_RECORDED",
        "QUERY_ROUND_STARTED",
        "QUERY_RESULT_RECORDED",
        "POLL_DECIDED",
    ]
    assert [(e["data"]["report"], e["data"]["result"]) for e in history if e["type"] == "QUERY_RESULT_RECORDED"] == [
        ("PENDING", PENDING),
        ("FINAL", final()),
    ]
