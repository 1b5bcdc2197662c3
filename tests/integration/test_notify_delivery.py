"""The delivery of outbound notifications (N2, N3): signed POSTs the `standardwebhooks` reference
library verifies, retries on the schedule with the same webhook-id, drops for a disabled or
deleted subscription, no redirects, private addresses refused when configured, and a bounded
pool of delivery threads that a hanging endpoint cannot turn into a stalled scanner."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from helpers import signal_flow_definition, wait_until
from notifying import KEYRING, Receiver, attempts, enqueue, notification, subscribe
from standardwebhooks.webhooks import Webhook

from weave import metrics
from weave.config import DEFAULT_NOTIFY_DELIVERIES
from weave.delivery import Deliveries
from weave.scanner import Scanner
from weave.sql import outbox


@pytest.fixture
def deliveries(database):
    made = []

    # the default pool: a subscription may hold 4 of its 16 threads, one batch sends 4 of its notifications
    def make(slots: int = DEFAULT_NOTIFY_DELIVERIES, allow_private: bool = True, timeout: float = 10.0) -> Deliveries:
        made.append(Deliveries(database, KEYRING, slots, allow_private, timeout))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def scan(database, pool: Deliveries):
    """One batch of a scanner that delivers, and the POSTs it started finished."""
    report = Scanner(database, deliveries=pool).run_once()
    assert pool.wait_idle(30)
    return report


def delivered_count(event: str, outcome: str) -> float:
    return metrics.NOTIFICATIONS.labels(event, outcome)._value.get()


def test_N2_every_delivery_is_signed_and_the_reference_library_verifies_it(database, deliveries):
    pool = deliveries()
    with Receiver() as receiver:
        subscription = subscribe(database, receiver.url)
        ids = [enqueue(database, subscription, data={"n": n}) for n in range(3)]
        before = delivered_count("workflow.succeeded", "delivered")
        report = scan(database, pool)
    assert report.by_source == {"notification": 3}
    assert len(receiver.received) == 3
    webhook_ids = set()
    for received in receiver.received:
        document = Webhook(subscription.secret).verify(received.body, received.headers)  # raises unless signed
        assert document["type"] == "workflow.succeeded"
        webhook_ids.add(received.headers["webhook-id"])
    for notification_id in ids:
        row = notification(database, notification_id)
        assert (row["status"], row["due_at"], row["attempts"]) == ("DELIVERED", None, 1)
        assert row["delivered_at"] is not None and row["webhook_id"] in webhook_ids
        [attempt] = attempts(database, notification_id)
        assert (attempt["http_status"], attempt["error"]) == (204, None)
    assert delivered_count("workflow.succeeded", "delivered") == before + 3
    assert scan(database, pool).candidates == 0  # nothing is due any more


def test_N2_a_receiver_that_fails_twice_gets_the_same_webhook_id_three_times(database, deliveries, clock):
    pool = deliveries()
    with Receiver(answers=[500, 503]) as receiver:
        subscription = subscribe(database, receiver.url)
        notification_id = enqueue(database, subscription)
        failing = lambda: database.run(  # noqa: E731
            lambda tx: tx.one("SELECT failing_since FROM notify_subscriptions WHERE id = %s", (subscription.id,))
        )["failing_since"]
        for attempt, (low, high) in enumerate(((2.5, 5), (5, 10)), start=1):
            tried_at = clock.now()
            scan(database, pool)
            row = notification(database, notification_id)
            assert (row["status"], row["attempts"]) == ("PENDING", attempt)
            assert row["last_error"].startswith("HTTP 5")
            # the schedule: the first retry within 5 s, then doubling, each drawn down to half by jitter
            assert timedelta(seconds=low) <= row["due_at"] - tried_at <= timedelta(seconds=high)
            assert failing() is not None  # the endpoint is marked failing from its first failure on
            assert scan(database, pool).candidates == 0  # not due before its retry
            clock.set(row["due_at"])
        scan(database, pool)
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1 and len(receiver.received) == 3
    for received in receiver.received:
        Webhook(subscription.secret).verify(received.body, received.headers)
    row = notification(database, notification_id)
    assert (row["status"], row["attempts"], row["due_at"]) == ("DELIVERED", 3, None)
    assert [a["http_status"] for a in attempts(database, notification_id)] == [500, 503, 204]
    assert failing() is None  # the endpoint answered again: healthy


@pytest.mark.parametrize("disable", ["DISABLED", "deleted"])
def test_N3_a_disabled_or_deleted_subscription_pending_notification_is_dropped_not_sent(database, deliveries, disable):
    pool = deliveries()
    with Receiver() as receiver:
        subscription = subscribe(database, receiver.url)
        notification_id = enqueue(database, subscription)
        if disable == "deleted":
            database.run(lambda tx: tx.execute("DELETE FROM notify_subscriptions WHERE id = %s", (subscription.id,)))
        else:
            database.run(
                lambda tx: tx.execute(
                    "UPDATE notify_subscriptions SET status = 'DISABLED' WHERE id = %s", (subscription.id,)
                )
            )
        before = delivered_count("workflow.succeeded", "dropped")
        report = scan(database, pool)
    assert receiver.received == []
    row = notification(database, notification_id)
    assert (row["status"], row["due_at"], row["attempts"]) == ("DROPPED", None, 0)
    assert attempts(database, notification_id) == []
    assert report.done == 1 and delivered_count("workflow.succeeded", "dropped") == before + 1


def test_N2_a_redirect_is_not_followed(database, deliveries):
    pool = deliveries()
    with Receiver() as elsewhere, Receiver(otherwise=307) as redirecting:
        redirecting.location = elsewhere.url
        notification_id = enqueue(database, subscribe(database, redirecting.url))
        scan(database, pool)
    assert len(redirecting.received) == 1 and elsewhere.received == []
    row = notification(database, notification_id)
    assert (row["status"], row["attempts"]) == ("PENDING", 1)
    [attempt] = attempts(database, notification_id)
    assert attempt["http_status"] == 307 and "redirects are not followed" in attempt["error"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_N2_private_addresses_refused_when_configured(database, deliveries, host):
    """WEAVE_NOTIFY_ALLOW_PRIVATE=0: the address the name resolves to is checked, not the name."""
    pool = deliveries(allow_private=False)
    with Receiver() as receiver:
        url = receiver.url.replace("127.0.0.1", host)
        notification_id = enqueue(database, subscribe(database, url))
        scan(database, pool)
    assert receiver.received == []
    row = notification(database, notification_id)
    assert (row["status"], row["attempts"]) == ("PENDING", 1)
    [attempt] = attempts(database, notification_id)
    assert attempt["http_status"] is None and attempt["error"].startswith("refused: the endpoint's address")
    assert "loopback" in attempt["error"]


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "file:///etc/passwd"])
def test_N2_only_http_and_https_endpoints_are_called(database, deliveries, url):
    pool = deliveries()
    notification_id = enqueue(database, subscribe(database, url))
    scan(database, pool)
    [attempt] = attempts(database, notification_id)
    assert attempt["error"].startswith("refused: the URL's scheme must be http or https")


def test_N2_a_hanging_endpoint_does_not_stop_other_deliveries_or_the_other_sources(database, deliveries, flow, tenant):
    """A POST runs in a delivery thread: the batch that claimed it returns at once, the other
    endpoint's notification is delivered meanwhile, a workflow still advances; the hanging attempt
    ends at the timeout and is retried on the schedule."""
    pool = deliveries(slots=2, timeout=2.0)
    scanner = Scanner(database, deliveries=pool)
    flow.publish(signal_flow_definition(timeout=600))
    with Receiver(answers=["hang"]) as hanging, Receiver() as answering:
        stuck = enqueue(database, subscribe(database, hanging.url, name="stuck"))
        started = time.monotonic()
        report = scanner.run_once()
        assert hanging.arrived.wait(5)
        assert report.by_source == {"notification": 1} and time.monotonic() - started < 1.0
        fine = enqueue(database, subscribe(database, answering.url, name="fine"))
        flow.start("order-1", input={"order_id": "o-1"})
        report = scanner.run_once()  # the hanging POST is still in flight
        assert report.by_source.get("notification") == 1 and report.millis < 1000, report
        wait_until(lambda: notification(database, fine)["status"] == "DELIVERED", timeout=5)
        flow.scanner = scanner
        flow.scan()
        assert flow.claim().status_code == 200  # the workflow's first task was created meanwhile
        assert notification(database, stuck)["status"] == "PENDING" and attempts(database, stuck) == []
        assert pool.wait_idle(10)  # the timeout ends the hanging attempt
    [attempt] = attempts(database, stuck)
    assert attempt["http_status"] is None and attempt["error"] == "timed out after 2 s"
    assert 1900 <= attempt["duration_ms"] < 4000


def test_N2_a_full_pool_leaves_notifications_due_for_a_later_batch(database, deliveries, clock):
    pool = deliveries(slots=1, timeout=5.0)
    scanner = Scanner(database, deliveries=pool)
    with Receiver(answers=["hang"]) as receiver:
        subscription = subscribe(database, receiver.url)
        first = enqueue(database, subscription)
        scanner.run_once()
        assert receiver.arrived.wait(5)
        second = enqueue(database, subscription)
        due_at = notification(database, second)["due_at"]
        report = scanner.run_once()
        assert report.candidates == 0  # nothing listed: no delivery thread is free
        assert notification(database, second)["due_at"] == due_at  # untouched, still due
        receiver.release.set()
        assert pool.wait_idle(10)
        scan(database, pool)
    assert [notification(database, n)["status"] for n in (first, second)] == ["DELIVERED", "DELIVERED"]


def test_N2_a_slow_subscription_holds_its_share_of_the_threads_and_the_others_are_delivered_meanwhile(
    database, deliveries, clock
):
    """N2, fair between subscriptions: an endpoint that blocks, with a backlog due before another
    subscription's notification, holds one of two delivery threads (its share), not both: the listing
    passes over it and the other notification is delivered while it blocks. What was passed over
    stays PENDING and due; once the endpoint answers, every notification of both is delivered once."""
    pool = deliveries(slots=2)
    scanner = Scanner(database, deliveries=pool)
    with Receiver(otherwise="hang") as slow, Receiver() as fine:
        busy = subscribe(database, slow.url, name="slow")
        backlog = [enqueue(database, busy) for _ in range(4)]
        clock.advance(1)
        other = enqueue(database, subscribe(database, fine.url, name="fine"))
        scanner.run_once()  # lists the two oldest, both the slow one's: claims one, passes the other
        assert slow.arrived.wait(5)
        scanner.run_once()  # passes over the slow subscription: the other's is found
        wait_until(lambda: notification(database, other)["status"] == "DELIVERED", timeout=5)
        assert len(slow.received) == 1 and len(fine.received) == 1  # the slow endpoint still blocks
        waiting = [notification(database, n) for n in backlog[1:]]
        assert {(row["status"], row["attempts"], row["due_at"]) for row in waiting} == {
            ("PENDING", 0, clock.now() - timedelta(seconds=1))
        }
        slow.release.set()
        for _ in range(10):
            assert pool.wait_idle(10)
            if scanner.run_once().candidates == 0:
                break
        assert pool.wait_idle(10)
    rows = [notification(database, n) for n in (*backlog, other)]
    assert {(row["status"], row["attempts"]) for row in rows} == {("DELIVERED", 1)}
    sent = sorted(r.headers["webhook-id"] for r in (*slow.received, *fine.received))
    assert sent == sorted(row["webhook_id"] for row in rows)  # each exactly once


def test_N2_a_claimed_notification_is_not_listed_again_until_its_lease_passes(database, deliveries, clock):
    """The claim moves due_at a lease ahead (3 timeouts): a process killed mid-POST loses nothing,
    the notification is due again once the lease passes (at least once)."""
    pool = deliveries(timeout=10.0)
    with Receiver() as receiver:
        notification_id = enqueue(database, subscribe(database, receiver.url))
        claimed = outbox.claim(database, notification_id, pool.lease)  # and the process dies: no record
        assert isinstance(claimed, outbox.Claimed)
        assert notification(database, notification_id)["due_at"] == clock.now() + timedelta(seconds=30)
        assert scan(database, pool).candidates == 0
        clock.advance(30)
        scan(database, pool)
    assert len(receiver.received) == 1
    assert notification(database, notification_id)["status"] == "DELIVERED"


def test_N2_a_secret_that_cannot_be_decrypted_is_an_attempt_that_failed(database, deliveries):
    pool = Deliveries(database, None, 2, True)
    try:
        with Receiver() as receiver:
            notification_id = enqueue(database, subscribe(database, receiver.url))
            scan(database, pool)
    finally:
        pool.close()
    assert receiver.received == []
    [attempt] = attempts(database, notification_id)
    assert "WEAVE_SECRET_KEY" in attempt["error"]


def test_N2_an_https_endpoint_that_never_answers_its_handshake_times_out(database, deliveries):
    """The TLS path: the handshake is made on the checked socket and the attempt's deadline cuts it."""
    import socket

    pool = deliveries(timeout=1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        url = f"https://127.0.0.1:{listener.getsockname()[1]}/hooks"
        notification_id = enqueue(database, subscribe(database, url))
        scan(database, pool)
    finally:
        listener.close()
    [attempt] = attempts(database, notification_id)
    assert attempt["http_status"] is None and attempt["error"] == "timed out after 1 s"
    assert 900 <= attempt["duration_ms"] < 3000


def test_N1_N2_a_workflow_that_needs_review_then_fails_is_told_to_its_subscriber_signed(
    database, deliveries, flow, clock, tenant
):
    """Both halves together: a subscription made as `weave admin notify create` makes it, a workflow
    whose payment never comes goes to review and is then failed by an operator; each change wrote its
    notification in its own transaction, and the scanner delivers both, signed, the reference
    library verifying each, with the workflow as the API shows it."""
    from weave.rules import notify
    from weave.sql import notifications

    secret = notify.new_secret()
    pool = deliveries()
    with Receiver() as receiver:
        notifications.create_subscription(
            database, "acme", "ops", receiver.url, ["workflow.needs_review", "workflow.failed"], KEYRING.encrypt(secret)
        )
        flow.publish(signal_flow_definition(timeout=60))
        flow.start("order-1", input={"order_id": "o-1"})
        flow.scan()
        flow.finish_task({"reservation_id": "r-1"})
        clock.advance(60)
        flow.scan()  # the wait expired: NEEDS_REVIEW
        reviewed = flow.client.simulate_post(
            f"{flow.ns}/workflows/order-1/review",
            json={"action": "fail", "reason": "customer left"},
            headers=tenant.headers("workflows:review", queues=("inventory", "carrier")),
        )
        assert reviewed.status_code == 200, reviewed.text
        scan(database, pool)
    documents = [Webhook(secret).verify(r.body, r.headers) for r in receiver.received]
    assert sorted(d["type"] for d in documents) == ["workflow.failed", "workflow.needs_review"]
    by_type = {d["type"]: d["data"] for d in documents}
    assert by_type["workflow.needs_review"]["review_reason"] == "WAIT_EXPIRED"
    assert (by_type["workflow.failed"]["workflow_id"], by_type["workflow.failed"]["status"]) == ("order-1", "FAILED")
