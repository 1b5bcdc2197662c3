"""Pulse worker API: claim (with long-poll), heartbeat, complete (P2, P3)."""

from __future__ import annotations

import time

import falcon

from weave import jsontext
from weave.errors import Code
from weave.http import Resource, bounded_value_text, operation, read_json, send_json
from weave.sql import tasks
from weave.times import rfc3339
from weave.views import claimed_task_view

# Long-poll: look again after these pauses (the last one repeats) until wait_seconds have passed.
# No transaction and no connection is held while waiting.
LONG_POLL_PAUSES = (0.05, 0.1, 0.2, 0.25)


class QueueClaim(Resource):
    @operation(
        "Claim the oldest available task of a queue (200), or nothing (204); long-polls up to 20 s",
        scopes=("tasks:work",),
        not_found=Code.NOT_FOUND,
        queue_grant="queue",
        request="claim",
        statuses=(200, 204, 401, 403, 404, 413, 415, 422),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, queue: str) -> None:
        principal = req.context.principal
        body = read_json(req, "claim", self.body_limit)
        deadline = time.monotonic() + body.get("wait_seconds", 0)
        pauses = iter(LONG_POLL_PAUSES)
        pause = next(pauses)
        while True:
            claimed = tasks.claim_task(
                self.database,
                principal.namespace_id,
                queue,
                body["worker_id"],
                body.get("lease_seconds", 60),
                principal.credential_id,
                principal.actor,
            )
            remaining = deadline - time.monotonic()
            if claimed is not None or remaining <= 0:
                break
            time.sleep(min(pause, remaining))
            pause = next(pauses, pause)
        if claimed is None:
            resp.status = 204
            return
        send_json(resp, 200, claimed_task_view(claimed))


class TaskHeartbeat(Resource):
    @operation(
        "Extend a task's lease; says whether cancellation was requested",
        scopes=("tasks:work",),
        not_found=Code.TASK_NOT_FOUND,
        request="heartbeat",
        statuses=(200, 401, 403, 404, 409, 413, 415, 422),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, task_id: int) -> None:
        principal = req.context.principal
        body = read_json(req, "heartbeat", self.body_limit)
        beat = tasks.heartbeat(
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
        statuses=(200, 401, 403, 404, 409, 413, 415, 422),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, task_id: int) -> None:
        principal = req.context.principal
        body = read_json(req, "complete", self.body_limit)
        error = body.get("error")
        completion = tasks.Completion(
            outcome=body["outcome"],
            result_text=bounded_value_text(body["result"], "/result") if "result" in body else None,
            error_text=jsontext.compact(error) if error is not None else None,
            retryable=bool(error and error["retryable"]),
        )
        done = tasks.complete_task(
            self.database,
            principal.namespace_id,
            task_id,
            body["lease_token"],
            completion,
            principal.queues,
            principal.credential_id,
            principal.actor,
        )
        send_json(resp, 200, done)
