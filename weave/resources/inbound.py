"""Inbound webhooks (docs/rules.md#webhooks, W2-W5): a provider's signed event becomes a fact routed
by its business key (B1-B3), and every delivery is recorded and listed.

`POST /v1/inbound/{namespace}/{source}` takes no token: the signature authenticates. What it does,
in this order, and why:

1. A body declared over the cap was refused by `BodyCap` (413) before anything read it.
2. Without a keyring (`WEAVE_SECRET_KEY`), no secret can be read: 503.
3. A timestamp the request carries is held to the tolerance before anything touches the database
   (`TIMESTAMPED`): a replayed old delivery costs no query. The body is read (up to the cap).
4. The source is looked up with its secrets and its credential as it is now. An unknown source, one
   of another namespace and one whose credential is revoked cost one HMAC (`dummy_verify`) and
   answer exactly as a bad signature does: one 401 `SIGNATURE_INVALID`, the same bytes, nothing
   stored. The reason goes to the log line only.
5. The source's credential acts as any sender: a disabled application is 403 and a used-up quota
   429 (Retry-After), neither recorded: a refused delivery must not cost a row.
6. The mapping reads the event (`weave.rules.webhooks.read_event`): an event it cannot turn into a
   valid fact, or whose fact breaks the route's schema or the waiting step's contract, is recorded
   UNMAPPABLE and answered 422, so that the provider retries and a corrected mapping lets the
   redelivery through; a type it does not name is recorded IGNORED (200).
7. The fact is routed under the idempotency key `{source}:{event id}`: a redelivery replays the
   first receipt (the same outcome and signal id). One whose fact differs (the mapping changed in
   between) answers with the stored fact too: the provider's event happened once.

Each delivery is counted (`weave_inbound_deliveries_total{outcome}`) and logged in one line
(`weave.inbound`: namespace, source, event id and type, outcome, signal id, and why it was
refused); never a header, so never a signature, and never a secret.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import falcon

from weave import jsontext, metrics, schemas
from weave.errors import Code, WeaveError
from weave.http import Resource, operation, query_int, query_text, read_capped, send_json
from weave.resources.signals import PAGE_DEFAULT, PAGE_MAX, route_request, take_quota
from weave.rules import webhooks
from weave.secretbox import Keyring
from weave.sql import inbound, routing

log = logging.getLogger("weave.inbound")

OUTCOMES = ("ROUTED", "PARKED", "AMBIGUOUS", "IGNORED", "UNMAPPABLE")  # W4, as recorded
IGNORED = "IGNORED"
UNMAPPABLE = "UNMAPPABLE"
SIGNATURE_INVALID = "signature_invalid"  # the metric's outcome of a 401
REFUSED = "refused"  # the metric's outcome of any other answer that records nothing (403, 413, 429, 503)
# The one answer to a bad signature, an unknown source, another namespace's source, a revoked one.
NOT_VERIFIED = "the request's signature does not verify for this source"
NO_KEYRING_RETRY_SECONDS = 60  # an operator must set WEAVE_SECRET_KEY and restart: not a matter of seconds
# The header that carries each timestamped scheme's time (W2). A request carrying one is held to
# the tolerance before its source is looked up (`check_timestamp`); its source's own scheme is
# checked again by `verify`, so a request without it is refused there.
TIMESTAMPED = {"standard-webhooks": "webhook-timestamp", "stripe": "stripe-signature"}
DELIVERIES = metrics.Children(metrics.INBOUND_DELIVERIES)


@dataclass
class Seen:
    """What the log line of one delivery says: the outcome and, once known, the event."""

    outcome: str = REFUSED
    event_id: str | None = None
    event_type: str | None = None
    signal_id: str | None = None
    reason: str | None = None  # why it was refused or unmappable (never a signature or secret)


def signature_invalid() -> WeaveError:
    return WeaveError(Code.SIGNATURE_INVALID, NOT_VERIFIED)


def unmappable(pointer: str, message: str) -> WeaveError:
    return WeaveError(Code.VALIDATION_FAILED, f"{pointer}: {message}", [{"pointer": pointer, "message": message}])


class InboundDelivery(Resource):
    """POST /v1/inbound/{namespace}/{source} (W2-W4)."""

    def __init__(self, database, body_limit: int, keyring: Keyring | None, clock: Callable[[], float] = time.time):
        super().__init__(database, body_limit)
        self.keyring = keyring
        self.clock = clock  # the process's clock: the timestamp is checked before the database is asked

    @operation(
        "Receive a provider's signed webhook (W2-W4): verified, mapped to a fact and routed by its key",
        description=(
            "No bearer token: the signature authenticates (`standard-webhooks`, `stripe`, `github` or"
            " `hmac-sha256`, as the source was created). A bad or missing signature, a timestamp more than"
            " 5 minutes off, an unknown source and another namespace's source all get the same 401"
            " SIGNATURE_INVALID and store nothing. A verified event answers 200 with its outcome (ROUTED,"
            " PARKED, AMBIGUOUS, or IGNORED for a type the mapping does not name) and its fact's signal_id;"
            " a redelivery of the event answers the same. One the mapping cannot turn into a valid fact is"
            " recorded and answered 422. 503 when the server has no WEAVE_SECRET_KEY."
        ),
        public=True,
        not_found=Code.SIGNATURE_INVALID,  # a path that names no source can name: as an unknown source
        response="inbound_answer",
        statuses=(200, 401, 403, 422, 429, 503),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, source: str) -> None:
        seen = Seen()
        try:
            answer = self._receive(req, namespace, source, seen)
        except WeaveError as exc:
            if exc.code is Code.SIGNATURE_INVALID:
                seen.outcome = SIGNATURE_INVALID
            elif seen.outcome != UNMAPPABLE:
                seen.reason = seen.reason or exc.code.name
            raise
        finally:
            DELIVERIES(seen.outcome).inc()
            fields = {"namespace": namespace, "source": source, **vars(seen)}
            log.info("inbound delivery", extra={"fields": fields})
        send_json(resp, 200, answer)

    def _receive(self, req: falcon.Request, namespace: str, source: str, seen: Seen) -> dict:
        if self.keyring is None:
            raise WeaveError(
                Code.UNAVAILABLE,
                "inbound webhooks need WEAVE_SECRET_KEY on the server",
                headers={"Retry-After": str(NO_KEYRING_RETRY_SECONDS)},
            )
        headers = {name.lower(): value for name, value in req.headers.items()}
        now = self.clock()
        try:
            for scheme, header in TIMESTAMPED.items():
                if header in headers:
                    webhooks.check_timestamp(scheme, headers, now)
        except webhooks.Unverified as exc:
            seen.reason = str(exc)
            raise signature_invalid() from None
        body = read_capped(req, self.body_limit)
        found = inbound.delivery_source(self.database, namespace, source)
        try:
            if found is None:  # none by that name here, or its credential revoked (a deleted source)
                webhooks.dummy_verify(body)  # as long as a verification: an unknown source looks like a bad signature
                raise webhooks.Unverified("no such source in this namespace, or its credential is not current")
            webhooks.verify(found.scheme, self._secrets(found), headers, body, now, found.signature_header)
        except webhooks.Unverified as exc:
            seen.reason = str(exc)
            raise signature_invalid() from None
        principal = found.principal
        principal.require_writable()
        take_quota(self.database, principal)
        try:
            event = webhooks.read_event(found.scheme, found.mapping, found.name, headers, body)
        except webhooks.Unmappable as exc:
            self._record_unmappable(found, seen, f"{exc.pointer}: {exc.message}")
            raise unmappable(exc.pointer, exc.message) from None
        seen.event_id, seen.event_type = event.event_id, event.event_type
        if event.fact is None:
            seen.outcome = IGNORED
            self._record(found, seen)
            return {"outcome": IGNORED, "signal_id": None}
        try:
            receipt = self._route(principal, event)
        except WeaveError as exc:
            if exc.code.status not in (413, 422):  # 413: a payload over 256 KiB cannot be a fact either
                raise
            self._record_unmappable(found, seen, exc.detail)
            raise WeaveError(exc.code if exc.code.status == 422 else Code.VALIDATION_FAILED, exc.detail, exc.errors)
        fact = jsontext.loads(receipt.text)
        seen.outcome, seen.signal_id = fact["route"], fact["signal_id"]
        self._record(found, seen)
        return {"outcome": seen.outcome, "signal_id": seen.signal_id}

    def _secrets(self, found: inbound.DeliverySource) -> list[str]:
        """The source's secrets that a key of the ring opens. One that none opens (encrypted with a
        key WEAVE_SECRET_KEY no longer holds) verifies nothing, and the operator is told."""
        opened = []
        for ciphertext in found.ciphertexts:
            try:
                opened.append(self.keyring.decrypt(ciphertext))
            except ValueError as exc:
                log.error("inbound source %s of namespace %s: %s", found.name, found.namespace_id, exc)
        return opened

    def _route(self, principal, event: webhooks.Event):
        """The receipt of the event's fact routed under its idempotency key: the first delivery's
        for a redelivery, even one whose fact changed with the mapping (W3)."""
        schemas.validate("route_signal", event.fact)
        request = route_request(event.idempotency_key, event.fact)
        try:
            return routing.route_signal(self.database, principal, request)
        except WeaveError as exc:
            if exc.code is not Code.IDEMPOTENCY_CONFLICT:
                raise
            first = routing.stored_receipt(self.database, principal, event.idempotency_key)
            if first is None:  # a conflict names a stored fact; it cannot have gone, but never guess
                raise
            return first

    def _record(self, found: inbound.DeliverySource, seen: Seen) -> None:
        signal_id = int(seen.signal_id) if seen.signal_id is not None else None
        inbound.record_delivery(
            self.database, found, seen.event_id, seen.event_type, seen.outcome, signal_id, seen.reason
        )

    def _record_unmappable(self, found: inbound.DeliverySource, seen: Seen, error: str) -> None:
        seen.outcome, seen.reason = UNMAPPABLE, error
        self._record(found, seen)


def source_view(row: dict) -> dict:
    """A source as a reader of the namespace sees it: its name, scheme and age (its credential,
    grants, mapping and secrets are the operator's: `weave admin inbound list`)."""
    return {"source": row["source"], "scheme": row["scheme"], "created_at": row["created_at"]}


class Sources(Resource):
    """GET {N}/inbound: the namespace's sources, so that a reader finds their deliveries."""

    @operation(
        "List the namespace's inbound webhook sources by name (W1): name, scheme, creation time",
        scopes=("workflows:read",),
        not_found=Code.NOT_FOUND,
        response="inbound_source_list",
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        rows = inbound.list_sources(self.database, req.context.principal.namespace)
        send_json(resp, 200, {"sources": [source_view(row) for row in rows]})


class SourceDeliveries(Resource):
    """GET {N}/inbound/{source}/deliveries (W5)."""

    @operation(
        "List an inbound source's deliveries (W5), newest first",
        description="Every delivery that verified: its time, event id and type, outcome, signal id and error",
        scopes=("workflows:read",),
        not_found=Code.NOT_FOUND,
        response="inbound_delivery_page",
        query=(
            ("outcome", f"one of {', '.join(OUTCOMES)}"),
            ("after", "the next_after of the previous page (absent or 0: start at the newest)"),
            ("limit", f"page size 1..{PAGE_MAX} (default {PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, source: str) -> None:
        outcome = query_text(req, "outcome", OUTCOMES.__contains__, f"one of {', '.join(OUTCOMES)}")
        after = query_int(req, "after", 0, 0, 2**63 - 1) or None  # 0: from the newest, as the other lists
        limit = query_int(req, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        rows = inbound.list_deliveries(self.database, req.context.principal, source, outcome, after, limit + 1)
        page = rows[:limit]
        send_json(
            resp,
            200,
            {
                "deliveries": page,
                "next_after": page[-1]["delivery_id"] if len(rows) > limit else None,
            },
        )
