"""The error codes of the HTTP API, their statuses, and the one problem+json handler.

Everything that refuses a request raises `WeaveError(Code.X, detail, errors=[...])`. Falcon's own
errors (unknown route, wrong method), database unavailability (503) and values the database
refused (422) are mapped here as well, and `weave.server` renders the errors waitress answers
before the application runs with `problem_text`, so that every error body has the same shape:
`{"type", "title", "status", "detail", "code", "errors": [{"pointer", "message"}]}`.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass
from typing import Sequence

import falcon

from weave import db

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


class Code(enum.Enum):
    UNAUTHENTICATED = (401, "Authentication required")
    SIGNATURE_INVALID = (401, "Signature invalid")  # W2: an inbound webhook's signature, source or timestamp
    FORBIDDEN = (403, "Forbidden")
    WORKFLOW_NOT_FOUND = (404, "Workflow not found")
    SIGNAL_NOT_FOUND = (404, "Signal not found")
    DEFINITION_NOT_FOUND = (404, "Definition not found")
    TASK_NOT_FOUND = (404, "Task not found")
    NOT_FOUND = (404, "Not found")
    METHOD_NOT_ALLOWED = (405, "Method not allowed")
    INVALID_JSON = (400, "Invalid JSON")
    BAD_REQUEST = (400, "Bad request")
    VALIDATION_FAILED = (422, "Validation failed")
    CONTRACT_MISMATCH = (422, "Signal does not match the step's contract")
    PAYLOAD_TOO_LARGE = (413, "Payload too large")
    HEADERS_TOO_LARGE = (431, "Request header fields too large")
    UNSUPPORTED_MEDIA_TYPE = (415, "Unsupported media type")
    IDEMPOTENCY_CONFLICT = (409, "Idempotency key reused with different content")
    ACTIVATION_NOT_FOUND = (409, "Activation not found")
    SIGNAL_LIMIT_REACHED = (409, "Signal limit reached")
    WORKFLOW_EXISTS = (409, "Workflow exists")
    INVALID_STATE = (409, "Invalid state")
    TASK_IN_FLIGHT = (409, "Task in flight")
    LEASE_LOST = (409, "Lease lost")
    QUOTA_EXCEEDED = (429, "Quota exceeded")
    UNAVAILABLE = (503, "Service unavailable")
    INTERNAL = (500, "Internal error")
    NOT_IMPLEMENTED = (501, "Not implemented")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def title(self) -> str:
        return self.value[1]


class WeaveError(Exception):
    def __init__(
        self, code: Code, detail: str, errors: list[dict] | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(f"{code.name}: {detail}")
        self.code = code
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}


def refusal(code: Code, problems: Sequence) -> WeaveError:
    """The error refusing a request for `problems` (at least one `weave.rules.problems.Problem`):
    each one's pointer and message in `errors`, the first one's as the detail."""
    errors = [{"pointer": p.pointer, "message": p.message} for p in problems]
    return WeaveError(code, f"{errors[0]['pointer']}: {errors[0]['message']}", errors)


def problem(code: Code, detail: str, errors: list[dict] | None = None) -> dict:
    return {
        "type": f"urn:weave:problem:{code.name}",
        "title": code.title,
        "status": code.status,
        "detail": detail,
        "code": code.name,
        "errors": errors or [],
    }


def problem_text(code: Code, detail: str, errors: list[dict] | None = None) -> str:
    """The problem+json body; also what `weave.server` writes for the errors waitress answers itself."""
    return json.dumps(problem(code, detail, errors), ensure_ascii=False)


@dataclass(frozen=True)
class Answer:
    """What answers an error: its HTTP status, its problem+json text and its headers."""

    status: int
    text: str
    headers: dict[str, str]


def answer(exc: Exception) -> Answer:
    """The answer to `exc`: the one mapping of errors to problem+json, for a request (`install`)
    and for each item of a batch (B8), so that an item's answer is the single request's, byte
    for byte. Weave errors, Falcon errors, database unavailability, values the database refused;
    anything else is an internal error (its caller logs it)."""
    if isinstance(exc, WeaveError):
        return Answer(exc.code.status, problem_text(exc.code, exc.detail, exc.errors), exc.headers)
    if isinstance(exc, falcon.HTTPError):
        code = _FALCON_STATUS_CODES.get(exc.status_code, Code.BAD_REQUEST)
        text = problem_text(code, exc.description or exc.title or code.title)
        return Answer(exc.status_code, text, dict(exc.headers or {}))
    if isinstance(exc, db.Unavailable):
        return Answer(
            Code.UNAVAILABLE.status, problem_text(Code.UNAVAILABLE, f"{exc.what}; retry shortly"), {"Retry-After": "1"}
        )
    if isinstance(exc, db.InvalidValue):
        # Input that got past the API's own checks: the client's error, but ours to tighten.
        detail = "a value of the request has characters or a length that its field does not allow"
        return Answer(Code.VALIDATION_FAILED.status, problem_text(Code.VALIDATION_FAILED, detail), {})
    return Answer(
        Code.INTERNAL.status, problem_text(Code.INTERNAL, "an internal error occurred; it has been logged"), {}
    )


def _respond(resp: falcon.Response, ex: Exception) -> None:
    answered = answer(ex)
    resp.status = answered.status
    resp.content_type = PROBLEM_JSON
    resp.text = answered.text
    for name, value in answered.headers.items():
        resp.set_header(name, value)


_FALCON_STATUS_CODES = {
    400: Code.BAD_REQUEST,
    401: Code.UNAUTHENTICATED,
    403: Code.FORBIDDEN,
    404: Code.NOT_FOUND,
    405: Code.METHOD_NOT_ALLOWED,
    413: Code.PAYLOAD_TOO_LARGE,
    415: Code.UNSUPPORTED_MEDIA_TYPE,
}


def install(app: falcon.App) -> None:
    """Register the handlers: Weave errors, Falcon errors, database unavailability, the rest."""

    def weave_error(req, resp, ex: WeaveError, params):
        _respond(resp, ex)

    def falcon_error(req, resp, ex: falcon.HTTPError, params):
        _respond(resp, ex)

    def unavailable(req, resp, ex: db.Unavailable, params):
        log.warning("503 for %s %s: %s", req.method, req.path, ex)
        _respond(resp, ex)

    def invalid_value(req, resp, ex: db.InvalidValue, params):
        log.warning("422 for %s %s: %s", req.method, req.path, ex)
        _respond(resp, ex)

    def unexpected(req, resp, ex: Exception, params):
        log.exception("unexpected error in %s %s", req.method, req.path)
        _respond(resp, ex)

    # Falcon picks the most specific registered class, so the order here does not matter.
    app.add_error_handler(Exception, unexpected)
    app.add_error_handler(falcon.HTTPError, falcon_error)
    app.add_error_handler(db.Unavailable, unavailable)
    app.add_error_handler(db.InvalidValue, invalid_value)
    app.add_error_handler(WeaveError, weave_error)
