"""Send, read and list signals (S1.1-S1.12); send a fact by its business key (docs/rules.md#routing, B1-B3)."""

from __future__ import annotations

import re
import time

import falcon

from weave import auth, metrics
from weave.db import Unavailable
from weave.errors import Code, WeaveError
from weave.http import (
    Resource,
    bounded_value_text,
    operation,
    query_int,
    query_key,
    query_text,
    read_json,
    send_json,
)
from weave.resources import waiting
from weave.rules import routing as routing_rules
from weave.rules import signals as rules
from weave.sql import routing, signals, tenancy
from weave.views import signal_view

IDEMPOTENCY_KEY = re.compile(r"^[\x20-\x7e]{1,128}$")
CORRELATION_KEY_MAX_BYTES = 512
STATUSES = ("PENDING", "CONSUMED", "REJECTED", "EXPIRED")
PAGE_DEFAULT = 100
PAGE_MAX = 1000
SEND_OUTCOMES = metrics.Children(metrics.SIGNAL_REQUESTS)
ACCEPTED = metrics.Children(metrics.SIGNALS_ACCEPTED)
ROUTED = metrics.Children(metrics.SIGNALS_ROUTED)


def idempotency_header(scope: str) -> tuple:
    """The Idempotency-Key header as an operation documents it."""
    return (
        "Idempotency-Key",
        f"1-128 printable ASCII; scoped to the {scope}",
        {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
    )


def _idempotency_key(req: falcon.Request) -> str:
    return checked_key(req.get_header("Idempotency-Key"), "header Idempotency-Key", "header:Idempotency-Key")


def checked_key(key, named: str, pointer: str) -> str:
    """An idempotency key as sent (the header of a single request, a member of a batch item, B8):
    1-128 printable ASCII, else VALIDATION_FAILED."""
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.match(key):
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"{named} is required: 1-128 printable ASCII characters",
            [{"pointer": pointer, "message": "1-128 printable ASCII characters"}],
        )
    return key


SIGNAL_NAME = re.compile(r"[\x21-\x7e]{1,128}")  # a contract's signal name (schemas/definition.json)


def signal_request(key: str, body: dict, digest=rules.request_digest) -> signals.SignalRequest:
    """The request as `sql.signals` takes it: exact payload text, correlation bytes, digest."""
    correlation = body["correlation_key"].encode("utf-8")
    if len(correlation) > CORRELATION_KEY_MAX_BYTES:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"/correlation_key: {len(correlation)} bytes of UTF-8; the limit is {CORRELATION_KEY_MAX_BYTES}",
            [{"pointer": "/correlation_key", "message": f"at most {CORRELATION_KEY_MAX_BYTES} bytes"}],
        )
    payload = body.get("payload", rules.ABSENT)
    fields = {k: v for k, v in body.items() if k != "payload"}
    return signals.SignalRequest(
        idempotency_key=key,
        fields=fields,
        payload=payload,
        payload_text=None if payload is rules.ABSENT else bounded_value_text(payload, "/payload"),
        correlation=correlation,
        request_digest=digest(fields, payload),
    )


def route_request(key: str, body: dict) -> signals.SignalRequest:
    """A fact sent by its business key (B1), its `park_seconds` default written in: the digest
    covers what the fact asks for, so an absent park_seconds and 86,400 are the same request."""
    body = {**body, "park_seconds": body.get("park_seconds", routing_rules.PARK_SECONDS_DEFAULT)}
    return signal_request(key, body, rules.route_digest)


def take_quota(database, principal) -> None:
    """S1.3: QUOTA_EXCEEDED (429, Retry-After) when the application's signals per minute are used up."""
    if principal.signals_per_minute is not None:
        wait = signals.take_quota(database, principal.application_id, principal.signals_per_minute)
        if wait is not None:
            raise WeaveError(
                Code.QUOTA_EXCEEDED,
                f"the application's quota of {principal.signals_per_minute} signals per minute is used up",
                headers={"Retry-After": str(wait)},
            )


def count_refusal(exc: Exception) -> None:
    """A refused send, counted by its code (a batch item's too, B8)."""
    if isinstance(exc, WeaveError):
        SEND_OUTCOMES(exc.code.name).inc()
    elif isinstance(exc, Unavailable):
        SEND_OUTCOMES(Code.UNAVAILABLE.name).inc()


def count_receipt(receipt: signals.Receipt) -> None:
    """An answered send, counted as accepted (by status, disposition and route) or replayed."""
    if receipt.replayed:
        SEND_OUTCOMES("replayed").inc()
    else:
        SEND_OUTCOMES("accepted").inc()
        ACCEPTED(receipt.status, receipt.disposition or "none").inc()
        if receipt.route is not None:
            ROUTED(receipt.route).inc()


REPLAYED = {"Idempotent-Replayed": "true"}


def answer_receipt(resp: falcon.Response, send) -> None:
    """201 with the receipt `send()` returns (replays with Idempotent-Replayed), counted by outcome.

    Counted here, once the unit has committed and returned: a unit re-run after a lost commit
    returns one receipt (a replay, when the first commit had landed), so nothing counts twice."""
    try:
        receipt = send()
    except (WeaveError, Unavailable) as exc:
        count_refusal(exc)
        raise
    count_receipt(receipt)
    resp.status = 201
    resp.content_type = "application/json"
    resp.text = receipt.text
    if receipt.replayed:
        resp.set_headers(REPLAYED)


def send_signal_page(resp: falcon.Response, rows: list[dict], limit: int, workflow_id: str | None) -> None:
    """200 with a page of signals: `rows` were read one beyond `limit`, so that a next page is known."""
    page = rows[:limit]
    send_json(
        resp,
        200,
        {
            "signals": [signal_view(row, workflow_id) for row in page],
            "next_after": str(page[-1]["id"]) if len(rows) > limit else None,
        },
    )


def send_target(req: falcon.Request, params: dict, token_sha256: bytes) -> tuple[str, tuple]:
    """The single send's target, read with the credential (one round trip less a signal: issue
    31). The key is checked only after authorization, as before: a malformed one finds nothing."""
    key = req.get_header("Idempotency-Key") or ""
    return signals.SELECT_TARGET_OF_TOKEN, (key, token_sha256, params["workflow_id"])


class WorkflowSignals(Resource):
    @operation(
        "Send a signal (201 with the frozen receipt; replays answer the same bytes)",
        scopes=("workflows:signal",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        request="signal",
        response="signal_receipt",
        statuses=(201, 409, 422, 429),
        headers=(idempotency_header("workflow"),),
        read_first=send_target,
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        answer_receipt(resp, lambda: self._send(req, workflow_id))

    def _send(self, req: falcon.Request, workflow_id: str) -> signals.Receipt:
        principal = req.context.principal
        request = signal_request(_idempotency_key(req), read_json(req, "signal", self.body_limit))
        take_quota(self.database, principal)
        return signals.send_signal(self.database, principal, workflow_id, request, req.context.read_first)

    @operation(
        "List a workflow's signals with their dispositions, oldest first",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="signal_page",
        query=(
            ("status", "PENDING, CONSUMED, REJECTED or EXPIRED"),
            ("after", "signal_id to continue after"),
            ("limit", f"page size 1..{PAGE_MAX} (default {PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        principal = req.context.principal
        status = query_text(req, "status", STATUSES.__contains__, f"one of {', '.join(STATUSES)}")
        after = query_int(req, "after", 0, 0, 2**63 - 1)
        limit = query_int(req, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        rows = signals.list_signals(self.database, principal, workflow_id, status, after, limit + 1)
        send_signal_page(resp, rows, limit, workflow_id)


WAIT_SECONDS_MAX = 20
WAIT_SECONDS = ("wait_seconds", f"0..{WAIT_SECONDS_MAX}: answer once the signal is no longer PENDING or PARKED (B6)")
WAITED_STATUSES = (rules.PENDING, "PARKED")  # a signal in these may still change: a read may wait it out
WAIT_DESCRIPTION = (
    "With `wait_seconds`, a signal still PENDING or PARKED is read again (no transaction or connection"
    " is held in between) until it is not, or until the seconds have passed: the answer is its state"
    " then. Such a read counts against the process's cap of waiting claims (`weave serve"
    " --max-waiting-claims`); at the cap it answers at once with the state it read (docs/decisions.md)."
    " A read that waited reads its credential again before it answers: revoked or expired meanwhile is 401."
)


class SignalRead(Resource):
    """A read of one signal's current state that may wait for it to settle (B6)."""

    def __init__(self, database, *, slots: waiting.WaitingClaims):
        super().__init__(database)
        self.slots = slots

    def answer(self, req: falcon.Request, resp: falcon.Response, read) -> None:
        """200 with the signal `read(principal)` returns, looked at again while it is PENDING or
        PARKED, up to `?wait_seconds`, in a waiting slot; at the cap, or when the slot goes to
        another application's request, what was last read. A read that waited checks its
        credential again before it answers (401 when revoked or expired meanwhile), as a claim does."""
        wait_seconds = query_int(req, "wait_seconds", 0, 0, WAIT_SECONDS_MAX)
        principal = req.context.principal
        row = read(principal)
        if row["status"] in WAITED_STATUSES and wait_seconds:
            deadline = time.monotonic() + wait_seconds
            with self.slots.slot(principal.application_id) as ended:
                if ended is not None:
                    settled = waiting.look_until(
                        lambda: read(principal), lambda seen: seen["status"] not in WAITED_STATUSES, deadline, ended
                    )
                    principal = tenancy.authenticate(self.database, req.context.token_sha256)
                    if principal is None:
                        raise auth.unauthenticated(auth.NOT_CURRENT)
                    row = settled or read(principal)
        send_json(resp, 200, signal_view(row, row["workflow_id"]))


class WorkflowSignal(SignalRead):
    @operation(
        "Read a signal's current state",
        description=WAIT_DESCRIPTION,
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="signal_state",
        query=(WAIT_SECONDS,),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str, signal_id: int
    ) -> None:
        self.answer(
            req,
            resp,
            lambda principal: {
                **signals.get_signal(self.database, principal, workflow_id, signal_id),
                "workflow_id": workflow_id,
            },
        )


class NamespaceSignal(SignalRead):
    @operation(
        "Read a fact sent by its business key, wherever it is now (B6): parked, routed, expired or refused",
        description=(
            "Parked, expired unrouted and refused facts are readable by any credential of the namespace"
            " with `workflows:read`; a routed one also needs a grant for every queue of its instance's"
            " definition, as the instance's own signal reads do. The body is that of"
            " `GET /workflows/{workflow_id}/signals/{signal_id}` for the same signal, with `route`;"
            " `workflow_id` is null while the fact belongs to no instance. " + WAIT_DESCRIPTION
        ),
        scopes=("workflows:read",),
        not_found=Code.SIGNAL_NOT_FOUND,
        response="signal_state",
        query=(WAIT_SECONDS,),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, signal_id: int) -> None:
        self.answer(req, resp, lambda principal: signals.get_fact(self.database, principal, signal_id))


class NamespaceSignals(Resource):
    @operation(
        "Send a fact by its business key (B1-B3): routed to the one wait for it, parked until one opens, "
        "or refused as ambiguous; 201 with the frozen receipt and its route",
        scopes=("workflows:signal",),
        not_found=Code.NOT_FOUND,
        request="route_signal",
        response="routed_signal_receipt",
        statuses=(201, 409, 422, 429),
        headers=(idempotency_header("namespace"),),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        answer_receipt(resp, lambda: self._route(req))

    def _route(self, req: falcon.Request) -> signals.Receipt:
        principal = req.context.principal
        request = route_request(_idempotency_key(req), read_json(req, "route_signal", self.body_limit))
        take_quota(self.database, principal)
        return routing.route_signal(self.database, principal, request)

    @operation(
        "List the namespace's facts that belong to no instance (B6): parked, expired unrouted, refused; newest first",
        description=(
            "Facts sent by their business key that no wait has taken: PARKED (a wait that opens in time"
            " takes it), EXPIRED (EXPIRED_UNROUTED) or REJECTED (AMBIGUOUS_CORRELATION, or"
            " SIGNAL_LIMIT_REACHED). A routed fact is read with its instance's signals. Readable by any"
            " credential of the namespace with `workflows:read`."
        ),
        scopes=("workflows:read",),
        not_found=Code.NOT_FOUND,
        response="signal_page",
        query=(
            ("status", f"one of {', '.join(signals.UNROUTED_STATUSES)}"),
            ("name", "the contract's signal name"),
            ("correlation_key", "the exact correlation key"),
            ("after", "the next_after of the previous page (absent or 0: start at the newest)"),
            ("limit", f"page size 1..{PAGE_MAX} (default {PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        principal = req.context.principal
        status = query_text(
            req, "status", signals.UNROUTED_STATUSES.__contains__, f"one of {', '.join(signals.UNROUTED_STATUSES)}"
        )
        name = query_text(req, "name", SIGNAL_NAME.fullmatch, "1-128 visible ASCII characters, as a contract's name")
        correlation = query_key(req, "correlation_key", CORRELATION_KEY_MAX_BYTES)
        after = query_int(req, "after", 0, 0, 2**63 - 1) or 2**63 - 1  # 0: from the newest, as the workflow list
        limit = query_int(req, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        rows = signals.list_facts(self.database, principal, status, name, correlation, after, limit + 1)
        send_signal_page(resp, rows, limit, None)
