"""weave.rules.webhooks without a database: verification of the four schemes (W2), checked against
the providers' own material (the `standardwebhooks` package and its published test vector, the
`stripe` library's signer and verifier, GitHub's documented example), the mapping document (W3),
and the fact a verified event becomes (W3, W4)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import astuple
from datetime import datetime, timezone
from decimal import Decimal
from urllib.parse import urlencode

import pytest
import stripe
from helpers import STRIPE_MAPPING
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from weave import jsontext, schemas
from weave.rules import webhooks
from weave.rules.problems import Problem

NOW = 1_800_000_000
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The Standard Webhooks reference library's own test vector (libraries/python/tests/test_webhooks.py,
# test_sign_function, in github.com/standard-webhooks/standard-webhooks).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = '{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

# GitHub's documented example ("Validating webhook deliveries").
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

STRIPE_SECRET = "whsec_8a1f2c3d4e5f60718293a4b5c6d7e8f9"
STRIPE_EVENT = {
    "id": "evt_1Pq2Rs3Tu4Vw5Xy6",
    "object": "event",
    "type": "payment_intent.succeeded",
    "data": {"object": {"id": "pi_42", "amount": 1250, "metadata": {"order_id": "o-42"}}},
}


def sw_headers(secret: str, body: str, timestamp: int = NOW, message_id: str = SW_ID) -> dict:
    """Headers as a Standard Webhooks sender makes them, signed by the reference library."""
    signature = Webhook(secret).sign(message_id, datetime.fromtimestamp(timestamp, tz=timezone.utc), body)
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp), "webhook-signature": signature}


def stripe_headers(body: str, secret: str = STRIPE_SECRET, timestamp: int = NOW) -> dict:
    """Stripe-Signature as Stripe's own library makes it."""
    return {"stripe-signature": stripe.WebhookSignature.generate_signature_header(body, secret, timestamp)}


def stripe_hex(body: str, timestamp: int, secret: str = STRIPE_SECRET) -> str:
    return stripe.WebhookSignature._compute_signature(f"{timestamp}.{body}", secret)


def stripe_accepts(body: str, header: str, secret: str = STRIPE_SECRET) -> bool:
    try:
        return stripe.WebhookSignature.verify_header(body, header, secret, tolerance=webhooks.TOLERANCE_SECONDS)
    except stripe.SignatureVerificationError:
        return False


def accepts(scheme, secrets, headers, body, now=NOW, signature_header=None) -> bool:
    try:
        webhooks.verify(scheme, secrets, headers, body, now, signature_header)
    except webhooks.Unverified:
        return False
    return True


def changed_byte(body: bytes, index: int, flip: int) -> bytes:
    index %= len(body)
    return body[:index] + bytes([body[index] ^ flip]) + body[index + 1 :]


# ---- Standard Webhooks -----------------------------------------------------------------------------------


def test_W2_standard_webhooks_published_vector_is_what_the_package_signs_and_what_verify_accepts():
    signed = Webhook(SW_SECRET).sign(SW_ID, datetime.fromtimestamp(SW_TIMESTAMP, tz=timezone.utc), SW_BODY)
    assert signed == SW_SIGNATURE
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_SIGNATURE}
    for secret in (SW_SECRET, SW_SECRET.removeprefix("whsec_")):  # the prefix is optional
        webhooks.verify("standard-webhooks", [secret], headers, SW_BODY.encode(), SW_TIMESTAMP)
    assert not accepts("standard-webhooks", [SW_SECRET], headers, b'{"test": 2432232315}', SW_TIMESTAMP)
    other_id = {**headers, "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJel"}  # the id is signed too
    assert not accepts("standard-webhooks", [SW_SECRET], other_id, SW_BODY.encode(), SW_TIMESTAMP)
    other_time = {**headers, "webhook-timestamp": str(SW_TIMESTAMP + 1)}  # and the time
    assert not accepts("standard-webhooks", [SW_SECRET], other_time, SW_BODY.encode(), SW_TIMESTAMP)


def test_W2_standard_webhooks_several_signatures_one_of_them_ours_and_v1a_ignored():
    """The signature header is a space-separated list (rotation on the sender's side); only `v1`
    entries are HMACs; a `v1a` (ed25519) entry is not ours to check, even one holding our HMAC."""
    good = sw_headers(SW_SECRET, SW_BODY)["webhook-signature"]
    digest = good.removeprefix("v1,")
    wrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    listed = f"{wrong} v2,{digest} v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw== {good} {wrong}"
    headers = {**sw_headers(SW_SECRET, SW_BODY), "webhook-signature": listed}
    webhooks.verify("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode(), NOW)
    only_v1a = {**headers, "webhook-signature": f"v1a,{digest} {wrong} v1,not*base64 v1"}
    assert not accepts("standard-webhooks", [SW_SECRET], only_v1a, SW_BODY.encode())


def test_W2_standard_webhooks_agrees_with_the_package_on_several_signatures():
    """The package verifies against the wall clock; both are asked about the same headers now."""
    now = int(time.time())
    headers = sw_headers(SW_SECRET, SW_BODY, now)
    wrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    headers["webhook-signature"] = f"{wrong} {headers['webhook-signature']}"
    assert Webhook(SW_SECRET).verify(SW_BODY, headers) == {"test": 2432232314}
    assert accepts("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode(), now)
    good = sw_headers(SW_SECRET, SW_BODY, now)["webhook-signature"].removeprefix("v1,")
    for refused in (wrong, f"v1a,{good}", f"v2,{good} {wrong}"):  # our HMAC under another version is none
        headers["webhook-signature"] = refused
        with pytest.raises(WebhookVerificationError):
            Webhook(SW_SECRET).verify(SW_BODY, headers)
        assert not accepts("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode(), now)


@pytest.mark.parametrize("offset, accepted", [(0, True), (-300, True), (300, True), (-301, False), (301, False)])
def test_W2_standard_webhooks_timestamp_within_five_minutes_either_way_as_the_package_says(offset, accepted):
    now = int(time.time())
    headers = sw_headers(SW_SECRET, SW_BODY, now + offset)
    assert accepts("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode(), now) is accepted
    if not accepted:  # the package reads its own clock: it is asked with a margin of seconds
        margin = 10 if offset > 0 else -10
        with pytest.raises(WebhookVerificationError, match="too (old|new)"):
            Webhook(SW_SECRET).verify(SW_BODY, sw_headers(SW_SECRET, SW_BODY, now + offset + margin))


@pytest.mark.parametrize("timestamp", ["", "abc", "1800000000.5", "-1800000000", " 1800000000", "1e9", "١٨٠٠٠٠٠٠٠٠"])
def test_W2_standard_webhooks_timestamp_must_be_whole_seconds(timestamp):
    headers = {**sw_headers(SW_SECRET, SW_BODY), "webhook-timestamp": timestamp}
    with pytest.raises(webhooks.Unverified, match="webhook-timestamp"):
        webhooks.check_timestamp("standard-webhooks", headers, NOW)
    assert not accepts("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode())


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_W2_standard_webhooks_every_header_is_required(missing):
    headers = sw_headers(SW_SECRET, SW_BODY)
    del headers[missing]
    with pytest.raises(webhooks.Unverified, match=missing):
        webhooks.verify("standard-webhooks", [SW_SECRET], headers, SW_BODY.encode(), NOW)


def test_W2_standard_webhooks_secret_is_base64_of_24_to_64_bytes_prefix_and_padding_optional():
    for size in (24, 40, 64):
        key = bytes(range(size))
        padded = base64.b64encode(key).decode()
        for secret in (padded, padded.rstrip("="), "whsec_" + padded, "whsec_" + padded.rstrip("=")):
            webhooks.check_secret("standard-webhooks", secret)
            headers = sw_headers("whsec_" + padded, SW_BODY)
            webhooks.verify("standard-webhooks", [secret], headers, SW_BODY.encode(), NOW)
    for secret, why in [
        ("", "24-64 bytes"),
        ("whsec_", "24-64 bytes"),
        (base64.b64encode(bytes(23)).decode(), "decodes to 23"),
        (base64.b64encode(bytes(65)).decode(), "decodes to 65"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa$w", "base64"),
        ("whsec_MfKQ9r8GKYqr TwjUPD8ILPZIo2LaLaSw", "base64"),
        ("whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "base64"),  # an asymmetric secret key is no HMAC key
    ]:
        with pytest.raises(ValueError, match=why):
            webhooks.check_secret("standard-webhooks", secret)


@EXAMPLES
@given(
    key=st.binary(min_size=24, max_size=64),
    body=st.text(min_size=1, max_size=300),
    message_id=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40),
    index=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_W2_any_body_the_standard_webhooks_package_signs_verifies_and_no_changed_byte_does(
    key, body, message_id, index, flip
):
    secret = "whsec_" + base64.b64encode(key).decode()
    headers = sw_headers(secret, body, NOW, message_id)
    raw = body.encode("utf-8")
    webhooks.verify("standard-webhooks", [secret], headers, raw, NOW)
    assert not accepts("standard-webhooks", [secret], headers, changed_byte(raw, index, flip))


# ---- Stripe -------------------------------------------------------------------------------------------------


def test_W2_stripe_header_made_by_stripes_library_verifies_here_and_there():
    body = json.dumps(STRIPE_EVENT)
    now = int(time.time())
    headers = stripe_headers(body, timestamp=now)
    webhooks.verify("stripe", [STRIPE_SECRET], headers, body.encode(), now)
    event = stripe.Webhook.construct_event(body, headers["stripe-signature"], STRIPE_SECRET)
    assert event["id"] == STRIPE_EVENT["id"]
    assert not accepts("stripe", ["whsec_another"], headers, body.encode(), now)
    assert not stripe_accepts(body, headers["stripe-signature"], "whsec_another")


@pytest.mark.parametrize(
    "entries, accepted",
    [
        pytest.param(["v1={wrong}", "v1={good}"], True, id="the second v1 matches"),
        pytest.param(["v1={good}", "v1={wrong}", "v0={wrong}"], True, id="v0 beside it is ignored"),
        pytest.param(["v0={good}", "v1={wrong}"], False, id="v0 holding our HMAC is not a v1"),
        pytest.param(["v0={good}"], False, id="only v0"),
        pytest.param(["v1={wrong}"], False, id="only a wrong v1"),
        pytest.param(["v1={other_time}"], False, id="signed for another time"),
    ],
)
def test_W2_stripe_several_v1_entries_and_v0_ignored_as_stripes_library_decides(entries, accepted):
    body = json.dumps(STRIPE_EVENT)
    now = int(time.time())
    values = {
        "good": stripe_hex(body, now),
        "wrong": stripe_hex(body, now, "whsec_x"),
        "other_time": stripe_hex(body, now - 1),
    }
    header = ",".join([f"t={now}", *(entry.format(**values) for entry in entries)])
    assert stripe_accepts(body, header) is accepted
    assert accepts("stripe", [STRIPE_SECRET], {"stripe-signature": header}, body.encode(), now) is accepted


@pytest.mark.parametrize("age, accepted", [(0, True), (299, True), (300, True), (301, False), (3600, False)])
def test_W2_stripe_timestamp_older_than_five_minutes_refused_as_stripes_library_refuses_it(age, accepted):
    body = json.dumps(STRIPE_EVENT)
    now = int(time.time())
    header = stripe_headers(body, timestamp=now - age)["stripe-signature"]
    assert accepts("stripe", [STRIPE_SECRET], {"stripe-signature": header}, body.encode(), now) is accepted
    if age != 300:  # the library reads its own clock, which may have moved on by a second
        assert stripe_accepts(body, header) is accepted


def test_W2_stripe_timestamp_more_than_five_minutes_ahead_is_refused_too():
    """W2 refuses a time 5 minutes off either way; Stripe's library only checks age (it would take
    a delivery stamped an hour ahead), so here Weave is the stricter of the two."""
    body = json.dumps(STRIPE_EVENT)
    now = int(time.time())
    ahead = stripe_headers(body, timestamp=now + 301)
    assert stripe_accepts(body, ahead["stripe-signature"])
    with pytest.raises(webhooks.Unverified, match="stripe-signature t"):
        webhooks.check_timestamp("stripe", ahead, now)
    assert accepts("stripe", [STRIPE_SECRET], stripe_headers(body, timestamp=now + 300), body.encode(), now)


@pytest.mark.parametrize("header", ["", "v1=abc", "t=,v1=abc", "t=abc,v1=abc", "t=-5,v1=abc", "t=1.5,v1=abc"])
def test_W2_stripe_header_without_a_whole_seconds_t_is_refused_before_anything_else(header):
    with pytest.raises(webhooks.Unverified, match="stripe-signature t"):
        webhooks.check_timestamp("stripe", {"stripe-signature": header}, NOW)
    assert not stripe_accepts(json.dumps(STRIPE_EVENT), header)


def test_W2_stripe_secret_is_whsec_text():
    webhooks.check_secret("stripe", STRIPE_SECRET)
    for secret in ("8a1f2c3d4e5f", "whsec_", "whsec_ab cd", "whsec_ab\n", "sk_live_abc"):
        with pytest.raises(ValueError, match="whsec_"):
            webhooks.check_secret("stripe", secret)


@EXAMPLES
@given(
    body=st.text(min_size=1, max_size=300),
    secret=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=60),
    index=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_W2_any_body_stripes_library_signs_verifies_and_a_changed_byte_fails_for_both(body, secret, index, flip):
    secret = "whsec_" + secret
    now = int(time.time())
    header = stripe_headers(body, secret, now)
    raw = body.encode("utf-8")
    webhooks.verify("stripe", [secret], header, raw, now)
    changed = changed_byte(raw, index, flip)
    assert not accepts("stripe", [secret], header, changed, now)
    try:
        text = changed.decode("utf-8")
    except UnicodeDecodeError:
        return  # Stripe's library verifies text only
    assert not stripe_accepts(text, header["stripe-signature"], secret)


# ---- GitHub and hmac-sha256 ------------------------------------------------------------------------------------


def test_W2_github_documented_example_verifies():
    headers = {"x-hub-signature-256": GITHUB_SIGNATURE}
    webhooks.verify("github", [GITHUB_SECRET], headers, GITHUB_BODY, NOW)
    webhooks.check_timestamp("github", headers, 0)  # GitHub signs no time: nothing to check
    assert not accepts("github", ["It's a Secret to Everybody!"], headers, GITHUB_BODY)
    assert not accepts("github", [GITHUB_SECRET], headers, b"Hello, World?")
    bare = {"x-hub-signature-256": GITHUB_SIGNATURE.removeprefix("sha256=")}  # GitHub always writes sha256=
    assert not accepts("github", [GITHUB_SECRET], bare, GITHUB_BODY)
    sha1 = {"x-hub-signature-256": "sha1=" + GITHUB_SIGNATURE.removeprefix("sha256=")}
    assert not accepts("github", [GITHUB_SECRET], sha1, GITHUB_BODY)
    assert not accepts("github", [GITHUB_SECRET], {"x-hub-signature": GITHUB_SIGNATURE}, GITHUB_BODY)


def test_W2_hmac_sha256_hex_in_the_sources_header_with_or_without_sha256_prefix():
    body = b'{"id": 7, "kind": "shipped"}'
    digest = hmac.new(b"carrier-secret", body, hashlib.sha256).hexdigest()
    for value in (digest, digest.upper(), "sha256=" + digest):
        headers = {"x-carrier-signature": value}
        webhooks.verify("hmac-sha256", ["carrier-secret"], headers, body, NOW, "X-Carrier-Signature")
    headers = {"x-carrier-signature": digest}
    assert not accepts("hmac-sha256", ["carrier-secret"], headers, body, NOW, "X-Other-Signature")
    assert not accepts("hmac-sha256", ["carrier-secret"], headers, body, NOW, None)
    for value in (
        "sha1=" + digest,
        digest[:-1],
        base64.b64encode(bytes.fromhex(digest)).decode(),
        f"{digest},{digest}",
    ):
        assert not accepts(
            "hmac-sha256", ["carrier-secret"], {"x-carrier-signature": value}, body, NOW, "x-carrier-signature"
        )


@pytest.mark.parametrize("scheme", ["github", "hmac-sha256"])
def test_W2_text_secrets_are_printable_without_line_breaks(scheme):
    webhooks.check_secret(scheme, GITHUB_SECRET)
    for secret in ("", "secret\n", "sec\tret", "x" * (webhooks.MAX_SECRET_CHARS + 1)):
        with pytest.raises(ValueError, match=scheme):
            webhooks.check_secret(scheme, secret)


def test_W2_unknown_scheme_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown scheme"):
        webhooks.check_secret("svix", SW_SECRET)
    with pytest.raises(ValueError, match="unknown scheme"):
        webhooks.verify("svix", [SW_SECRET], {}, b"{}", NOW)


# ---- what every scheme shares ------------------------------------------------------------------------------------


def test_W2_the_raw_body_bytes_are_verified_reserialising_the_json_breaks_the_signature():
    """The signature covers the bytes sent: the same JSON in another spelling (spacing, member
    order, escapes, number form) is another body."""
    body = '{"id":"evt_1","amount":12.50,"name":"caf\\u00e9"}'
    now = int(time.time())
    header = stripe_headers(body, timestamp=now)
    webhooks.verify("stripe", [STRIPE_SECRET], header, body.encode(), now)
    value = json.loads(body)
    for respelt in (json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, ensure_ascii=False)):
        assert json.loads(respelt) == value
        assert not accepts("stripe", [STRIPE_SECRET], header, respelt.encode(), now)
        assert not stripe_accepts(respelt, header["stripe-signature"])


def test_W2_a_body_whose_bytes_are_not_the_signed_ones_fails():
    text = '{"customer": "Zoë"}'
    signed = text.encode("utf-8")
    digest = hmac.new(GITHUB_SECRET.encode(), signed, hashlib.sha256).hexdigest()
    headers = {"x-hub-signature-256": f"sha256={digest}"}
    webhooks.verify("github", [GITHUB_SECRET], headers, signed, NOW)
    for other in (text.encode("latin-1"), text.encode("utf-16"), signed + b"\n", b" " + signed, signed[:-1]):
        assert not accepts("github", [GITHUB_SECRET], headers, other)


def test_W2_rotation_either_of_two_secrets_verifies_with_one_hmac_per_secret(monkeypatch):
    body = b'{"ok": true}'
    digest = hmac.new(b"new-secret", body, hashlib.sha256).hexdigest()
    computed = []
    real_new = hmac.new
    monkeypatch.setattr(webhooks.hmac, "new", lambda key, *args: computed.append(key) or real_new(key, *args))
    webhooks.verify("github", ["old-secret", "new-secret"], {"x-hub-signature-256": f"sha256={digest}"}, body, NOW)
    assert computed == [b"old-secret", b"new-secret"]
    computed.clear()
    assert not accepts("github", ["old-secret", "newer-secret"], {"x-hub-signature-256": f"sha256={digest}"}, body)
    assert computed == [b"old-secret", b"newer-secret"]
    assert not accepts("github", [], {"x-hub-signature-256": f"sha256={digest}"}, body)


def test_W2_many_signatures_cost_one_hmac_per_secret_and_at_most_sixteen_comparisons_each(monkeypatch):
    now = int(time.time())
    body = json.dumps(STRIPE_EVENT)
    wrong = [f"v1={stripe_hex(body, now, f'whsec_{i}')}" for i in range(40)]
    header = ",".join([f"t={now}", *wrong])
    assert len(header) <= webhooks.MAX_SIGNATURE_HEADER_CHARS
    macs, comparisons = [], []
    real_new, real_compare = hmac.new, hmac.compare_digest
    monkeypatch.setattr(webhooks.hmac, "new", lambda *args: macs.append(1) or real_new(*args))
    monkeypatch.setattr(webhooks.hmac, "compare_digest", lambda a, b: comparisons.append(1) or real_compare(a, b))
    assert not accepts("stripe", [STRIPE_SECRET, "whsec_second"], {"stripe-signature": header}, body.encode(), now)
    assert len(macs) == 2 and len(comparisons) == 2 * webhooks.MAX_SIGNATURES


def test_W2_only_the_first_sixteen_signatures_are_considered():
    now = int(time.time())
    body = json.dumps(STRIPE_EVENT)
    wrong = [f"v1={stripe_hex(body, now, f'whsec_{i}')}" for i in range(webhooks.MAX_SIGNATURES)]
    good = f"v1={stripe_hex(body, now)}"
    sixteenth = ",".join([f"t={now}", *wrong[1:], good])
    seventeenth = ",".join([f"t={now}", *wrong, good])
    assert accepts("stripe", [STRIPE_SECRET], {"stripe-signature": sixteenth}, body.encode(), now)
    assert not accepts("stripe", [STRIPE_SECRET], {"stripe-signature": seventeenth}, body.encode(), now)
    assert stripe_accepts(body, seventeenth)  # Stripe's library reads them all: a sender never sends so many


@pytest.mark.parametrize("scheme", ["standard-webhooks", "stripe", "github"])
def test_W2_a_signature_header_over_the_cap_is_refused_unread(scheme):
    body = json.dumps(STRIPE_EVENT)
    if scheme == "standard-webhooks":
        secret, headers = SW_SECRET, sw_headers(SW_SECRET, body)
        name, padding = "webhook-signature", " v1a,x"
    elif scheme == "stripe":
        secret, headers = STRIPE_SECRET, stripe_headers(body)
        name, padding = "stripe-signature", ",v0=x"
    else:
        secret = GITHUB_SECRET
        digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
        headers, name, padding = {"x-hub-signature-256": f"sha256={digest}"}, "x-hub-signature-256", " "
    assert accepts(scheme, [secret], headers, body.encode())
    headers[name] += padding * (webhooks.MAX_SIGNATURE_HEADER_CHARS // len(padding) + 1)
    with pytest.raises(webhooks.Unverified, match=f"{name} is .* characters"):
        webhooks.verify(scheme, [secret], headers, body.encode(), NOW)


def test_W2_dummy_verify_costs_one_hmac_of_the_body(monkeypatch):
    macs = []
    real_new = hmac.new
    monkeypatch.setattr(
        webhooks.hmac, "new", lambda key, body, digest: macs.append(body) or real_new(key, body, digest)
    )
    assert webhooks.dummy_verify(b"x" * 1000) is None
    assert macs == [b"x" * 1000]


@pytest.mark.parametrize("scheme", ["standard-webhooks", "stripe", "github", "hmac-sha256"])
def test_W2_no_signature_at_all_is_unverified(scheme):
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(NOW), "stripe-signature": f"t={NOW}"}
    with pytest.raises(webhooks.Unverified):
        webhooks.verify(
            scheme, [SW_SECRET if scheme == "standard-webhooks" else "whsec_x"], headers, b"{}", NOW, "x-sig"
        )


# ---- the mapping document (W3) ---------------------------------------------------------------------------------------

GITHUB_MAPPING = {
    "rules": [
        {
            "event": "pull_request",
            "name": "review.done",
            "payload_version": "v1",
            "correlation_key": "/pull_request/number",
        }
    ]
}
CARRIER_MAPPING = {
    "event_type": "/kind",
    "idempotency_key": "/id",
    "rules": [
        {
            "event": "shipped",
            "name": "parcel.shipped",
            "payload_version": "v2",
            "correlation_key": "/order",
            "park_seconds": 3600,
        }
    ],
}


@pytest.mark.parametrize(
    "scheme, mapping",
    [
        ("stripe", STRIPE_MAPPING),
        ("standard-webhooks", {**STRIPE_MAPPING, "idempotency_key": "/never/read"}),
        ("standard-webhooks", {"event_type": "/type", "rules": []}),  # records every delivery IGNORED
        ("github", GITHUB_MAPPING),
        ("hmac-sha256", CARRIER_MAPPING),
        (
            "hmac-sha256",
            {**CARRIER_MAPPING, "rules": [{**CARRIER_MAPPING["rules"][0], "park_seconds": Decimal("3.6e3")}]},
        ),
        ("stripe", {**STRIPE_MAPPING, "event_type": "", "idempotency_key": "/a~1b/~0c/0/"}),  # RFC 6901 edge cases
    ],
)
def test_W3_mappings_that_can_be_used(scheme, mapping):
    assert webhooks.mapping_problems(scheme, mapping) == []


RULE = STRIPE_MAPPING["rules"][0]


@pytest.mark.parametrize(
    "scheme, mapping, expected",
    [
        ("stripe", [], [Problem("", "[] is not of type 'object'")]),
        ("stripe", {"event_type": "/type"}, [Problem("", "'rules' is a required property")]),
        (
            "stripe",
            {**STRIPE_MAPPING, "rule": []},
            [Problem("", "Additional properties are not allowed ('rule' was unexpected)")],
        ),
        (
            "stripe",
            {
                **STRIPE_MAPPING,
                "rules": [RULE, {**RULE, "reason": "again"}, {**RULE, "event": "charge.refunded"}, RULE],
            },
            [
                Problem("/rules/1/event", "a second rule for 'payment_intent.succeeded' (the first is /rules/0)"),
                Problem("/rules/3/event", "a second rule for 'payment_intent.succeeded' (the first is /rules/0)"),
            ],
        ),
        (
            "stripe",
            {"event_type": "type", "rules": [{**RULE, "payload": "/a~2"}]},
            [
                Problem(
                    "/event_type",
                    "'type' is not a JSON Pointer (RFC 6901): empty, or tokens each after a '/', '~' only as ~0 or ~1",
                ),
                Problem(
                    "/rules/0/payload",
                    "'/a~2' is not a JSON Pointer (RFC 6901): empty, or tokens each after a '/', '~' only as ~0 or ~1",
                ),
            ],
        ),
        (
            "stripe",
            {"rules": [RULE]},
            [Problem("/event_type", "required: the pointer to the event's type in the body, e.g. /type")],
        ),
        (
            "standard-webhooks",
            {"rules": []},
            [Problem("/event_type", "required: the pointer to the event's type in the body, e.g. /type")],
        ),
        (
            "github",
            {**GITHUB_MAPPING, "event_type": "/action"},
            [Problem("/event_type", "github's event type is the X-GitHub-Event header; leave event_type out")],
        ),
        (
            "hmac-sha256",
            {"event_type": "/kind", "rules": []},
            [Problem("/idempotency_key", "required for hmac-sha256: the pointer to the event's id in the body")],
        ),
        (
            "hmac-sha256",
            {
                **CARRIER_MAPPING,
                "rules": [{**CARRIER_MAPPING["rules"][0], "park_seconds": 0, "name": "parcel shipped"}],
            },
            [
                Problem("/rules/0/name", "'parcel shipped' does not match '^[\\\\x21-\\\\x7e]+$'"),
                Problem("/rules/0/park_seconds", "0 is less than the minimum of 1"),
            ],
        ),
        (
            "github",
            {"rules": [{"event": "push", "name": "x", "correlation_key": "/ref", "extra": 1}]},
            [
                Problem("/rules/0", "'payload_version' is a required property"),
                Problem("/rules/0", "Additional properties are not allowed ('extra' was unexpected)"),
            ],
        ),
    ],
)
def test_W3_mapping_problems_say_where_and_why(scheme, mapping, expected):
    assert sorted(webhooks.mapping_problems(scheme, mapping), key=astuple) == sorted(expected, key=astuple)


def test_W3_mapping_of_an_unknown_scheme_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown scheme"):
        webhooks.mapping_problems("svix", STRIPE_MAPPING)


# ---- reading a verified event (W3, W4) ---------------------------------------------------------------------------------


def test_W3_a_stripe_event_becomes_a_routed_fact_whose_payload_keeps_the_providers_digits():
    body = (
        b'{"id": "evt_1Pq2", "object": "event", "type": "payment_intent.succeeded", "data": {"object":'
        b' {"id": "pi_42", "amount": 1250, "fee": 12.50, "rate": 0.0010, "big": 123456789012345678901234567890,'
        b' "metadata": {"order_id": "o-42"}}}}'
    )
    event = webhooks.read_event("stripe", STRIPE_MAPPING, "stripe-prod", {}, body)
    assert event == webhooks.Event(
        event_id="evt_1Pq2",
        event_type="payment_intent.succeeded",
        idempotency_key="stripe-prod:evt_1Pq2",
        fact={
            "name": "payment.settled",
            "payload_version": "v1",
            "correlation_key": "o-42",
            "payload": jsontext.loads(body)["data"]["object"],
            "reason": "Stripe: payment succeeded",
            "evidence_ref": "stripe-prod:evt_1Pq2",
        },
    )
    assert jsontext.compact(event.fact["payload"]) == (
        '{"id":"pi_42","amount":1250,"fee":12.50,"rate":0.0010,"big":123456789012345678901234567890,'
        '"metadata":{"order_id":"o-42"}}'
    )
    schemas.validate("route_signal", event.fact)


def test_W3_a_verified_stripe_delivery_end_to_end():
    """What Stripe's library signs, verify accepts, and read_event maps."""
    body = json.dumps(STRIPE_EVENT)
    now = int(time.time())
    headers = stripe_headers(body, timestamp=now)
    webhooks.verify("stripe", [STRIPE_SECRET], headers, body.encode(), now)
    event = webhooks.read_event("stripe", STRIPE_MAPPING, "psp", headers, body.encode())
    assert (event.idempotency_key, event.fact["correlation_key"], event.fact["payload"]["amount"]) == (
        "psp:evt_1Pq2Rs3Tu4Vw5Xy6",
        "o-42",
        1250,
    )


def test_W4_an_event_type_no_rule_names_is_ignored_with_its_id_and_type():
    body = json.dumps({**STRIPE_EVENT, "type": "charge.refunded"}).encode()
    event = webhooks.read_event("stripe", STRIPE_MAPPING, "psp", {}, body)
    assert event == webhooks.Event("evt_1Pq2Rs3Tu4Vw5Xy6", "charge.refunded", "psp:evt_1Pq2Rs3Tu4Vw5Xy6", None)


def test_W3_github_id_and_type_come_from_its_headers_and_the_whole_body_is_the_payload():
    body = b'{"action": "closed", "pull_request": {"number": 1347, "merged": true}}'
    headers = {"x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "x-github-event": "pull_request"}
    event = webhooks.read_event("github", GITHUB_MAPPING, "gh", headers, body)
    assert event.event_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert event.event_type == "pull_request"
    assert event.fact == {
        "name": "review.done",
        "payload_version": "v1",
        "correlation_key": "1347",  # an integer is a key as its digits spell it
        "payload": {"action": "closed", "pull_request": {"number": 1347, "merged": True}},
        "reason": "gh: pull_request",  # the default reason
        "evidence_ref": "gh:72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }
    push = webhooks.read_event("github", GITHUB_MAPPING, "gh", {**headers, "x-github-event": "push"}, body)
    assert push.fact is None and push.event_type == "push"


def test_W3_github_form_encoded_delivery_reads_its_payload_field():
    """GitHub's form content type sends the JSON in the `payload` field; the signature covers the
    form body as sent."""
    payload = '{"action": "closed", "pull_request": {"number": 7}}'
    body = urlencode({"payload": payload}).encode()
    digest = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-hub-signature-256": f"sha256={digest}",
        "x-github-delivery": "d-7",
        "x-github-event": "pull_request",
    }
    webhooks.verify("github", [GITHUB_SECRET], headers, body, NOW)
    event = webhooks.read_event("github", GITHUB_MAPPING, "gh", headers, body)
    assert event.fact["correlation_key"] == "7" and event.fact["payload"] == json.loads(payload)
    for broken in (b"payload=%7B&payload=%7B", b"other=1", b"payload=%FF", b"a&&b"):
        with pytest.raises(webhooks.Unmappable) as caught:
            webhooks.read_event("github", GITHUB_MAPPING, "gh", headers, broken)
        assert caught.value.pointer == ""
    with pytest.raises(webhooks.Unmappable, match="not acceptable JSON"):  # form bodies are GitHub's only
        webhooks.read_event("stripe", STRIPE_MAPPING, "psp", headers, body)


def test_W3_standard_webhooks_id_is_the_webhook_id_header():
    body = b'{"type": "invoice.paid", "data": {"invoice": "inv-9", "order": "o-9"}}'
    mapping = {
        "event_type": "/type",
        "rules": [
            {
                "event": "invoice.paid",
                "name": "invoice.paid",
                "payload_version": "v1",
                "correlation_key": "/data/order",
                "payload": "/data",
            }
        ],
    }
    event = webhooks.read_event("standard-webhooks", mapping, "billing", {"webhook-id": SW_ID}, body)
    assert event.idempotency_key == f"billing:{SW_ID}" and event.fact["evidence_ref"] == f"billing:{SW_ID}"
    assert event.fact["payload"] == {"invoice": "inv-9", "order": "o-9"}


def test_W3_hmac_sha256_id_is_the_mappings_pointer_and_park_seconds_is_passed_on():
    body = b'{"id": 90071992547409931, "kind": "shipped", "order": "o-1"}'
    event = webhooks.read_event("hmac-sha256", CARRIER_MAPPING, "carrier", {}, body)
    assert event.event_id == "90071992547409931"  # beyond a double's precision: the digits as sent
    assert event.fact["park_seconds"] == 3600 and event.fact["evidence_ref"] == "carrier:90071992547409931"
    decimal_mapping = {**CARRIER_MAPPING, "rules": [{**CARRIER_MAPPING["rules"][0], "park_seconds": Decimal("3.6e3")}]}
    parked = webhooks.read_event("hmac-sha256", decimal_mapping, "carrier", {}, body).fact["park_seconds"]
    assert parked == 3600 and type(parked) is int


@pytest.mark.parametrize(
    "scheme, mapping, headers, body, pointer, message",
    [
        ("stripe", STRIPE_MAPPING, {}, b"", "", "the body is not acceptable JSON: Expecting value at line 1 column 1"),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "a", "id": "b"}',
            "",
            "the body is not acceptable JSON: duplicate object key 'id'",
        ),
        ("stripe", STRIPE_MAPPING, {}, b'{"type": "x"}', "/id", "the event id is not in the body: no member 'id'"),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": null}',
            "/id",
            "the event id must be a string or an integer, not NoneType",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": 1.0}',
            "/id",
            "the event id must be a string or an integer, not a number with a fraction or an exponent",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "evt 1"}',
            "/id",
            "the event id (5 characters) does not make an idempotency key: psp:<event id> must be 1-128 printable ASCII characters without spaces",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": ""}',
            "/id",
            "the event id (0 characters) does not make an idempotency key: psp:<event id> must be 1-128 printable ASCII characters without spaces",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "' + b"e" * 125 + b'"}',
            "/id",
            "the event id (125 characters) does not make an idempotency key: psp:<event id> must be 1-128 printable ASCII characters without spaces",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "evt_1"}',
            "/type",
            "the event type is not in the body: no member 'type'",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "evt_1", "type": 7}',
            "/type",
            "the event type must be a non-empty string, not int",
        ),
        (
            "stripe",
            STRIPE_MAPPING,
            {},
            b'{"id": "evt_1", "type": "' + b"t" * 256 + b'"}',
            "/type",
            "the event type has 256 characters; at most 255",
        ),
        (
            "github",
            GITHUB_MAPPING,
            {"x-github-event": "push"},
            b"{}",
            "header:X-GitHub-Delivery",
            "the event id is missing",
        ),
        (
            "github",
            GITHUB_MAPPING,
            {"x-github-delivery": "d-1"},
            b"{}",
            "header:X-GitHub-Event",
            "the event type is missing",
        ),
        (
            "standard-webhooks",
            {"event_type": "/type", "rules": []},
            {},
            b"{}",
            "header:webhook-id",
            "the event id is missing",
        ),
        (
            "hmac-sha256",
            CARRIER_MAPPING,
            {},
            b'{"kind": "shipped"}',
            "/id",
            "the event id is not in the body: no member 'id'",
        ),
        (
            "hmac-sha256",
            CARRIER_MAPPING,
            {},
            b'{"id": true, "kind": "shipped"}',
            "/id",
            "the event id must be a string or an integer, not bool",
        ),
    ],
)
def test_W4_an_event_without_a_usable_id_or_type_is_unmappable(scheme, mapping, headers, body, pointer, message):
    with pytest.raises(webhooks.Unmappable) as caught:
        webhooks.read_event(scheme, mapping, "psp", headers, body)
    assert (caught.value.pointer, caught.value.message) == (pointer, message)
    assert str(caught.value) == f"{pointer or '/'}: {message}"


def stripe_body(order_id: str) -> bytes:
    """A payment event whose order id is the JSON text `order_id`, as the provider wrote it."""
    return (
        '{"id": "evt_9", "type": "payment_intent.succeeded", "data": {"object": {"metadata": {"order_id": %s}}}}'
        % order_id
    ).encode()


FRACTION = "the correlation key must be a string or an integer, not a number with a fraction or an exponent"


@pytest.mark.parametrize(
    "order_id, message",
    [
        ("null", "the correlation key must be a string or an integer, not NoneType"),
        ("true", "the correlation key must be a string or an integer, not bool"),
        ("42.0", FRACTION),  # the value 42, but not spelt as a key is
        ("4.2E1", FRACTION),
        ("42e0", FRACTION),
        ('{"id": "o-1"}', "the correlation key must be a string or an integer, not dict"),
        ('""', "the correlation key is 0 bytes of UTF-8; it must be 1-512"),
        (json.dumps("é" * 257), "the correlation key is 514 bytes of UTF-8; it must be 1-512"),
    ],
)
def test_W4_a_correlation_key_that_is_not_1_to_512_bytes_of_text_is_unmappable(order_id, message):
    with pytest.raises(webhooks.Unmappable) as caught:
        webhooks.read_event("stripe", STRIPE_MAPPING, "psp", {}, stripe_body(order_id))
    assert (caught.value.pointer, caught.value.message) == ("/data/object/metadata/order_id", message)


@pytest.mark.parametrize(
    "order_id, key",
    [(json.dumps("é" * 256), "é" * 256), ('"o-42"', "o-42"), ("0", "0"), ("-17", "-17"), (str(10**40), str(10**40))],
)
def test_W3_correlation_keys_at_the_limits_and_integers_as_their_digits(order_id, key):
    event = webhooks.read_event("stripe", STRIPE_MAPPING, "psp", {}, stripe_body(order_id))
    assert event.fact["correlation_key"] == key


def test_W4_a_missing_correlation_or_payload_pointer_is_unmappable_at_that_pointer():
    body = b'{"id": "evt_9", "type": "payment_intent.succeeded", "data": {"object": []}}'
    with pytest.raises(webhooks.Unmappable) as caught:
        webhooks.read_event("stripe", STRIPE_MAPPING, "psp", {}, body)
    assert caught.value.pointer == "/data/object/metadata/order_id"
    assert caught.value.message == "the correlation key is not in the body: no element 'metadata'"
    mapping = {**STRIPE_MAPPING, "rules": [{**RULE, "correlation_key": "/id", "payload": "/data/charge"}]}
    with pytest.raises(webhooks.Unmappable) as caught:
        webhooks.read_event("stripe", mapping, "psp", {}, body)
    assert (caught.value.pointer, caught.value.message) == (
        "/data/charge",
        "the payload is not in the body: no member 'charge'",
    )


@EXAMPLES
@given(
    order_id=st.one_of(st.text(min_size=1, max_size=128), st.integers()),
    amount=st.decimals(allow_nan=False, allow_infinity=False),
    event_id=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=124),
)
@example(order_id="o-42", amount=Decimal("0.10"), event_id="evt_1")
def test_W3_every_fact_read_fits_the_route_signal_schema_and_keeps_the_amount_as_written(order_id, amount, event_id):
    written = str(amount)
    body = (
        '{"id": %s, "type": "payment_intent.succeeded", "data": {"object": {"amount": %s, "metadata": {"order_id": %s}}}}'
        % (json.dumps(event_id), written, json.dumps(order_id))
    ).encode()
    event = webhooks.read_event("stripe", STRIPE_MAPPING, "psp", {}, body)
    schemas.validate("route_signal", event.fact)
    assert jsontext.compact(event.fact["payload"]["amount"]) == written
    assert event.fact["correlation_key"] == str(order_id)
