"""Repair a workflow in NEEDS_REVIEW (R2, R3): retry or complete the step under review, fail or
cancel; or set a new total deadline of a workflow that has not ended (R4)."""

from __future__ import annotations

import falcon

from weave.errors import Code
from weave.http import Resource, bounded_value_text, operation, read_json, send_json
from weave.rules import signals as signal_rules
from weave.sql import engine
from weave.views import workflow_view


class WorkflowReview(Resource):
    @operation(
        "Review a workflow in NEEDS_REVIEW: retry_step, complete_step, fail or cancel (R2); or give one that has"
        " not ended a new total deadline: extend_deadline (R4); answers the workflow",
        scopes=("workflows:review",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        request="review",
        response="workflow",
        statuses=(200, 409),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        principal = req.context.principal
        body = read_json(req, "review", self.body_limit)
        result = body.get("result", signal_rules.ABSENT)
        if result is not signal_rules.ABSENT:
            bounded_value_text(result, "/result")  # the 256 KiB limit of every value (docs/rules.md#api)
        facts = engine.review(
            self.database,
            principal,
            workflow_id,
            body["action"],
            body.get("step_key"),
            result,
            body["reason"],
            body.get("deadline_seconds"),
        )
        send_json(resp, 200, workflow_view(facts))
