"""Start, list, read and control workflow instances (pause, resume, cancel), and read their history
(I1, I2, R1)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

import falcon

from weave import jsontext
from weave.errors import Code
from weave.export import ExportDocument
from weave.http import (
    JSON,
    PATH_IDS,
    Resource,
    bounded_value_text,
    operation,
    query_int,
    query_key,
    query_text,
    read_json,
    send_json,
)
from weave.rules import correlation
from weave.sql import engine, export, instances
from weave.views import event_view, workflow_summary_view, workflow_view

EVENTS_PAGE_DEFAULT = 100
EVENTS_PAGE_MAX = 1000
LIST_PAGE_DEFAULT = 100
LIST_PAGE_MAX = 1000
STATUSES = ("RUNNING", "PAUSED", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED")
DEFINITION_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # as weave/schemas/definition.json


class WorkflowCollection(Resource):
    @operation(
        "Start a workflow (idempotent on workflow_id)",
        scopes=("workflows:start",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        request="start_workflow",
        response="workflow",
        statuses=(200, 201, 409),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        principal = req.context.principal
        body = read_json(req, "start_workflow", self.body_limit)
        input_text = bounded_value_text(body["input"], "/input")
        workflow_id = body.get("workflow_id") or "wf_" + secrets.token_hex(16)
        request = instances.StartRequest(
            workflow_id=workflow_id,
            definition=body["definition"],
            version=body["version"],
            input_text=input_text,
            deadline_seconds=body["deadline_seconds"],
            request_digest=jsontext.digest({**body, "workflow_id": workflow_id}),
        )
        facts, created = instances.start_workflow(self.database, principal, request)
        send_json(resp, 201 if created else 200, workflow_view(facts))

    @operation(
        "List workflows, newest first: only those whose definition's queues the credential holds grants for",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="workflow_page",
        query=(
            ("status", "RUNNING, PAUSED, NEEDS_REVIEW, SUCCEEDED, FAILED or CANCELLED"),
            ("definition", "a definition name: its workflows of every version"),
            ("correlation_key", "a business key: the workflows with a wait or a signal of exactly this key"),
            ("workflow_id_prefix", "the workflows whose id starts with this text"),
            ("after", "the next_after of the previous page (absent or 0: start at the newest)"),
            ("limit", f"page size 1..{LIST_PAGE_MAX} (default {LIST_PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        principal = req.context.principal
        status = query_text(req, "status", STATUSES.__contains__, f"one of {', '.join(STATUSES)}")
        definition = query_text(
            req, "definition", DEFINITION_NAME.fullmatch, "a definition name (1-128 of A-Za-z0-9_.-)"
        )
        after = query_int(req, "after", 0, 0, 2**64 - 1)
        limit = query_int(req, "limit", LIST_PAGE_DEFAULT, 1, LIST_PAGE_MAX)
        search = search_terms(req)
        rows, next_after = list_or_search(self.database, principal, search, status, definition, after or None, limit)
        send_json(
            resp,
            200,
            {
                "workflows": [workflow_summary_view(row) for row in rows],
                "next_after": str(next_after) if next_after is not None else None,
            },
        )


@dataclass(frozen=True)
class Search:
    """A workflow search's terms (issue 34, item 2): a business key, the start of a workflow id."""

    correlation_key: bytes | None
    workflow_id_prefix: str | None

    def __bool__(self) -> bool:
        return self.correlation_key is not None or self.workflow_id_prefix is not None


def search_terms(req: falcon.Request) -> Search:
    """The search of a workflow list's query (the API's and the console's), each term checked (422)."""
    workflow_id = PATH_IDS["workflow_id"]
    return Search(
        query_key(req, "correlation_key", correlation.MAX_BYTES),
        query_text(req, "workflow_id_prefix", workflow_id.rule.fullmatch, workflow_id.description),
    )


def list_or_search(
    database, principal, search: Search, status: str | None, definition: str | None, after: int | None, limit: int
) -> tuple[list[dict], int | None]:
    """A page of the workflow list, or of the search when it has terms."""
    if not search:
        return instances.list_workflows(database, principal, status, definition, after, limit)
    return instances.search_workflows(
        database, principal, search.correlation_key, search.workflow_id_prefix, status, definition, after, limit
    )


class Workflow(Resource):
    @operation(
        "Read a workflow: status, gate, steps, activations, waits, review reason",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="workflow",
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        principal = req.context.principal
        facts = instances.read_workflow(self.database, principal, workflow_id)
        send_json(resp, 200, workflow_view(facts))


class WorkflowEvents(Resource):
    @operation(
        "A page of a workflow's history, oldest first",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="event_page",
        query=(
            ("after", "return events with seq greater than this (default 0)"),
            ("limit", f"page size, 1..{EVENTS_PAGE_MAX} (default {EVENTS_PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        principal = req.context.principal
        after = query_int(req, "after", 0, 0, 2**32 - 1)
        limit = query_int(req, "limit", EVENTS_PAGE_DEFAULT, 1, EVENTS_PAGE_MAX)
        rows = instances.list_events(self.database, principal, workflow_id, after, limit + 1)
        page = rows[:limit]
        next_after = page[-1]["seq"] if len(rows) > limit else None
        send_json(resp, 200, {"events": [event_view(row) for row in page], "next_after": next_after})


class WorkflowExport(Resource):
    """GET /export (L2): the document is written to a spooled file inside the snapshot and sent
    from it afterwards, with its length, so that no transaction waits on the client."""

    @operation(
        "Export everything Weave holds of a workflow, exact as stored (L2, docs/export.md)",
        scopes=("workflows:read",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        response="workflow_export",
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        document = ExportDocument()
        try:
            export.export_workflow(self.database, req.context.principal, workflow_id, document)
        except BaseException:
            document.close()
            raise
        resp.status = 200
        resp.content_type = JSON
        length = document.size()
        resp.set_stream(document.file(), length)


class WorkflowControl(Resource):
    """POST /pause, /resume, /cancel (R1)."""

    def __init__(self, database, body_limit: int, action: str):
        super().__init__(database, body_limit)
        self.action = action

    @operation(
        "Pause, resume or cancel a workflow (R1); answers the workflow",
        scopes=("workflows:control",),
        not_found=Code.WORKFLOW_NOT_FOUND,
        request="control",
        response="workflow",
        statuses=(200, 409),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        principal = req.context.principal
        body = read_json(req, "control", self.body_limit)
        facts = engine.control(self.database, principal, workflow_id, self.action, body["reason"])
        send_json(resp, 200, workflow_view(facts))
