"""What every resource shares: operation metadata, authorization, bounded exact-JSON bodies.

- `@operation(...)` marks a responder with what OpenAPI and authorization need (summary, scopes,
  not-found code, request and response schemas, statuses); `weave.openapi` reads these marks, so the document
  lists exactly what is served.
- `Authenticate` middleware is the one place that authorizes a request from that mark: it
  refuses an unmarked responder and ids in the path that break their character rules
  (`PATH_IDS`, 404), and for every responder not marked `public` it resolves the bearer token
  into `req.context.principal` and checks namespace (404) and scope (403) with `authorize`. A
  console page (`session=True`) is left to `weave.console`, which answers in HTML and runs the
  same checks from its session's credential.
- `RequestId` middleware gives every request an id, returned in `X-Request-Id` and carried by
  every log record of the request; `Observe` middleware records the HTTP metrics and writes the
  request's log line.
- `BodyCap` middleware refuses, on every route, a body whose Content-Length is over the cap
  (413) before anything reads it.
- `read_json(req, schema, limit)` reads at most the cap (413 beyond, for a body of undeclared
  length), then checks the media type (415), exact JSON (400) and the schema (422).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl

import falcon

from weave import auth, jsontext, logs, metrics, schemas
from weave.db import Database
from weave.errors import Code, WeaveError
from weave.sql import tenancy

log = logging.getLogger(__name__)
access_log = logging.getLogger("weave.access")

JSON = "application/json"
READING_METHODS = ("GET", "HEAD")  # every other operation of the API writes
VALUE_LIMIT_BYTES = 256 * 1024  # a workflow input, a task result, a signal payload (serialised)
MAX_REPORTED_NAMES = 20  # unknown query parameters named in one answer


@dataclass(frozen=True)
class Operation:
    summary: str
    description: str = ""  # more than the summary says, for the OpenAPI document
    scopes: tuple[str, ...] = ()  # any one of them grants the operation
    not_found: Code | None = None  # the answer to a credential of another namespace
    queue_grant: str | None = None  # the URL parameter naming a queue the credential needs a grant for
    request: str | None = None  # name of a schema in weave/schemas
    response: str | None = None  # the body of every success but 204: a $defs entry of weave/schemas/responses.json
    text: str | None = None  # instead of `response`: the media type of a body that is text, not JSON (/metrics)
    # What the responder itself answers: its successes and its own refusals. `weave.openapi` adds
    # what the middleware and `read_json` answer in front of it (401, 403, 404, 413, 415, 422, ...).
    statuses: tuple[int, ...] = (200,)
    public: bool = False
    session: bool = False  # a console page: authorized by `weave.console` from its session, with `authorize`
    query: tuple[tuple[str, str], ...] = field(default=())  # (name, description)
    headers: tuple[tuple[str, str, dict], ...] = field(default=())  # (name, description, JSON Schema)
    # A read the responder needs first, sent with the credential's in one round trip (issue 31):
    # `(req, params, token_sha256) -> (sql, args)`; its rows are `req.context.read_first`.
    read_first: Callable[[falcon.Request, dict, bytes], tuple[str, tuple]] | None = None

    def __post_init__(self) -> None:
        # Refused at import, not at the first request: without both, `Authenticate` could not decide.
        if not self.public and (not self.scopes or self.not_found is None):
            raise TypeError(f"operation {self.summary!r} is not public, so it needs scopes and not_found")


def operation(summary: str, **kwargs: Any) -> Callable:
    def mark(responder: Callable) -> Callable:
        responder.operation = Operation(summary, **kwargs)
        return responder

    return mark


@dataclass(frozen=True)
class PathId:
    """The character rule of an id that route paths carry, and the answer to one that breaks it."""

    rule: re.Pattern
    description: str
    not_found: Code | None  # None: the operation's own not-found code
    convert: Callable[[str], Any] = str


_NAME_64 = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ROW_ID = re.compile(r"[0-9]{1,19}")  # the decimal string of a BIGINT UNSIGNED key

# Every `{field}` of a route has a rule here (tests/integration/test_path_ids.py walks the router), from
# docs/decisions.md "Identifiers and names". An id that breaks its rule names nothing that can
# exist, so it is answered like an unknown route, before any SQL sees it: the id columns are ASCII
# or binary, and the database refuses to compare them with other characters.
PATH_IDS = {
    "namespace": PathId(_NAME_64, "1-64 of A-Z a-z 0-9 _ . -", None),
    "queue": PathId(_NAME_64, "1-64 of A-Z a-z 0-9 _ . -", None),
    "name": PathId(re.compile(r"[A-Za-z0-9_.-]{1,128}"), "1-128 of A-Z a-z 0-9 _ . -", Code.DEFINITION_NOT_FOUND),
    "workflow_id": PathId(
        re.compile(r"[\x21-\x2e\x30-\x7e]{1,128}"), "1-128 visible ASCII characters except /", Code.WORKFLOW_NOT_FOUND
    ),
    "source": PathId(_NAME_64, "1-64 of A-Z a-z 0-9 _ . -", None),  # an inbound source (W1)
    "subscription": PathId(_NAME_64, "1-64 of A-Z a-z 0-9 _ . -", None),  # a notification subscription (N1)
    "signal_id": PathId(_ROW_ID, "a decimal id", Code.SIGNAL_NOT_FOUND, int),
    "task_id": PathId(_ROW_ID, "a decimal id", Code.TASK_NOT_FOUND, int),
}


def check_path_ids(params: dict, not_found: Code) -> None:
    """Refuse a request whose path names an id that breaks its rule (404); row ids become ints.

    Fields that Falcon converts itself (`{version:int(min=1)}`) arrive converted and are left alone.
    """
    for name, raw in params.items():
        if not isinstance(raw, str):
            continue
        path_id = PATH_IDS[name]
        if not path_id.rule.fullmatch(raw):
            # The id is not echoed: it may hold anything, control characters included.
            raise WeaveError(path_id.not_found or not_found, f"no such {name}: it must be {path_id.description}")
        params[name] = path_id.convert(raw)


class Resource:
    """A Falcon resource's collaborators: the database and the request body cap."""

    def __init__(self, database: Database, body_limit: int = 0):
        self.database = database
        self.body_limit = body_limit


class RequestId:
    """Falcon middleware: every response carries `X-Request-Id` (docs/rules.md#operating), the client's when it
    sent a usable one (so a caller can follow its own id through logs), else a new random one.
    First in the stack, so that errors raised by the other middleware carry it too."""

    HEADER = "X-Request-Id"
    USABLE = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # never anything a log or a header could be forged with

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        sent = req.get_header(self.HEADER)
        req.context.request_id = sent if sent and self.USABLE.fullmatch(sent) else secrets.token_hex(16)
        req.context.request_id_token = logs.REQUEST_ID.set(req.context.request_id)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource, req_succeeded: bool) -> None:
        resp.set_header(self.HEADER, req.context.request_id)
        logs.REQUEST_ID.reset(req.context.request_id_token)  # the thread's next request gets its own


class Observe:
    """Falcon middleware: the HTTP metrics and one log line per request (`weave.access`).

    Second in the stack, after `RequestId`: it times everything the application does, refusals by
    the other middleware included. The line holds the method, the route template (never the path:
    ids in it are the clients'), the status, the duration, the namespace and the actor, plus the
    request id (`weave.logs`); never a header, so never a token, and never a body."""

    def __init__(self):
        self.requests = metrics.Children(metrics.HTTP_REQUESTS)
        self.durations = metrics.Children(metrics.HTTP_DURATION)

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource, params) -> None:
        req.context.namespace = params.get("namespace")  # checked before it is logged (below)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource, req_succeeded: bool) -> None:
        seconds = time.perf_counter() - req.context.started
        route = req.uri_template or metrics.UNROUTED
        method = metrics.method_label(req.method)
        status = resp.status_code
        self.requests(route, method, status).inc()
        self.durations(route, method).observe(seconds)
        principal = req.context.get("principal")
        if principal is not None:
            namespace, actor = principal.namespace, principal.actor
        else:  # a refused request: the namespace it named, if that can be a namespace at all
            namespace, actor = req.context.get("namespace"), None
            if namespace is not None and not PATH_IDS["namespace"].rule.fullmatch(namespace):
                namespace = None
        access_log.info(
            "request",
            extra={
                "fields": {
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "namespace": namespace,
                    "actor": actor,
                }
            },
        )


class BodyCap:
    """Falcon middleware: a body over the cap is refused from its declared length (413), on every
    route (those that take no body and unknown ones too), before routing, authentication or any
    read. waitress has read the body already (its own limit is set above this cap, see
    `weave.server`), so the connection stays usable after this answer."""

    def __init__(self, limit: int):
        self.limit = limit

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        length = req.content_length  # Falcon answers 400 for a malformed or negative Content-Length
        if length is not None and length > self.limit:
            raise WeaveError(Code.PAYLOAD_TOO_LARGE, f"the body has {length} bytes; the limit is {self.limit}")


class Authenticate:
    """Falcon middleware, the one place where requests are authorized, from the `@operation` marks.

    A responder without a mark is never run. Every id in the path must keep its rule (`PATH_IDS`),
    else the request is answered like an unknown route (404) before any token or row is looked at.
    A public responder then runs without a token. Any other runs only with a current bearer token
    (else 401) whose namespace is the `{namespace}` of the URL (else the operation's `not_found`
    code: another tenant's objects look absent, never forbidden) and which holds one of the
    operation's scopes (else 403), checked in this order, plus the grant of the queue the URL names
    where the operation says so (403); it then finds the principal in `req.context.principal`,
    and refuses query parameters the operation does not declare (422). Grants that depend on
    stored objects (an instance's queues, a task's queue) are checked where those objects are read.
    """

    def __init__(self, database: Database):
        self.database = database

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource, params) -> None:
        if resource is None:
            return  # no route: Falcon answers 404 itself
        # Weave mounts no route with a suffix (`add_route(..., suffix=...)`), so this is the very
        # responder Falcon is about to call.
        responder = getattr(resource, f"on_{req.method.lower()}", None)
        if responder is None:
            return  # Falcon's own responder (405, OPTIONS): none of our code runs
        meta = getattr(responder, "operation", None)
        if meta is None:
            # Undeclared means not part of the API: the OpenAPI document, built from the same marks,
            # does not list it. So it is answered like an unknown route, before any token is looked
            # at; 403 would say that some other credential could be let in, and none can.
            log.error(
                "refused %s %s: %s.%s has no @operation",
                req.method,
                req.path,
                type(resource).__name__,
                responder.__name__,
            )
            raise WeaveError(Code.NOT_FOUND, f"no operation {req.method} {req.path}")
        if meta.session:
            return  # weave.console answers in HTML, so it runs these same checks itself
        check_path_ids(params, meta.not_found or Code.NOT_FOUND)
        if meta.public:
            return
        token_sha256 = auth.token_hash(auth.bearer_token(req.get_header("Authorization")))
        if meta.read_first is None:
            principal = tenancy.authenticate(self.database, token_sha256)
        else:
            read = meta.read_first(req, params, token_sha256)
            principal, (req.context.read_first,) = tenancy.authenticate_reading(self.database, token_sha256, read)
        if principal is None:
            raise auth.unauthenticated(auth.NOT_CURRENT)
        authorize(principal, meta, params, req.method)
        req.context.principal = principal
        req.context.token_sha256 = token_sha256  # a claim that waited reads the credential again
        check_query_names(req, meta)


def check_query_names(req: falcon.Request, meta: Operation) -> None:
    """Refuse query parameters the operation does not declare (422): a misspelt filter
    (`?stauts=NEEDS_REVIEW`) would otherwise be answered as if there were no filter at all, and
    an operator acting on that list would act on every workflow. Refuse one given twice too
    (422): every parameter takes one value, and reading one of two would drop a filter unsaid."""
    unknown = sorted(set(req.params) - {name for name, _ in meta.query})[:MAX_REPORTED_NAMES]
    if unknown:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"unknown query parameter {unknown[0]!r}; this operation takes "
            + (", ".join(name for name, _ in meta.query) or "none"),
            [{"pointer": f"?{name}", "message": "not a parameter of this operation"} for name in unknown],
        )
    repeated = sorted(name for name, value in req.params.items() if isinstance(value, list))[:MAX_REPORTED_NAMES]
    if repeated:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"query parameter {repeated[0]!r} is given more than once; it takes one value",
            [{"pointer": f"?{name}", "message": "given more than once"} for name in repeated],
        )


def authorize(principal: auth.Principal, meta: Operation, params: dict, method: str) -> None:
    """Whether a current credential may run the operation, checked in this order: its namespace is
    the URL's (else the operation's not-found code), it holds one of the operation's scopes (403),
    the queue grant the URL names where the operation says so (403), and a disabled application's
    credential only reads (403). For API requests and console pages alike."""
    # A route without {namespace} names none, so it is nobody's: not found for every credential.
    principal.require(params.get("namespace"), meta.not_found, *meta.scopes)
    if meta.queue_grant:
        principal.require_queues([params[meta.queue_grant]])
    if method not in READING_METHODS:
        principal.require_writable()


def read_json(req: falcon.Request, schema: str, limit: int) -> Any:
    """The request body parsed exactly and validated against `weave/schemas/<schema>.json`.

    A declared length over the cap was refused by `BodyCap` already; the bounded read covers a
    body whose length a WSGI server does not declare."""
    raw = read_body(req, JSON, limit)
    if not raw.strip():
        raise WeaveError(Code.INVALID_JSON, "the body is empty; a JSON document is required")
    try:
        value = jsontext.loads(raw)
    except jsontext.NumberTooLong as exc:
        raise WeaveError(Code.VALIDATION_FAILED, f"the body holds {exc}") from None
    except jsontext.JsonRejected as exc:
        raise WeaveError(Code.INVALID_JSON, f"the body is not acceptable JSON: {exc}") from None
    schemas.validate(schema, value)
    return value


def read_body(req: falcon.Request, media_type: str, limit: int) -> bytes:
    """The body, of the one media type the responder takes (else 415), read up to the cap (413 beyond)."""
    sent = (req.content_type or "").split(";", 1)[0].strip().lower()
    if sent != media_type:
        raise WeaveError(
            Code.UNSUPPORTED_MEDIA_TYPE, f"send Content-Type: {media_type} (got {req.content_type or 'none'})"
        )
    return read_capped(req, limit)


def read_capped(req: falcon.Request, limit: int) -> bytes:
    """The body as sent, whatever its media type, read up to the cap (413 beyond: a body of
    undeclared length; a declared one over the cap was refused by `BodyCap` before any read)."""
    raw = req.bounded_stream.read(limit + 1)
    if len(raw) > limit:
        raise WeaveError(Code.PAYLOAD_TOO_LARGE, f"the body is over the limit of {limit} bytes")
    return raw


def bounded_value_text(value: Any, pointer: str) -> str:
    """The compact text of a client-supplied JSON value, refused above 256 KiB (413)."""
    text = jsontext.compact(value)
    size = len(text.encode("utf-8"))
    if size > VALUE_LIMIT_BYTES:
        raise WeaveError(
            Code.PAYLOAD_TOO_LARGE,
            f"{pointer}: serialises to {size} bytes; the limit is {VALUE_LIMIT_BYTES}",
            [{"pointer": pointer, "message": f"larger than {VALUE_LIMIT_BYTES} bytes serialised"}],
        )
    return text


def send_json(resp: falcon.Response, status: int, body: Any) -> None:
    resp.status = status
    resp.content_type = JSON
    resp.text = jsontext.compact(body)


def query_int(req: falcon.Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 20) or not minimum <= int(raw) <= maximum:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"query parameter {name!r} must be an integer {minimum}..{maximum}",
            [{"pointer": f"?{name}", "message": f"must be an integer {minimum}..{maximum}"}],
        )
    return int(raw)


def query_key(req: falcon.Request, name: str, max_bytes: int) -> bytes | None:
    """A correlation key of the query, as its exact UTF-8 bytes (None when absent or empty); 422
    when it is longer than `max_bytes` or not UTF-8. Read from the raw query string: Falcon's
    decoding would replace bytes that are not UTF-8 with U+FFFD, a key no one sent."""
    raw = dict(parse_qsl(req.query_string, keep_blank_values=True, errors="surrogateescape"))
    exact = raw.get(name, "")

    def fits(_: str) -> bool:
        try:
            return len(exact.encode("utf-8")) <= max_bytes
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text, so no key
            return False

    return exact.encode("utf-8") if query_text(req, name, fits, f"1-{max_bytes} bytes of UTF-8") is not None else None


def query_text(req: falcon.Request, name: str, accepts: Callable[[str], Any], rule: str) -> str | None:
    """A text query parameter `accepts` says yes to, None when absent or empty; else 422 saying `rule`."""
    raw = req.get_param(name)
    if raw is None or raw == "":
        return None
    if not accepts(raw):
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"query parameter {name!r} must be {rule}",
            [{"pointer": f"?{name}", "message": f"must be {rule}"}],
        )
    return raw
