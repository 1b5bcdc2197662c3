"""I1, I2, I5: start (idempotent on workflow_id), read, history; one transaction; the clock seam."""

import threading
from datetime import datetime, timedelta

import pytest

from weave.db import Database
from weave.sql import instances
from weave.tx import DatabaseClock

DOC = {
    "name": "order",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30},
        {
            "key": "payment",
            "type": "SIGNAL",
            "timeout_seconds": 3600,
            "correlation": "/input/order_id",
            "signal": {"name": "payment.settled", "payload_version": "v1", "payload_schema": {"type": "object"}},
        },
    ],
}


@pytest.fixture
def headers(client, tenant):
    headers = tenant.headers("definitions:write", "workflows:start", "workflows:read", queues=("inventory",))
    assert client.simulate_post("/v1/namespaces/acme/definitions", json=DOC, headers=headers).status_code == 201
    return headers


def start(client, headers, **overrides):
    body = {
        "definition": "order",
        "version": 1,
        "input": {"order_id": "o-1"},
        "deadline_seconds": 600,
        "workflow_id": "wf-1",
        **overrides,
    }
    body = {k: v for k, v in body.items() if v is not None}
    return client.simulate_post("/v1/namespaces/acme/workflows", json=body, headers=headers)


def rows(database, sql):
    return database.run(lambda tx: tx.all(sql))


def test_i1_i2_start_writes_instance_root_checkpoint_event_and_audit(client, headers, database, clock):
    result = start(client, headers)
    assert result.status_code == 201
    body = result.json
    assert body["workflow_id"] == "wf-1" and body["namespace"] == "acme"
    assert (body["definition"], body["version"], body["status"], body["gate"]) == ("order", 1, "RUNNING", "OPEN")
    assert body["review_reason"] is None and body["input"] == {"order_id": "o-1"}
    assert body["created_at"] == "2026-11-30T07:00:00.000000Z"
    assert body["deadline_at"] == "2026-11-30T07:10:00.000000Z"
    assert [
        (s["key"], s["type"], s["status"], s["activation_sequence"], s["wait"], s["task"]) for s in body["steps"]
    ] == [("reserve", "TASK", "NOT_STARTED", None, None, None), ("payment", "SIGNAL", "NOT_STARTED", None, None, None)]

    checkpoints = rows(
        database, "SELECT kind, wait_id, due_at, available_at, attempts FROM checkpoints ORDER BY due_at"
    )
    now, deadline = clock.now(), clock.now() + timedelta(seconds=600)
    assert checkpoints == [  # the first look, and the one at the total deadline (I6)
        {"kind": "ROOT", "wait_id": None, "due_at": now, "available_at": now, "attempts": 0},
        {"kind": "ROOT", "wait_id": None, "due_at": deadline, "available_at": deadline, "attempts": 0},
    ]
    (event,) = rows(database, "SELECT seq, type FROM events")
    assert event == {"seq": 1, "type": "WORKFLOW_STARTED"}
    (audit,) = rows(
        database,
        "SELECT actor, action, instance_id IS NOT NULL AS has_instance, request_digest "
        "FROM audit_records WHERE action = 'workflow.start'",
    )
    assert audit["actor"] == "tester" and audit["has_instance"] == 1 and len(audit["request_digest"]) == 64


def test_i1_same_workflow_id_same_request_is_200_with_the_existing_instance(client, headers, database, clock):
    first = start(client, headers)
    clock.advance(5)
    again = start(client, headers)
    assert again.status_code == 200
    assert again.json == first.json
    assert len(rows(database, "SELECT id FROM instances")) == 1
    assert len(rows(database, "SELECT id FROM events")) == 1


@pytest.mark.parametrize("change", [{"input": {"order_id": "o-2"}}, {"deadline_seconds": 601}])
def test_i1_same_workflow_id_other_request_is_409(client, headers, database, change):
    start(client, headers)
    result = start(client, headers, **change)
    assert (result.status_code, result.json["code"]) == (409, "WORKFLOW_EXISTS")
    assert len(rows(database, "SELECT id FROM instances")) == 1


def test_i1_member_order_of_the_input_does_not_change_the_request(client, headers):
    start(client, headers, input={"a": 1, "b": 2})
    assert start(client, headers, input={"b": 2, "a": 1}).status_code == 200


def test_i1_workflow_id_is_generated_when_absent(client, headers, database):
    first = start(client, headers, workflow_id=None)
    second = start(client, headers, workflow_id=None)
    assert first.status_code == second.status_code == 201
    assert first.json["workflow_id"] != second.json["workflow_id"]
    assert first.json["workflow_id"].startswith("wf_")


@pytest.mark.parametrize(
    "change, pointer",
    [
        ({"deadline_seconds": 0}, "/deadline_seconds"),
        ({"deadline_seconds": 366 * 86400 + 1}, "/deadline_seconds"),
        ({"workflow_id": ""}, "/workflow_id"),
        ({"workflow_id": "x" * 129}, "/workflow_id"),
        ({"workflow_id": "tab\there"}, "/workflow_id"),
        ({"workflow_id": "é"}, "/workflow_id"),
        ({"version": 0}, "/version"),
        ({"version": "1"}, "/version"),
        ({"input": None, "extra": 1}, ""),
    ],
)
def test_i1_invalid_start_is_422(client, headers, database, change, pointer):
    result = start(client, headers, **change)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED"), result.text
    assert pointer in [e["pointer"] for e in result.json["errors"]]
    assert rows(database, "SELECT id FROM instances") == []


def test_i1_deadline_limits_are_inclusive(client, headers):
    assert start(client, headers, workflow_id="a", deadline_seconds=1).status_code == 201
    assert start(client, headers, workflow_id="b", deadline_seconds=366 * 86400).status_code == 201


def test_i1_unknown_definition_or_version_is_404(client, headers):
    assert start(client, headers, definition="nope").json["code"] == "DEFINITION_NOT_FOUND"
    result = start(client, headers, version=2)
    assert (result.status_code, result.json["code"]) == (404, "DEFINITION_NOT_FOUND")


def test_input_of_256_kib_is_accepted_and_one_byte_more_is_413(client, headers, database):
    overhead = len('""')
    exact = "x" * (256 * 1024 - overhead)
    assert start(client, headers, workflow_id="exact", input=exact).status_code == 201
    over = start(client, headers, workflow_id="over", input=exact + "x")
    assert (over.status_code, over.json["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert [r["workflow_id"] for r in rows(database, "SELECT workflow_id FROM instances")] == ["exact"]


def test_s1_11_input_keeps_exact_decimals_and_member_order(client, headers, database):
    body = (
        b'{"definition":"order","version":1,"deadline_seconds":60,"workflow_id":"exact",'
        b'"input":{"z":1.10,"a":123456789012345678901234567890.000000000000000000001}}'
    )
    result = client.simulate_post(
        "/v1/namespaces/acme/workflows", body=body, headers={**headers, "Content-Type": "application/json"}
    )
    assert result.status_code == 201
    expected = '{"z":1.10,"a":123456789012345678901234567890.000000000000000000001}'
    assert f'"input":{expected}' in result.text
    assert rows(database, "SELECT input FROM instances") == [{"input": expected}]


def test_i2_start_is_one_transaction(client, headers, database):
    """A failure just before COMMIT leaves no instance, checkpoint, event or audit record."""

    def fail(tx, unit):
        if unit == "start_workflow":
            raise RuntimeError("injected failure before commit")

    database.before_commit = fail
    result = start(client, headers)
    database.before_commit = None
    assert result.status_code == 500
    for table in ("instances", "checkpoints", "events"):
        assert rows(database, f"SELECT id FROM {table}") == []
    assert rows(database, "SELECT id FROM audit_records WHERE action = 'workflow.start'") == []
    assert start(client, headers).status_code == 201


def test_i1_concurrent_starts_of_one_workflow_id_make_one_instance(database, tenant, client, headers):
    starter = tenant.principal("workflows:start", queues=("inventory",))
    request = instances.StartRequest("race", "order", 1, "{}", 60, "d" * 64)
    barrier = threading.Barrier(8)
    outcomes = []

    def go():
        barrier.wait()
        facts, created = instances.start_workflow(database, starter, request)
        outcomes.append((facts.instance["id"], created))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 8
    assert len({instance_id for instance_id, _ in outcomes}) == 1
    assert sorted(created for _, created in outcomes) == [False] * 7 + [True]
    assert len(rows(database, "SELECT id FROM checkpoints")) == 2  # one start's: due now, and at the deadline


def test_read_workflow_and_404(client, headers):
    start(client, headers)
    read = client.simulate_get("/v1/namespaces/acme/workflows/wf-1", headers=headers)
    assert read.status_code == 200 and read.json["status"] == "RUNNING"
    missing = client.simulate_get("/v1/namespaces/acme/workflows/wf-2", headers=headers)
    assert (missing.status_code, missing.json["code"]) == (404, "WORKFLOW_NOT_FOUND")


def test_events_are_in_order_and_paged(client, headers, database, clock):
    start(client, headers)
    instance_id = rows(database, "SELECT id FROM instances")[0]["id"]

    from weave.sql import events

    def add_events(tx):
        tx.one("SELECT id FROM instances WHERE id = %s FOR UPDATE", (instance_id,))
        for i in range(4):
            events.append(tx, instance_id, f"TEST_{i}", {"i": i})

    clock.advance(1)
    database.run(add_events)
    url = "/v1/namespaces/acme/workflows/wf-1/events"
    page1 = client.simulate_get(url, query_string="limit=2", headers=headers).json
    assert [e["seq"] for e in page1["events"]] == [1, 2] and page1["next_after"] == 2
    assert page1["events"][0]["type"] == "WORKFLOW_STARTED"
    page2 = client.simulate_get(url, query_string="limit=2&after=2", headers=headers).json
    assert [e["type"] for e in page2["events"]] == ["TEST_1", "TEST_2"] and page2["next_after"] == 4
    page3 = client.simulate_get(url, query_string="limit=2&after=4", headers=headers).json
    assert [e["type"] for e in page3["events"]] == ["TEST_3"] and page3["next_after"] is None
    assert page3["events"][0]["data"] == {"i": 3} and page3["events"][0]["at"] == "2026-11-30T07:00:01.000000Z"
    everything = client.simulate_get(url, headers=headers).json
    assert [e["seq"] for e in everything["events"]] == [1, 2, 3, 4, 5] and everything["next_after"] is None


def test_i5_production_clock_reads_the_database_utc_clock(migrated_url):
    database = Database(migrated_url, clock=DatabaseClock())
    before = datetime.utcnow() - timedelta(seconds=5)
    first, again = database.run(lambda tx: (tx.now(), tx.now()))
    assert before < first < datetime.utcnow() + timedelta(seconds=5)
    assert again == first  # read once per transaction
    assert database.run(lambda tx: tx.now()) > first
    database.close()
