"""N2 with real `weave scan` processes: a scanner SIGKILLed in the middle of a delivery loses
nothing; the notification's lease passes and the next scanner delivers it (at least once, with
the same webhook-id)."""

import time

import pytest
from helpers import scanner_process, use_real_time, wait_until
from notifying import SECRET_KEY, Receiver, attempts, enqueue, notification, subscribe
from standardwebhooks.webhooks import Webhook

pytestmark = pytest.mark.slow

TIMEOUT_SECONDS = 2  # WEAVE_NOTIFY_TIMEOUT: the lease is three of them


def test_N2_a_scanner_killed_mid_delivery_loses_nothing(database, clock, config, monkeypatch):
    use_real_time(database, clock)
    monkeypatch.setenv("WEAVE_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("WEAVE_NOTIFY_TIMEOUT", str(TIMEOUT_SECONDS))
    with Receiver(answers=["hang"]) as receiver:
        subscription = subscribe(database, receiver.url)
        notification_id = enqueue(database, subscription)
        first = scanner_process(config)
        try:
            assert receiver.arrived.wait(30), "the first scanner never sent it"
        finally:
            first.kill()  # SIGKILL while the endpoint holds the request: no attempt is recorded
            first.wait(10)
        killed_at = time.monotonic()
        row = notification(database, notification_id)
        assert row["status"] == "PENDING" and attempts(database, notification_id) == []
        second = scanner_process(config)
        try:
            wait_until(lambda: notification(database, notification_id)["status"] == "DELIVERED", timeout=60)
        finally:
            second.terminate()
            assert second.wait(20) == 0
    assert len(receiver.received) == 2  # at least once: the killed attempt's and the next
    assert len({received.headers["webhook-id"] for received in receiver.received}) == 1
    for received in receiver.received:
        Webhook(subscription.secret).verify(received.body, received.headers)
    # sent again once the lease (3 timeouts from the first claim) passed, not before
    assert receiver.received[1].at - receiver.received[0].at >= 3 * TIMEOUT_SECONDS - 0.5
    assert receiver.received[1].at - killed_at < 30
    [attempt] = attempts(database, notification_id)
    assert attempt["http_status"] == 204
