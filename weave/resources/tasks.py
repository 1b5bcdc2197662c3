"""Pulse worker API: claim (with long-poll), heartbeat, complete (P2, P3)."""

from __future__ import annotations

import random
import time

import falcon

from weave import metrics
from weave.errors import Code, WeaveError
from weave.http import Resource, bounded_value_text, operation, read_json, send_json
from weave.resources import waiting
from weave.sql import tasks
from weave.times import rfc3339
from weave.views import claimed_task_view

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


def _retry_after(wait_seconds: int) -> str:
    """Random, so that workers turned away together do not come back as one herd; no later than the
    wait they asked for, so each polls about as often as it meant to."""
    return str(random.randint(1, min(wait_seconds, RETRY_AFTER_MAX_SECONDS)))


class QueueClaim(Resource):
    def __init__(self, database, body_limit: int, slots: waiting.WaitingClaims):
        super().__init__(database, body_limit)
        self.waiting = slots

    @operation(
        "Claim the oldest available task of a queue (200), or nothing (204); long-polls up to 20 s",
        description=(
            "One claim attempt always runs at once. With `wait_seconds` and no task, the claim then"
            " waits for one, unless this server process already has its cap of waiting claims (below"
            " its thread count: `weave serve --max-waiting-claims`); then it answers 204 at once with"
            " a `Retry-After` header (seconds): claim again after that. The cap is shared between"
            " applications, and with signal reads that wait (`wait_seconds`, B6): when it is full, the application waiting with the most claims gives one up"
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
                claimed = waiting.look_until(lambda: claim(True), lambda task: task is not None, deadline, ended)
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
