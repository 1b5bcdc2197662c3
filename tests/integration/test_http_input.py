"""Bad input gets a clear problem+json and changes nothing; never a 500 (S1.9, §11)."""

import json

import pytest

DOC = {"name": "order", "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}]}


def count(database, table):
    return database.run(lambda tx: tx.one(f"SELECT COUNT(*) AS n FROM `{table}`"))["n"]


@pytest.fixture
def writer(tenant):
    return tenant.headers("definitions:write", "workflows:start", "workflows:read")


def post_raw(client, path, body: bytes, headers, content_type="application/json"):
    return client.simulate_post(path, body=body, headers={**headers, "Content-Type": content_type})


def test_invalid_json_is_400_and_stores_nothing(client, database, writer):
    result = post_raw(client, "/v1/namespaces/acme/definitions", b'{"name": "x", ', writer)
    assert (result.status_code, result.json["code"]) == (400, "INVALID_JSON")
    assert result.json["type"] == "urn:weave:problem:INVALID_JSON"
    assert set(result.json) == {"type", "title", "status", "detail", "code", "errors"}
    assert count(database, "definitions") == 0


def test_s1_11_duplicate_keys_are_refused_not_silently_merged(client, database, writer):
    body = b'{"name": "order", "name": "other", "steps": []}'
    result = post_raw(client, "/v1/namespaces/acme/definitions", body, writer)
    assert result.status_code == 400
    assert "duplicate object key 'name'" in result.json["detail"]
    assert count(database, "definitions") == 0


def test_nan_is_refused(client, writer):
    body = b'{"definition": "order", "version": 1, "input": {"x": NaN}, "deadline_seconds": 5}'
    assert post_raw(client, "/v1/namespaces/acme/workflows", body, writer).status_code == 400


def test_issue_10_11_a_number_no_common_parser_reads_is_422_and_stores_nothing(client, database, writer):
    assert post_raw(client, "/v1/namespaces/acme/definitions", json.dumps(DOC).encode(), writer).status_code == 201
    body = b'{"definition": "order", "version": 1, "input": {"n": ' + b"7" * 4301 + b'}, "deadline_seconds": 5}'
    result = post_raw(client, "/v1/namespaces/acme/workflows", body, writer)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert "4301 characters; at most 1000" in result.json["detail"]
    assert count(database, "instances") == 0


def test_issue_25_9_the_apis_integer_fields_take_integral_decimals_as_the_integers_they_are(flow):
    """JSON Schema 2020-12 counts `30.0` and `6e1` as integers: the definition, start, claim and
    heartbeat fields the schemas type `integer` take them, and the code gets ints (a Decimal
    would fail in a `timedelta`, in the claim's long-poll clock, in SQL)."""
    document = {
        "name": "order",
        "steps": [
            {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 3e1, "max_attempts": 2.0}
        ],
    }
    assert flow.publish(document) == 1
    published = flow.client.simulate_get(f"{flow.ns}/definitions/order/versions/1", headers=flow.headers)
    assert published.json["document"]["steps"][0] == {
        "key": "reserve",
        "type": "TASK",
        "queue": "inventory",
        "timeout_seconds": 30,
        "max_attempts": 2,
    }
    # the same document written with ints: the same version, not a new one
    document["steps"][0].update(timeout_seconds=30, max_attempts=2)
    again = flow.client.simulate_post(f"{flow.ns}/definitions", json=document, headers=flow.headers)
    assert (again.status_code, again.json["version"]) == (200, 1)

    started = flow.start("w1", definition="order", version=1.0, deadline_seconds=6e1)
    assert flow.start("w1", definition="order", version=1, deadline_seconds=60) == started  # the same request
    flow.scan()
    claimed = flow.claim(lease_seconds=6e1, wait_seconds=0.0)
    assert claimed.status_code == 200, claimed.text
    assert claimed.json["max_attempts"] == 2
    beat = flow.heartbeat(claimed.json, lease_seconds=4.5e1)
    assert beat.status_code == 200, beat.text
    (task,) = flow.rows(
        "SELECT max_attempts, TIMESTAMPDIFF(SECOND, created_at, deadline_at) AS timeout,"
        " TIMESTAMPDIFF(SECOND, created_at, lease_expires_at) AS lease FROM tasks"
    )
    assert task == {"max_attempts": 2, "timeout": 30, "lease": 45}
    refused = flow.claim(lease_seconds=1.5)
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")
    assert refused.json["errors"] == [
        {"pointer": "/lease_seconds", "message": "Decimal('1.5') is not of type 'integer'"}
    ]


def test_wrong_content_type_is_415(client, database, writer):
    result = post_raw(client, "/v1/namespaces/acme/definitions", json.dumps(DOC).encode(), writer, "text/plain")
    assert (result.status_code, result.json["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert count(database, "definitions") == 0


def test_json_with_charset_parameter_is_accepted(client, writer):
    result = post_raw(
        client, "/v1/namespaces/acme/definitions", json.dumps(DOC).encode(), writer, "application/json; charset=utf-8"
    )
    assert result.status_code == 201


def test_body_over_the_cap_is_413_before_parsing(client, database, writer):
    body = b"{" + b" " * (1024 * 1024)  # not even JSON: refused for its size, never parsed
    result = post_raw(client, "/v1/namespaces/acme/definitions", body, writer)
    assert (result.status_code, result.json["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert count(database, "definitions") == 0


def test_schema_violations_are_422_with_pointers(client, database, writer):
    bad = {
        "name": "bad name",
        "steps": [{"key": "a", "type": "TASK", "queue": "inventory"}, {"key": "b", "type": "WHAT"}],
        "extra": 1,
    }
    result = client.simulate_post("/v1/namespaces/acme/definitions", json=bad, headers=writer)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    pointers = {e["pointer"] for e in result.json["errors"]}
    assert {"", "/name", "/steps/0", "/steps/1/type"} <= pointers
    assert count(database, "definitions") == 0


def test_unknown_route_and_method_are_problems(client, writer):
    missing = client.simulate_get("/v1/nothing-here", headers=writer)
    assert (missing.status_code, missing.json["code"]) == (404, "NOT_FOUND")
    wrong = client.simulate_delete("/v1/namespaces/acme/definitions", headers=writer)
    assert (wrong.status_code, wrong.json["code"]) == (405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize("query", ["after=-1", "after=x", "limit=0", "limit=1001", "limit=²", "after=" + "9" * 50])
def test_bad_paging_parameters_are_422(client, writer, query):
    result = client.simulate_get("/v1/namespaces/acme/workflows/w/events", query_string=query, headers=writer)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")


GARBAGE = [
    b"",
    b"null",
    b"[]",
    b"1",
    b'"s"',
    b"{}",
    b'{"steps": null}',
    b'{"name": 1}',
    b"\xff\xfe",
    b'{"definition": "x", "version": "1", "input": 1, "deadline_seconds": 1}',
    b'{"definition": "x", "version',
    b"[" * 5000,
    b'{"a": 1e999999}',
    b'{"definition": "order", "version": 99999999999, "input": null, "deadline_seconds": 0}',
]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/namespaces/acme/definitions",
        "/v1/namespaces/acme/workflows",
        "/v1/namespaces/acme/workflows/w1/signals",
        "/v1/namespaces/acme/workflows/w1/pause",
        "/v1/namespaces/acme/queues/inventory/claim",
        "/v1/namespaces/acme/tasks/1/complete",
        "/v1/namespaces/acme/tasks/1/heartbeat",
    ],
)
def test_garbage_never_gives_500_and_stores_nothing(client, database, tenant, path):
    everything = tenant.headers(
        "definitions:write",
        "workflows:start",
        "workflows:read",
        "workflows:signal",
        "workflows:control",
        "tasks:work",
        queues=("inventory", "carrier"),
    )
    everything["Idempotency-Key"] = "k1"
    client.simulate_post("/v1/namespaces/acme/definitions", json=DOC, headers=everything)
    client.simulate_post(
        "/v1/namespaces/acme/workflows",
        headers=everything,
        json={"definition": "order", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "w1"},
    )
    before = {t: count(database, t) for t in ("definitions", "instances", "signals", "tasks", "audit_records")}
    for body in GARBAGE:
        result = post_raw(client, path, body, everything)
        assert 400 <= result.status_code < 500, (body, result.status_code, result.text)
        assert result.headers["content-type"] == "application/problem+json"
    assert {t: count(database, t) for t in before} == before
