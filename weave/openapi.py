"""The OpenAPI 3.1 document, built from the routes actually served and the schemas that validate.

Nothing here is kept by hand: paths come from `create_app`'s route table, operations from the
`@operation` marks on responders, request bodies from `weave/schemas/*.json`, success bodies from
`weave/schemas/responses.json` and errors from `weave.errors.Code`.

What a responder answers itself is in its mark (`statuses`); what the layers in front of it
answer is added here from what the operation is, because those layers answer it on every such
route: `weave.http.BodyCap` (413) and Falcon (400 for malformed framing) on every route,
`weave.http.Authenticate` (401, 403, 404 and, through the credential lookup, 503) on every
operation that needs a token, the path id rules (404) on every route with ids, `read_json`
(400, 413, 415, 422) on every operation that takes a body, and the query parsers (422).

The schema files are JSON Schema documents with their own `$defs` and `$id`; inside the OpenAPI
document each becomes a component and each of its `$defs` a component of its own, with every
`$ref` rewritten to point there, so that the document resolves without fetching anything.
"""

from __future__ import annotations

import re
from typing import Iterable

from weave import schemas
from weave.errors import Code, problem
from weave.http import PATH_IDS

HTTP_METHODS = ("get", "post", "put", "patch", "delete")
_PARAM = re.compile(r"{(\w+)(?::[^}]*)?}")
_SCHEMA_URN = "urn:weave:schema:"
RESPONSES = "responses"  # the file of success bodies: only its $defs are components

# Why each error status is answered; the codes are those of `Code` with that status.
ERROR_STATUSES = {
    400: "Malformed HTTP (BAD_REQUEST), or a body that is not exact JSON (INVALID_JSON: empty, "
    "malformed, a duplicate member, NaN or Infinity)",
    401: "No token, or one that is malformed, unknown, revoked or expired",
    403: "The credential lacks the operation's scope or a grant for a queue involved, or its "
    "application is disabled and the operation writes",
    404: "No such object in the credential's namespace (another namespace's objects look the same), "
    "or an id in the path that breaks its rule",
    409: "The request conflicts with the current state",
    413: "The body is over the cap (1 MiB by default), or a value in it is over 256 KiB serialised",
    415: "The body is not application/json",
    422: "The body, a query parameter or a header breaks its rule (one pointer per problem), or a "
    "signal breaks its step's contract",
    429: "The application's signal quota is used up: come back after Retry-After seconds",
    503: "The database is unreachable or kept failing: retry after Retry-After seconds",
}
# Answered by what stands in front of every responder, on every route (see the module docstring).
EVERY_ROUTE = (400, 413)
WITH_TOKEN = (401, 403, 404, 503)
WITH_BODY = (400, 413, 415, 422)

HEADERS = {
    "X-Request-Id": {
        "description": "The client's own request id when it sent a usable one, else a new random one",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
    },
    "Retry-After": {
        "description": "Seconds to wait before trying again",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "WWW-Authenticate": {
        "description": "The authentication scheme: Bearer",
        "required": True,
        "schema": {"type": "string", "pattern": "^Bearer "},
    },
    "Idempotent-Replayed": {
        "description": "`true` when the answer replays the receipt of an earlier request with this key",
        "required": False,
        "schema": {"const": "true"},
    },
}
# Headers beyond X-Request-Id that every answer of a status carries.
STATUS_HEADERS = {401: ("WWW-Authenticate",), 429: ("Retry-After",), 503: ("Retry-After",)}
# A public operation's 401 is an inbound webhook's (W2): its signature authenticates it, so the
# answer is SIGNATURE_INVALID with no Bearer challenge; a token's 401 is never SIGNATURE_INVALID.
SIGNED = "problem_401_signed"
SIGNED_CODES = (Code.SIGNATURE_INVALID.name,)
SIGNED_WHY = (
    "The signature is missing or does not verify, its timestamp is more than 5 minutes off, or the"
    " namespace has no such source (one answer for all)"
)


def _problem_schema() -> dict:
    example = problem(Code.VALIDATION_FAILED, "/name: 'x y' does not match", [{"pointer": "/name", "message": "…"}])
    return {
        "type": "object",
        "required": ["type", "title", "status", "detail", "code", "errors"],
        "properties": {
            "type": {"type": "string", "pattern": "^urn:weave:problem:[A-Z_]+$"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"enum": [code.name for code in Code]},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["pointer", "message"],
                    "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
        "examples": [example],
    }


def _error_response(status: int, signed: bool = False) -> dict:
    codes = [code.name for code in Code if code.status == status and (code.name in SIGNED_CODES) == signed]
    extra = () if signed else STATUS_HEADERS.get(status, ())
    headers = {name: {"$ref": f"#/components/headers/{name}"} for name in ("X-Request-Id", *extra)}
    return {
        "description": f"{SIGNED_WHY if signed else ERROR_STATUSES[status]}: {', '.join(codes)}",
        "headers": headers,
        "content": {
            "application/problem+json": {
                "schema": {
                    "allOf": [{"$ref": "#/components/schemas/problem"}],
                    "properties": {"status": {"const": status}, "code": {"enum": codes}},
                }
            }
        },
    }


def _rewrite_refs(value, owner: str, wanted: set[str]):
    """`value` with every `$ref` of the schema file `owner` pointing inside the OpenAPI document:
    its `$defs` are components of their own, its root is the component `owner`, and another
    file (`urn:weave:schema:NAME`) is the component NAME (which is added to `wanted`)."""
    if isinstance(value, list):
        return [_rewrite_refs(item, owner, wanted) for item in value]
    if not isinstance(value, dict):
        return value
    rewritten = {key: _rewrite_refs(item, owner, wanted) for key, item in value.items()}
    ref = rewritten.get("$ref")
    if isinstance(ref, str):
        if ref.startswith(_SCHEMA_URN):
            wanted.add(ref[len(_SCHEMA_URN) :])
            rewritten["$ref"] = f"#/components/schemas/{ref[len(_SCHEMA_URN) :]}"
        elif ref.startswith("#/$defs/"):
            rewritten["$ref"] = "#/components/schemas/" + ref[len("#/$defs/") :]
        elif ref.startswith("#"):
            rewritten["$ref"] = f"#/components/schemas/{owner}{ref[1:]}"
        else:
            raise ValueError(f"schema {owner}: $ref {ref!r} would need fetching")
    return rewritten


def _add_component(components: dict, name: str, schema: dict) -> None:
    if components.setdefault(name, schema) != schema:
        raise ValueError(f"two different schemas would be the component {name!r}")


def _schema_components(names: set[str]) -> dict:
    """Every schema file in `names` (and those they refer to) as components, with their `$defs`."""
    components: dict = {}
    wanted, done = set(names), set()
    while wanted - done:
        name = min(wanted - done)
        done.add(name)
        document = _rewrite_refs(schemas.schema(name), name, wanted)
        for def_name, definition in document.pop("$defs", {}).items():
            _add_component(components, def_name, definition)
        if name != RESPONSES:
            document.pop("$id", None)  # its refs now resolve against the OpenAPI document, not the $id
            document.pop("$schema", None)  # the document's jsonSchemaDialect says it
            _add_component(components, name, document)
    return components


def _path_schema(path: str, name: str) -> dict:
    if ":int" in path.split("{" + name)[1].split("}")[0]:
        return {"type": "integer"}
    rule = PATH_IDS[name]
    return {"type": "string", "pattern": f"^{rule.rule.pattern}$", "description": rule.description}


def _statuses(path: str, meta) -> list[int]:
    statuses = {*meta.statuses, *EVERY_ROUTE}
    if _PARAM.search(path):
        statuses.add(404)
    if not meta.public:
        statuses.update(WITH_TOKEN)
    if meta.request:
        statuses.update(WITH_BODY)
    if meta.query:
        statuses.add(422)
    return sorted(statuses)


def _success(status: int, meta) -> dict:
    headers = {"X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"}}
    if status == 204:
        # A claim that found nothing; Retry-After when it was not allowed to wait (tasks.QueueClaim).
        headers["Retry-After"] = {**HEADERS["Retry-After"], "required": False}
        return {"description": "nothing to answer", "headers": headers}
    if meta.text is not None:
        return {"description": "success", "headers": headers, "content": {meta.text: {"schema": {"type": "string"}}}}
    if meta.response is None:
        # Refused when the app is built: a body nobody documented is a body no client can rely on.
        raise ValueError(f"operation {meta.summary!r} answers {status} with a body: name its response schema")
    if meta.headers:  # Idempotency-Key: a replay says so
        headers["Idempotent-Replayed"] = {"$ref": "#/components/headers/Idempotent-Replayed"}
    return {
        "description": "success",
        "headers": headers,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{meta.response}"}}},
    }


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
        {"name": name, "in": "header", "required": True, "description": text, "schema": schema}
        for name, text, schema in meta.headers
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
    for status in _statuses(path, meta):
        if status < 400:
            op["responses"][str(status)] = _success(status, meta)
        else:
            name = SIGNED if status == 401 and meta.public else f"problem_{status}"
            op["responses"][str(status)] = {"$ref": f"#/components/responses/{name}"}
    return op


def build(routes: Iterable[tuple[str, object]]) -> dict:
    paths: dict = {}
    schema_files: set[str] = {RESPONSES}
    error_statuses: set[int] = set()
    signed = False  # whether an operation answers a signature's 401
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
            operation = paths.setdefault(clean, {})[method] = _operation(path, method, meta, op_id)
            error_statuses.update(int(status) for status in operation["responses"] if int(status) >= 400)
            signed = signed or (meta.public and "401" in operation["responses"])
            if meta.request:
                schema_files.add(meta.request)
    components = _schema_components(schema_files)
    _add_component(components, "problem", _problem_schema())
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
            "schemas": dict(sorted(components.items())),
            "responses": {
                **{f"problem_{status}": _error_response(status) for status in sorted(error_statuses)},
                **({SIGNED: _error_response(401, signed=True)} if signed else {}),
            },
            "headers": HEADERS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
