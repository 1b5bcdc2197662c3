"""Inbound webhooks without I/O (docs/rules.md#webhooks): whether a request is signed by a secret
of its source (W2), whether a mapping document can be used (W3), and what fact a verified event
becomes (W3, W4). The HTTP side (`weave.resources.inbound`) reads the source and its secrets,
calls these, and records the outcome.

Verification is written here, over the raw body bytes, rather than with the providers' libraries
(they are the tests' oracles: docs/decisions.md#inbound-webhooks). Its cost is bounded
whatever a request carries: a signature header longer than `MAX_SIGNATURE_HEADER_CHARS` is
refused unread, at most `MAX_SIGNATURES` signatures of it are considered, and each secret costs one
HMAC of the body, compared in constant time (`hmac.compare_digest`) with every signature.

| scheme | signed bytes | signatures (header) | secret |
| --- | --- | --- | --- |
| `standard-webhooks` | `{webhook-id}.{webhook-timestamp}.{body}` | `webhook-signature`: space-separated `v1,<base64>` (other versions, e.g. `v1a`, ignored) | base64 of 24-64 bytes, `whsec_` prefix optional |
| `stripe` | `{t}.{body}` | `stripe-signature`: `t=<seconds>,v1=<hex>,…` (`v0` and others ignored) | `whsec_…`, used as text |
| `github` | the body | `x-hub-signature-256`: `sha256=<hex>` | text |
| `hmac-sha256` | the body | the source's header: `<hex>` or `sha256=<hex>` | text |
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, Sequence
from urllib.parse import parse_qs

from weave import jsontext, schemas
from weave.rules.correlation import MAX_BYTES as CORRELATION_KEY_MAX_BYTES
from weave.rules.correlation import Unresolved, resolve
from weave.rules.problems import Problem

STANDARD_WEBHOOKS = "standard-webhooks"
STRIPE = "stripe"
GITHUB = "github"
HMAC_SHA256 = "hmac-sha256"
SCHEMES = (STANDARD_WEBHOOKS, STRIPE, GITHUB, HMAC_SHA256)
TOLERANCE_SECONDS = 300  # W2: a timestamp more than 5 minutes off either way is refused

# Bounds on what one request may make the server do before it is refused (W2).
MAX_SIGNATURE_HEADER_CHARS = 4096  # sixteen signatures of any scheme fit in a quarter of it
MAX_SIGNATURES = 16  # signatures considered per request; a sender rotating its secret sends two
MAX_SECRET_CHARS = 1024

SECRET_PREFIX = "whsec_"  # Standard Webhooks' (optional there) and Stripe's (always there)
STANDARD_SECRET_BYTES = range(24, 65)  # the Standard Webhooks specification: 24 to 64 random bytes
TIMESTAMP = re.compile(r"[0-9]{1,15}")  # whole seconds since the epoch, as both schemes send them
HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
PRINTABLE = re.compile(r"[\x21-\x7e]+")
# The idempotency key `{source}:{event id}` is also the fact's evidence_ref: printable ASCII
# without spaces (route_signal.json refuses whitespace there), 1-128 characters (B1).
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")
MAX_EVENT_TYPE_CHARS = 255  # what a delivery's record keeps (W5)
FORM = "application/x-www-form-urlencoded"  # GitHub's other content type: the JSON is the `payload` field

# A key nobody knows: `dummy_verify` spends an HMAC with it.
_DUMMY_KEY = os.urandom(32)


class Unverified(Exception):
    """The request is not signed by a secret of its source, or its time is off (W2). The text says
    which for the log; the answer never does."""


class Unmappable(Exception):
    """W4: a verified event that the mapping cannot turn into a valid fact. `pointer` is where
    (RFC 6901 into the body, or `header:<Name>`), `message` why."""

    def __init__(self, pointer: str, message: str):
        super().__init__(f"{pointer or '/'}: {message}")
        self.pointer = pointer
        self.message = message


# ---- secrets ---------------------------------------------------------------------------------------


def _key(scheme: str, secret: str) -> bytes:
    """The HMAC key a secret stands for, or ValueError saying what is wrong with it."""
    if scheme == STANDARD_WEBHOOKS:
        encoded = secret.removeprefix(SECRET_PREFIX)
        try:
            # senders may leave the padding off (the reference library adds it back)
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a standard-webhooks secret is base64 (after an optional whsec_ prefix)") from None
        if len(key) not in STANDARD_SECRET_BYTES:
            raise ValueError(f"a standard-webhooks secret is 24-64 bytes; this one decodes to {len(key)}")
        return key
    if scheme == STRIPE:
        if not (
            secret.startswith(SECRET_PREFIX)
            and PRINTABLE.fullmatch(secret[len(SECRET_PREFIX) :])
            and len(secret) <= MAX_SECRET_CHARS
        ):
            raise ValueError("a Stripe signing secret is whsec_ followed by printable characters, no spaces")
        return secret.encode("ascii")
    if scheme in (GITHUB, HMAC_SHA256):
        if not 1 <= len(secret) <= MAX_SECRET_CHARS or not secret.isprintable():
            raise ValueError(f"a {scheme} secret is 1-{MAX_SECRET_CHARS} characters without line breaks or controls")
        return secret.encode("utf-8")
    raise ValueError(f"unknown scheme {scheme!r}; one of {', '.join(SCHEMES)}")


def standard_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (`whsec_` + base64 of 24-64 bytes), as inbound
    verification and outbound signing (weave.rules.notify) both use it; ValueError when malformed."""
    return _key(STANDARD_WEBHOOKS, secret)


def check_secret(scheme: str, secret: str) -> None:
    """ValueError (its message for the operator) when `secret` cannot be a secret of `scheme`."""
    _key(scheme, secret)


# ---- verification (W2) --------------------------------------------------------------------------------


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if value is None:
        raise Unverified(f"no {name} header")
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise Unverified(f"{name} is {len(value)} characters; at most {MAX_SIGNATURE_HEADER_CHARS} are read")
    return value


def _stripe_fields(headers: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The `t` (the first, as Stripe's library reads it) and the first `v1` signatures of Stripe-Signature."""
    timestamp, signatures = None, []
    for item in _header(headers, "stripe-signature").split(","):
        name, _, value = item.partition("=")
        if name == "t" and timestamp is None:
            timestamp = value
        elif name == "v1" and len(signatures) < MAX_SIGNATURES:
            signatures.append(value)
    return timestamp, signatures


def _fresh_timestamp(scheme: str, headers: Mapping[str, str], now: float) -> int | None:
    """The request's timestamp (None for the schemes without one), refused when missing,
    malformed or more than TOLERANCE_SECONDS from `now` either way."""
    if scheme == STANDARD_WEBHOOKS:
        text, where = _header(headers, "webhook-timestamp"), "webhook-timestamp"
    elif scheme == STRIPE:
        text, where = _stripe_fields(headers)[0], "stripe-signature t"
    else:
        return None
    if text is None or not TIMESTAMP.fullmatch(text):
        raise Unverified(f"{where} is not whole seconds since the epoch")
    timestamp = int(text)
    if abs(now - timestamp) > TOLERANCE_SECONDS:
        raise Unverified(f"{where} is {now - timestamp:.0f} s from now; at most {TOLERANCE_SECONDS} s are allowed")
    return timestamp


def check_timestamp(scheme: str, headers: Mapping[str, str], now: float) -> None:
    """W2, before any database work: Unverified when a scheme that signs a time (standard-webhooks,
    stripe) carries none, or one more than TOLERANCE_SECONDS from `now`. `headers`' names are
    lower case."""
    _fresh_timestamp(scheme, headers, now)


def _hex_digests(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(value) for value in values if HEX_DIGEST.fullmatch(value)]


def _standard_digests(header: str) -> list[bytes]:
    found = []
    for entry in header.split(" "):
        version, _, signature = entry.partition(",")
        if version != "v1":  # v1a (asymmetric) and versions to come are not ours to check
            continue
        try:
            found.append(base64.b64decode(signature, validate=True))
        except (binascii.Error, ValueError):
            continue
        if len(found) == MAX_SIGNATURES:
            break
    return found


def _signed(
    scheme: str, headers: Mapping[str, str], timestamp: int | None, signature_header: str | None
) -> tuple[bytes, list[bytes]]:
    """(what precedes the body in the signed bytes, the request's signatures as digests)."""
    if scheme == STANDARD_WEBHOOKS:
        message_id = headers.get("webhook-id")
        if message_id is None or not PRINTABLE.fullmatch(message_id):
            raise Unverified("webhook-id is missing or not printable ASCII")
        return f"{message_id}.{timestamp}.".encode("ascii"), _standard_digests(_header(headers, "webhook-signature"))
    if scheme == STRIPE:
        return f"{timestamp}.".encode("ascii"), _hex_digests(_stripe_fields(headers)[1])
    if scheme == GITHUB:
        scheme_name, _, digest = _header(headers, "x-hub-signature-256").partition("=")
        return b"", _hex_digests([digest] if scheme_name == "sha256" else [])
    if scheme == HMAC_SHA256:
        if not signature_header:
            raise Unverified("the source names no signature header")
        # the bare hex digest, or GitHub's spelling of it, which many senders copy
        return b"", _hex_digests([_header(headers, signature_header.lower()).removeprefix("sha256=")])
    raise ValueError(f"unknown scheme {scheme!r}")


def verify(
    scheme: str,
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    signature_header: str | None = None,
) -> None:
    """W2: Unverified unless one signature of the request is the HMAC-SHA256 of the signed bytes
    under one of `secrets` (its timestamp checked first, as `check_timestamp`). The raw body bytes
    are signed: nothing is parsed or re-encoded before. `signature_header` names the header of an
    `hmac-sha256` source; `headers`' names are lower case."""
    timestamp = _fresh_timestamp(scheme, headers, now)
    prefix, signatures = _signed(scheme, headers, timestamp, signature_header)
    if not signatures:
        raise Unverified(f"no {scheme} signature in the request")
    for secret in secrets:
        try:
            key = _key(scheme, secret)
        except ValueError:
            continue  # refused when it was added (check_secret): never a usable key
        mac = hmac.new(key, prefix, hashlib.sha256)
        mac.update(body)
        digest = mac.digest()
        if any(hmac.compare_digest(digest, signature) for signature in signatures):
            return
    raise Unverified(f"no signature matches a secret of the source ({len(signatures)} considered)")


def dummy_verify(body: bytes) -> None:
    """One HMAC of the body, as a verification costs: an unknown source takes as long to refuse as
    a bad signature (W2)."""
    hmac.compare_digest(hmac.new(_DUMMY_KEY, body, hashlib.sha256).digest(), _DUMMY_KEY)


# ---- the mapping (W3) ---------------------------------------------------------------------------------


@functools.cache
def _mapping_validator():
    return schemas.Validator(schemas.schema("inbound_mapping"))


def _shape_message(error) -> str:
    if error.validator == "pattern" and error.schema == _mapping_validator().schema["$defs"]["body_pointer"]:
        return f"{error.instance!r} is not a JSON Pointer (RFC 6901): empty, or tokens each after a '/', '~' only as ~0 or ~1"
    return schemas.short_message(error)


def mapping_problems(scheme: str, mapping: Any) -> list[Problem]:
    """W3 at create and update: everything wrong with a mapping document for a source of `scheme`
    (empty: usable). Its shape (weave/schemas/inbound_mapping.json, pointers well-formed by
    RFC 6901), then what the schema cannot say: one rule per event type, `event_type` required
    except for github (whose type is the X-GitHub-Event header, so naming one is refused rather than
    ignored), `idempotency_key` required for hmac-sha256 (read for it only)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}")
    shape = sorted(
        _mapping_validator().iter_errors(mapping), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if shape:
        return [Problem(schemas.pointer(e.absolute_path), _shape_message(e)) for e in shape]
    found = []
    if scheme == GITHUB and "event_type" in mapping:
        found.append(Problem("/event_type", "github's event type is the X-GitHub-Event header; leave event_type out"))
    if scheme != GITHUB and "event_type" not in mapping:
        found.append(Problem("/event_type", "required: the pointer to the event's type in the body, e.g. /type"))
    if scheme == HMAC_SHA256 and "idempotency_key" not in mapping:
        found.append(Problem("/idempotency_key", "required for hmac-sha256: the pointer to the event's id in the body"))
    first: dict[str, int] = {}
    for i, rule in enumerate(mapping["rules"]):
        if rule["event"] in first:
            found.append(
                Problem(
                    f"/rules/{i}/event",
                    f"a second rule for {rule['event']!r} (the first is /rules/{first[rule['event']]})",
                )
            )
        first.setdefault(rule["event"], i)
    return found


# ---- reading a verified event (W3, W4) ----------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    event_id: str  # the provider's: webhook-id, Stripe's /id, X-GitHub-Delivery, the mapping's pointer
    event_type: str | None
    idempotency_key: str  # f"{source}:{event_id}": the fact's idempotency key and evidence_ref
    fact: dict | None  # a route_signal body; None: IGNORED, no rule for the type


def _document(scheme: str, headers: Mapping[str, str], body: bytes) -> Any:
    """The body as exact JSON (`jsontext`: numbers keep their digits into the fact's payload).
    GitHub may send it form-encoded, the JSON in the `payload` field."""
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    text: str | bytes = body
    if scheme == GITHUB and content_type == FORM:
        try:
            fields = parse_qs(body.decode("ascii"), strict_parsing=True, errors="strict", max_num_fields=100)
        except (UnicodeDecodeError, ValueError) as exc:
            raise Unmappable("", f"the form-encoded body cannot be read: {exc}") from None
        if len(fields.get("payload", [])) != 1:
            raise Unmappable("", "the form-encoded body has no single payload field")
        text = fields["payload"][0]
    try:
        return jsontext.loads(text)
    except jsontext.JsonRejected as exc:
        raise Unmappable("", f"the body is not acceptable JSON: {exc}") from None


def _at(document: Any, pointer: str, what: str) -> Any:
    try:
        return resolve(document, pointer)
    except Unresolved as exc:
        raise Unmappable(pointer, f"{what} is not in the body: {str(exc).removeprefix(pointer + ': ')}") from None


def _key_text(document: Any, pointer: str, what: str) -> str:
    """A string, or an integer as its decimal text: a provider's numeric id or order number is a
    key as its digits spell it. A number with a fraction or an exponent is not (`42.0` and `42`
    would be one key in JSON and two as text)."""
    value = _at(document, pointer, what)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        kind = "a number with a fraction or an exponent" if isinstance(value, Decimal) else type(value).__name__
        raise Unmappable(pointer, f"{what} must be a string or an integer, not {kind}")
    return value


def _required_header(headers: Mapping[str, str], name: str, what: str) -> str:
    value = headers.get(name.lower())
    if not value:
        raise Unmappable(f"header:{name}", f"{what} is missing")
    return value


def _event_id(scheme: str, mapping: dict, headers: Mapping[str, str], document: Any) -> tuple[str, str]:
    """(the provider's event id, where it is)."""
    if scheme == STANDARD_WEBHOOKS:
        return _required_header(headers, "webhook-id", "the event id"), "header:webhook-id"
    if scheme == GITHUB:
        return _required_header(headers, "X-GitHub-Delivery", "the event id"), "header:X-GitHub-Delivery"
    pointer = "/id" if scheme == STRIPE else mapping["idempotency_key"]
    return _key_text(document, pointer, "the event id"), pointer


def _event_type(scheme: str, mapping: dict, headers: Mapping[str, str], document: Any) -> str:
    if scheme == GITHUB:
        where, value = "header:X-GitHub-Event", _required_header(headers, "X-GitHub-Event", "the event type")
    else:
        where = mapping["event_type"]
        value = _at(document, where, "the event type")
        if not isinstance(value, str) or not value:
            raise Unmappable(where, f"the event type must be a non-empty string, not {type(value).__name__}")
    if len(value) > MAX_EVENT_TYPE_CHARS:
        raise Unmappable(where, f"the event type has {len(value)} characters; at most {MAX_EVENT_TYPE_CHARS}")
    return value


def read_event(scheme: str, mapping: dict, source: str, headers: Mapping[str, str], body: bytes) -> Event:
    """What a verified event of `source` is (W3): its id, type and idempotency key, and the fact it
    becomes (None: no rule names its type, IGNORED), or Unmappable (W4). `mapping` passed
    `mapping_problems`; `headers`' names are lower case."""
    document = _document(scheme, headers, body)
    event_id, where = _event_id(scheme, mapping, headers, document)
    key = f"{source}:{event_id}"
    if not event_id or not IDEMPOTENCY_KEY.fullmatch(key):
        raise Unmappable(
            where,
            f"the event id ({len(event_id)} characters) does not make an idempotency key: {source}:<event id>"
            " must be 1-128 printable ASCII characters without spaces",
        )
    event_type = _event_type(scheme, mapping, headers, document)
    rule = next((rule for rule in mapping["rules"] if rule["event"] == event_type), None)
    if rule is None:
        return Event(event_id, event_type, key, None)
    correlation = _key_text(document, rule["correlation_key"], "the correlation key")
    size = len(correlation.encode("utf-8"))
    if not 1 <= size <= CORRELATION_KEY_MAX_BYTES:
        raise Unmappable(
            rule["correlation_key"],
            f"the correlation key is {size} bytes of UTF-8; it must be 1-{CORRELATION_KEY_MAX_BYTES}",
        )
    fact = {
        "name": rule["name"],
        "payload_version": rule["payload_version"],
        "correlation_key": correlation,
        "payload": _at(document, rule["payload"], "the payload") if "payload" in rule else document,
        "reason": rule.get("reason", f"{source}: {event_type}"),
        "evidence_ref": key,
    }
    if "park_seconds" in rule:
        fact["park_seconds"] = int(rule["park_seconds"])  # an integral 3600.0 in the mapping is 3600
    return Event(event_id, event_type, key, fact)
