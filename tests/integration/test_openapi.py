"""/v1/openapi.json is built from the served routes and the validating schemas, and it is true:
every answer of a real flow through every operation is documented for its operation and matches
the documented schema (tests/integration/test_schema_fuzz.py does the same for generated requests)."""

import dataclasses
import re

import falcon.testing
import pytest
import stripe
import test_inbound as inbound_test
from helpers import Flow, payment, signal_flow_definition
from jsonschema import Draft202012Validator

from weave import auth, schemas
from weave.app import create_app, routes
from weave.config import Config
from weave.errors import Code
from weave.rules import subscriptions
from weave.sql import notifications

_PARAM = re.compile(r"{(\w+)(?::[^}]*)?}")
KEYS = inbound_test.keyring()


def test_openapi_lists_every_served_operation_with_its_request_schema(client):
    document = client.simulate_get("/v1/openapi.json").json
    assert document["openapi"] == "3.1.0"
    paths = document["paths"]
    assert set(paths["/v1/namespaces/{namespace}/definitions"]) == {"get", "post"}
    assert set(paths["/v1/namespaces/{namespace}/workflows/{workflow_id}"]) == {"get"}
    assert "/v1/namespaces/{namespace}/definitions/{name}/versions/{version}" in paths
    assert {"/healthz", "/readyz", "/v1/openapi.json"} <= set(paths)
    publish = paths["/v1/namespaces/{namespace}/definitions"]["post"]
    assert publish["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/definition"
    }
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


# ---- references resolve inside the document ---------------------------------------------------------


def refs(value):
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"]
        for item in value.values():
            yield from refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs(item)


def resolve(document: dict, ref: str):
    assert ref.startswith("#/"), ref
    node = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_every_reference_resolves_inside_the_document(client):
    """The publish body referred to `#/$defs/step`, which is nowhere in the OpenAPI document."""
    document = client.simulate_get("/v1/openapi.json").json
    found = set(refs(document))
    assert "#/components/schemas/step" in found
    for ref in found:
        resolve(document, ref)  # a KeyError names the dangling one
    assert not any("$id" in schema for schema in document["components"]["schemas"].values())


def test_a_request_schema_in_the_document_judges_like_the_validator(client):
    """The definition component, its `$defs` now components beside it, accepts and refuses
    exactly what publishing does."""
    document = client.simulate_get("/v1/openapi.json").json
    documented = validator(document, "#/components/schemas/definition")
    good = signal_flow_definition()
    poll = {
        "name": "p",
        "steps": [
            {"key": "s", "type": "POLL", "queue": "q", "interval_seconds": 5, "timeout_seconds": 60},
        ],
    }
    bad_step = {"name": "flow", "steps": [{"key": "a", "type": "TASK", "queue": "q"}]}
    extra = {"name": "flow", "steps": [{"key": "a", "type": "SIGNAL", "timeout_seconds": 1, "queue": "q"}]}
    bad_key = {"name": "flow", "steps": [{"key": "a b", "type": "TASK", "queue": "q", "timeout_seconds": 1}]}
    for candidate in (good, poll, bad_step, extra, bad_key, {"name": "x", "steps": []}, {"steps": 1}):
        expected = schemas.errors_of(schemas._validator("definition"), candidate) == []
        assert documented.is_valid(candidate) == expected, candidate


# ---- the three lies a schema fuzzer found ----------------------------------------------------------


def body_operations(document: dict):
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if "requestBody" in operation:
                yield path, method, operation


def test_every_body_taking_operation_documents_and_answers_400_invalid_json(client, tenant):
    document = client.simulate_get("/v1/openapi.json").json
    headers = {
        **tenant.headers(*auth.SCOPES, queues=("inventory", "carrier")),
        "Idempotency-Key": "k",
        "Content-Type": "application/json",
    }
    ids = {"namespace": "acme", "queue": "inventory", "workflow_id": "wf", "task_id": "1"}
    operations = list(body_operations(document))
    assert len(operations) == 12
    for path, method, operation in operations:
        answer = resolve(document, operation["responses"]["400"]["$ref"])
        assert "INVALID_JSON" in answer["content"]["application/problem+json"]["schema"]["properties"]["code"]["enum"]
        url = _PARAM.sub(lambda m: ids[m.group(1)], path)
        result = client.simulate_request(method.upper(), url, headers=headers, body=b'{"reason": ')
        assert (result.status_code, result.json["code"]) == (400, "INVALID_JSON"), (path, result.text)


def test_the_claims_204_is_documented_without_a_body(client, tenant):
    document = client.simulate_get("/v1/openapi.json").json
    claim = document["paths"]["/v1/namespaces/{namespace}/queues/{queue}/claim"]["post"]
    assert "content" not in claim["responses"]["204"]
    result = client.simulate_post(
        "/v1/namespaces/acme/queues/inventory/claim",
        json={"worker_id": "w"},
        headers=tenant.headers("tasks:work", queues=("inventory",)),
    )
    assert result.status_code == 204 and result.content == b""


def test_every_answer_but_204_has_a_schema_and_errors_say_their_codes(client):
    document = client.simulate_get("/v1/openapi.json").json
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            for status, answer in operation["responses"].items():
                answer = resolve(document, answer["$ref"]) if "$ref" in answer else answer
                if status == "204":
                    continue
                (media_type,) = answer["content"]
                assert answer["content"][media_type]["schema"], (path, method, status)
                if int(status) >= 400:
                    codes = answer["content"][media_type]["schema"]["properties"]["code"]["enum"]
                    # a token's 401 is UNAUTHENTICATED; a public operation's, an inbound signature's (W2)
                    signed = int(status) == 401 and not operation["security"]
                    assert codes == [
                        code.name
                        for code in Code
                        if code.status == int(status) and (code is Code.SIGNATURE_INVALID) == signed
                    ], (path, method, status)
                    assert media_type == "application/problem+json"
            if operation["security"]:
                assert {"401", "403", "404", "503"} <= set(operation["responses"]), (path, method)


def test_W2_the_inbound_routes_401_is_the_signatures_without_a_bearer_challenge(client):
    document = client.simulate_get("/v1/openapi.json").json
    inbound = document["paths"]["/v1/inbound/{namespace}/{source}"]["post"]
    assert inbound["security"] == [] and "requestBody" not in inbound  # the raw body is what is signed
    refused = resolve(document, inbound["responses"]["401"]["$ref"])
    assert set(refused["headers"]) == {"X-Request-Id"}
    assert refused["content"]["application/problem+json"]["schema"]["properties"]["code"]["enum"] == [
        "SIGNATURE_INVALID"
    ]
    token = resolve(
        document, document["paths"]["/v1/namespaces/{namespace}/inbound"]["get"]["responses"]["401"]["$ref"]
    )
    assert "WWW-Authenticate" in token["headers"]


# ---- real answers match the document ----------------------------------------------------------------


def tightened(schema):
    """`schema` refusing members it does not name: a field the code adds without documenting it fails."""
    if isinstance(schema, list):
        return [tightened(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tight = {key: tightened(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        tight["additionalProperties"] = False
    return tight


def strict(components: dict) -> dict:
    """The components with every answer body tightened (those of responses.json and the problem)."""
    answers = {*schemas.schema("responses")["$defs"], "problem"}
    return {
        **components,
        "schemas": {
            name: tightened(schema) if name in answers else schema for name, schema in components["schemas"].items()
        },
    }


def validator(document: dict, ref: str, tight: bool = False) -> Draft202012Validator:
    """A validator of the document's schema at `ref`, with its references resolved inside the document."""
    components = strict(document["components"]) if tight else document["components"]
    return Draft202012Validator({"$ref": ref, "components": components})


class DocumentedClient(falcon.testing.TestClient):
    """A test client that checks every answer against the served OpenAPI document: its status is
    documented for the operation, its media type too, and its body matches the documented schema
    (strictly: no undocumented member). `seen` collects (path, method, status)."""

    def __init__(self, app):
        super().__init__(app)
        self.document = super().simulate_request("GET", "/v1/openapi.json").json
        self.seen: set[tuple[str, str, int]] = set()

    def simulate_request(self, method: str = "GET", path: str = "/", **kwargs):
        result = super().simulate_request(method, path, **kwargs)
        self.check(method.lower(), path, result)
        return result

    def check(self, method: str, path: str, result) -> None:
        _, _, _, template = self.app._router.find(path)
        clean = _PARAM.sub(r"{\1}", template)
        operation = self.document["paths"][clean][method]
        status = str(result.status_code)
        assert status in operation["responses"], f"{method} {clean} answered undocumented {status}: {result.text}"
        self.seen.add((clean, method, result.status_code))
        answer = operation["responses"][status]
        answer = resolve(self.document, answer["$ref"]) if "$ref" in answer else answer
        for name, header in answer.get("headers", {}).items():
            header = resolve(self.document, header["$ref"]) if "$ref" in header else header
            if header["required"]:
                assert name in result.headers, f"{method} {clean} {status} without {name}"
        if "content" not in answer:
            assert result.content == b""
            return
        (media_type,) = answer["content"]
        assert result.headers["content-type"] == media_type
        schema = answer["content"][media_type]["schema"]
        documented = Draft202012Validator({**schema, "components": strict(self.document["components"])})
        body = result.json if "json" in media_type else result.text
        problems = [f"{list(e.absolute_path)}: {e.message}" for e in documented.iter_errors(body)]
        assert not problems, f"{method} {clean} {status}: {problems}"


@pytest.fixture
def documented(config, database):
    return DocumentedClient(create_app(dataclasses.replace(config, keyring=KEYS), database))


def test_every_operation_of_a_real_flow_answers_as_documented(documented, tenant, database):
    """A workflow through every operation and state, and the usual refusals: the client checks each answer."""
    flow = Flow(documented, tenant, database)
    ns, c = flow.ns, documented
    everything = tenant.headers(*auth.SCOPES, queues=("inventory", "carrier"))
    for path in ("/healthz", "/readyz", "/v1/openapi.json", "/metrics"):
        assert c.simulate_get(path).status_code == 200

    notifications.create_subscription(  # N1: every change below is notified
        database, "acme", "ops", "https://hooks.example/", list(subscriptions.EVENT_TYPES), KEYS.encrypt("whsec_x")
    )
    definition = signal_flow_definition()
    assert flow.publish(definition) == 1
    assert flow.publish(definition) == 1  # 200: identical to the latest
    assert c.simulate_get(f"{ns}/definitions/flow/versions/1", headers=everything).status_code == 200
    assert c.simulate_get(f"{ns}/definitions/flow/versions/9", headers=everything).status_code == 404
    listed = c.simulate_get(f"{ns}/definitions", query_string="limit=1", headers=everything).json
    assert [d["name"] for d in listed["definitions"]] == ["flow"] and listed["next_after"] is None
    assert c.simulate_get(f"{ns}/definitions", query_string="after=a%20b", headers=everything).status_code == 422

    flow.start("wf-1", input={"order_id": "o-1"})
    flow.start("wf-1", input={"order_id": "o-1"})  # 200: the same start again
    conflict = c.simulate_post(
        f"{ns}/workflows",
        json={"definition": "flow", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "wf-1"},
        headers=everything,
    )
    assert conflict.status_code == 409
    flow.start("wf-2", input={"order_id": "o-2"})
    flow.workflow("wf-1")  # every step NOT_STARTED
    page = c.simulate_get(f"{ns}/workflows", query_string="limit=1&status=RUNNING", headers=everything)
    assert page.json["next_after"] is not None
    assert c.simulate_get(f"{ns}/workflows", query_string="status=LOST", headers=everything).status_code == 422

    flow.scan()
    flow.workflow("wf-1")  # reserve has its task
    claimed = flow.claim().json
    assert flow.heartbeat(claimed).status_code == 200
    assert flow.heartbeat({**claimed, "lease_token": "stale"}).status_code == 409
    assert flow.complete(claimed, result={"reservation_id": "r-1"}).status_code == 200
    flow.scan()
    assert flow.workflow(claimed["workflow_id"])["steps"][1]["wait"]["status"] == "WAITING"
    other = "wf-2" if claimed["workflow_id"] == "wf-1" else "wf-1"
    flow.finish_task({"reservation_id": "r-2"})

    assert flow.send("wf-1", "early-miss", payment("o-2")).json["status"] == "REJECTED"
    assert flow.send("wf-1", "k-1", payment("o-1")).status_code == 201
    routed = {k: v for k, v in payment("o-9").items() if not k.startswith("target_")}
    by_key = {**flow.signaller, "Idempotency-Key": "r-1"}
    parked = c.simulate_post(f"{ns}/signals", json=routed, headers=by_key).json
    assert parked["route"] == "PARKED"  # B1
    fact = c.simulate_get(f"{ns}/signals/{parked['signal_id']}", query_string="wait_seconds=0", headers=everything)
    assert fact.json["route"] == "PARKED"  # B6
    assert c.simulate_get(f"{ns}/signals/999999", headers=everything).status_code == 404
    assert c.simulate_get(f"{ns}/signals", query_string="status=PARKED&limit=1", headers=everything).status_code == 200
    assert c.simulate_get(f"{ns}/signals", query_string="status=LOST", headers=everything).status_code == 422
    assert c.simulate_post(f"{ns}/signals", json=payment("o-9"), headers=by_key).status_code == 422
    # an inbound webhook (W2-W5): verified and parked, refused unsigned, unmappable; the listings
    psp = inbound_test.make_source(database, KEYS, "stripe")
    webhook = f"/v1/inbound/acme/{psp.source}"
    body, signature = psp.event("evt_1", "o-9")
    as_json = {**signature, "Content-Type": "application/json"}
    assert c.simulate_post(webhook, body=body, headers=as_json).json["outcome"] == "PARKED"
    assert c.simulate_post(webhook, body=body, headers={"Content-Type": "application/json"}).status_code == 401
    not_json = {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header("[", psp.secret)}
    assert (
        c.simulate_post(webhook, body=b"[", headers={**not_json, "Content-Type": "application/json"}).status_code == 422
    )
    assert c.simulate_get(f"{ns}/inbound", headers=everything).json["sources"][0]["source"] == psp.source
    delivered = c.simulate_get(f"{ns}/inbound/{psp.source}/deliveries", query_string="limit=1", headers=everything)
    assert delivered.json["deliveries"][0]["outcome"] == "UNMAPPABLE"  # the newest first
    assert c.simulate_get(f"{ns}/inbound/nobody/deliveries", headers=everything).status_code == 404
    assert flow.send("wf-1", "k-1", payment("o-1")).headers["Idempotent-Replayed"] == "true"
    items = [{"workflow_id": "wf-1", "idempotency_key": "k-1", **payment("o-1")}, {"idempotency_key": "r-1", **routed}]
    items.append({"idempotency_key": "k-4"})
    batch = c.simulate_post(f"{ns}/signal-batches", json={"signals": items}, headers=flow.signaller)
    assert [r["status"] for r in batch.json["results"]] == [201, 201, 422]  # B8: replays, and a refusal
    assert flow.send("wf-1", "k-1", payment("o-1", reason="other")).status_code == 409
    assert flow.send("wf-1", "k-2", payment("o-1", payload={"amount": "x"})).status_code == 422
    assert flow.send("wf-2", "k-3", payment("o-2", payload=None), headers=everything).status_code in (201, 422)
    signals = c.simulate_get(f"{ns}/workflows/wf-1/signals", query_string="limit=1", headers=everything).json
    assert signals["next_after"] is not None
    assert flow.signal("wf-1", signals["signals"][0]["signal_id"]).status_code == 200
    assert flow.signal("wf-1", "999999").status_code == 404
    flow.scan()
    events = c.simulate_get(f"{ns}/workflows/wf-1/events", query_string="limit=1", headers=everything).json
    assert events["next_after"] == 1
    exported = c.simulate_get(f"{ns}/workflows/wf-1/export", headers=everything).json  # L2
    assert exported["workflow"]["workflow_id"] == "wf-1" and exported["signals"] and exported["tasks"]

    def control(workflow_id, verb, **body):
        return c.simulate_post(
            f"{ns}/workflows/{workflow_id}/{verb}", json={"reason": "ops", **body}, headers=everything
        )

    assert control(other, "pause").status_code == 200
    assert control(other, "pause").status_code == 409
    assert control(other, "resume").status_code == 200
    ship = flow.claim("carrier").json
    assert flow.complete(ship, "FAILED", error={"message": "no truck", "retryable": False}).status_code == 200
    flow.scan()
    assert flow.workflow(ship["workflow_id"])["status"] == "NEEDS_REVIEW"
    review = {"action": "retry_step", "step_key": "ship", "reason": "a truck came back"}
    assert control(ship["workflow_id"], "review", **review).status_code == 200
    assert control(ship["workflow_id"], "cancel").status_code == 200
    assert flow.claim("carrier").status_code == 204
    # N1, N3: the subscriptions and a subscription's notifications with their attempts
    assert c.simulate_get(f"{ns}/notify", headers=everything).json["subscriptions"][0]["name"] == "ops"
    notified = c.simulate_get(f"{ns}/notify/ops/deliveries", query_string="limit=2", headers=everything).json
    assert len(notified["deliveries"]) == 2 and notified["next_after"] is not None
    assert c.simulate_get(f"{ns}/notify/nobody/deliveries", headers=everything).status_code == 404
    assert (
        c.simulate_get(f"{ns}/notify/ops/deliveries", query_string="status=LOST", headers=everything).status_code == 422
    )

    # the usual refusals, each checked against its documented problem
    assert c.simulate_get(f"{ns}/workflows/wf-1").status_code == 401
    assert c.simulate_get(f"{ns}/workflows/wf-1", headers={"Authorization": "Bearer wv_nope"}).status_code == 401
    assert c.simulate_get(f"{ns}/workflows/wf-1", headers=tenant.headers("tasks:work")).status_code == 403
    assert c.simulate_get("/v1/namespaces/globex/workflows/wf-1", headers=everything).status_code == 404
    assert c.simulate_get(f"{ns}/workflows/a%20b", headers=everything).status_code == 404
    too_big = c.simulate_post(f"{ns}/definitions", body=b"x" * (2 * 1024 * 1024), headers=everything)
    assert too_big.status_code == 413
    as_text = c.simulate_post(f"{ns}/definitions", body=b"{}", headers={**everything, "Content-Type": "text/plain"})
    assert as_text.status_code == 415
    as_json = {**everything, "Content-Type": "application/json"}
    assert c.simulate_post(f"{ns}/definitions", body=b"{", headers=as_json).status_code == 400
    assert c.simulate_post(f"{ns}/definitions", json={"name": "x"}, headers=everything).status_code == 422

    documented_operations = {(p, m) for p, methods in c.document["paths"].items() for m in methods}
    succeeded = {(p, m) for p, m, status in c.seen if status < 300}
    assert succeeded == documented_operations
    assert {status for *_, status in c.seen} >= {200, 201, 204, 400, 401, 403, 404, 409, 413, 415, 422}


def test_a_documented_response_schema_catches_an_undocumented_member(client, tenant):
    """The strict check above can fail: a body with a member the document does not name is refused."""
    document = client.simulate_get("/v1/openapi.json").json
    check = validator(document, "#/components/schemas/lease", tight=True)
    assert check.is_valid({"cancel_requested": False, "lease_expires_at": "2026-01-01T00:00:00.000000Z"})
    assert not check.is_valid(
        {"cancel_requested": False, "lease_expires_at": "2026-01-01T00:00:00.000000Z", "secret": 1}
    )
    assert not check.is_valid({"cancel_requested": False, "lease_expires_at": "2026-01-01T00:00:00Z"})
