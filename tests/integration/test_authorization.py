"""Authorization happens in one place, the `Authenticate` middleware, from each responder's `@operation`.

tests/integration/test_auth.py proves tokens, scopes and tenancy on examples; this file proves that the
middleware leaves no responder out and that every operation's declaration is the one SPEC §11 asks
for; tests/integration/test_security_matrix.py proves each declaration on real objects (scopes, tokens, a
disabled application, other namespaces' ids).
"""

import re

import falcon
import falcon.inspect
import falcon.testing
import pytest

from weave import auth, errors
from weave.app import create_app, routes
from weave.config import Config
from weave.http import Authenticate, operation

CONFIG = Config("mysql://u@h/db")  # the app is only built here, never connected


def mounted(app: falcon.App):
    """(URI template, resource) of every route the app serves, read from Falcon's router.

    Falcon lists routes publicly (`falcon.inspect`) but without the resources, so the walk reads its
    router's nodes; the count is checked against the public listing so that the walk cannot miss any.
    """
    found = []
    nodes = list(app._router._roots)
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        if node.resource is not None:
            found.append((node.uri_template, node.resource))
    assert len(found) == len(falcon.inspect.inspect_routes(app))
    return found


def responders(resource):
    return {
        name: getattr(resource, name)
        for name in dir(resource)
        if name.startswith("on_") and callable(getattr(resource, name))
    }


def test_every_responder_of_every_route_has_operation_metadata():
    served = mounted(create_app(CONFIG))
    paths = {path for path, _ in served}
    assert {path for path, _ in routes(None, CONFIG)} | {"/v1/openapi.json"} <= paths
    unmarked = [
        (path, name)
        for path, resource in served
        for name, responder in responders(resource).items()
        if getattr(responder, "operation", None) is None
    ]
    assert unmarked == []


def test_a_non_public_operation_cannot_be_declared_without_scopes_and_not_found_code():
    def responder(req, resp):
        pass

    for incomplete in ({}, {"scopes": ("workflows:read",)}, {"not_found": errors.Code.WORKFLOW_NOT_FOUND}):
        with pytest.raises(TypeError):
            operation("incomplete", **incomplete)(responder)
    operation("complete", scopes=("workflows:read",), not_found=errors.Code.WORKFLOW_NOT_FOUND)(responder)


class HalfDeclared:
    """A declared public GET beside a POST someone forgot to declare."""

    def __init__(self):
        self.ran = []

    @operation("declared", public=True)
    def on_get(self, req, resp, namespace):
        self.ran.append("GET")

    def on_post(self, req, resp, namespace):
        self.ran.append("POST")


def test_a_responder_without_operation_is_refused_and_never_runs(database, tenant):
    app = falcon.App(middleware=[Authenticate(database)])
    errors.install(app)
    resource = HalfDeclared()
    app.add_route("/v1/namespaces/{namespace}/half", resource)
    client = falcon.testing.TestClient(app)
    path = "/v1/namespaces/acme/half"

    assert client.simulate_get(path).status_code == 200
    for headers in ({}, tenant.headers(*auth.SCOPES)):  # not even asked for a token, and no token lets it in
        refused = client.simulate_post(path, headers=headers)
        assert (refused.status_code, refused.json["code"]) == (404, "NOT_FOUND")
        assert refused.headers["content-type"] == "application/problem+json"
    assert resource.ran == ["GET"]


# Every non-public operation: what it answers to another namespace, and which scopes grant it. Kept
# by hand, so that a wrong declaration fails here; the next test makes sure none is left out.
N = "/v1/namespaces/{namespace}"
OPERATIONS = [
    ("POST", f"{N}/definitions", "DEFINITION_NOT_FOUND", {"definitions:write"}),
    ("GET", f"{N}/definitions", "DEFINITION_NOT_FOUND", {"definitions:read", "workflows:read"}),
    (
        "GET",
        f"{N}/definitions/{{name}}/versions/{{version:int(min=1)}}",
        "DEFINITION_NOT_FOUND",
        {"definitions:read", "workflows:read"},
    ),
    ("POST", f"{N}/workflows", "WORKFLOW_NOT_FOUND", {"workflows:start"}),
    ("GET", f"{N}/workflows", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/workflows/{{workflow_id}}", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/workflows/{{workflow_id}}/events", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/workflows/{{workflow_id}}/export", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("POST", f"{N}/workflows/{{workflow_id}}/pause", "WORKFLOW_NOT_FOUND", {"workflows:control"}),
    ("POST", f"{N}/workflows/{{workflow_id}}/resume", "WORKFLOW_NOT_FOUND", {"workflows:control"}),
    ("POST", f"{N}/workflows/{{workflow_id}}/cancel", "WORKFLOW_NOT_FOUND", {"workflows:control"}),
    ("POST", f"{N}/workflows/{{workflow_id}}/review", "WORKFLOW_NOT_FOUND", {"workflows:review"}),
    ("POST", f"{N}/workflows/{{workflow_id}}/signals", "WORKFLOW_NOT_FOUND", {"workflows:signal"}),
    ("GET", f"{N}/workflows/{{workflow_id}}/signals", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/workflows/{{workflow_id}}/signals/{{signal_id}}", "WORKFLOW_NOT_FOUND", {"workflows:read"}),
    ("POST", f"{N}/signals", "NOT_FOUND", {"workflows:signal"}),
    ("GET", f"{N}/signals", "NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/signals/{{signal_id}}", "SIGNAL_NOT_FOUND", {"workflows:read"}),
    ("POST", f"{N}/signal-batches", "NOT_FOUND", {"workflows:signal"}),
    ("POST", f"{N}/queues/{{queue}}/claim", "NOT_FOUND", {"tasks:work"}),
    ("POST", f"{N}/tasks/{{task_id}}/heartbeat", "TASK_NOT_FOUND", {"tasks:work"}),
    ("POST", f"{N}/tasks/{{task_id}}/complete", "TASK_NOT_FOUND", {"tasks:work"}),
    ("GET", f"{N}/inbound", "NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/inbound/{{source}}/deliveries", "NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/notify", "NOT_FOUND", {"workflows:read"}),
    ("GET", f"{N}/notify/{{subscription}}/deliveries", "NOT_FOUND", {"workflows:read"}),
]
EVERY_SCOPE = auth.SCOPES
SAMPLE = {
    "namespace": "acme",
    "name": "order",
    "version": "1",
    "workflow_id": "w1",
    "signal_id": "1",
    "queue": "inventory",
    "task_id": "1",
    "source": "stripe",
    "subscription": "ops",
}
by_operation = pytest.mark.parametrize(
    "method, template, not_found, scopes",
    OPERATIONS,
    ids=[f"{method} {template[len(N) :]}" for method, template, *_ in OPERATIONS],
)


def url(template: str) -> str:
    """The template filled in for namespace `acme` (a parameter not in SAMPLE fails the test)."""
    return re.sub(r"{(\w+)(?::[^}]*)?}", lambda m: SAMPLE[m.group(1)], template)


def test_the_table_lists_every_non_public_operation():
    served = {
        (name.removeprefix("on_").upper(), path)
        for path, resource in mounted(create_app(CONFIG))
        for name, responder in responders(resource).items()
        if not responder.operation.public and not responder.operation.session  # console pages: test_console.py
    }
    assert served == {(method, template) for method, template, *_ in OPERATIONS}


@by_operation
def test_another_namespace_gets_the_operations_not_found_code_with_or_without_the_scope(
    client, tenant, other_tenant, method, template, not_found, scopes
):
    for held in (EVERY_SCOPE, EVERY_SCOPE - scopes):  # without the scope: not found comes first
        outsider = other_tenant.headers(*held, queues=("inventory",))  # every queue globex has
        result = client.simulate_request(method, url(template), headers=outsider)
        assert (result.status_code, result.json["code"]) == (404, not_found), held
