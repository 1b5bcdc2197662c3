"""Regressions of the locking review (issue 25): decisions lost or mis-disposed under concurrency.

The first five began as the review's reproductions (shared/reviews/correctness_reproductions.py),
which passed while their defect was present; their last assertions are inverted here. The others
were written for the remaining items, each failing on the code before its fix."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import poll_invariants
import pytest
from helpers import payment, signal_flow_definition, task_steps

from weave import db, jsontext
from weave.db import Database
from weave.sql import engine, signals, tasks

QUEUES = ("inventory", "carrier")


# ---- A: decided_by_lost_commit takes "rolled back + one other locker" for "committed" ----------------


def test_A_a_cancel_rolled_back_then_one_scan_is_cancelled_on_its_rerun(flow, database, cut_connection, monkeypatch):
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})  # a ROOT checkpoint is due now
    operator = flow.tenant.principal("workflows:control", queues=QUEUES)
    pause, others = time.sleep, []

    def between_attempts(seconds):  # the scanner activates the first step: it locks the instance once
        if not others:
            others.append(flow.scanner.run_once().done)
        pause(seconds)

    killed = cut_connection("control")  # the server kills the session before COMMIT: rolled back
    monkeypatch.setattr(db.time, "sleep", between_attempts)
    facts = engine.control(database, operator, "o-1", "cancel", "ticket OPS-1")
    assert killed == ["control"] and others == [1]
    assert facts.instance["status"] == "CANCELLED"
    assert flow.rows("SELECT status FROM instances") == [{"status": "CANCELLED"}]
    assert len(flow.rows("SELECT id FROM audit_records WHERE action = 'workflow.cancel'")) == 1


# ---- B: TASK step deadline look reads the task without its lock ------------------------------------


def test_B_p7_a_task_completed_before_its_deadline_and_committing_during_the_look_counts(
    flow, database, migrated_url, clock, tenant
):
    flow.publish(task_steps("work", timeout=300))
    flow.start("wf-0")
    flow.scan()
    started = clock.now()
    task = flow.claim(lease_seconds=3600).json
    worker = tenant.principal("tasks:work", queues=("inventory",))

    other = Database(migrated_url, clock=clock)
    reached, release = threading.Event(), threading.Event()

    def hold(tx, unit):
        if unit == "complete_task":
            reached.set()
            release.wait(20)

    other.before_commit = hold
    clock.set(started + timedelta(seconds=299))  # the report is stamped 1 s before the deadline
    done = {}

    def complete():
        done["answer"] = tasks.complete_task(
            other,
            worker.namespace_id,
            int(task["task_id"]),
            task["lease_token"],
            tasks.Completion("SUCCEEDED", '{"ok":true}'),
            frozenset({"inventory"}),
            worker.credential_id,
            "w1",
        )

    completer = threading.Thread(target=complete)
    completer.start()
    assert reached.wait(10)
    clock.set(started + timedelta(seconds=300))  # the deadline: the ROOT look is due
    (checkpoint,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'ROOT' AND due_at <= %s", (clock.now(),))
    looked = {}
    looker = threading.Thread(target=lambda: looked.update(r=engine.process_checkpoint(database, checkpoint["id"])))
    looker.start()
    time.sleep(1.0)  # the look has read the task (RUNNING) and now waits for the task's lock
    release.set()
    completer.join(20)
    looker.join(20)
    other.close()
    flow.scan()
    (t,) = flow.rows("SELECT status, completed_at FROM tasks")
    (a,) = flow.rows("SELECT status, review_reason, deadline_at FROM step_activations")
    assert t["status"] == "SUCCEEDED" and t["completed_at"] < a["deadline_at"]
    assert (a["status"], a["review_reason"]) == ("SUCCEEDED", None)
    assert flow.workflow("wf-0")["status"] == "SUCCEEDED"


# ---- C: expiry of a PENDING signal whose wait stays WAITING under a reviewed step: deferred forever ----


def poll_definition() -> dict:
    return {**poll_invariants.definition(timeout=600, max_attempts=1), "name": "flow"}


def final_body(key: str = "o-1") -> dict:
    return poll_invariants.final_signal(key, {"status": "delivered"})


def poll_step_in_review(flow) -> None:
    """order-1 (total deadline 1200 s) with its POLL step in review before its wait's deadline
    (600 s): its one query failed; the wait is still WAITING."""
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=1200)
    flow.scan()
    claimed = flow.claim("carrier").json
    assert flow.complete(claimed, "FAILED", error={"message": "carrier down", "retryable": False}).status_code == 200
    flow.scan()
    assert flow.rows("SELECT status FROM waits") == [{"status": "WAITING"}]


def test_C_s2_6_s2_7_a_wait_under_review_expires_and_its_signal_expires_unmatched(flow, clock):
    poll_step_in_review(flow)
    assert flow.send("order-1", "k1", final_body()).json["status"] == "PENDING"
    flow.scan()
    clock.advance(1300)  # past the wait deadline and the instance's total deadline
    flow.scan()
    outcomes = []
    for _ in range(5):
        report = flow.scanner.run_once()
        outcomes.append((report.by_source, report.done))
        clock.advance(2)
    assert all(o == ({}, 0) for o in outcomes), outcomes  # the scan above did it all, once
    assert flow.rows("SELECT status, disposition FROM signals") == [
        {"status": "EXPIRED", "disposition": "EXPIRED_UNMATCHED"}
    ]
    assert flow.rows("SELECT status FROM waits") == [{"status": "EXPIRED"}]
    assert "WAIT_EXPIRED" in flow.events("order-1")


def test_C_k1_expiries_under_a_reviewed_step_are_done_once_and_never_sort_before_fresh_work(flow, clock):
    """200 such signals were deferred every second, forever, and sorted first in every batch
    (their due time was their long-past expires_at): fresh work waited behind two full batches."""
    poll_step_in_review(flow)
    body = final_body()
    for i in range(200):
        assert flow.send("order-1", f"k{i}", body).status_code == 201
    flow.scan()
    clock.advance(1300)
    flow.scan()  # the wait expires, then its 200 signals: each once
    clock.advance(1)
    flow.start("order-2", input={"order_id": "o-2"}, deadline_seconds=3600)  # fresh work, due now
    batches = [flow.scanner.run_once().by_source for _ in range(3)]
    assert batches[0] == {"checkpoint": 1}
    assert flow.rows("SELECT COUNT(*) AS n FROM signals WHERE status = 'EXPIRED'") == [{"n": 200}]


# ---- G: C5's SKIP LOCKED read of the round's inbox event: decided without it, recorded after ----------


def test_G_c5_a_checkpoint_defers_while_the_rounds_report_is_held_by_another_unit(flow, database, migrated_url):
    from weave.db import connect

    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    claimed = flow.claim("carrier").json
    assert flow.complete(claimed, result={"state": "PENDING"}).status_code == 200
    assert flow.send("order-1", "k1", final_body()).status_code == 201
    (event,) = flow.rows("SELECT id FROM inbox_events WHERE status = 'PENDING'")
    holder = connect(migrated_url)  # a scanner that claimed the inbox event and waits for the instance
    with holder.cursor() as cur:
        cur.execute("SELECT id FROM inbox_events WHERE id = %s FOR UPDATE", (event["id"],))
    due = flow.rows("SELECT id FROM checkpoints WHERE kind = 'WAIT' ORDER BY due_at LIMIT 1")
    decided = engine.process_checkpoint(database, due[0]["id"])
    holder.rollback()
    holder.close()
    flow.scan()
    events = flow.events("order-1")
    assert decided == "DEFERRED"
    assert events.index("QUERY_RESULT_RECORDED") < events.index("POLL_DECIDED")
    assert flow.workflow("order-1")["steps"][0]["status"] == "SUCCEEDED"


# ---- D: a signal with another key for a settled wait is a mismatch, not WAIT_SETTLED ------------------


def test_D_s2_2_c3_another_key_for_a_wait_taken_while_the_round_runs_is_a_mismatch(flow):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    assert flow.claim("carrier").status_code == 200  # the round runs
    assert flow.send("order-1", "k1", final_body()).status_code == 201
    flow.scan()  # C3: the wait takes the signal, the step stays ACTIVE until Pulse reports
    assert flow.rows("SELECT status FROM waits") == [{"status": "SATISFIED"}]
    other = flow.send("order-1", "k2", final_body("o-2")).json
    assert (other["status"], other["disposition"]) == ("REJECTED", "CORRELATION_MISMATCH")
    same = flow.send("order-1", "k3", final_body("o-1")).json
    assert (same["status"], same["disposition"]) == ("REJECTED", "WAIT_SETTLED")


# ---- E: a proof mismatch sends the POLL step to review with its round cancelled (P5) -----------------


def tampered_final(flow) -> None:
    sent = flow.send("order-1", "k1", final_body()).json
    flow.rows("UPDATE signals SET reason = 'edited' WHERE id = %s", (sent["signal_id"],))
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "ACCEPTANCE_PROOF_MISMATCH"


def test_E_p5_a_proof_mismatch_cancels_the_queued_round(flow):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()  # round 1 is QUEUED
    tampered_final(flow)
    assert flow.rows("SELECT status FROM tasks") == [{"status": "CANCELLED"}]
    assert flow.claim("carrier").status_code == 204  # nothing to claim for a step under review


def test_E_p5_a_proof_mismatch_asks_the_running_round_to_stop(flow):
    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    task = flow.claim("carrier").json
    tampered_final(flow)
    assert flow.heartbeat(task).json["cancel_requested"] is True
    assert flow.rows("SELECT status, cancel_requested FROM tasks") == [{"status": "RUNNING", "cancel_requested": 1}]


# ---- I: adjudication reads ids and times under the instance lock, the winner's payload alone ---------


def test_I_s2_2_the_activations_unit_moves_a_bounded_number_of_bytes_for_1024_fat_early_signals(
    flow, migrated_url, clock
):
    """1,024 early signals of 16 KiB each: the unit that activates their wait took the winner and
    turned 1,023 down reading well under 1 MiB from the server (it read all 16 MiB before)."""
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    flow.scan()
    fat = {"amount": 1, "note": "x" * 16384}
    for i in range(1024):
        sent = flow.send("o-1", f"k{i}", {**payment(), "payload": fat, "correlation_key": "o-1"})
        assert sent.status_code == 201, sent.text
    claimed = flow.claim().json
    assert flow.complete(claimed, result={}).status_code == 200
    flow.scanner.run_once()  # the report activates the payment step: its wait's first look is due now
    (look,) = flow.rows("SELECT id FROM checkpoints WHERE kind = 'WAIT' AND due_at <= %s", (clock.now(),))
    fresh = Database(migrated_url, clock=clock)  # one new connection: its counters are this unit's
    sent_bytes = {}

    def measure(tx, unit):
        sent_bytes["n"] = int(tx.one("SHOW SESSION STATUS LIKE 'Bytes_sent'")["Value"])

    fresh.before_commit = measure
    try:
        assert engine.process_checkpoint(fresh, look["id"]) == "CONSUMED"
    finally:
        fresh.close()
    print("bytes the server sent to the activation's unit:", sent_bytes["n"])
    assert sent_bytes["n"] < 1024 * 1024, sent_bytes
    counts = flow.rows("SELECT status, disposition, COUNT(*) AS n FROM signals GROUP BY status, disposition")
    assert sorted((c["status"], c["disposition"], c["n"]) for c in counts) == [
        ("CONSUMED", None, 1),
        ("REJECTED", "WAIT_SETTLED", 1023),
    ]
    (step,) = flow.rows("SELECT result FROM step_activations WHERE step_key = 'payment'")
    assert jsontext.loads(step["result"]) == fat


# ---- K: a unit that decides nothing writes nothing -------------------------------------------------


def instance_version(flow, workflow_id: str = "o-1") -> int:
    return flow.rows("SELECT version FROM instances WHERE workflow_id = %s", (workflow_id,))[0]["version"]


def test_K_a_look_that_is_not_due_yet_commits_nothing(flow, database, clock):
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    (root,) = flow.rows("SELECT id FROM checkpoints WHERE due_at <= %s", (clock.now(),))  # the first look
    flow.rows(
        "UPDATE checkpoints SET available_at = %s WHERE id = %s", (clock.now() + timedelta(seconds=30), root["id"])
    )
    before = instance_version(flow)
    assert engine.process_checkpoint(database, root["id"]) is None
    assert instance_version(flow) == before
    assert flow.rows("SELECT id FROM checkpoints WHERE id = %s", (root["id"],)) == [root]  # backed off, kept


def test_K_a_look_that_finds_nothing_to_decide_deletes_its_checkpoint_and_nothing_else(flow, database, clock):
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    flow.scan()  # reserve's task is running: its deadline look (ROOT) waits
    clock.advance(10)
    flow.rows(
        "INSERT INTO checkpoints (instance_id, kind, due_at, available_at, attempts, created_at)"
        " SELECT id, 'ROOT', %s, %s, 0, %s FROM instances",
        (clock.now(), clock.now(), clock.now()),
    )
    (look,) = flow.rows("SELECT id FROM checkpoints WHERE due_at <= %s", (clock.now(),))
    before, history = instance_version(flow), flow.events("o-1")
    assert engine.process_checkpoint(database, look["id"]) == "BUSY"
    assert instance_version(flow) == before and flow.events("o-1") == history
    assert flow.rows("SELECT id FROM checkpoints WHERE id = %s", (look["id"],)) == []


def test_K_s2_7_an_expiry_deferred_for_an_open_wait_moves_only_the_signals_next_look(flow, database, clock):
    """The instance's deadline (60 s) comes before its wait's (3600 s): the on-time signal belongs
    to the wait's decision, so its expiry looks again at the wait's deadline, without a decision."""
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"}, deadline_seconds=60)
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    flow.rows("DELETE FROM checkpoints")  # the wait's looks are late (say, failing)
    signal_id = int(flow.send("o-1", "k1", payment()).json["signal_id"])
    flow.rows("DELETE FROM checkpoints")
    clock.advance(61)
    before = instance_version(flow)
    assert signals.expire_unmatched_signal(database, signal_id) == "EXPIRY_DEFERRED"
    assert instance_version(flow) == before
    (wait,) = flow.rows("SELECT deadline_at FROM waits")
    assert flow.rows("SELECT status, available_at FROM signals") == [
        {"status": "PENDING", "available_at": wait["deadline_at"]}
    ]


# ---- item 9: lease expiry against the step deadline, by the facts' times -----------------------------


@pytest.mark.parametrize("order", ["lease_first", "deadline_first"])
@pytest.mark.parametrize(
    "lease_seconds, expected",
    [(60, "CANCELLED"), (3600, "UNKNOWN")],
    ids=["lease_ended_before_the_deadline", "deadline_while_the_lease_held"],
)
def test_p4_p7_lease_expiry_and_step_deadline_end_the_task_alike_whichever_looks_first(
    flow, database, clock, order, lease_seconds, expected
):
    """Issue 25, item 9: the scanner was down past both the lease's end and the step's deadline
    (300 s); the task ends the same whichever unit looks first."""
    flow.publish(task_steps("work", timeout=300))
    flow.start("wf-0")
    flow.scan()
    task = flow.claim(lease_seconds=lease_seconds).json
    clock.advance(4000)
    (deadline_look,) = flow.rows(  # the step's deadline (the workflow's, I6, is later)
        "SELECT id FROM checkpoints WHERE kind = 'ROOT' ORDER BY due_at LIMIT 1"
    )
    (running,) = flow.rows("SELECT id, queue_id FROM tasks")
    units = [
        lambda: tasks.expire_lease(database, running["id"], running["queue_id"]),
        lambda: engine.process_checkpoint(database, deadline_look["id"]),
    ]
    for unit in units if order == "lease_first" else reversed(units):
        unit()
    flow.scan()
    assert flow.rows("SELECT status FROM tasks") == [{"status": expected}]
    assert flow.workflow("wf-0")["review_reason"] == "STEP_DEADLINE_EXCEEDED"
    assert flow.complete(task, result={}).status_code == 409  # the lease is gone either way
