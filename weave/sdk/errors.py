"""The SDK's exceptions: one class per problem code of the API (docs/rules.md#api), all `WeaveError`s.

Every error answer of Weave is `application/problem+json` with a stable `code`; the SDK raises
the class registered for that code (`IdempotencyConflict` for `IDEMPOTENCY_CONFLICT`, …) with
`code`, `status`, `detail` and `errors` (a list of `{"pointer", "message"}`) from the body, and
`retry_after` (seconds) from a `Retry-After` header. The 404 classes (`WorkflowNotFound`, …) are
subclasses of `NotFound`, so `except NotFound` catches any of them.

Two classes are not problem codes: `ConnectionFailed` (no answer was read: refused, reset,
timed out; whether the server acted is unknown unless the call is one the SDK retries) and
`InvalidResponse` (an answer that is not what the API sends, e.g. an HTML page of a proxy).
"""

from __future__ import annotations

import email.utils
import time
from typing import Any


class WeaveError(Exception):
    """An error answer of the API (or no answer: see `ConnectionFailed`). `request_id` is the
    X-Request-Id the call sent on each of its attempts (the server's log lines of the call carry
    it); None on an error not raised by a `Client` call."""

    code: str = "ERROR"
    request_id: str | None = None

    def __init__(
        self,
        code: str,
        status: int | None,
        detail: str,
        errors: list[dict] | None = None,
        *,
        title: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.title = title
        self.retry_after = retry_after
        self.document: dict | None = None  # the problem document the server answered, as it answered it

    @property
    def problem(self) -> dict:
        """The error as a problem+json document (RFC 9457): the server's own, every member kept,
        or, for an error without one (no answer, an answer that was not a problem), one made in the
        same shape, with the code Weave's clients know it by."""
        if self.document is not None:
            return self.document
        return {
            "type": f"urn:weave:problem:{self.code}",
            "title": self.title or self.code.replace("_", " ").capitalize(),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            "errors": self.errors,
        }


# ---- one class per code -------------------------------------------------------------------------


class Unauthenticated(WeaveError):
    """401: the token is missing, unknown, revoked or expired."""


class SignatureInvalid(Unauthenticated):
    """401 on an inbound webhook route (W2): the signature, the timestamp or the source did not
    verify (one answer for all three). A relay that forwards a provider's deliveries sees it."""


class Forbidden(WeaveError):
    """403: the credential lacks a scope or a queue grant, or its application is disabled."""


class NotFound(WeaveError):
    """404 `NOT_FOUND` (no such route or queue), and the base of every other 404."""


class WorkflowNotFound(NotFound):
    """404: no such workflow in this namespace (another namespace's look absent, never forbidden)."""


class SignalNotFound(NotFound):
    """404: no such signal on this workflow."""


class DefinitionNotFound(NotFound):
    """404: no such definition version."""


class TaskNotFound(NotFound):
    """404: no such task."""


class MethodNotAllowed(WeaveError):
    """405: the route exists but not with this method."""


class InvalidJson(WeaveError):
    """400: the body is not acceptable JSON (syntax, duplicate keys, NaN)."""


class BadRequest(WeaveError):
    """400: a malformed request the server could not read."""


class ValidationFailed(WeaveError):
    """422: the body or a parameter breaks the schema; `errors` point at what was wrong."""


class ContractMismatch(WeaveError):
    """422: a signal does not match its step's contract (name, payload version, payload schema)."""


class PayloadTooLarge(WeaveError):
    """413: the body (or a payload, input or result over 256 KiB serialised) is too large."""


class HeadersTooLarge(WeaveError):
    """431: the request line and headers are over the server's limit."""


class UnsupportedMediaType(WeaveError):
    """415: the body was not sent as application/json."""


class IdempotencyConflict(WeaveError):
    """409: this idempotency key was used on this workflow for a different signal."""


class ActivationNotFound(WeaveError):
    """409: the signal targets an activation sequence that does not exist yet."""


class SignalLimitReached(WeaveError):
    """409: the workflow holds its maximum of signals."""


class WorkflowExists(WeaveError):
    """409: a workflow with this id was started with a different request."""


class InvalidState(WeaveError):
    """409: the workflow's status does not allow this action."""


class TaskInFlight(WeaveError):
    """409: review refused while the step's task is still running."""


class LeaseLost(WeaveError):
    """409: the lease token is no longer the task's current lease (expired or already reported)."""


class QuotaExceeded(WeaveError):
    """429: the application's signal quota is used up; `retry_after` says how many seconds to wait."""


class Unavailable(WeaveError):
    """503: the server or its database is busy; `retry_after` says when to try again."""


class Internal(WeaveError):
    """500: a bug on the server (it has been logged there)."""


class Unimplemented(WeaveError):
    """501 `NOT_IMPLEMENTED`: the request uses an HTTP feature the server does not implement (a
    Transfer-Encoding). Not named `NotImplemented`: that would shadow Python's constant."""


class ConnectionFailed(WeaveError):
    """No answer was read (connection refused, reset or timed out). Not a problem code: `status`
    is None. For a call the SDK does not retry, whether the server acted is unknown."""


class InvalidResponse(WeaveError):
    """An answer the API never sends (not JSON, not a problem document, an unexpected status)."""


_CLASSES: dict[str, type[WeaveError]] = {
    "UNAUTHENTICATED": Unauthenticated,
    "SIGNATURE_INVALID": SignatureInvalid,
    "FORBIDDEN": Forbidden,
    "WORKFLOW_NOT_FOUND": WorkflowNotFound,
    "SIGNAL_NOT_FOUND": SignalNotFound,
    "DEFINITION_NOT_FOUND": DefinitionNotFound,
    "TASK_NOT_FOUND": TaskNotFound,
    "NOT_FOUND": NotFound,
    "METHOD_NOT_ALLOWED": MethodNotAllowed,
    "INVALID_JSON": InvalidJson,
    "BAD_REQUEST": BadRequest,
    "VALIDATION_FAILED": ValidationFailed,
    "CONTRACT_MISMATCH": ContractMismatch,
    "PAYLOAD_TOO_LARGE": PayloadTooLarge,
    "HEADERS_TOO_LARGE": HeadersTooLarge,
    "UNSUPPORTED_MEDIA_TYPE": UnsupportedMediaType,
    "IDEMPOTENCY_CONFLICT": IdempotencyConflict,
    "ACTIVATION_NOT_FOUND": ActivationNotFound,
    "SIGNAL_LIMIT_REACHED": SignalLimitReached,
    "WORKFLOW_EXISTS": WorkflowExists,
    "INVALID_STATE": InvalidState,
    "TASK_IN_FLIGHT": TaskInFlight,
    "LEASE_LOST": LeaseLost,
    "QUOTA_EXCEEDED": QuotaExceeded,
    "UNAVAILABLE": Unavailable,
    "INTERNAL": Internal,
    "NOT_IMPLEMENTED": Unimplemented,
}
for _code, _cls in _CLASSES.items():
    _cls.code = _code
ConnectionFailed.code = "CONNECTION_FAILED"
InvalidResponse.code = "INVALID_RESPONSE"
# Answers without a problem document (a proxy's page) still get the class their status implies.
_BY_STATUS: dict[int, type[WeaveError]] = {401: Unauthenticated, 403: Forbidden, 404: NotFound, 503: Unavailable}


def error_class(code: str) -> type[WeaveError]:
    """The class raised for a problem code (`WeaveError` itself for a code this SDK does not know)."""
    return _CLASSES.get(code, WeaveError)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header as seconds from now: delta-seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def from_answer(status: int, retry_after: str | None, body: Any) -> WeaveError:
    """The exception for an error answer; `body` is the parsed JSON (or None when it was not JSON)."""
    seconds = retry_after_seconds(retry_after)
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        errors = body.get("errors")
        error = error_class(body["code"])(
            body["code"],
            status,
            str(body.get("detail") or body.get("title") or ""),
            errors if isinstance(errors, list) else [],
            title=body.get("title"),
            retry_after=seconds,
        )
        error.document = body
        return error
    cls = _BY_STATUS.get(status, InvalidResponse)
    return cls(cls.code, status, f"HTTP {status} without a problem document", retry_after=seconds)
