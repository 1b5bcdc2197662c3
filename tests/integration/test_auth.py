"""Bearer tokens, scopes, namespaces: 401 / 403 / 404, by example; tests/integration/test_security_matrix.py
checks each on every operation."""

import hashlib

import pytest

from weave import auth
from weave.sql import tenancy

DOC = {"name": "order", "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}]}


def problem_code(result):
    assert result.headers["content-type"] == "application/problem+json"
    return result.json["code"]


def test_tokens_are_256_bit_prefixed_and_stored_only_as_sha256(database, tenant, weave_tables):
    token = tenant.token("workflows:read")
    assert token.startswith("wv_") and len(token) >= 3 + 43
    rows = database.run(lambda tx: tx.all("SELECT token_sha256 FROM credentials"))
    assert [r["token_sha256"] for r in rows] == [hashlib.sha256(token.encode()).digest()]

    def every_value(tx):
        for table in weave_tables:
            for row in tx.all(f"SELECT * FROM `{table}`"):
                yield from row.values()

    values = database.run(lambda tx: list(every_value(tx)))
    secret = token[3:]
    assert not [
        v
        for v in values
        if isinstance(v, (str, bytes)) and (secret in (v if isinstance(v, str) else v.decode("latin1")))
    ]


def test_expired_token_is_401_exactly_at_expiry(client, tenant, clock):
    headers = tenant.headers("workflows:read", expires_in=60)
    clock.advance(59.999999)
    assert client.simulate_get("/v1/namespaces/acme/workflows/x", headers=headers).status_code == 404
    clock.advance(0.000001)
    assert client.simulate_get("/v1/namespaces/acme/workflows/x", headers=headers).status_code == 401


def test_d4_s1_8_publish_right_grants_no_read_or_signal_right(client, tenant):
    headers = tenant.headers("definitions:write")
    assert client.simulate_post("/v1/namespaces/acme/definitions", json=DOC, headers=headers).status_code == 201
    result = client.simulate_get("/v1/namespaces/acme/workflows/x", headers=headers)
    assert result.status_code == 403


def test_other_namespace_is_404_never_403(client, tenant, other_tenant):
    writer = tenant.headers("definitions:write", "workflows:start", "workflows:read", queues=("inventory",))
    assert client.simulate_post("/v1/namespaces/acme/definitions", json=DOC, headers=writer).status_code == 201
    start = {"definition": "order", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "w1"}
    assert client.simulate_post("/v1/namespaces/acme/workflows", json=start, headers=writer).status_code == 201

    # A fully privileged credential of another namespace sees nothing, with or without the scope.
    for scopes in (("workflows:read", "definitions:read"), ("tasks:work",)):
        outsider = other_tenant.headers(*scopes)
        read = client.simulate_get("/v1/namespaces/acme/workflows/w1", headers=outsider)
        assert (read.status_code, problem_code(read)) == (404, "WORKFLOW_NOT_FOUND")
        events = client.simulate_get("/v1/namespaces/acme/workflows/w1/events", headers=outsider)
        assert events.status_code == 404
        definition = client.simulate_get("/v1/namespaces/acme/definitions/order/versions/1", headers=outsider)
        assert (definition.status_code, problem_code(definition)) == (404, "DEFINITION_NOT_FOUND")
    # ... and its own namespace has no such workflow either.
    own = client.simulate_get("/v1/namespaces/globex/workflows/w1", headers=other_tenant.headers("workflows:read"))
    assert own.status_code == 404


def test_public_endpoints_need_no_token(client):
    assert client.simulate_get("/healthz").status_code == 200
    assert client.simulate_get("/readyz").status_code == 200
    assert client.simulate_get("/v1/openapi.json").status_code == 200


def test_identity_is_cached_but_status_quota_and_revocation_are_read_on_every_request(database, tenant):
    token = tenant.token("workflows:signal", queues=())
    first = tenancy.authenticate(database, auth.token_hash(token))
    assert first.application_status == "ACTIVE" and first.signals_per_minute is None
    database.run(lambda tx: tx.execute("UPDATE applications SET signals_per_minute = 7"))
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    second = tenancy.authenticate(database, auth.token_hash(token))
    assert (second.application_status, second.signals_per_minute) == ("DISABLED", 7)
    assert (second.credential_id, second.namespace, second.actor, second.scopes) == (
        first.credential_id,
        first.namespace,
        first.actor,
        first.scopes,
    )
    tenancy.revoke_credential(database, "acme", first.credential_id)
    assert tenancy.authenticate(database, auth.token_hash(token)) is None


# ---- issue 10, item 6: every operation on an instance needs a grant for every queue it uses ---------

TWO_QUEUES = {
    "name": "order",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30},
        {"key": "ship", "type": "TASK", "queue": "carrier", "timeout_seconds": 30},
    ],
}
START = {"definition": "order", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "w1"}


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/workflows", {**START, "workflow_id": "w2"}),
        ("POST", "/workflows", START),  # the idempotent replay of an existing start, too
        ("GET", "/workflows/w1", None),
        ("GET", "/workflows/w1/events", None),
        ("POST", "/workflows/w1/pause", {"reason": "look"}),
        ("POST", "/workflows/w1/cancel", {"reason": "look"}),
        ("GET", "/workflows/w1/signals", None),
        ("GET", "/workflows/w1/signals/1", None),
    ],
    ids=["start", "start-replay", "read", "events", "pause", "cancel", "signals", "signal"],
)
def test_issue_10_6_an_instance_is_refused_to_a_credential_without_every_queue_grant(
    client, database, tenant, method, path, body
):
    everything = tenant.headers(*auth.SCOPES, queues=("inventory", "carrier"))
    assert (
        client.simulate_post("/v1/namespaces/acme/definitions", json=TWO_QUEUES, headers=everything).status_code == 201
    )
    assert client.simulate_post("/v1/namespaces/acme/workflows", json=START, headers=everything).status_code == 201
    history = client.simulate_get("/v1/namespaces/acme/workflows/w1/events", headers=everything).json["events"]

    partial = tenant.headers(*auth.SCOPES, queues=("inventory",))  # every scope, one of the two queues
    result = client.simulate_request(method, f"/v1/namespaces/acme{path}", json=body, headers=partial)
    assert (result.status_code, result.json["code"]) == (403, "FORBIDDEN")
    assert "carrier" in result.json["detail"]
    # ... and nothing changed.
    after = client.simulate_get("/v1/namespaces/acme/workflows/w1", headers=everything).json
    assert (after["status"], after["gate"]) == ("RUNNING", "OPEN")
    assert client.simulate_get("/v1/namespaces/acme/workflows/w1/events", headers=everything).json["events"] == history
    assert client.simulate_get("/v1/namespaces/acme/workflows/w2", headers=everything).status_code == 404
