"""D1-D4: publish, numbering, identical re-publish, validation, read."""

import copy
import threading

import pytest

from weave.sql import definitions

SIGNAL = {"name": "payment.settled", "payload_version": "v1", "payload_schema": {"type": "object"}}


def doc(name="order", queue="inventory", timeout=30):
    return copy.deepcopy(
        {
            "name": name,
            "steps": [
                {"key": "reserve", "type": "TASK", "queue": queue, "max_attempts": 3, "timeout_seconds": timeout},
                {
                    "key": "payment",
                    "type": "SIGNAL",
                    "timeout_seconds": 3600,
                    "signal": SIGNAL,
                    "correlation": "/input/order_id",
                },
                {
                    "key": "shipment",
                    "type": "POLL",
                    "queue": "carrier",
                    "interval_seconds": 60,
                    "timeout_seconds": 86400,
                    "max_attempts": 3,
                    "final_signal": {"name": "shipment.final", "payload_version": "v1", "payload_schema": {}},
                    "correlation": "/steps/reserve/result/reservation_id",
                },
            ],
        }
    )


@pytest.fixture
def headers(tenant):
    return tenant.headers("definitions:write", "definitions:read")


def publish(client, headers, document):
    return client.simulate_post("/v1/namespaces/acme/definitions", json=document, headers=headers)


def test_d1_versions_are_numbered_per_name_and_identical_republish_returns_the_latest(client, headers, database):
    first = publish(client, headers, doc())
    assert first.status_code == 201
    assert first.json["version"] == 1 and len(first.json["digest"]) == 64
    assert set(first.json) == {"name", "version", "digest", "created_at"}
    again = publish(client, headers, doc())
    assert (again.status_code, again.json) == (200, first.json)

    changed = publish(client, headers, doc(timeout=31))
    assert (changed.status_code, changed.json["version"]) == (201, 2)
    # Identical to version 1 but not to the latest (2): a new version 3.
    back = publish(client, headers, doc())
    assert (back.status_code, back.json["version"]) == (201, 3)
    other = publish(client, headers, doc(name="refund"))
    assert (other.status_code, other.json["version"]) == (201, 1)
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM definitions"))["n"] == 4


def test_d1_identity_is_the_canonical_digest_not_member_order(client, headers):
    first = publish(client, headers, doc())
    reordered = {"steps": [dict(reversed(list(step.items()))) for step in doc()["steps"]], "name": "order"}
    assert publish(client, headers, reordered).status_code == 200
    assert publish(client, headers, reordered).json["digest"] == first.json["digest"]


def test_d1_published_document_reads_back_unchanged(client, headers):
    document = doc()
    document["steps"][1]["signal"]["payload_schema"] = {
        "type": "object",
        "properties": {"amount": {"multipleOf": 0.01}},
    }
    publish(client, headers, document)
    read = client.simulate_get("/v1/namespaces/acme/definitions/order/versions/1", headers=headers)
    assert read.status_code == 200
    assert read.json["document"] == document
    assert '"multipleOf":0.01' in read.text
    missing = client.simulate_get("/v1/namespaces/acme/definitions/order/versions/2", headers=headers)
    assert (missing.status_code, missing.json["code"]) == (404, "DEFINITION_NOT_FOUND")


def test_d1_task_and_poll_queues_must_exist_in_the_namespace(client, headers, database):
    result = publish(client, headers, doc(queue="nowhere"))
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert [e["pointer"] for e in result.json["errors"]] == ["/steps/0/queue"]
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM definitions"))["n"] == 0


@pytest.mark.parametrize(
    "mutate, pointer",
    [
        (lambda d: d["steps"][0].update(key="x" * 65), "/steps/0/key"),
        (lambda d: d["steps"][0].update(key="bad key"), "/steps/0/key"),
        (lambda d: d["steps"][1].update(key="reserve"), "/steps/1/key"),
        (lambda d: d["steps"][1]["signal"].update(name="n" * 129), "/steps/1/signal/name"),
        (lambda d: d["steps"][1]["signal"].update(name="né"), "/steps/1/signal/name"),
        (lambda d: d["steps"][1]["signal"].update(payload_version="v" * 33), "/steps/1/signal/payload_version"),
        (lambda d: d["steps"][1]["signal"].update(payload_schema={"type": 5}), "/steps/1/signal/payload_schema"),
        (lambda d: d["steps"][1].update(correlation="no-leading-slash"), "/steps/1/correlation"),
        (lambda d: d["steps"][1].update(correlation="/bad~2escape"), "/steps/1/correlation"),
        (lambda d: d["steps"][1].pop("correlation"), "/steps/1"),
        (lambda d: d["steps"][0].pop("queue"), "/steps/0"),
        (lambda d: d["steps"][0].update(timeout_seconds=0), "/steps/0/timeout_seconds"),
        (lambda d: d["steps"][0].update(unknown=1), "/steps/0"),
        (lambda d: d.update(steps=[]), "/steps"),
        (lambda d: d.update(name=""), "/name"),
    ],
)
def test_d1_invalid_documents_are_422_with_a_pointer_and_store_nothing(client, headers, database, mutate, pointer):
    document = doc()
    mutate(document)
    result = publish(client, headers, document)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED"), result.text
    assert pointer in [e["pointer"] for e in result.json["errors"]], result.json
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM definitions"))["n"] == 0


def test_d1_poll_final_signal_is_optional_but_needs_a_correlation(client, headers):
    document = doc()
    del document["steps"][2]["final_signal"]
    del document["steps"][2]["correlation"]
    assert publish(client, headers, document).status_code == 201


def test_d1_concurrent_publishers_get_distinct_gapless_versions(database, tenant):
    namespace_id = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = 'acme'"))["id"]
    publishers = 8
    barrier = threading.Barrier(publishers)
    results, failures = [], []

    def publish_one(i):
        barrier.wait()
        try:
            results.append(definitions.publish_definition(database, namespace_id, doc(timeout=100 + i), 1, "t"))
        except Exception as exc:  # collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=publish_one, args=(i,)) for i in range(publishers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(d.version for d, created in results) == list(range(1, publishers + 1))
    assert all(created for _, created in results)


def test_d1_concurrent_identical_publishers_share_one_version(database, tenant):
    namespace_id = database.run(lambda tx: tx.one("SELECT id FROM namespaces WHERE name = 'acme'"))["id"]
    barrier = threading.Barrier(4)
    results = []

    def publish_one():
        barrier.wait()
        results.append(definitions.publish_definition(database, namespace_id, doc(), 1, "t"))

    threads = [threading.Thread(target=publish_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {d.version for d, _ in results} == {1}
    assert sorted(created for _, created in results) == [False, False, False, True]


def test_publish_is_audited_with_actor_and_digest(client, headers, database):
    first = publish(client, headers, doc())
    row = database.run(
        lambda tx: tx.one("SELECT actor, action, request_digest FROM audit_records WHERE action = 'definition.publish'")
    )
    assert row == {"actor": "tester", "action": "definition.publish", "request_digest": first.json["digest"]}
