"""Pulse worker API: claim (with long-poll), heartbeat, complete (P2, P3)."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import deque
from contextlib import contextmanager

import falcon

from weave import metrics
from weave.errors import Code, WeaveError
from weave.http import Resource, bounded_value_text, operation, read_json, send_json
from weave.rules import long_poll
from weave.sql import tasks
from weave.times import rfc3339
from weave.views import claimed_task_view

# Long-poll: look again after these pauses (the last one repeats) until wait_seconds have passed.
# No transaction and no connection is held while waiting, only the server thread.
LONG_POLL_PAUSES = (0.05, 0.1, 0.2, 0.25)
# A claim that would wait while the process has its cap of waiting claims answers 204 at once with
# Retry-After: a random 1 s up to its own wait_seconds, at most this (docs/decisions.md, Pulse).
RETRY_AFTER_MAX_SECONDS = 5
CLAIMS = metrics.Children(metrics.TASK_CLAIMS)
COMPLETED = metrics.Children(metrics.TASKS_COMPLETED)
LEASES_LOST = metrics.Children(metrics.LEASES_LOST)


def _counting_lost_leases(operation: str, call, *args):
    """`call(*args)`, counting a LEASE_LOST refusal of `operation` (heartbeat, complete)."""
    try:
        return call(*args)
    except WeaveError as exc:
        if exc.code is Code.LEASE_LOST:
            LEASES_LOST(operation).inc()
        raise


class WaitingClaims:
    """The process's slots for waiting claims, shared between applications (issue 26, item 7).

    Waiting claims hold server threads: at most `capacity` at once, so that long-polls never take
    the threads every other request needs, and shared by `weave.rules.long_poll`: a claim admitted
    by ending another application's waiting claim sets that claim's event, and the claim ends at
    once (its thread may first finish the look it is in: a few milliseconds over the cap)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._waiting: dict[int, deque[threading.Event]] = {}  # application -> its claims' events, oldest first

    @contextmanager
    def slot(self, application_id: int):
        """A slot for one waiting claim of the application, as an event that is set when the claim
        must end to make room; None when there is none (the claim answers at once)."""
        with self._lock:
            counts = {application: len(claims) for application, claims in self._waiting.items()}
            admission = long_poll.admit(counts, application_id, self.capacity)
            if admission.decision == long_poll.TURN_AWAY:
                event = None
            else:
                if admission.ends is not None:
                    # Its oldest claim: the nearest to the end of its own wait.
                    self._waiting[admission.ends].popleft().set()
                    if not self._waiting[admission.ends]:
                        del self._waiting[admission.ends]
                event = threading.Event()
                self._waiting.setdefault(application_id, deque()).append(event)
        try:
            yield event
        finally:
            if event is not None:
                with self._lock:  # an event is set under this lock, as its claim is taken off
                    if not event.is_set():
                        claims = self._waiting[application_id]
                        claims.remove(event)
                        if not claims:
                            del self._waiting[application_id]


def _retry_after(wait_seconds: int) -> str:
    """Random, so that workers turned away together do not come back as one herd; no later than the
    wait they asked for, so each polls about as often as it meant to."""
    return str(random.randint(1, min(wait_seconds, RETRY_AFTER_MAX_SECONDS)))


class QueueClaim(Resource):
    def __init__(self, database, body_limit: int, max_waiting: int):
        super().__init__(database, body_limit)
        self.waiting = WaitingClaims(max_waiting)

    @operation(
        "Claim the oldest available task of a queue (200), or nothing (204); long-polls up to 20 s",
        description=(
            "One claim attempt always runs at once. With `wait_seconds` and no task, the claim then"
            " waits for one, unless this server process already has its cap of waiting claims (below"
            " its thread count: `weave serve --max-waiting-claims`); then it answers 204 at once with"
            " a `Retry-After` header (seconds): claim again after that. The cap is shared between"
            " applications: when it is full, the application waiting with the most claims gives one up"
            " to an application waiting with at least two fewer (that claim answers 204 with"
            " `Retry-After` before its time). A claim that waited reads its credential again before it"
            " takes a task: revoked or expired meanwhile is 401, its application disabled 403."
        ),
        scopes=("tasks:work",),
        not_found=Code.NOT_FOUND,
        queue_grant="queue",
        request="claim",
        response="claimed_task",
        statuses=(200, 204),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, queue: str) -> None:
        principal = req.context.principal
        body = read_json(req, "claim", self.body_limit)

        def claim(waited: bool):
            # A claim that waited reads its credential again before it takes a task: a credential
            # is checked as it is now (docs/decisions.md), and the request's check is past.
            return tasks.claim_task(
                self.database,
                principal.namespace_id,
                queue,
                body["worker_id"],
                body.get("lease_seconds", 60),
                principal.credential_id,
                principal.actor,
                req.context.token_sha256 if waited else None,
            )

        wait_seconds = body.get("wait_seconds", 0)
        deadline = time.monotonic() + wait_seconds
        claimed = claim(False)  # even a claim that may not wait looks once: a queued task is never missed
        if claimed is None and time.monotonic() < deadline:
            with self.waiting.slot(principal.application_id) as ended:
                if ended is None:
                    resp.set_header("Retry-After", _retry_after(wait_seconds))
                    CLAIMS("turned_away").inc()
                    resp.status = 204
                    return
                claimed = self._wait(claim, deadline, ended)
                if claimed is None and ended.is_set():
                    resp.set_header("Retry-After", _retry_after(wait_seconds))
                    CLAIMS("made_room").inc()
                    resp.status = 204
                    return
        if claimed is None:
            CLAIMS("empty").inc()
            resp.status = 204
            return
        CLAIMS("claimed").inc()
        send_json(resp, 200, claimed_task_view(claimed))

    @staticmethod
    def _wait(claim, deadline: float, ended: threading.Event):
        """Look again after each pause until a task is claimed, the deadline has passed, or `ended`
        is set (the slot went to another application's claim)."""
        for pause in itertools.chain(LONG_POLL_PAUSES, itertools.repeat(LONG_POLL_PAUSES[-1])):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or ended.wait(min(pause, remaining)):
                return None
            claimed = claim(True)
            if claimed is not None:
                return claimed


class TaskHeartbeat(Resource):
    @operation(
        "Extend a task's lease; says whether cancellation was requested",
        scopes=("tasks:work",),
        not_found=Code.TASK_NOT_FOUND,
        request="heartbeat",
        response="lease",
        statuses=(200, 409),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, task_id: int) -> None:
        principal = req.context.principal
        body = read_json(req, "heartbeat", self.body_limit)
        beat = _counting_lost_leases(
            "heartbeat",
            tasks.heartbeat,
            self.database,
            principal.namespace_id,
            task_id,
            body["lease_token"],
            body.get("lease_seconds", 60),
            principal.queues,
        )
        send_json(
            resp,
            200,
            {"cancel_requested": beat["cancel_requested"], "lease_expires_at": rfc3339(beat["lease_expires_at"])},
        )


class TaskComplete(Resource):
    @operation(
        "Report a task's outcome: SUCCEEDED + result, FAILED + error, or CANCELLED",
        scopes=("tasks:work",),
        not_found=Code.TASK_NOT_FOUND,
        request="complete",
        response="task_report",
        statuses=(200, 409),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, task_id: int) -> None:
        principal = req.context.principal
        body = read_json(req, "complete", self.body_limit)
        error = body.get("error")
        completion = tasks.Completion(
            outcome=body["outcome"],
            result_text=bounded_value_text(body["result"], "/result") if "result" in body else None,
            # The same limit as a result's: the error is stored, read back and shown in the history.
            error_text=bounded_value_text(error, "/error") if error is not None else None,
            retryable=bool(error and error["retryable"]),
        )
        done = _counting_lost_leases(
            "complete",
            tasks.complete_task,
            self.database,
            principal.namespace_id,
            task_id,
            body["lease_token"],
            completion,
            principal.queues,
            principal.credential_id,
            principal.actor,
        )
        COMPLETED(completion.outcome).inc()
        send_json(resp, 200, done)
