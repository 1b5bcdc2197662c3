"""Faults between Weave and its database, one at a time, through the fault proxy (tests/support/faultproxy.py):
a stalled database, a pool of connections that all died, and a COMMIT whose acknowledgement is
lost (docs/decisions.md, "Transactions"). The mixed workload under random faults is in
test_fault_injection.py; a killed database server in test_database_crash.py.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import falcon
import falcon.testing
import pymysql
import pytest
from helpers import payment, signal_flow_definition, task_steps

from weave import db, errors
from weave.app import create_app
from weave.config import Config
from weave.db import Database
from weave.devdb import free_port
from weave.resources.signals import route_request, signal_request
from weave.rules import signals as signal_rules
from weave.sql import backoff, checkpoints, engine, routing, signals, tasks


def select_one(tx):
    return tx.one("SELECT 1 AS one")["one"]


@pytest.mark.slow
def test_a_stalled_database_makes_a_unit_unavailable_within_the_retry_budget(proxied, proxy):
    assert proxied.run(select_one) == 1  # a pooled connection, then nothing moves
    proxy.stall(60)
    started = time.monotonic()
    with pytest.raises(db.Unavailable):
        proxied.run(select_one)
    assert time.monotonic() - started < db.RETRY_BUDGET_SECONDS + db.READ_TIMEOUT_SECONDS + 1


def test_connections_that_all_died_are_replaced_without_failing_the_unit(proxied, proxy):
    # Every pooled connection dies at once (a database restart, a network blip): the next unit
    # must not spend its attempts on them one by one.
    held = [proxied._checkout(False) for _ in range(db.DEFAULT_MAX_ATTEMPTS + 2)]
    for conn in held:
        proxied._checkin(conn, True)
    assert proxy.cut_all() == len(held)
    assert proxied.run(select_one) == 1


# ---- a COMMIT whose acknowledgement is lost: the attempt committed, the unit is re-run ------------

# A started workflow's first look (the other ROOT checkpoint is at its total deadline, I6).
FIRST_LOOK = "SELECT id, due_at FROM checkpoints ORDER BY due_at LIMIT 1"


@pytest.fixture
def lose_commit_answer(proxied, proxy):
    """`lose_commit_answer()`: the next COMMIT on the proxied database is run by the server and its
    connection cut before the answer comes back. The pool is warmed first, so that the COMMIT of
    opening a connection is not the one hit."""

    def arm():
        proxied.run(select_one)
        proxy.lose_reply_to(b"COMMIT")

    yield arm
    assert proxy.counts["cut_reply_lost"] == 1, "the armed COMMIT never came"


def queued_tasks(flow, count):
    flow.publish(task_steps("work"))
    for i in range(count):
        flow.start(f"wf-{i}")
    flow.scan()


def test_a_claim_whose_commit_answer_is_lost_answers_the_task_it_took(flow, tenant, proxied, lose_commit_answer):
    queued_tasks(flow, 2)
    worker = tenant.principal("tasks:work", queues=("inventory",))
    lose_commit_answer()
    claimed = tasks.claim_task(proxied, worker.namespace_id, "inventory", "w1", 60, worker.credential_id, "w1")
    rows = flow.rows("SELECT id, status, attempt, lease_token FROM tasks ORDER BY id")
    assert [(r["status"], r["attempt"]) for r in rows] == [("RUNNING", 1), ("QUEUED", 0)]
    assert (claimed.task_id, claimed.lease_token, claimed.attempt) == (rows[0]["id"], rows[0]["lease_token"], 1)
    assert flow.rows("SELECT permits_in_use FROM queues WHERE name = 'inventory'") == [{"permits_in_use": 1}]
    assert len(flow.rows("SELECT id FROM audit_records WHERE action = 'task.claim'")) == 1


@pytest.mark.parametrize(
    "completion, status",
    [
        (tasks.Completion("SUCCEEDED", '{"done":true}'), "SUCCEEDED"),
        (tasks.Completion("FAILED", None, '{"message":"flaky","retryable":true}', retryable=True), "QUEUED"),
        (tasks.Completion("CANCELLED"), "CANCELLED"),
    ],
)
def test_a_completion_whose_commit_answer_is_lost_answers_what_it_recorded(
    flow, tenant, proxied, lose_commit_answer, completion, status
):
    queued_tasks(flow, 1)
    task = flow.claim().json
    worker = tenant.principal("tasks:work", queues=("inventory",))
    lose_commit_answer()
    done = tasks.complete_task(
        proxied,
        worker.namespace_id,
        int(task["task_id"]),
        task["lease_token"],
        completion,
        frozenset({"inventory"}),
        worker.credential_id,
        "w1",
    )
    assert done == {"task_id": task["task_id"], "status": status, "attempt": 1}
    assert flow.rows("SELECT status, attempt FROM tasks") == [{"status": status, "attempt": 1}]
    assert len(flow.rows("SELECT id FROM audit_records WHERE action = 'task.complete'")) == 1


def test_W1_a_source_whose_commit_answer_is_lost_is_answered_as_created(tenant, flow, proxied, lose_commit_answer):
    from weave.sql import inbound

    lose_commit_answer()
    created = inbound.create_source(proxied, "acme", "stripe", "app", "hooks", "stripe", "{}", ["inventory"], None)
    (source,) = flow.rows("SELECT id, credential_id FROM inbound_sources")
    assert (created["source_id"], created["credential_id"]) == (str(source["id"]), str(source["credential_id"]))
    assert len(flow.rows("SELECT id FROM credentials")) == len(
        flow.rows("SELECT id FROM audit_records WHERE action = 'credential.create'")
    )
    assert len(flow.rows("SELECT id FROM audit_records WHERE action = 'inbound.create'")) == 1
    # another call for the same name is refused: it is not the call that made it
    with pytest.raises(errors.WeaveError) as refused:
        inbound.create_source(proxied, "acme", "stripe", "app", "hooks", "stripe", "{}", ["inventory"], None)
    assert refused.value.code is errors.Code.INVALID_STATE


def test_W1_a_secret_whose_commit_answer_is_lost_is_stored_once(tenant, flow, proxied, lose_commit_answer):
    from weave.sql import inbound

    inbound.create_source(proxied, "acme", "stripe", "app", "hooks", "stripe", "{}", [], None)
    first = inbound.add_secret(proxied, "acme", "stripe", b"first")
    lose_commit_answer()
    second = inbound.add_secret(proxied, "acme", "stripe", b"second")
    rows = flow.rows("SELECT id, ciphertext FROM inbound_secrets ORDER BY id")
    assert [(str(r["id"]), bytes(r["ciphertext"])) for r in rows] == [
        (first["secret_id"], b"first"),
        (second["secret_id"], b"second"),
    ]  # not refused as a third, not stored twice
    assert len(flow.rows("SELECT id FROM audit_records WHERE action = 'inbound.secret.add'")) == 2


def test_a_backoff_whose_commit_answer_is_lost_is_counted_once(flow, clock, proxied, lose_commit_answer):
    flow.publish(task_steps("work"))
    flow.start("wf-0")
    (checkpoint,) = flow.rows(FIRST_LOOK)
    lose_commit_answer()
    available_at = backoff.record_failure(proxied, checkpoints.FAILURES, checkpoint["id"], "Retryable: injected")
    (row,) = flow.rows("SELECT attempts, available_at FROM checkpoints WHERE id = %s", (checkpoint["id"],))
    assert row == {"attempts": 1, "available_at": checkpoint["due_at"] + timedelta(seconds=1)}
    assert available_at == row["available_at"]


def test_a_backoff_whose_commit_answer_is_lost_while_another_scanner_counts_its_own_failure(
    flow, clock, database, proxied, lose_commit_answer, monkeypatch
):
    """Between the lost COMMIT and the re-run, a second scanner that failed on the same row counts
    its failure: two failures, two counts (the re-run used to count its own again: three; found by
    tests/processes/test_fault_injection.py)."""
    flow.publish(task_steps("work"))
    flow.start("wf-0")
    (checkpoint,) = flow.rows(FIRST_LOOK)
    pause, others = time.sleep, []

    def between_attempts(seconds):  # weave.db sleeps before it re-runs the unit
        if not others:
            others.append(backoff.record_failure(database, checkpoints.FAILURES, checkpoint["id"], "Retryable: other"))
        pause(seconds)

    lose_commit_answer()
    monkeypatch.setattr(db.time, "sleep", between_attempts)
    backoff.record_failure(proxied, checkpoints.FAILURES, checkpoint["id"], "Retryable: injected")
    assert others and flow.rows("SELECT attempts FROM checkpoints WHERE id = %s", (checkpoint["id"],)) == [
        {"attempts": 2}
    ]


def test_a_backoff_cut_before_its_commit_while_another_scanner_counts_its_own_is_counted_too(
    flow, clock, database, cut_connection, monkeypatch
):
    """The server kills the backoff's session before COMMIT (rolled back, the answer lost) and a
    second scanner counts its own failure on the row before the re-run: two failures, two counts.
    The re-run tells the other's count from its own by the `available_at` it wrote (it counted
    nothing, taking the other's for its own: found by tests/processes/test_fault_injection.py)."""
    flow.publish(task_steps("work"))
    flow.start("wf-0")
    (checkpoint,) = flow.rows(FIRST_LOOK)
    pause, others = time.sleep, []

    def between_attempts(seconds):
        if not others:
            clock.advance(0.5)  # the other scanner fails a moment later
            others.append(backoff.record_failure(database, checkpoints.FAILURES, checkpoint["id"], "Retryable: other"))
        pause(seconds)

    killed = cut_connection("record_failure")
    monkeypatch.setattr(db.time, "sleep", between_attempts)
    backoff.record_failure(database, checkpoints.FAILURES, checkpoint["id"], "Retryable: injected")
    assert killed == ["record_failure"] and others
    assert flow.rows("SELECT attempts FROM checkpoints WHERE id = %s", (checkpoint["id"],)) == [{"attempts": 2}]


def test_a_quota_count_whose_commit_answer_is_lost_is_counted_once(flow, proxied, lose_commit_answer):
    """Issue 25, item 9: the re-run answers what the earlier attempt decided, and counts nothing."""
    (application,) = flow.rows("SELECT id FROM applications WHERE name = %s", (flow.tenant.application,))
    assert signals.take_quota(proxied, application["id"], 1) is None
    lose_commit_answer()
    assert signals.take_quota(proxied, application["id"], 2) is None  # the second of two: not over
    assert flow.rows("SELECT used FROM signal_quota_windows") == [{"used": 2}]


def test_a_signal_whose_commit_answer_is_lost_answers_the_receipt_it_froze(flow, proxied, lose_commit_answer):
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    principal = flow.tenant.principal("workflows:signal", queues=("inventory", "carrier"))
    request = signal_request("k-1", payment())
    lose_commit_answer()
    receipt = signals.send_signal(proxied, principal, "o-1", request)
    assert flow.send("o-1", "k-1", payment()).text == receipt.text
    assert len(flow.rows("SELECT id FROM signals")) == 1


def test_B3_a_route_whose_commit_answer_is_lost_is_counted_at_most_once(flow, proxied, lose_commit_answer):
    """The re-run finds its own fact and answers it as a replay: weave_signals_routed_total (counted
    from the receipt a route returns, after its COMMIT) cannot count the fact twice."""
    flow.publish(signal_flow_definition())
    principal = flow.tenant.principal("workflows:signal", queues=("inventory", "carrier"))
    body = {
        "name": "payment.settled",
        "payload_version": "v1",
        "correlation_key": "o-9",
        "payload": {"amount": 12.5},
        "reason": "PSP webhook settled the payment",
    }
    lose_commit_answer()
    receipt = routing.route_signal(proxied, principal, route_request("p-1", body))
    assert receipt.replayed and receipt.route is None  # nothing more to count
    assert json.loads(receipt.text)["route"] == "PARKED"
    assert len(flow.rows("SELECT id FROM signals WHERE status = 'PARKED'")) == 1


QUEUES = ("inventory", "carrier")


@pytest.mark.parametrize(
    "before, action, after",
    [(None, "pause", "PAUSED"), ("pause", "resume", "RUNNING"), (None, "cancel", "CANCELLED")],
)
def test_a_control_whose_commit_answer_is_lost_answers_what_it_did(
    flow, proxied, lose_commit_answer, before, action, after
):
    """R1 after a lost COMMIT: the re-run finds the instance in the state its first attempt left it
    in; it answers that state, once audited, instead of 409 INVALID_STATE."""
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    operator = flow.tenant.principal("workflows:control", queues=QUEUES)
    if before is not None:
        engine.control(proxied, operator, "o-1", before, "ticket OPS-0")
    lose_commit_answer()
    facts = engine.control(proxied, operator, "o-1", action, "ticket OPS-1")
    assert facts.instance["status"] == after
    assert flow.rows("SELECT status FROM instances") == [{"status": after}]
    audited = flow.rows("SELECT details FROM audit_records WHERE action = %s", (f"workflow.{action}",))
    assert len(audited) == 1 and "OPS-1" in audited[0]["details"]


def test_a_review_whose_commit_answer_is_lost_answers_what_it_did(expired, proxied, lose_commit_answer):
    """R2 after a lost COMMIT: one retry of the step, one new generation, one audit record."""
    operator = expired.tenant.principal("workflows:review", queues=QUEUES)
    lose_commit_answer()
    facts = engine.review(proxied, operator, "order-1", "retry_step", "payment", signal_rules.ABSENT, "ticket OPS-1")
    assert (facts.instance["status"], facts.activations["payment"]["activation_sequence"]) == ("RUNNING", 2)
    sequences = expired.rows("SELECT activation_sequence FROM step_activations WHERE step_key = 'payment' ORDER BY 1")
    assert sequences == [{"activation_sequence": 1}, {"activation_sequence": 2}]
    assert len(expired.rows("SELECT id FROM audit_records WHERE action = 'workflow.review'")) == 1


def test_a_control_rerun_after_others_decided_recognises_its_own_commit(
    flow, database, proxied, lose_commit_answer, monkeypatch
):
    """Between the lost COMMIT and the re-run another unit decided about the instance (here a
    resume): the re-run finds its own audit record by the call's identity (issue 25, A) and answers
    the instance as it is now; it does not pause a second time."""
    flow.publish(signal_flow_definition())
    flow.start("o-1", input={"order_id": "o-1"})
    operator = flow.tenant.principal("workflows:control", queues=QUEUES)
    pause, others = time.sleep, []

    def between_attempts(seconds):
        if not others:
            others.append(engine.control(database, operator, "o-1", "resume", "ticket OPS-2"))
        pause(seconds)

    lose_commit_answer()
    monkeypatch.setattr(db.time, "sleep", between_attempts)
    facts = engine.control(proxied, operator, "o-1", "pause", "ticket OPS-1")
    assert others and facts.instance["status"] == "RUNNING"
    actions = flow.rows(
        "SELECT action FROM audit_records WHERE action IN ('workflow.pause', 'workflow.resume') ORDER BY id"
    )
    assert [row["action"] for row in actions] == ["workflow.pause", "workflow.resume"]


# ---- what a 503 says (issue 28, item 3) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "unreachable"),
    [
        ((1205, "Lock wait timeout exceeded; try restarting transaction"), False),
        ((1213, "Deadlock found when trying to get lock"), False),
        ((2013, "Lost connection to MySQL server during query"), True),
        ((1047, "WSREP has not yet prepared node for application use"), True),
    ],
    ids=["lock-wait-timeout", "deadlock", "connection-lost", "galera-node-not-ready"],
)
def test_issue_28_3_a_unit_out_of_retries_says_whether_the_database_was_busy_or_unreachable(
    database, error, unreachable
):
    def always_fails(tx):
        tx.one("SELECT 1 AS one")
        raise pymysql.err.OperationalError(*error)

    with pytest.raises(db.Unavailable) as failed:
        Database(database.url, max_attempts=2).run(always_fails)
    assert failed.value.unreachable is unreachable
    assert failed.value.what == ("the database is unreachable" if unreachable else "the database is busy")


def test_issue_28_3_with_the_database_down_the_api_and_readyz_both_say_unreachable():
    # Before: the API answered "the database is busy; retry shortly" while /readyz said
    # "database unreachable". Nothing listens on this port: both must say what is true.
    url = f"mysql://root@127.0.0.1:{free_port()}/nowhere"
    client = falcon.testing.TestClient(create_app(Config(url), Database(url, max_attempts=2)))
    api = client.simulate_get("/v1/namespaces/shop/workflows", headers={"Authorization": "Bearer wv_x"})
    ready = client.simulate_get("/readyz")
    for answer in (api, ready):
        assert (answer.status_code, answer.json["code"]) == (503, "UNAVAILABLE")
        assert answer.headers["Retry-After"]
    assert api.json["detail"] == "the database is unreachable; retry shortly"
    assert ready.json["detail"].startswith("the database is unreachable: ")
    assert "busy" not in ready.json["detail"]


def test_issue_28_3_a_busy_database_is_called_busy_by_the_api():
    app = falcon.App()
    errors.install(app)

    class Busy:
        def on_get(self, req, resp):
            raise db.Unavailable("a unit failed 5 times; last error: 1205", unreachable=False)

    app.add_route("/busy", Busy())
    answer = falcon.testing.TestClient(app).simulate_get("/busy")
    assert (answer.status_code, answer.headers["Retry-After"]) == (503, "1")
    assert answer.json["detail"] == "the database is busy; retry shortly"
