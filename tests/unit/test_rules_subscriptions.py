"""N1 without a database: which endpoint URLs and event types a subscription may have, the form of
its Standard Webhooks secret (checked with the `standardwebhooks` reference library), and when a
wait's deadline is near."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook

from weave.rules import subscriptions
from weave.rules.waits import near_deadline
from weave.statuses import NotifyEvent


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/weave",
        "http://127.0.0.1:8080/hook",
        "HTTPS://HOOKS.EXAMPLE.COM/a?b=c",
        "http://[::1]:9000/",
    ],
)
def test_N1_http_and_https_urls_with_a_host_are_accepted(url):
    assert subscriptions.url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///etc/passwd", "scheme"),
        ("ftp://example.com/x", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("hooks.example.com/weave", "scheme"),
        ("", "scheme"),
        ("https:///path-only", "no host"),
        ("https://user:pw@hooks.example.com/", "credentials"),
        ("https://hooks.example.com/a b", "spaces"),
        ("https://hooks.example.com/\n", "control"),
        ("https://hooks.example.com:99999/", "parse"),
        ("https://hooks.example.com/#frag", "fragment"),
        ("https://hooks.example.com/" + "a" * 2048, "longer"),
    ],
)
def test_N1_other_urls_are_refused_with_the_reason(url, says):
    problem = subscriptions.url_problem(url)
    assert problem is not None and says in problem


def test_N1_the_event_types_are_the_six_of_the_spec_and_others_are_named():
    assert subscriptions.EVENT_TYPES == (
        "workflow.needs_review",
        "workflow.succeeded",
        "workflow.failed",
        "workflow.cancelled",
        "signal.settled",
        "wait.deadline_near",
    )
    assert subscriptions.unknown_events(["workflow.failed", "workflow.started", "x"]) == ["workflow.started", "x"]
    assert subscriptions.unknown_events(list(subscriptions.EVENT_TYPES)) == []
    assert len({event.bit for event in NotifyEvent}) == 6


def test_N1_the_secret_is_a_standard_webhooks_secret_the_reference_library_signs_with():
    secret = subscriptions.secret_from(bytes(range(32)))
    assert secret.startswith("whsec_") and base64.b64decode(secret.removeprefix("whsec_")) == bytes(range(32))
    hook = Webhook(secret)
    signed_at = datetime.now().astimezone()
    signature = hook.sign("msg_1", signed_at, '{"type":"x"}')
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(signed_at.timestamp())),
        "webhook-signature": signature,
    }
    assert hook.verify('{"type":"x"}', headers) == {"type": "x"}
    for wrong in (23, 65):
        with pytest.raises(ValueError):
            subscriptions.secret_from(b"x" * wrong)


def test_N1_a_wait_is_near_its_deadline_at_80_percent_of_its_time():
    opened = datetime(2026, 12, 2, 10, 0, 0)
    assert near_deadline(opened, opened + timedelta(seconds=600)) == opened + timedelta(seconds=480)
    assert near_deadline(opened, opened + timedelta(days=10)) == opened + timedelta(days=8)
    assert near_deadline(opened, opened) == opened
