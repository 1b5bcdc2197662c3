"""`Client`: one method per endpoint of the Weave HTTP API v1 (docs/rules.md#api), standard library only.

Every call has a timeout (`timeout` seconds per socket operation; a claim adds its long-poll
`wait_seconds`). Answers are read as exact JSON and returned as the dataclasses of
`weave.sdk.models`; error answers raise the `weave.sdk.errors` class of their problem code.

Retries (bounded: at most `retries` more attempts, with jittered exponential backoff, or the
server's `Retry-After` when it sends one) happen only where repeating a request cannot do
something twice:

- a connection that could not be opened, or a request that could not be written whole: the
  server cannot have acted on it (it waits for all of a body's Content-Length), so every call is
  retried;
- after a connection error (reset, timeout, closed before the answer) or a 503, only calls whose
  repetition is harmless: reads (GET), `send_signal` (one `Idempotency-Key` per call, sent again
  unchanged: the server answers a repeat with the first receipt), `send_signals` (likewise, one
  key per item), `start_workflow` (the
  `workflow_id`, generated here when not given, makes a repeat answer the same instance) and
  `heartbeat` (extending a lease twice is extending it);
- after a 429 (`QUOTA_EXCEEDED`), `send_signal`, after `Retry-After`.

Never repeated blindly: `publish_definition` (a repeat after someone else published would add a
version), `pause`/`resume`/`cancel`/`review` (a repeat answers `INVALID_STATE`), `claim` (a lost
answer would hold a second task until its lease expires) and `complete` (the lease token lets at
most one report in, but a repeat of one that landed answers `LEASE_LOST`: `Worker` repeats it
knowing that).

Connections are kept alive (issue 31): each thread that calls a Client gets one connection of its
own, opened at its first call and reused by its next ones, so that a call costs no TCP (or TLS)
handshake and no new server channel. A kept connection is given up and a new one opened when it
cannot carry a request: the server closed it (it closes idle ones after its idle timeout, and all
of them when it stops), it has been idle KEEP_IDLE_SECONDS, it failed, or an answer said
`Connection: close`. Re-opening never repeats a request the rules above would not: see
`_Connections` and docs/decisions.md "Kept-alive connections in the SDK".

Every call sends an `X-Request-Id`, the same on each of its retries, so that the server's log
lines of all its attempts carry one id; an error raised by a call holds it (`request_id`). A
caller with an id of its own (a webhook's delivery id) sends it with `request_id(...)`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import http.client
import platform
import random
import re
import secrets
import select
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from weave.sdk import errors, models
from weave.sdk.jsonio import ABSENT, dumps, loads

USER_AGENT = f"weave-sdk/0.1 python/{platform.python_version()}"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 10.0
# A Retry-After longer than this is not waited for: the error is raised with its `retry_after`.
RETRY_AFTER_MAX_SECONDS = 120.0
PAGE_SIZE = 100
RETRIED_STATUSES = frozenset({503})
# A kept connection idle longer than this is closed rather than reused. The server closes its idle
# connections after its idle timeout (Weave's default is 10 s, looked for every second): a request
# written just as the server closes its connection is lost unanswered, and a call that is not
# retried could not tell that from a server that acted and died. Half the default keeps clear of
# that moment; a server set shorter is caught by the check before each reuse (`_Connections.take`).
KEEP_IDLE_SECONDS = 5.0
# What the server keeps of a client's X-Request-Id (`weave.http.RequestId.USABLE`; a test compares
# the two): anything else it replaces with an id of its own.
REQUEST_ID_RULE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("weave_sdk_request_id", default=None)

T = TypeVar("T")


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: Any  # parsed JSON, or None for an empty body


def _read(cls: type[T], answer: Answer) -> T:
    try:
        return models.from_json(cls, answer.body)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidResponse("INVALID_RESPONSE", answer.status, f"not a {cls.__name__}: {exc}") from None


def _new_key() -> str:
    return f"sdk-{uuid.uuid4().hex}"


def _item_result(result: dict, receipt_type: type) -> models.Receipt | errors.WeaveError:
    """One result of a signal batch (B8) as the single call would have returned or raised it."""
    headers = result.get("headers") or {}
    if result["status"] >= 400:
        return errors.from_answer(result["status"], headers.get("Retry-After"), result["body"])
    receipt = _read(receipt_type, Answer(result["status"], headers, result["body"]))
    receipt.replayed = headers.get("Idempotent-Replayed") == "true"
    return receipt


@contextlib.contextmanager
def request_id(value: str) -> Iterator[str]:
    """Send `value` as the X-Request-Id of every call made in this block (in this thread, or this
    asyncio task), instead of a new random id per call: a relay passes on the id of the delivery
    it is handling, and finds it in Weave's log lines. 1-128 of A-Z a-z 0-9 . _ : - (what the
    server keeps); anything else raises ValueError."""
    if not isinstance(value, str) or not REQUEST_ID_RULE.fullmatch(value):
        raise ValueError(f"a request id is 1-128 of A-Z a-z 0-9 . _ : -, not {value!r}")
    token = _REQUEST_ID.set(value)
    try:
        yield value
    finally:
        _REQUEST_ID.reset(token)


class _NotSent(Exception):
    """The request never reached the server whole, so the server cannot have acted on it: the
    connection could not be opened, or writing the request failed (a body cut short is never
    served: the server waits for all of its Content-Length). `stale`: it was a kept connection."""

    def __init__(self, stale: bool):
        super().__init__()
        self.stale = stale


class _Dropped(Exception):
    """A kept connection ended (closed or reset) after the request was written and before an
    answer arrived: most likely the server had just closed it as idle, but a server that acted and
    then died looks the same."""


def _readable(sock: socket.socket) -> bool:
    """Whether a kept connection has something to read between two calls: the server closed it
    (end of stream or a reset) or sent what nothing asked for. Either way it cannot carry a
    request. poll() where there is one (select() refuses descriptors above 1023)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class _Kept:
    """A thread's kept connection."""

    __slots__ = ("http", "thread", "used_at", "answered")

    def __init__(self, connection: http.client.HTTPConnection):
        self.http = connection
        self.thread = threading.current_thread()
        self.used_at = time.monotonic()
        self.answered = False  # it has carried an answer: the next request on it is on a reused connection


class _Connections:
    """One kept connection per thread (`threading.local`: a thread finds its own without a lock,
    and two threads never share one). Every one is also in `_all`, so that `close()` reaches the
    connections of every thread, and the connection of a thread that has ended is closed when the
    next one is opened instead of staying open until the server's idle timeout.

    Re-opening and retries. A kept connection is checked before it is reused: one idle longer than
    KEEP_IDLE_SECONDS, or one with something to read (the server closed it), is closed and a new
    one opened; nothing was written to it, so this is no retry. What remains is the moment between
    that check and the server reading the request: a server that closes its connection then
    (waitress closing an idle channel) never serves the request, but the SDK cannot tell that from
    a server that served it and died before answering. So, after a kept connection failed:
    - writing the request failed: nothing whole reached the server; every call is sent again, once
      at once on a new connection (then as after a connection that could not be opened);
    - the connection ended before the answer (`_Dropped`): a call the rules repeat anyway (reads,
      signals with their key, starts with their id, heartbeats) is sent again at once, once, on a
      new connection, without backoff and without counting against `retries`; any other call
      raises ConnectionFailed as it would on a new connection: the SDK does not know whether it acted.
    Go's net/http transport and RFC 9110 section 9.2.2 draw the same line."""

    def __init__(self, open_connection: Callable[..., http.client.HTTPConnection]):
        self._open_connection = open_connection
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: set[_Kept] = set()

    def take(self, timeout: float) -> _Kept:
        """This thread's connection, ready for a request with this timeout; a new one if need be."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is not None:
            sock = kept.http.sock
            if sock is not None and time.monotonic() - kept.used_at <= KEEP_IDLE_SECONDS and not _readable(sock):
                sock.settimeout(timeout)
                return kept
            self.discard(kept)
        connection = self._open_connection(timeout=timeout)
        try:
            connection.connect()
        except OSError as exc:
            connection.close()
            raise _NotSent(stale=False) from exc
        kept = _Kept(connection)
        with self._lock:
            ended = {k for k in self._all if not k.thread.is_alive()}
            self._all -= ended
            self._all.add(kept)
        for other in ended:
            other.http.close()
        self._local.kept = kept
        return kept

    def discard(self, kept: _Kept) -> None:
        with self._lock:
            self._all.discard(kept)
        if getattr(self._local, "kept", None) is kept:
            self._local.kept = None
        kept.http.close()

    def close(self) -> None:
        """Close every thread's connection (a call made afterwards opens a new one)."""
        with self._lock:
            kept, self._all = self._all, set()
        for one in kept:
            one.http.close()


class Client:
    """A Weave API client for one namespace, authenticated with one bearer token.

    `Client("http://127.0.0.1:8080", token, "demo")`; `base_url` may carry a path prefix
    (`https://gateway.example/weave`). Safe to share between threads: each thread calls over a
    kept-alive connection of its own. `close()` (or leaving `with Client(...) as client:`) closes
    them all; a call made afterwards opens a new one.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        namespace: str,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        retries: int = DEFAULT_RETRIES,
        ssl_context: ssl.SSLContext | None = None,
    ):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.base_url = base_url
        self.namespace = namespace
        self.timeout = timeout
        self.retries = retries
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, application/problem+json",
            "User-Agent": USER_AGENT,
        }
        # A factory that holds nothing of the Client: a Client dropped without close() is freed at
        # once, with its connections, instead of waiting in a reference cycle for the collector.
        if parts.scheme == "https":
            opener = functools.partial(http.client.HTTPSConnection, self._host, self._port, context=ssl_context)
        else:
            opener = functools.partial(http.client.HTTPConnection, self._host, self._port)
        self._connections = _Connections(opener)
        self._sleep = time.sleep  # a seam for tests

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, namespace={self.namespace!r})"  # never the token

    def close(self) -> None:
        """Close the kept-alive connections of every thread. Call it when no call is running: a
        call in flight on a closed connection fails (and is retried as its rules allow)."""
        self._connections.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- definitions ----------------------------------------------------------------------------

    def publish_definition(self, document: dict) -> models.Definition:
        """Publish a definition (D1): a new version (`created`), or the latest one when `document`
        is identical to it. Not retried after a lost answer: read the versions instead."""
        answer = self._call("POST", self._ns("definitions"), body=document)
        definition = _read(models.Definition, answer)
        definition.created = answer.status == 201
        return definition

    def list_definitions(self, name: str | None = None, *, page_size: int = PAGE_SIZE) -> Iterator[models.Definition]:
        """The newest version of each definition name, in name order, page by page (D5); of `name`
        only when given (none when it was never published). Items have no `document`."""
        for item in self._pages(self._ns("definitions"), "definitions", {"name": name}, None, page_size):
            yield models.from_json(models.Definition, item)

    def get_definition(self, name: str, version: int) -> models.Definition:
        answer = self._call("GET", self._ns("definitions", name, "versions", str(version)), retry=True)
        return _read(models.Definition, answer)

    # ---- workflows ------------------------------------------------------------------------------

    def start_workflow(
        self, definition: str, version: int, input: Any, deadline_seconds: int, workflow_id: str | None = None
    ) -> models.Workflow:
        """Start a workflow (I1). Without `workflow_id` one is generated here (`wf_` + 32 hex
        digits), so that a retry after a lost answer finds the same instance instead of starting
        a second one; the same request again answers the existing workflow."""
        body = {
            "definition": definition,
            "version": version,
            "input": input,
            "deadline_seconds": deadline_seconds,
            "workflow_id": workflow_id if workflow_id is not None else "wf_" + secrets.token_hex(16),
        }
        answer = self._call("POST", self._ns("workflows"), body=body, retry=True)
        return _read(models.Workflow, answer)

    def get_workflow(self, workflow_id: str) -> models.Workflow:
        answer = self._call("GET", self._ns("workflows", workflow_id), retry=True)
        return _read(models.Workflow, answer)

    def list_workflows(
        self,
        status: str | None = None,
        definition: str | None = None,
        *,
        correlation_key: str | None = None,
        workflow_id_prefix: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[models.Workflow]:
        """The namespace's workflows (optionally of one status or definition; with a wait or a
        signal of exactly `correlation_key`; whose id starts with `workflow_id_prefix`), page by
        page, in the server's order (newest first). Items are summaries: status, gate, review
        reason and times, without `input` and `steps` (read those with `get_workflow`)."""
        query = {
            "status": status,
            "definition": definition,
            "correlation_key": correlation_key,
            "workflow_id_prefix": workflow_id_prefix,
        }
        for item in self._pages(self._ns("workflows"), "workflows", query, None, page_size):
            yield models.from_json(models.Workflow, item)

    def events(
        self, workflow_id: str, *, after: int | None = None, page_size: int = PAGE_SIZE
    ) -> Iterator[models.Event]:
        """A workflow's history, oldest first, fetched page by page as the iterator is consumed."""
        for item in self._pages(self._ns("workflows", workflow_id, "events"), "events", {}, after, page_size):
            yield models.from_json(models.Event, item)

    def export_workflow(self, workflow_id: str) -> dict[str, Any]:
        """Everything Weave holds of a workflow, exact as stored (L2, docs/export.md): the document
        `{"format", "exported_at", "workflow", "activations", "waits", "signals", "tasks", "events",
        "audit", "checkpoints", "notifications"}` read exactly (numbers keep their digits, members
        their order), so `dumps(client.export_workflow(id))` is the server's answer byte for byte."""
        answer = self._call("GET", self._ns("workflows", workflow_id, "export"), retry=True)
        return answer.body

    def pause(self, workflow_id: str, reason: str) -> models.Workflow:
        """Pause a RUNNING workflow (R1). Not retried: a repeat would answer INVALID_STATE."""
        return self._control(workflow_id, "pause", reason)

    def resume(self, workflow_id: str, reason: str) -> models.Workflow:
        """Resume a PAUSED workflow (R1). Not retried: a repeat would answer INVALID_STATE."""
        return self._control(workflow_id, "resume", reason)

    def cancel(self, workflow_id: str, reason: str) -> models.Workflow:
        """Cancel a workflow (R1). Not retried: a repeat would answer INVALID_STATE."""
        return self._control(workflow_id, "cancel", reason)

    def _control(self, workflow_id: str, action: str, reason: str) -> models.Workflow:
        answer = self._call("POST", self._ns("workflows", workflow_id, action), body={"reason": reason})
        return _read(models.Workflow, answer)

    def review(
        self,
        workflow_id: str,
        action: str,
        reason: str,
        step_key: str | None = None,
        result: Any = ABSENT,
        deadline_seconds: int | None = None,
    ) -> models.Workflow:
        """Repair a NEEDS_REVIEW workflow (R2): `action` is retry_step, complete_step (with
        `result`, which may be None for JSON null), fail or cancel; or give a workflow that has not
        ended a new total deadline, `deadline_seconds` from now (extend_deadline, R4). Not retried:
        a repeat of retry_step would start yet another activation."""
        body: dict[str, Any] = {"action": action}
        if step_key is not None:
            body["step_key"] = step_key
        if result is not ABSENT:
            body["result"] = result
        if deadline_seconds is not None:
            body["deadline_seconds"] = deadline_seconds
        body["reason"] = reason
        answer = self._call("POST", self._ns("workflows", workflow_id, "review"), body=body)
        return _read(models.Workflow, answer)

    # ---- signals --------------------------------------------------------------------------------

    def send_signal(
        self,
        workflow_id: str,
        *,
        name: str,
        payload_version: str,
        target_step_key: str,
        target_activation_sequence: int,
        correlation_key: str,
        reason: str,
        payload: Any = ABSENT,
        evidence_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Receipt:
        """Send a signal (S1) and return its receipt.

        `payload` left out sends no payload; `payload=None` sends JSON null (they differ). One
        idempotency key is used for the whole call: the caller's, or a new random one. After a
        connection error, a 503 or a 429 the same request is sent again with the same key
        (bounded, jittered, after `Retry-After` when given): the server stores the signal once and
        answers a repeat with the first receipt (`receipt.replayed`). Pass your own key (an event
        id of the source system) to make retries across processes safe as well.
        """
        body: dict[str, Any] = {
            "name": name,
            "payload_version": payload_version,
            "target_step_key": target_step_key,
            "target_activation_sequence": target_activation_sequence,
            "correlation_key": correlation_key,
        }
        return self._post_signal(
            self._ns("workflows", workflow_id, "signals"),
            models.Receipt,
            body,
            reason=reason,
            payload=payload,
            evidence_ref=evidence_ref,
            idempotency_key=idempotency_key,
        )

    def route_signal(
        self,
        *,
        name: str,
        payload_version: str,
        correlation_key: str,
        reason: str,
        payload: Any = ABSENT,
        evidence_ref: str | None = None,
        idempotency_key: str | None = None,
        park_seconds: int | None = None,
    ) -> models.RoutedReceipt:
        """Send a fact by its business key (B1-B3): no workflow, step or activation. Weave
        routes it to the one wait of this contract and correlation key (`receipt.route` ROUTED,
        with `workflow_id`), parks it until such a wait opens, at most `park_seconds` (PARKED,
        with `parked_until`), or refuses it when several wait (AMBIGUOUS). Payload, key and
        retries as `send_signal`; the idempotency key is scoped to the namespace."""
        body: dict[str, Any] = {"name": name, "payload_version": payload_version, "correlation_key": correlation_key}
        if park_seconds is not None:
            body["park_seconds"] = park_seconds
        return self._post_signal(
            self._ns("signals"),
            models.RoutedReceipt,
            body,
            reason=reason,
            payload=payload,
            evidence_ref=evidence_ref,
            idempotency_key=idempotency_key,
        )

    def _post_signal(
        self,
        path: str,
        receipt_type: type,
        body: dict[str, Any],
        *,
        reason: str,
        payload: Any,
        evidence_ref: str | None,
        idempotency_key: str | None,
    ):
        """POST a signal body with one idempotency key for every retry; its receipt."""
        if payload is not ABSENT:
            body["payload"] = payload
        body["reason"] = reason
        if evidence_ref is not None:
            body["evidence_ref"] = evidence_ref
        key = idempotency_key if idempotency_key is not None else _new_key()
        answer = self._call("POST", path, body=body, headers={"Idempotency-Key": key}, retry=True, retry_quota=True)
        receipt = _read(receipt_type, answer)
        receipt.replayed = (answer.headers.get("Idempotent-Replayed") or "").lower() == "true"
        return receipt

    def send_signals(self, items: list[dict[str, Any]]) -> list[models.Receipt | errors.WeaveError]:
        """Send 1-100 signals in one request (B8); one result per item, in order: its receipt
        (`RoutedReceipt` for an item without `workflow_id`, `replayed` when it answered a repeat)
        or the `WeaveError` it alone would have raised. Nothing is raised for an item; the
        request itself may raise (401, 413, 422 for 0 or over 100 items, a connection failure).

        Each item is a request body as the API takes it: `send_signal`'s body plus its
        `workflow_id`, or `route_signal`'s body (B1), each with an `idempotency_key`; an item
        without one is given a new random one here (the items passed in are not changed). Every
        item then has its key, so after a connection error or a 503 the batch is sent again
        unchanged: items that were accepted answer as replays.
        """
        keyed = [item if "idempotency_key" in item else {**item, "idempotency_key": _new_key()} for item in items]
        answer = self._call("POST", self._ns("signal-batches"), body={"signals": keyed}, retry=True)
        results = answer.body.get("results") if isinstance(answer.body, dict) else None
        if not isinstance(results, list) or len(results) != len(keyed):
            raise errors.InvalidResponse("INVALID_RESPONSE", answer.status, f"not {len(keyed)} batch results")
        return [
            _item_result(result, models.Receipt if "workflow_id" in item else models.RoutedReceipt)
            for item, result in zip(keyed, results)
        ]

    def get_signal(self, workflow_id: str, signal_id: str, wait_seconds: int = 0) -> models.Signal:
        """A workflow's signal as it is now; with `wait_seconds` (≤ 20), once it is no longer
        PENDING, or after that long with its state then (B6)."""
        return self._read_signal(self._ns("workflows", workflow_id, "signals", str(signal_id)), wait_seconds)

    def get_routed_signal(self, signal_id: str, wait_seconds: int = 0) -> models.Signal:
        """A fact sent with `route_signal`, wherever it is now (B6): `route` says where (ROUTED,
        with its `workflow_id`; PARKED; AMBIGUOUS), `status` its fate. With `wait_seconds`
        (≤ 20), once it is no longer PENDING or PARKED, or after that long with its state then.
        A server with its cap of waiting reads answers at once: look at `status` again."""
        return self._read_signal(self._ns("signals", str(signal_id)), wait_seconds)

    def _read_signal(self, path: str, wait_seconds: int) -> models.Signal:
        if wait_seconds:
            path += f"?{urlencode({'wait_seconds': wait_seconds})}"
        answer = self._call("GET", path, retry=True, timeout=self.timeout + wait_seconds)
        return _read(models.Signal, answer)

    def list_unrouted_signals(
        self,
        status: str | None = None,
        *,
        name: str | None = None,
        correlation_key: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[models.Signal]:
        """The namespace's facts that belong to no instance (B6: PARKED, EXPIRED unrouted,
        REJECTED), newest first, page by page."""
        query = {"status": status, "name": name, "correlation_key": correlation_key}
        for item in self._pages(self._ns("signals"), "signals", query, None, page_size):
            yield models.from_json(models.Signal, item)

    def list_signals(
        self, workflow_id: str, status: str | None = None, *, page_size: int = PAGE_SIZE
    ) -> Iterator[models.Signal]:
        """A workflow's signals with their dispositions, oldest first, page by page."""
        path = self._ns("workflows", workflow_id, "signals")
        for item in self._pages(path, "signals", {"status": status}, None, page_size):
            yield models.from_json(models.Signal, item)

    # ---- tasks (Pulse) --------------------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, lease_seconds: int = 30, wait_seconds: int = 0) -> models.Task | None:
        """Claim the oldest available task of `queue`, waiting up to `wait_seconds` (≤ 20) for one;
        None when there is none. Not retried after a lost answer: it could hold a task unseen."""
        return self._claim(queue, worker_id, lease_seconds, wait_seconds)[0]

    def _claim(
        self, queue: str, worker_id: str, lease_seconds: int, wait_seconds: int
    ) -> tuple[models.Task | None, float | None]:
        """`claim`, plus the `Retry-After` (seconds) of an empty answer: a server with enough
        waiting claims may answer at once and say when to come back (`Worker` waits that long)."""
        answer = self._call(
            "POST",
            self._ns("queues", queue, "claim"),
            body={"worker_id": worker_id, "lease_seconds": lease_seconds, "wait_seconds": wait_seconds},
            timeout=self.timeout + wait_seconds,
        )
        if answer.status == 204:
            return None, errors.retry_after_seconds(answer.headers.get("Retry-After"))
        return _read(models.Task, answer), None

    def heartbeat(self, task: models.Task, lease_seconds: int = 30) -> models.Heartbeat:
        """Extend the task's lease; `cancel_requested` says whether Weave asked to cancel it.
        Raises `LeaseLost` when the lease is no longer this task's. Retried (a repeat only extends
        the lease again)."""
        answer = self._call(
            "POST",
            self._ns("tasks", task.task_id, "heartbeat"),
            body={"lease_token": task.lease_token, "lease_seconds": lease_seconds},
            retry=True,
        )
        return _read(models.Heartbeat, answer)

    def complete(
        self, task: models.Task, outcome: str, result: Any = None, error: dict | str | None = None
    ) -> models.Completion:
        """Report the task's outcome: SUCCEEDED with `result`, FAILED with `error` (a dict
        `{"message", "retryable", "details"?}`, or a message string, then retryable), or CANCELLED.
        Not retried (see the module docstring)."""
        body: dict[str, Any] = {"lease_token": task.lease_token, "outcome": outcome}
        if outcome == "SUCCEEDED":
            body["result"] = result
        elif result is not None:
            raise ValueError(f"a result is reported with SUCCEEDED only, not {outcome}")
        if outcome == "FAILED":
            body["error"] = {"message": error, "retryable": True} if isinstance(error, str) else error
        elif error is not None:
            raise ValueError(f"an error is reported with FAILED only, not {outcome}")
        answer = self._call("POST", self._ns("tasks", task.task_id, "complete"), body=body)
        return _read(models.Completion, answer)

    # ---- transport ------------------------------------------------------------------------------

    def _ns(self, *segments: str) -> str:
        # Every segment is quoted whole: a workflow id may hold `?`, `#` or `%`.
        return "/v1/namespaces/" + "/".join(quote(str(s), safe="") for s in (self.namespace, *segments))

    def _pages(self, path: str, member: str, query: dict, after: Any, page_size: int) -> Iterator[dict]:
        while True:
            params = {k: v for k, v in query.items() if v is not None}
            params["limit"] = page_size
            if after is not None:
                params["after"] = after
            page = self._call("GET", f"{path}?{urlencode(params)}", retry=True).body
            yield from page[member]
            after = page.get("next_after")
            if after is None:
                return

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = ABSENT,
        headers: dict[str, str] | None = None,
        retry: bool = False,
        retry_quota: bool = False,
        timeout: float | None = None,
    ) -> Answer:
        """One API call: send, read, and retry as the call allows (see the module docstring), every
        attempt with the call's one X-Request-Id."""
        data = None if body is ABSENT else dumps(body).encode("utf-8")
        call_id = _REQUEST_ID.get() or secrets.token_hex(16)
        request_headers = {**self._headers, "X-Request-Id": call_id, **(headers or {})}
        if data is not None:
            request_headers["Content-Type"] = "application/json"
        attempt = 0
        renewed = False  # the one immediate attempt on a new connection after a kept one failed
        while True:
            try:
                answer = self._once(method, path, data, request_headers, timeout or self.timeout)
            except _NotSent as exc:
                if exc.stale and not renewed:
                    renewed = True
                    continue
                failure: errors.WeaveError = errors.ConnectionFailed(
                    "CONNECTION_FAILED", None, f"{method} {path}: not sent to {self.base_url}: {exc.__cause__}"
                )
                failure.__cause__ = exc.__cause__
                retryable = True
            except _Dropped as exc:
                if retry and not renewed:
                    renewed = True
                    continue
                failure = self._no_answer(method, path, exc.__cause__)
                retryable = retry
            except (OSError, http.client.HTTPException) as exc:
                failure = self._no_answer(method, path, exc)
                retryable = retry
            else:
                if answer.status < 400:
                    return answer
                failure = errors.from_answer(answer.status, answer.headers.get("Retry-After"), answer.body)
                retryable = (retry and answer.status in RETRIED_STATUSES) or (retry_quota and answer.status == 429)
            failure.request_id = call_id
            if not retryable or attempt >= self.retries:
                raise failure
            if failure.retry_after is not None:
                if failure.retry_after > RETRY_AFTER_MAX_SECONDS:
                    raise failure
                # At least what the server asked, plus a little so that waiters do not return as one.
                delay = failure.retry_after + random.uniform(0, min(1.0, BACKOFF_BASE_SECONDS * 2**attempt))
            else:
                delay = random.uniform(0, min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))
            self._sleep(delay)
            attempt += 1

    @staticmethod
    def _no_answer(method: str, path: str, cause: BaseException | None) -> errors.WeaveError:
        failure = errors.ConnectionFailed(
            "CONNECTION_FAILED", None, f"{method} {path}: no answer read: {type(cause).__name__}: {cause}"
        )
        failure.__cause__ = cause
        return failure

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str], timeout: float) -> Answer:
        """One attempt on this thread's kept connection. The answer is read whole, so that the
        connection can carry the next request; it is given up after any failure (its state is
        unknown) and after an answer that says `Connection: close` (or an HTTP/1.0 one)."""
        kept = self._connections.take(timeout)
        try:
            try:
                kept.http.request(method, self._prefix + path, body=data, headers=headers)
            except OSError as exc:
                raise _NotSent(stale=kept.answered) from exc
            try:
                response = kept.http.getresponse()
            except ConnectionError as exc:  # reset, broken pipe, or closed before a status line (RemoteDisconnected)
                if kept.answered:
                    raise _Dropped() from exc
                raise
            raw = response.read()
        except BaseException:
            self._connections.discard(kept)
            raise
        if response.will_close:
            self._connections.discard(kept)
        else:
            kept.used_at = time.monotonic()
            kept.answered = True
        try:
            body = loads(raw) if raw else None
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            if response.status < 400:
                raise errors.InvalidResponse(
                    "INVALID_RESPONSE", response.status, f"{method} {path}: the answer is not JSON"
                ) from None
            body = None
        return Answer(response.status, response.headers, body)
