"""N1-N3, the storage half: subscriptions with encrypted secrets, the outbox rows written in the
transaction of the change they report (N2), and what disable and delete leave (N3), on a real
database. Delivery (claims, attempts, signatures) is tests/integration/test_outbox*.py's."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from helpers import payment, signal_flow_definition, task_steps

from weave.errors import Code, WeaveError
from weave.rules import review as review_rules
from weave.rules import subscriptions
from weave.secretbox import Keyring, new_key
from weave.sql import engine, notifications
from weave.statuses import NotifyEvent

KEY = new_key()
RING = Keyring([KEY])
SECRET = subscriptions.secret_from(b"s" * 32)
QUEUES = ("inventory", "carrier")


def subscribe(database, name="ops", events=tuple(e.value for e in NotifyEvent), namespace="acme", secret=SECRET):
    return notifications.create_subscription(
        database, namespace, name, f"https://hooks.example/{name}", list(events), RING.encrypt(secret)
    )


def outbox(flow, event: str | None = None) -> list[dict]:
    rows = flow.rows(
        "SELECT n.*, s.name AS subscription FROM notifications n JOIN notify_subscriptions s ON s.id = n.subscription_id "
        "ORDER BY n.id"
    )
    for row in rows:
        row["document"] = json.loads(row["body"])
    return [row for row in rows if event is None or row["event_type"] == event]


def at_payment(flow):
    """order-1 waits for its payment (the wait opened now)."""
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    return flow


def operator(tenant):
    return tenant.principal("workflows:control", "workflows:review", queues=QUEUES)


# ---- N1: subscriptions ----------------------------------------------------------------------------


def test_N1_a_subscription_is_created_listed_with_its_events_and_its_secret_is_stored_encrypted(tenant, database):
    created = subscribe(database, events=["workflow.failed", "signal.settled"])
    assert created["events"] == ["workflow.failed", "signal.settled"] and created["status"] == "ENABLED"
    stored = database.run(lambda tx: tx.one("SELECT * FROM notify_subscriptions"))
    assert stored["event_mask"] == NotifyEvent.FAILED.bit | NotifyEvent.SIGNAL_SETTLED.bit
    assert RING.decrypt(stored["ciphertext"]) == SECRET
    dump = repr(
        database.run(lambda tx: [tx.all(f"SELECT * FROM {t}") for t in ("notify_subscriptions", "audit_records")])
    )
    assert SECRET not in dump and SECRET.removeprefix("whsec_") not in dump
    (listed,) = notifications.list_subscriptions(database, "acme")
    assert listed["name"] == "ops" and listed["url"] == "https://hooks.example/ops" and listed["failing_since"] is None
    assert listed["events"] == ["workflow.failed", "signal.settled"] and "ciphertext" not in listed


def test_N1_a_name_is_unique_in_its_namespace_and_an_unknown_namespace_is_not_found(tenant, other_tenant, database):
    subscribe(database)
    with pytest.raises(WeaveError) as caught:
        subscribe(database)
    assert caught.value.code is Code.INVALID_STATE
    subscribe(database, namespace="globex")  # the same name in another namespace
    with pytest.raises(WeaveError) as caught:
        subscribe(database, namespace="nowhere")
    assert caught.value.code is Code.NOT_FOUND


# ---- N2: every event type, written with its change ----------------------------------------------------


def test_N2_needs_review_is_written_in_the_transaction_that_moves_the_instance(flow, database, clock):
    subscribe(database)
    at_payment(flow)
    clock.advance(600)
    flow.scan()  # the wait expires: the step and the instance go to review
    (row,) = outbox(flow, "workflow.needs_review")
    instance = flow.rows("SELECT id, status, updated_at FROM instances")[0]
    assert instance["status"] == "NEEDS_REVIEW"
    assert row["occurred_at"] == instance["updated_at"] and row["instance_id"] == instance["id"]
    assert row["status"] == "PENDING" and row["due_at"] == row["occurred_at"] and row["attempts"] == 0
    document = row["document"]
    assert list(document) == ["type", "timestamp", "data"] and document["type"] == "workflow.needs_review"
    assert document["data"] == flow.workflow("order-1")  # the representation of §11, as GET renders it
    assert row["webhook_id"].startswith("msg_")


def test_N2_succeeded_and_the_consumed_signal_are_written_with_their_changes(flow, database):
    subscribe(database)
    at_payment(flow)
    sent = flow.send("order-1", "pay-1", payment())
    flow.scan()
    (settled,) = outbox(flow, "signal.settled")
    consumed_at = flow.rows("SELECT settled_at FROM signals")[0]["settled_at"]
    assert settled["occurred_at"] == consumed_at
    assert settled["document"]["data"] == flow.signal("order-1", sent.json["signal_id"]).json
    assert settled["document"]["data"]["status"] == "CONSUMED"
    flow.finish_task({"tracking": "t-1"}, queue="carrier")
    (succeeded,) = outbox(flow, "workflow.succeeded")
    assert succeeded["document"]["data"]["status"] == "SUCCEEDED"
    assert succeeded["occurred_at"] == flow.rows("SELECT updated_at FROM instances")[0]["updated_at"]


def test_N2_cancel_writes_cancelled_and_each_rejected_signal(flow, database, tenant):
    subscribe(database)
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    early = [flow.send("order-1", f"k{i}", payment()).json["signal_id"] for i in range(2)]  # PENDING, early
    engine.control(database, operator(tenant), "order-1", "cancel", "ticket OPS-1")
    assert [r["document"]["data"]["status"] for r in outbox(flow, "workflow.cancelled")] == ["CANCELLED"]
    settled = outbox(flow, "signal.settled")
    assert [r["document"]["data"]["signal_id"] for r in settled] == early
    assert {(r["document"]["data"]["status"], r["document"]["data"]["disposition"]) for r in settled} == {
        ("REJECTED", "INSTANCE_SETTLED")
    }


def test_N2_failed_is_written_by_the_review_that_fails_the_instance(flow, database, clock, tenant):
    subscribe(database, events=["workflow.failed"])
    at_payment(flow)
    clock.advance(600)
    flow.scan()
    engine.review(database, operator(tenant), "order-1", review_rules.FAIL, None, None, "customer gone")
    (row,) = outbox(flow)
    assert row["event_type"] == "workflow.failed" and row["document"]["data"]["status"] == "FAILED"


def test_N2_an_expired_unmatched_signal_is_settled(flow, database, clock):
    subscribe(database, events=["signal.settled"])
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"}, deadline_seconds=300)
    flow.scan()
    early = flow.send("order-1", "k1", payment()).json["signal_id"]
    clock.advance(300)
    flow.scan()
    (row,) = outbox(flow)
    assert (row["document"]["data"]["signal_id"], row["document"]["data"]["status"]) == (early, "EXPIRED")
    assert row["document"]["data"]["disposition"] == "EXPIRED_UNMATCHED"


def test_N2_a_rejected_loser_and_the_winner_are_both_settled(flow, database):
    subscribe(database, events=["signal.settled"])
    at_payment(flow)
    flow.send("order-1", "first", payment())
    flow.send("order-1", "second", payment())  # both PENDING until the wait's look: the first wins
    flow.scan()
    settled = {r["document"]["data"]["idempotency_key"]: r["document"]["data"] for r in outbox(flow)}
    assert (settled["second"]["status"], settled["second"]["disposition"]) == ("REJECTED", "WAIT_SETTLED")
    assert settled["first"]["status"] == "CONSUMED"


def test_N2_a_signal_refused_at_acceptance_is_answered_not_notified(flow, database):
    subscribe(database, events=["signal.settled"])
    at_payment(flow)
    refused = flow.send("order-1", "k1", payment(correlation_key="o-2"))  # the open wait's key is o-1
    assert (refused.json["status"], refused.json["disposition"]) == ("REJECTED", "CORRELATION_MISMATCH")
    assert outbox(flow) == []


def test_N2_deadline_near_is_written_at_80_percent_while_the_wait_has_no_winner(flow, database, clock):
    subscribe(database, events=["wait.deadline_near"])
    at_payment(flow)
    (near,) = flow.rows("SELECT due_at, created_at FROM checkpoints WHERE kind = 'NEAR'")
    assert near["due_at"] - near["created_at"] == timedelta(seconds=480)  # 80 % of the wait's 600 s
    clock.advance(479)
    flow.scan()
    assert outbox(flow) == []
    clock.advance(1)
    flow.scan()
    (row,) = outbox(flow)
    wait = flow.rows("SELECT step_key, activation_sequence, deadline_at FROM waits")[0]
    assert row["document"]["type"] == "wait.deadline_near"
    assert row["document"]["data"] == {
        "workflow_id": "order-1",
        "step_key": "payment",
        "activation_sequence": 1,
        "deadline_at": flow.workflow("order-1")["steps"][1]["wait"]["deadline_at"],
    }
    assert wait["step_key"] == "payment"
    assert flow.rows("SELECT id FROM checkpoints WHERE kind = 'NEAR'") == []


def test_N2_deadline_near_is_not_written_when_the_wait_has_its_winner(flow, database, clock):
    subscribe(database, events=["wait.deadline_near"])
    at_payment(flow)
    flow.send("order-1", "pay-1", payment())
    flow.scan()
    clock.advance(480)
    flow.scan()
    assert outbox(flow) == []
    assert flow.rows("SELECT id FROM checkpoints WHERE kind = 'NEAR'") == []  # looked at, and done


def test_N2_no_near_checkpoint_is_written_for_a_namespace_that_does_not_subscribe_to_it(flow, database):
    subscribe(database, events=["workflow.failed"])
    at_payment(flow)
    assert flow.rows("SELECT id FROM checkpoints WHERE kind = 'NEAR'") == []


# ---- N2: only what is subscribed, only where subscribed ------------------------------------------------


def test_N2_a_namespace_without_subscriptions_gets_no_row(flow, database, other_tenant):
    subscribe(database, namespace="globex")  # another namespace's subscription
    at_payment(flow)
    flow.send("order-1", "pay-1", payment())
    flow.scan()
    flow.finish_task({}, queue="carrier")
    assert flow.workflow("order-1")["status"] == "SUCCEEDED"
    assert outbox(flow) == []


def test_N2_an_unsubscribed_type_and_a_disabled_subscription_get_no_row(flow, database):
    subscribe(database, "failures", events=["workflow.failed"])
    subscribe(database, "off")
    notifications.disable_subscription(database, "acme", "off")
    subscribe(database, "done", events=["workflow.succeeded"])
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    flow.finish_task({})
    assert [(r["subscription"], r["event_type"]) for r in outbox(flow)] == [("done", "workflow.succeeded")]


def test_N2_each_subscription_gets_its_own_row_with_its_own_webhook_id(flow, database):
    subscribe(database, "a")
    subscribe(database, "b", events=["workflow.succeeded"])
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    flow.finish_task({})
    rows = outbox(flow, "workflow.succeeded")
    assert sorted(r["subscription"] for r in rows) == ["a", "b"]
    assert len({r["webhook_id"] for r in rows}) == 2 and rows[0]["body"] == rows[1]["body"]


# ---- N2: a change that rolls back writes nothing --------------------------------------------------------


def test_N2_a_cancel_cut_before_commit_writes_no_notification_and_its_rerun_writes_one(
    flow, database, tenant, cut_connection
):
    subscribe(database)
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    killed = cut_connection("control")
    with pytest.raises(Exception):
        engine.control.once(database, operator(tenant), "wf-1", "cancel", "ticket OPS-2")
    assert killed == ["control"]
    assert flow.rows("SELECT status FROM instances") == [{"status": "RUNNING"}]
    assert outbox(flow) == []
    engine.control(database, operator(tenant), "wf-1", "cancel", "ticket OPS-2")
    assert [r["event_type"] for r in outbox(flow)] == ["workflow.cancelled"]


def test_N2_a_consumption_cut_before_commit_writes_nothing_and_its_rerun_writes_exactly_one(
    flow, database, cut_connection, clock
):
    subscribe(database, events=["signal.settled"])
    at_payment(flow)
    flow.send("order-1", "pay-1", payment())
    killed = cut_connection("process_checkpoint")
    flow.scan()  # the consuming look is cut before COMMIT: rolled back, the checkpoint backed off
    assert killed == ["process_checkpoint"]
    assert flow.rows("SELECT status FROM signals") == [{"status": "PENDING"}]
    assert outbox(flow) == []
    clock.advance(1)
    flow.scan()
    assert flow.rows("SELECT status FROM signals") == [{"status": "CONSUMED"}]
    assert len(outbox(flow)) == 1


# ---- N3: disable and delete -----------------------------------------------------------------------


def test_N3_disable_drops_what_is_pending_and_delete_removes_the_history(flow, database):
    subscribe(database, "ops")
    subscribe(database, "audit")
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    flow.finish_task({})
    assert len(outbox(flow)) == 2
    disabled = notifications.disable_subscription(database, "acme", "ops")
    assert disabled["dropped"] == 1
    by_name = {r["subscription"]: r for r in outbox(flow)}
    assert (by_name["ops"]["status"], by_name["ops"]["due_at"]) == ("DROPPED", None)
    assert by_name["audit"]["status"] == "PENDING"  # another subscription's are its own
    assert notifications.disable_subscription(database, "acme", "ops")["dropped"] == 0  # again: nothing changes
    notification_id = by_name["audit"]["id"]
    database.run(
        lambda tx: tx.execute(
            "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, error, duration_ms) "
            "VALUES (%s, UTC_TIMESTAMP(6), 500, 'HTTP 500', 12)",
            (notification_id,),
        )
    )
    (listed,) = notifications.list_deliveries(database, "acme", "audit", None, None, 10)
    assert listed["attempts"][0]["http_status"] == 500 and listed["workflow_id"] == "wf-1"
    deleted = notifications.delete_subscription(database, "acme", "audit")
    assert deleted["notifications_deleted"] == 1
    assert [r["subscription"] for r in outbox(flow)] == ["ops"]
    assert flow.rows("SELECT id FROM notification_attempts") == []
    with pytest.raises(WeaveError) as caught:
        notifications.list_deliveries(database, "acme", "audit", None, None, 10)
    assert caught.value.code is Code.NOT_FOUND


def test_N3_deliveries_are_listed_newest_first_by_page_and_status(flow, database):
    subscribe(database, events=["workflow.succeeded"])
    flow.publish(task_steps("work"))
    for n in range(3):
        flow.start(f"wf-{n}")
        flow.scan()
        flow.finish_task({})
    first = notifications.list_deliveries(database, "acme", "ops", None, None, 2)
    assert [d["workflow_id"] for d in first] == ["wf-2", "wf-1"]
    rest = notifications.list_deliveries(database, "acme", "ops", None, int(first[-1]["notification_id"]), 2)
    assert [d["workflow_id"] for d in rest] == ["wf-0"]
    assert notifications.list_deliveries(database, "acme", "ops", "DELIVERED", None, 10) == []
    assert len(notifications.list_deliveries(database, "acme", "ops", "PENDING", None, 10)) == 3


def test_N1_reencrypt_rewrites_the_subscriptions_secrets(flow, database):
    subscribe(database)
    (row,) = notifications.secrets_after(database, 0, 10)
    newer = Keyring([new_key(), KEY])
    assert notifications.rewrite_secret(database, row, newer.rotate(row["ciphertext"]))
    stored = database.run(lambda tx: tx.one("SELECT ciphertext FROM notify_subscriptions"))["ciphertext"]
    assert bytes(stored) != row["ciphertext"] and newer.decrypt(stored) == SECRET
    assert not notifications.rewrite_secret(database, row, b"stale")  # rewritten since it was read


def test_N2_signals_settled_in_bulk_by_a_review_are_each_notified(flow, database, clock, tenant):
    subscribe(database, events=["signal.settled"])
    at_payment(flow)
    clock.advance(600)
    flow.scan()  # in review
    late = flow.send("order-1", "late", payment())
    assert late.json["status"] == "REJECTED"  # LATE at acceptance: answered, not notified
    engine.review(database, operator(tenant), "order-1", review_rules.RETRY_STEP, "payment", None, "retry it")
    pending = flow.send("order-1", "p2", payment(sequence=2)).json["signal_id"]
    engine.control(database, operator(tenant), "order-1", "cancel", "give up")
    assert [r["document"]["data"]["signal_id"] for r in outbox(flow, "signal.settled")] == [pending]


def test_N2_a_parked_fact_that_expires_unrouted_is_settled_without_a_workflow(flow, database, clock):
    from test_routing import fact, route

    subscribe(database, events=["signal.settled"])
    flow.publish(signal_flow_definition())
    receipt = route(flow, "pay-1", fact(park_seconds=60)).json
    assert receipt["route"] == "PARKED"
    clock.advance(61)
    flow.scan()
    (row,) = outbox(flow)
    read = flow.client.simulate_get(f"{flow.ns}/signals/{receipt['signal_id']}", headers=flow.headers)
    assert row["document"]["data"] == read.json and read.json["disposition"] == "EXPIRED_UNROUTED"
    assert row["instance_id"] is None and read.json["workflow_id"] is None


def test_N2_a_namespace_without_subscriptions_renders_nothing_on_the_hot_path(
    flow, database, monkeypatch, other_tenant
):
    """Consumption and the end of a workflow read the namespace's mask with the instance lock and
    go no further: neither representation is rendered, no signal or workflow is read for it."""
    from weave import views
    from weave.sql import instances

    subscribe(database, namespace="globex")

    def refuse(*args, **kwargs):
        raise AssertionError("rendered for a namespace without subscriptions")

    at_payment(flow)
    monkeypatch.setattr(views, "signal_view", refuse)
    monkeypatch.setattr(views, "workflow_view", refuse)
    monkeypatch.setattr(instances, "read_facts", refuse)
    flow.send("order-1", "first", payment())
    flow.send("order-1", "second", payment())
    flow.scan()
    claimed = flow.claim("carrier").json
    assert flow.complete(claimed, result={}).status_code == 200
    flow.scan()
    monkeypatch.undo()
    assert flow.workflow("order-1")["status"] == "SUCCEEDED"
    assert outbox(flow) == []
