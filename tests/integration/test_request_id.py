"""SPEC §12: every response carries X-Request-Id, the client's if it sent a valid one."""

import re

import pytest

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.mark.parametrize(
    "method, path, headers, status",
    [
        ("GET", "/healthz", {}, 200),
        ("GET", "/v1/namespaces/acme/workflows/w1", {}, 401),
        ("GET", "/v1/no/such/route", {}, 404),
        ("POST", "/v1/namespaces/acme/definitions", {"Content-Length": str(10**9)}, 413),
    ],
    ids=["ok", "unauthenticated", "unknown_route", "too_large"],
)
def test_every_response_carries_a_request_id(client, method, path, headers, status):
    result = client.simulate_request(method, path, headers=headers)
    assert result.status_code == status
    assert GENERATED.fullmatch(result.headers["x-request-id"])


def test_two_requests_get_two_ids(client):
    first, second = (client.simulate_get("/healthz").headers["x-request-id"] for _ in range(2))
    assert first != second


def test_the_clients_valid_request_id_is_echoed(client):
    for sent in ("req-42", "A.b_c:D-1", "x" * 128):
        assert client.simulate_get("/healthz", headers={"X-Request-Id": sent}).headers["x-request-id"] == sent


@pytest.mark.parametrize("sent", ["", "x" * 129, "has space", "new\\nline", "é", "a;b"])
def test_an_unusable_request_id_is_replaced(client, sent):
    echoed = client.simulate_get("/healthz", headers={"X-Request-Id": sent}).headers["x-request-id"]
    assert echoed != sent and GENERATED.fullmatch(echoed)
