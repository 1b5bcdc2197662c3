"""Defects that the schema fuzzer (tests/integration/test_schema_fuzz.py) and the documented-answers check
(tests/integration/test_openapi.py) found, each reproduced here without them."""

import pytest


@pytest.mark.parametrize(
    "authorization",
    [None, "Basic dXNlcjpwYXNz", "Bearer not-a-weave-token", "Bearer wv_unknown"],
)
def test_every_401_carries_the_bearer_challenge(client, tenant, authorization):
    """RFC 9110 §11.6.1: a 401 carries WWW-Authenticate. Only the unknown token's did; a missing
    or malformed Authorization header was answered without it."""
    headers = {"Authorization": authorization} if authorization else {}
    result = client.simulate_get("/v1/namespaces/acme/workflows/wf", headers=headers)
    assert (result.status_code, result.json["code"]) == (401, "UNAUTHENTICATED")
    assert result.headers["WWW-Authenticate"] == 'Bearer realm="weave"'


def test_an_unknown_query_parameter_is_refused_not_ignored(client, tenant, database):
    """A misspelt filter was ignored: `?stauts=NEEDS_REVIEW` listed every workflow."""
    headers = tenant.headers("workflows:read", queues=("inventory", "carrier"))
    result = client.simulate_get("/v1/namespaces/acme/workflows", query_string="stauts=NEEDS_REVIEW", headers=headers)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert result.json["errors"] == [{"pointer": "?stauts", "message": "not a parameter of this operation"}]
    declared = client.simulate_get("/v1/namespaces/acme/workflows", query_string="status=RUNNING", headers=headers)
    assert declared.status_code == 200
    no_query = client.simulate_get("/v1/namespaces/acme/workflows/wf", query_string="x=1", headers=headers)
    assert no_query.status_code == 422 and "takes none" in no_query.json["detail"]


def test_a_query_parameter_given_twice_is_refused_not_read_as_one(client, tenant):
    """`?status=RUNNING&status=PAUSED` was answered with one of the two filters, unsaid which."""
    headers = tenant.headers("workflows:read", queues=("inventory", "carrier"))
    result = client.simulate_get(
        "/v1/namespaces/acme/workflows", query_string="status=RUNNING&status=PAUSED", headers=headers
    )
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert result.json["errors"] == [{"pointer": "?status", "message": "given more than once"}]
