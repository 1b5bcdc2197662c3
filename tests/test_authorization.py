"""Authorization happens in one place, the `Authenticate` middleware, from each responder's `@operation`.

tests/test_auth.py proves tokens, scopes and tenancy on real objects; this file proves that the
middleware leaves no responder out and applies every operation's own declaration.
"""

import falcon
import falcon.inspect
import falcon.testing

from weave import errors
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
    return {name: getattr(resource, name) for name in dir(resource)
            if name.startswith("on_") and callable(getattr(resource, name))}


def test_every_responder_of_every_route_has_operation_metadata():
    served = mounted(create_app(CONFIG))
    paths = {path for path, _ in served}
    assert {path for path, _ in routes(None, CONFIG)} | {"/v1/openapi.json"} <= paths
    unmarked = [(path, name) for path, resource in served for name, responder in responders(resource).items()
                if getattr(responder, "operation", None) is None]
    assert unmarked == []


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
    every_scope = tenant.headers("definitions:write", "definitions:read", "workflows:start", "workflows:read",
                                 "workflows:signal", "workflows:control", "workflows:review", "tasks:work")
    for headers in ({}, every_scope):  # not even asked for a token, and no token lets it in
        refused = client.simulate_post(path, headers=headers)
        assert (refused.status_code, refused.json["code"]) == (404, "NOT_FOUND")
        assert refused.headers["content-type"] == "application/problem+json"
    assert resource.ran == ["GET"]
