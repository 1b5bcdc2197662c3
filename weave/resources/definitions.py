"""Publish and read definitions (D1-D4)."""

from __future__ import annotations

import falcon

from weave.errors import Code, WeaveError
from weave.http import Resource, operation, read_json, send_json
from weave.rules import definitions as definition_rules
from weave.sql import definitions
from weave.views import definition_view


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
            errors = [{"pointer": p.pointer, "message": p.message} for p in problems]
            raise WeaveError(Code.VALIDATION_FAILED, f"{errors[0]['pointer']}: {errors[0]['message']}", errors)
        definition, created = definitions.publish_definition(
            self.database, principal.namespace_id, document, principal.credential_id, principal.actor
        )
        send_json(resp, 201 if created else 200, definition_view(definition))


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
