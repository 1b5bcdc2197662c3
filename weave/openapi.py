"""The OpenAPI 3.1 document, built from the routes actually served and the schemas that validate.

Nothing here is kept by hand: paths come from `create_app`'s route table, operations from the
`@operation` marks on responders, request bodies from `weave/schemas/*.json`.
"""

from __future__ import annotations

import re
from typing import Iterable

from weave import schemas
from weave.errors import Code, problem
from weave.http import PATH_IDS

HTTP_METHODS = ("get", "post", "put", "patch", "delete")
_PARAM = re.compile(r"{(\w+)(?::[^}]*)?}")


def _problem_schema() -> dict:
    example = problem(Code.VALIDATION_FAILED, "/name: 'x y' does not match", [{"pointer": "/name", "message": "…"}])
    return {
        "type": "object",
        "required": ["type", "title", "status", "detail", "code", "errors"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"enum": [code.name for code in Code]},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
        "examples": [example],
    }


def _path_schema(path: str, name: str) -> dict:
    if ":int" in path.split("{" + name)[1].split("}")[0]:
        return {"type": "integer"}
    rule = PATH_IDS[name]
    return {"type": "string", "pattern": f"^{rule.rule.pattern}$", "description": rule.description}


def _operation(path: str, method: str, meta, op_id: str) -> dict:
    params = [
        {"name": name, "in": "path", "required": True, "schema": _path_schema(path, name)}
        for name in _PARAM.findall(path)
    ]
    params += [
        {"name": name, "in": "query", "required": False, "description": text, "schema": {"type": "string"}}
        for name, text in meta.query
    ]
    params += [
        {"name": name, "in": "header", "required": True, "description": text, "schema": {"type": "string"}}
        for name, text in meta.headers
    ]
    op: dict = {"operationId": op_id, "summary": meta.summary, "parameters": params, "responses": {}}
    description = []
    if meta.scopes:
        description.append("Scope: " + " or ".join(meta.scopes))
        if meta.queue_grant:
            description[-1] += f", and a grant for the queue {{{meta.queue_grant}}}"
        op["security"] = [{"bearer": []}]
    else:
        op["security"] = []
    if meta.description:
        description.append(meta.description)
    if description:
        op["description"] = ". ".join(description)
    if meta.request:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{meta.request}"}}},
        }
    for status in meta.statuses:
        if status < 400:
            op["responses"][str(status)] = {"description": "success", "content": {"application/json": {}}}
        else:
            op["responses"][str(status)] = {
                "description": "problem",
                "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/problem"}}},
            }
    return op


def build(routes: Iterable[tuple[str, object]]) -> dict:
    paths: dict = {}
    request_schemas: set[str] = set()
    for path, resource in routes:
        clean = _PARAM.sub(r"{\1}", path)
        for method in HTTP_METHODS:
            responder = getattr(resource, f"on_{method}", None)
            meta = getattr(responder, "operation", None)
            if meta is None:
                continue
            words = [
                "by_" + w[1:-1] if w.startswith("{") else w
                for w in clean.split("/")
                if w and w not in ("v1", "namespaces", "{namespace}")
            ]
            op_id = "_".join([method, *words]).replace(".", "_")
            paths.setdefault(clean, {})[method] = _operation(path, method, meta, op_id)
            if meta.request:
                request_schemas.add(meta.request)
    components = {name: schemas.schema(name) for name in sorted(request_schemas)}
    components["problem"] = _problem_schema()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Weave",
            "version": "1",
            "description": "Durable workflows on MySQL: task steps, external signals and polls.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
