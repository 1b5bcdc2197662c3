"""Send, read and list signals (S1.1-S1.12)."""

from __future__ import annotations

import re

import falcon

from weave import metrics
from weave.db import Unavailable
from weave.errors import Code, WeaveError
from weave.http import (
    Resource,
    bounded_value_text,
    operation,
    query_int,
    query_text,
    read_json,
    send_json,
)
from weave.rules import signals as rules
from weave.sql import signals
from weave.views import signal_view

IDEMPOTENCY_KEY = re.compile(r"^[\x20-\x7e]{1,128}$")
CORRELATION_KEY_MAX_BYTES = 512
STATUSES = ("PENDING", "CONSUMED", "REJECTED", "EXPIRED")
PAGE_DEFAULT = 100
PAGE_MAX = 1000
SEND_OUTCOMES = metrics.Children(metrics.SIGNAL_REQUESTS)
ACCEPTED = metrics.Children(metrics.SIGNALS_ACCEPTED)


def _idempotency_key(req: falcon.Request) -> str:
    key = req.get_header("Idempotency-Key")
    if key is None or not IDEMPOTENCY_KEY.match(key):
        raise WeaveError(
            Code.VALIDATION_FAILED,
            "header Idempotency-Key is required: 1-128 printable ASCII characters",
            [{"pointer": "header:Idempotency-Key", "message": "1-128 printable ASCII characters"}],
        )
    return key


def signal_request(key: str, body: dict) -> signals.SignalRequest:
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
        request_digest=rules.request_digest(fields, payload),
    )


class WorkflowSignals(Resource):
    @operation(
        "Send a signal (201 with the frozen receipt; replays answer the same bytes)",
        scopes=("workflows:signal",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        request="signal",
        response="signal_receipt",
        statuses=(201, 409, 422, 429),
        headers=(
            (
                "Idempotency-Key",
                "1-128 printable ASCII; scoped to the workflow",
                {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
            ),
        ),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        try:
            receipt = self._send(req, workflow_id)
        except WeaveError as exc:
            SEND_OUTCOMES(exc.code.name).inc()
            raise
        except Unavailable:
            SEND_OUTCOMES(Code.UNAVAILABLE.name).inc()
            raise
        resp.status = 201
        resp.content_type = "application/json"
        resp.text = receipt.text
        if receipt.replayed:
            SEND_OUTCOMES("replayed").inc()
            resp.set_header("Idempotent-Replayed", "true")
        else:
            SEND_OUTCOMES("accepted").inc()
            ACCEPTED(receipt.status, receipt.disposition or "none").inc()

    def _send(self, req: falcon.Request, workflow_id: str) -> signals.Receipt:
        principal = req.context.principal
        key = _idempotency_key(req)
        request = signal_request(key, read_json(req, "signal", self.body_limit))
        if principal.signals_per_minute is not None:
            wait = signals.take_quota(self.database, principal.application_id, principal.signals_per_minute)
            if wait is not None:
                raise WeaveError(
                    Code.QUOTA_EXCEEDED,
                    f"the application's quota of {principal.signals_per_minute} signals per minute is used up",
                    headers={"Retry-After": str(wait)},
                )
        return signals.send_signal(self.database, principal, workflow_id, request)

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
        page = rows[:limit]
        send_json(
            resp,
            200,
            {
                "signals": [signal_view(row, workflow_id) for row in page],
                "next_after": str(page[-1]["id"]) if len(rows) > limit else None,
            },
        )


class WorkflowSignal(Resource):
    @operation(
        "Read a signal's current state",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="signal_state",
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str, signal_id: int
    ) -> None:
        principal = req.context.principal
        row = signals.get_signal(self.database, principal, workflow_id, signal_id)
        send_json(resp, 200, signal_view(row, workflow_id))
