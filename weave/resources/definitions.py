"""Publish, list and read definitions (D1-D5)."""

from __future__ import annotations

import falcon

from weave.errors import Code, WeaveError, refusal
from weave.http import Resource, operation, query_int, query_text, read_json, send_json
from weave.resources.workflows import DEFINITION_NAME
from weave.rules import definitions as definition_rules
from weave.sql import definitions
from weave.views import definition_summary_view, definition_view

LIST_PAGE_DEFAULT = 100
LIST_PAGE_MAX = 1000
NAME_RULE = "a definition name (1-128 of A-Za-z0-9_.-)"


class DefinitionCollection(Resource):
    @operation(
        "Publish a definition: 201 for a new version, 200 when identical to the latest",
        scopes=("definitions:write",),
        not_found=Code.DEFINITION_NOT_FOUND,
        request="definition",
        response="published_definition",
        statuses=(200, 201),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        principal = req.context.principal
        document = read_json(req, "definition", self.body_limit)
        problems = definition_rules.problems(document)
        if problems:
            raise refusal(Code.VALIDATION_FAILED, problems)
        definition, created = definitions.publish_definition(
            self.database, principal.namespace_id, document, principal.credential_id, principal.actor
        )
        send_json(resp, 201 if created else 200, definition_view(definition))

    @operation(
        "List definitions: the newest version of each name, in name order (D5)",
        scopes=("definitions:read", "workflows:read"),
        not_found=Code.DEFINITION_NOT_FOUND,
        response="definition_page",
        query=(
            ("name", "a definition name: its newest version only"),
            ("after", "the next_after of the previous page (absent: start at the first name)"),
            ("limit", f"page size 1..{LIST_PAGE_MAX} (default {LIST_PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        principal = req.context.principal
        name = query_text(req, "name", DEFINITION_NAME.fullmatch, NAME_RULE)
        after = query_text(req, "after", DEFINITION_NAME.fullmatch, NAME_RULE) or ""
        limit = query_int(req, "limit", LIST_PAGE_DEFAULT, 1, LIST_PAGE_MAX)
        rows, next_after = definitions.list_newest(self.database, principal.namespace_id, name, after, limit)
        send_json(resp, 200, {"definitions": [definition_summary_view(row) for row in rows], "next_after": next_after})


class DefinitionVersion(Resource):
    @operation(
        "Read a published definition version",
        scopes=("definitions:read", "workflows:read"),
        not_found=Code.DEFINITION_NOT_FOUND,
        response="definition_version",
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, name: str, version: int) -> None:
        principal = req.context.principal
        definition = definitions.read_definition(self.database, principal.namespace_id, name, version)
        if definition is None:
            raise WeaveError(Code.DEFINITION_NOT_FOUND, f"definition {name!r} version {version} does not exist")
        send_json(resp, 200, definition_view(definition, with_document=True))
