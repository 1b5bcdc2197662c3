"""/v1/openapi.json is built from the served routes and the validating schemas."""

import re

from weave import schemas
from weave.app import routes
from weave.config import Config


def test_openapi_lists_every_served_operation_with_its_request_schema(client):
    document = client.simulate_get("/v1/openapi.json").json
    assert document["openapi"] == "3.1.0"
    paths = document["paths"]
    assert set(paths["/v1/namespaces/{namespace}/definitions"]) == {"post"}
    assert set(paths["/v1/namespaces/{namespace}/workflows/{workflow_id}"]) == {"get"}
    assert "/v1/namespaces/{namespace}/definitions/{name}/versions/{version}" in paths
    assert {"/healthz", "/readyz", "/v1/openapi.json"} <= set(paths)
    publish = paths["/v1/namespaces/{namespace}/definitions"]["post"]
    assert publish["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/definition"
    }
    # Not a copy kept by hand: the very documents that validate requests.
    assert document["components"]["schemas"]["definition"] == schemas.schema("definition")
    assert document["components"]["schemas"]["start_workflow"] == schemas.schema("start_workflow")
    version_param = [
        p
        for p in paths["/v1/namespaces/{namespace}/definitions/{name}/versions/{version}"]["get"]["parameters"]
        if p["name"] == "version"
    ]
    assert version_param[0]["schema"] == {"type": "integer"}


def test_every_route_of_the_app_is_documented_with_its_methods(client):
    documented = client.simulate_get("/v1/openapi.json").json["paths"]
    served = routes(database=None, config=Config("mysql://u@h/db"))
    assert len(served) >= 7
    for path, resource in served:
        clean = re.sub(r"{(\w+):[^}]*}", r"{\1}", path)
        methods = {m for m in ("get", "post") if hasattr(resource, f"on_{m}")}
        assert set(documented[clean]) == methods, path


def test_operation_ids_are_unique(client):
    document = client.simulate_get("/v1/openapi.json").json
    ids = [op["operationId"] for path in document["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)) >= 16
