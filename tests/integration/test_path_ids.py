"""Ids in URL paths are checked against their character rules before any SQL (issue 10, item 5).

An id that breaks its rule names nothing that can exist: every route answers it with its own 404
code, with or without a token, and writes nothing. A value the database refuses anyway (an
illegal mix of collations, an invalid string) is 422, never 500.
"""

import re
from urllib.parse import quote

import pymysql
import pytest
from helpers import payment, signal_flow_definition
from test_authorization import CONFIG, OPERATIONS, SAMPLE, mounted

from weave import auth, db, dberrors, http, schemas
from weave.app import create_app
from weave.sql import instances

# What an id of each field that cannot exist is answered; a namespace or queue gets the
# operation's own code (tests/integration/test_authorization.py lists it per operation).
FIELD_NOT_FOUND = {
    "workflow_id": "WORKFLOW_NOT_FOUND",
    "signal_id": "SIGNAL_NOT_FOUND",
    "task_id": "TASK_NOT_FOUND",
    "name": "DEFINITION_NOT_FOUND",
}
LONGEST = {
    "namespace": 64,
    "queue": 64,
    "source": 64,
    "subscription": 64,
    "name": 128,
    "workflow_id": 128,
    "signal_id": 19,
    "task_id": 19,
}
# As they appear in the URL (percent-encoded): non-ASCII (é, an emoji, a full-width digit), a byte
# that is not UTF-8, NUL, CR LF, a space, a sign and a point.
IMPOSSIBLE = ["%C3%A9", "%F0%9F%98%80", "%EF%BC%91", "%FF", "a%00b", "a%0D%0Ab", "a%20b", "-1", "1.5"]
ROW_IDS_ONLY = {"-1", "1.5"}  # fine as names and workflow ids

# A valid body for every POST, by the last segment of its path (a new POST route must be added here).
BODIES = {
    "definitions": signal_flow_definition(),
    "workflows": {"definition": "flow", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "w2"},
    "pause": {"reason": "r"},
    "resume": {"reason": "r"},
    "cancel": {"reason": "r"},
    "review": {"action": "cancel", "reason": "r"},
    "signals": payment(),
    "signal-batches": {"signals": [{**payment(), "workflow_id": "w1", "idempotency_key": "k1"}]},
    "claim": {"worker_id": "w", "lease_seconds": 30},
    "heartbeat": {"lease_token": "t"},
    "complete": {"lease_token": "t", "outcome": "CANCELLED"},
}

CASES = [
    (method, template, field, FIELD_NOT_FOUND.get(field, not_found))
    for method, template, not_found, _ in OPERATIONS
    for field in re.findall(r"{(\w+)}", template)  # `{version:int(min=1)}` is Falcon's to convert
]


def url(template: str, field: str, value: str) -> str:
    return re.sub(r"{(\w+)(?::[^}]*)?}", lambda m: value if m.group(1) == field else SAMPLE[m.group(1)], template)


def table_counts(database, tables) -> dict[str, int]:
    return database.read(lambda tx: {t: tx.one(f"SELECT COUNT(*) AS n FROM `{t}`")["n"] for t in tables})


@pytest.mark.parametrize(
    "method, template, field, code",
    CASES,
    ids=[f"{method} {template.split('}', 1)[1]} {field}" for method, template, field, _ in CASES],
)
def test_an_id_that_cannot_exist_is_the_routes_404_with_or_without_a_token_and_writes_nothing(
    client, database, weave_tables, tenant, method, template, field, code
):
    everything = {**tenant.headers(*auth.SCOPES, queues=("inventory", "carrier")), "Idempotency-Key": "k1"}
    ns = "/v1/namespaces/acme"
    client.simulate_post(f"{ns}/definitions", json=signal_flow_definition(), headers=everything)
    started = client.simulate_post(
        f"{ns}/workflows", json={**BODIES["workflows"], "workflow_id": "w1"}, headers=everything
    )
    assert started.status_code == 201, started.text
    before = table_counts(database, weave_tables)
    body = BODIES[template.rsplit("/", 1)[1]] if method == "POST" else None
    too_long = "9" * (LONGEST[field] + 1)
    for value in [too_long] + [v for v in IMPOSSIBLE if field in ("signal_id", "task_id") or v not in ROW_IDS_ONLY]:
        for headers in (everything, {"Idempotency-Key": "k1"}):  # no token: refused before it is looked at
            result = client.simulate_request(method, url(template, field, value), headers=headers, json=body)
            assert (result.status_code, result.json["code"]) == (404, code), (value, result.text)
            assert result.headers["content-type"] == "application/problem+json"
    assert table_counts(database, weave_tables) == before


def test_every_route_field_has_a_rule():
    fields = {field for path, _ in mounted(create_app(CONFIG)) for field in re.findall(r"{(\w+)}", path)}
    assert fields == set(http.PATH_IDS)


def test_the_path_rules_are_the_rules_that_create_the_ids_and_the_openapi_says_them(client):
    definition = schemas.schema("definition")
    assert (
        f"^{http.PATH_IDS['workflow_id'].rule.pattern}$"
        == (schemas.schema("start_workflow")["properties"]["workflow_id"]["pattern"])
    )
    assert f"^{http.PATH_IDS['name'].rule.pattern}$" == definition["properties"]["name"]["pattern"]
    assert f"^{http.PATH_IDS['queue'].rule.pattern}$" == definition["$defs"]["queue"]["pattern"]
    document = client.simulate_get("/v1/openapi.json").json
    claim = document["paths"]["/v1/namespaces/{namespace}/queues/{queue}/claim"]["post"]
    queue = next(p for p in claim["parameters"] if p["name"] == "queue")
    assert queue["schema"]["pattern"] == definition["$defs"]["queue"]["pattern"]


def test_ids_at_their_limits_pass_the_check(client, tenant):
    """The rules refuse nothing that can exist: the longest and oddest possible ids reach the lookup."""
    headers = tenant.headers(*auth.SCOPES, queues=("inventory", "carrier"))
    workflow_id = "".join(chr(c) for c in range(0x21, 0x7F) if c != 0x2F)[:128]  # every character allowed
    # Percent-encoded as a client must (`?` and `#` would end the path), so that all of it arrives.
    result = client.simulate_get(f"/v1/namespaces/acme/workflows/{quote(workflow_id, safe='')}", headers=headers)
    assert (result.status_code, result.json["code"]) == (404, "WORKFLOW_NOT_FOUND")
    assert f"{workflow_id!r} does not exist" in result.json["detail"]  # answered by the lookup, not by the rule
    name = "a" * 128
    result = client.simulate_get(f"/v1/namespaces/acme/definitions/{name}/versions/1", headers=headers)
    assert "does not exist" in result.json["detail"]


# ---- the safety net: a value the database refuses is never a 500 --------------------------------------


@pytest.mark.parametrize("code", sorted(dberrors.INVALID_VALUE_CODES))
def test_translate_maps_refused_values_to_invalid_value(code):
    assert isinstance(db.translate(pymysql.err.OperationalError(code, "refused")), db.InvalidValue)


def test_the_server_refuses_a_non_ascii_workflow_id_as_an_invalid_value(database, tenant):
    principal = tenant.principal("workflows:read")
    with pytest.raises(db.InvalidValue, match="^1267: Illegal mix of collations"):
        instances.read_workflow(database, principal, "é")


def test_a_refused_value_that_gets_past_the_rules_is_422_not_500(client, tenant, monkeypatch):
    anything = http.PathId(re.compile(r".+", re.S), "anything", None)
    monkeypatch.setitem(http.PATH_IDS, "workflow_id", anything)
    result = client.simulate_get("/v1/namespaces/acme/workflows/%C3%A9", headers=tenant.headers("workflows:read"))
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert "Illegal mix" not in result.text  # the database's words stay in the log
