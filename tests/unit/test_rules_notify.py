"""weave.rules.notify without a database (N2): signing checked by the `standardwebhooks`
reference library, the retry schedule, the address check."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from weave.rules import notify

# The reference library's own test vector (see tests/unit/test_rules_webhooks.py).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = '{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_N2_signature_is_the_reference_test_vector():
    assert notify.signature(SW_SECRET, SW_ID, SW_TIMESTAMP, SW_BODY.encode()) == SW_SIGNATURE


@given(
    body=st.binary(max_size=300).map(lambda b: b.hex()),
    webhook_id=st.from_regex(r"msg_[A-Za-z0-9]{1,40}", fullmatch=True),
)
def test_N2_the_reference_library_verifies_signed_headers(body, webhook_id):
    secret = notify.new_secret()
    payload = json.dumps({"data": body}).encode()
    headers = notify.signed_headers(secret, webhook_id, int(time.time()), payload)
    assert Webhook(secret).verify(payload, headers) == {"data": body}
    with pytest.raises(WebhookVerificationError):
        Webhook(notify.new_secret()).verify(payload, headers)  # another secret does not verify it
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(payload + b" ", headers)  # nor another body


def test_N2_new_secret_is_a_standard_webhooks_secret():
    secret = notify.new_secret()
    assert secret.startswith("whsec_") and secret != notify.new_secret()
    Webhook(secret)  # the reference library accepts it


def test_N2_first_retry_within_five_seconds():
    assert timedelta(seconds=2.5) <= notify.retry_delay(1, 0.999) <= notify.retry_delay(1, 0.0) == timedelta(seconds=5)


@given(attempts=st.integers(1, 10_000), jitter=st.floats(0, 1, exclude_max=True))
def test_N2_retry_delay_grows_up_to_a_day_and_never_gives_up(attempts, jitter):
    delay = notify.retry_delay(attempts, jitter)
    nominal = min(timedelta(hours=24), timedelta(seconds=5) * 2 ** min(attempts - 1, 32))
    assert nominal / 2 <= delay <= nominal
    assert delay <= notify.retry_delay(attempts + 1, 0.0)  # the next nominal delay is never shorter


def test_N2_retry_delay_reaches_the_cap():
    assert notify.retry_delay(15, 0.0) < notify.retry_delay(16, 0.0) == timedelta(hours=24)
    assert notify.retry_delay(10**9, 0.5) == timedelta(hours=18)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "100.64.0.1",
        "::1",
        "::",
        "fe80::1%eth0",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
    ],
)
def test_N2_private_addresses_refused_unless_allowed(address):
    assert notify.address_refusal(address, allow_private=False) is not None
    assert notify.address_refusal(address, allow_private=True) is None


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_N2_public_addresses_pass(address):
    assert notify.address_refusal(address, allow_private=False) is None


@pytest.mark.parametrize(
    "url, expected",
    [
        ("https://hooks.example.com/x", ("https", "hooks.example.com", 443)),
        ("http://127.0.0.1:8080/h?q=1", ("http", "127.0.0.1", 8080)),
        ("http://[::1]:81/", ("http", "::1", 81)),
    ],
)
def test_N2_check_url(url, expected):
    assert notify.check_url(url) == expected


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "file:///etc/passwd", "gopher://x", "http:///nohost", "https://x:99999/"]
)
def test_N2_only_http_and_https_urls(url):
    with pytest.raises(notify.Refused):
        notify.check_url(url)


@pytest.mark.parametrize(
    "status, ok",
    [(200, True), (204, True), (299, True), (301, False), (302, False), (404, False), (500, False), (None, False)],
)
def test_N2_only_a_2xx_succeeds(status, ok):
    assert notify.succeeded(status) is ok


@pytest.mark.parametrize("threads, share", [(1, 1), (2, 1), (4, 1), (7, 1), (8, 2), (16, 4), (64, 16)])
def test_N2_a_subscription_holds_a_quarter_of_the_delivery_threads_one_at_least(threads, share):
    assert notify.subscription_share(threads) == share
