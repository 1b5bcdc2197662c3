"""S2.1-S2.8 and S1.12: SIGNAL steps wait, take one winner by the facts' times, expire, and
consume in one transaction; D2 correlation; R1 control of waiting instances."""

from datetime import timedelta

import pytest
from helpers import payment, signal_flow_definition

from weave.sql import tenancy


@pytest.fixture
def wf(flow):
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    return flow


def activate_payment(flow):
    flow.finish_task({"reservation_id": "r-1"})


def statuses(flow):
    return {s["key"]: s["status"] for s in flow.workflow("order-1")["steps"]}


def signal_rows(flow):
    return flow.rows("SELECT id, status, disposition FROM signals ORDER BY id")


def test_s2_1_early_signal_is_consumed_when_the_step_activates(wf):
    early = wf.send("order-1", "k1", payment())
    assert early.json["status"] == "PENDING"
    activate_payment(wf)  # activation creates the wait and a WAIT checkpoint due now
    assert statuses(wf) == {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "ACTIVE"}
    state = wf.signal("order-1", early.json["signal_id"]).json
    assert state["status"] == "CONSUMED"
    workflow = wf.workflow("order-1")
    assert workflow["steps"][1]["result"] == {"amount": 12.5}
    assert workflow["steps"][1]["wait"]["winner_signal_id"] == early.json["signal_id"]
    assert wf.claim("carrier").json["input"]["steps"]["payment"] == {"result": {"amount": 12.5}}


def test_s2_2_the_wait_freezes_its_contract_and_the_first_match_by_acceptance_time_wins(wf, clock):
    mismatch = wf.send("order-1", "k0", payment("o-2"))
    first = wf.send("order-1", "k1", payment(payload={"amount": 1}))
    clock.advance(1)
    second = wf.send("order-1", "k2", payment(payload={"amount": 2}))
    activate_payment(wf)
    (wait,) = wf.rows(
        "SELECT name, payload_version, correlation, activation_sequence, deadline_at, status, "
        "winner_signal_id FROM waits"
    )
    assert (wait["name"], wait["payload_version"], wait["correlation"], wait["activation_sequence"]) == (
        "payment.settled",
        "v1",
        b"o-1",
        1,
    )
    assert wait["deadline_at"] == clock.now() + timedelta(seconds=600)
    assert (wait["status"], str(wait["winner_signal_id"])) == ("SATISFIED", first.json["signal_id"])
    assert [(str(r["id"]), r["status"], r["disposition"]) for r in signal_rows(wf)] == [
        (mismatch.json["signal_id"], "REJECTED", "CORRELATION_MISMATCH"),
        (first.json["signal_id"], "CONSUMED", None),
        (second.json["signal_id"], "REJECTED", "WAIT_SETTLED"),
    ]
    assert wf.workflow("order-1")["steps"][1]["result"] == {"amount": 1}


def test_s2_2_a_mismatch_after_the_winner_is_still_a_correlation_mismatch(wf, clock):
    first = wf.send("order-1", "k1", payment())
    clock.advance(1)
    mismatch = wf.send("order-1", "k2", payment("o-2"))
    loser = wf.send("order-1", "k3", payment(payload={"amount": 3}))
    activate_payment(wf)
    assert [(str(r["id"]), r["status"], r["disposition"]) for r in signal_rows(wf)] == [
        (first.json["signal_id"], "CONSUMED", None),
        (mismatch.json["signal_id"], "REJECTED", "CORRELATION_MISMATCH"),
        (loser.json["signal_id"], "REJECTED", "WAIT_SETTLED"),
    ]


def test_d2_correlation_pointer_must_resolve_to_a_string(flow):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": 42})
    flow.scan()
    flow.finish_task()
    workflow = flow.workflow("order-1")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "CORRELATION_UNRESOLVED")
    assert workflow["steps"][1]["status"] == "NEEDS_REVIEW"
    assert flow.rows("SELECT id FROM waits") == []


def test_d2_correlation_can_point_at_an_earlier_step_result(flow):
    document = signal_flow_definition()
    document["steps"][1]["correlation"] = "/steps/reserve/result/reservation_id"
    flow.publish(document)
    flow.start("order-1", input={})
    flow.scan()
    flow.finish_task({"reservation_id": "r-77"})
    assert flow.rows("SELECT correlation FROM waits") == [{"correlation": b"r-77"}]


def test_s2_3_a_signal_accepted_on_time_is_used_even_when_the_consumer_runs_late(wf, clock):
    activate_payment(wf)
    deadline = wf.rows("SELECT deadline_at FROM waits")[0]["deadline_at"]
    clock.set(deadline - timedelta(microseconds=1))
    sent = wf.send("order-1", "k1", payment())
    clock.set(deadline + timedelta(hours=2))  # the scanner was down past the deadline
    wf.scan()
    assert wf.signal("order-1", sent.json["signal_id"]).json["status"] == "CONSUMED"
    assert statuses(wf)["payment"] == "SUCCEEDED"


def test_s2_3_equal_to_the_deadline_is_late_and_the_wait_expires(wf, clock):
    activate_payment(wf)
    deadline = wf.rows("SELECT deadline_at FROM waits")[0]["deadline_at"]
    clock.set(deadline)
    late = wf.send("order-1", "k1", payment())
    assert (late.json["status"], late.json["disposition"]) == ("REJECTED", "LATE")
    wf.scan()
    assert wf.rows("SELECT status FROM waits") == [{"status": "EXPIRED"}]


def test_s2_4_a_paused_instance_still_collects_its_signal_and_resuming_starts_the_successor(wf, tenant):
    control = tenant.headers("workflows:control", queues=("inventory", "carrier"))
    activate_payment(wf)
    paused = wf.client.simulate_post(f"{wf.ns}/workflows/order-1/pause", json={"reason": "ops freeze"}, headers=control)
    assert (paused.json["status"], paused.json["gate"]) == ("PAUSED", "CLOSED")
    wf.send("order-1", "k1", payment())
    wf.scan()
    assert statuses(wf) == {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "NOT_STARTED"}
    assert wf.claim("carrier").status_code == 204
    resumed = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/resume", json={"reason": "freeze over"}, headers=control
    )
    assert (resumed.json["status"], resumed.json["gate"]) == ("RUNNING", "OPEN")
    wf.scan()
    assert statuses(wf)["ship"] == "ACTIVE"
    audit = wf.rows("SELECT action, details FROM audit_records WHERE action IN ('workflow.pause', 'workflow.resume')")
    assert [a["action"] for a in audit] == ["workflow.pause", "workflow.resume"]
    assert "ops freeze" in audit[0]["details"]


def test_s2_4_a_disabled_application_still_collects_and_its_successor_waits(wf, tenant, database, clock):
    activate_payment(wf)
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    # The instance's application is disabled; the payment provider's application is not.
    tenancy.create_application(database, "acme", "psp", None)
    psp = tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="psp")
    assert wf.send("order-1", "k1", payment(), headers=psp).status_code == 201
    wf.scan()
    assert statuses(wf) == {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "NOT_STARTED"}
    tenancy.set_application_status(database, "acme", "app", "ACTIVE")
    clock.advance(60)
    wf.scan()
    assert statuses(wf)["ship"] == "ACTIVE"


def test_s2_4_the_total_deadline_holds_back_the_successor(flow, clock):
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=120)
    flow.scan()
    flow.finish_task()
    clock.advance(119)
    flow.send("order-1", "k1", payment())
    clock.advance(1)
    flow.scan()
    workflow = flow.workflow("order-1")
    assert [s["status"] for s in workflow["steps"]] == ["SUCCEEDED", "SUCCEEDED", "NOT_STARTED"]
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "DEADLINE_EXCEEDED")


def test_s2_5_one_wait_has_one_winner_and_the_rest_of_its_generation_is_settled(wf):
    activate_payment(wf)
    sent = [wf.send("order-1", f"k{i}", payment(payload={"amount": i})) for i in range(5)]
    wf.scan()
    rows = signal_rows(wf)
    assert [r["status"] for r in rows] == ["CONSUMED"] + ["REJECTED"] * 4
    assert {r["disposition"] for r in rows[1:]} == {"WAIT_SETTLED"}
    assert wf.rows("SELECT winner_signal_id FROM waits") == [{"winner_signal_id": int(sent[0].json["signal_id"])}]


def test_s2_6_a_wait_without_an_on_time_match_expires_into_review(wf, clock):
    activate_payment(wf)
    wf.send("order-1", "k1", payment("wrong"))
    clock.advance(600)
    wf.scan()
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["gate"], workflow["review_reason"]) == (
        "NEEDS_REVIEW",
        "CLOSED",
        "WAIT_EXPIRED",
    )
    assert workflow["steps"][1]["status"] == "NEEDS_REVIEW"
    assert workflow["steps"][1]["wait"]["status"] == "EXPIRED"
    assert "WAIT_EXPIRED" in wf.events("order-1")


def test_s2_7_an_unmatched_early_signal_expires_at_the_total_deadline(flow, clock):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=300)
    flow.scan()
    early = flow.send("order-1", "k1", payment())  # the payment step never activates in time
    assert early.json["expires_at"] == "2026-11-30T07:05:00.000000Z"
    clock.advance(299)
    flow.scan()
    assert signal_rows(flow)[0]["status"] == "PENDING"
    clock.advance(1)
    flow.scan()
    state = flow.signal("order-1", early.json["signal_id"]).json
    assert (state["status"], state["disposition"]) == ("EXPIRED", "EXPIRED_UNMATCHED")
    assert state["expires_at"] == early.json["expires_at"] and state["accepted_at"] == early.json["accepted_at"]
    assert "SIGNAL_EXPIRED" in flow.events("order-1")


def test_s2_7_backoff_moves_only_available_at(flow, clock, database, monkeypatch):
    from weave.sql import signals

    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=300)
    early = flow.send("order-1", "k1", payment())
    before = flow.rows("SELECT accepted_at, expires_at FROM signals")[0]
    monkeypatch.setattr(signals, "EXPIRE_SIGNAL", "UPDATE signals SET no_such_column = 1 WHERE id = %s AND %s")
    clock.advance(300)
    flow.scanner.run_once()
    row = flow.rows("SELECT status, accepted_at, expires_at, available_at, attempts, last_error FROM signals")[0]
    assert (row["status"], row["attempts"]) == ("PENDING", 1) and "1054" in row["last_error"]
    assert (row["accepted_at"], row["expires_at"]) == (before["accepted_at"], before["expires_at"])
    assert row["available_at"] == clock.now() + timedelta(seconds=1)
    monkeypatch.undo()
    clock.advance(1)
    flow.scan()
    assert flow.signal("order-1", early.json["signal_id"]).json["status"] == "EXPIRED"


def test_s2_7_a_pending_signal_of_a_waiting_wait_is_left_to_the_wait(flow, clock):
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=300)
    flow.scan()
    flow.finish_task()
    sent = flow.send("order-1", "k1", payment())
    clock.advance(400)  # past the total deadline, before the wait deadline; nothing ran meanwhile
    flow.scan()
    assert flow.signal("order-1", sent.json["signal_id"]).json["status"] == "CONSUMED"


def test_s2_8_consumption_is_one_transaction(wf, database):
    activate_payment(wf)
    sent = wf.send("order-1", "k1", payment())

    def fail(tx, unit):
        if unit == "process_checkpoint":
            raise RuntimeError("injected failure before commit")

    database.before_commit = fail
    report = wf.scanner.run_once()
    database.before_commit = None
    assert report.failed >= 1
    assert wf.signal("order-1", sent.json["signal_id"]).json["status"] == "PENDING"
    assert wf.rows("SELECT status, winner_signal_id FROM waits") == [{"status": "WAITING", "winner_signal_id": None}]
    assert statuses(wf)["payment"] == "ACTIVE" and statuses(wf)["ship"] == "NOT_STARTED"
    assert "SIGNAL_CONSUMED" not in wf.events("order-1")


def test_s1_12_a_tampered_signal_is_not_used_and_sends_the_instance_to_review(wf, database):
    activate_payment(wf)
    sent = wf.send("order-1", "k1", payment())
    database.run(
        lambda tx: tx.execute(
            "UPDATE signals SET payload = '{\"amount\":1250}' WHERE id = %s", (int(sent.json["signal_id"]),)
        )
    )
    wf.scan()
    workflow = wf.workflow("order-1")
    assert (workflow["status"], workflow["review_reason"]) == ("NEEDS_REVIEW", "ACCEPTANCE_PROOF_MISMATCH")
    assert wf.signal("order-1", sent.json["signal_id"]).json["status"] == "PENDING"
    assert wf.rows("SELECT status FROM waits") == [{"status": "WAITING"}]
    assert statuses(wf)["ship"] == "NOT_STARTED"


def test_s1_12_a_rewritten_digest_is_caught_by_the_audit_record(wf, database):
    activate_payment(wf)
    sent = wf.send("order-1", "k1", payment())
    database.run(
        lambda tx: tx.execute(
            "UPDATE signals SET correlation = 'o-1', reason = 'forged', request_digest = %s WHERE id = %s",
            ("f" * 64, int(sent.json["signal_id"])),
        )
    )
    wf.scan()
    assert wf.workflow("order-1")["review_reason"] == "ACCEPTANCE_PROOF_MISMATCH"


def test_r1_cancel_settles_waits_signals_steps_and_tasks(wf, tenant):
    early = wf.send("order-1", "k1", payment("o-9"))
    result = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/cancel",
        json={"reason": "customer cancelled"},
        headers=tenant.headers("workflows:control", queues=("inventory", "carrier")),
    )
    assert (result.json["status"], result.json["gate"]) == ("CANCELLED", "CLOSED")
    assert wf.signal("order-1", early.json["signal_id"]).json["disposition"] == "INSTANCE_SETTLED"
    assert wf.rows("SELECT status FROM tasks") == [{"status": "CANCELLED"}]
    assert statuses(wf)["reserve"] == "CANCELLED"
    again = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/resume",
        json={"reason": "x"},
        headers=tenant.headers("workflows:control", queues=("inventory", "carrier")),
    )
    assert (again.status_code, again.json["code"]) == (409, "INVALID_STATE")


def test_r1_control_needs_scope_and_reason(wf, tenant):
    assert (
        wf.client.simulate_post(
            f"{wf.ns}/workflows/order-1/pause", json={"reason": "x"}, headers=tenant.headers("workflows:read")
        ).status_code
        == 403
    )
    missing = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/pause",
        json={},
        headers=tenant.headers("workflows:control", queues=("inventory", "carrier")),
    )
    assert (missing.status_code, missing.json["code"]) == (422, "VALIDATION_FAILED")
    assert wf.workflow("order-1")["status"] == "RUNNING"
