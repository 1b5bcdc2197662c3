"""D1-D4: publish, numbering, identical re-publish, validation, read."""

import copy
import json
import re
import shlex
import threading
from pathlib import Path

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


# ---- D5: the input schema, and the list ------------------------------------------------------------

ORDER_INPUT = {
    "type": "object",
    "required": ["order_id"],
    "properties": {"order_id": {"type": "string", "pattern": "^o-[0-9]+$"}, "total": {"type": "number"}},
}


def with_input_schema(schema, **kwargs) -> dict:
    return {**doc(**kwargs), "input_schema": schema}


def start(client, tenant, input, workflow_id="w1", version=1):
    headers = tenant.headers("workflows:start", queues=("inventory", "carrier"))
    body = {"definition": "order", "version": version, "input": input, "deadline_seconds": 600}
    return client.simulate_post(
        "/v1/namespaces/acme/workflows", json={**body, "workflow_id": workflow_id}, headers=headers
    )


def rows_written(database) -> dict:
    """Rows a start writes (the audit records of starts: minting a credential is audited too)."""
    counts = {t: f"SELECT COUNT(*) AS n FROM {t}" for t in ("instances", "checkpoints", "events")}
    counts["audit"] = "SELECT COUNT(*) AS n FROM audit_records WHERE action = 'workflow.start'"
    return {name: database.run(lambda tx: tx.one(sql))["n"] for name, sql in counts.items()}


def test_D5_a_document_without_input_schema_keeps_its_digest_and_behaves_as_before(client, headers, tenant):
    """The digest of a document written before D5 is what it was (pinned here), and any input starts it."""
    published = publish(client, headers, doc())
    assert published.json["digest"] == "83637b153f65aef71f6c30206e85481c9824b46ced1ccae30eb18a3da13263d0"
    assert start(client, tenant, ["any", {"input": None}]).status_code == 201
    with_schema = publish(client, headers, with_input_schema(ORDER_INPUT))
    assert (with_schema.status_code, with_schema.json["version"]) == (201, 2)
    assert with_schema.json["digest"] != published.json["digest"]
    read = client.simulate_get("/v1/namespaces/acme/definitions/order/versions/2", headers=headers)
    assert read.json["document"]["input_schema"] == ORDER_INPUT


def test_D5_start_checks_the_input_against_the_input_schema_and_writes_nothing_when_it_breaks_it(
    client, headers, tenant, database
):
    publish(client, headers, with_input_schema(ORDER_INPUT))
    before = rows_written(database)
    refused = start(client, tenant, {"order_id": "order one", "total": "12"})
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")
    assert [e["pointer"] for e in refused.json["errors"]] == ["/input/order_id", "/input/total"]
    assert refused.json["detail"].startswith("/input/order_id: ")
    missing = start(client, tenant, {})
    assert [e["pointer"] for e in missing.json["errors"]] == ["/input"]
    assert "'order_id' is a required property" in missing.json["errors"][0]["message"]
    assert rows_written(database) == before  # no instance, checkpoint, event or audit record
    started = start(client, tenant, {"order_id": "o-1", "total": 129.90})
    assert (started.status_code, started.json["status"]) == (201, "RUNNING")
    # Checked on every start, with the document's own schema: a start of version 1 again
    # (idempotent) answers the instance; another id with a bad input is still refused.
    assert start(client, tenant, {"order_id": "o-1", "total": 129.90}).status_code == 200
    assert start(client, tenant, {"order_id": 1}, workflow_id="w2").status_code == 422


def test_D5_the_input_is_checked_after_the_grants_and_by_the_payload_validator(client, headers, tenant):
    """A credential without the definition's queues learns nothing of its schema (403 first); the
    input schema's patterns run on RE2 and its integers are JSON Schema's (1.0 is an integer)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"pattern": "^(a|b)*$"}}}
    publish(client, headers, with_input_schema(schema))
    body = {"definition": "order", "version": 1, "input": {"n": "x"}, "deadline_seconds": 600}
    no_grant = client.simulate_post(
        "/v1/namespaces/acme/workflows", json=body, headers=tenant.headers("workflows:start", queues=("inventory",))
    )
    assert (no_grant.status_code, no_grant.json["code"]) == (403, "FORBIDDEN")
    assert start(client, tenant, {"n": 1.0, "s": "abab"}).status_code == 201
    assert [e["pointer"] for e in start(client, tenant, {"s": "abc"}, workflow_id="w2").json["errors"]] == ["/input/s"]


@pytest.mark.parametrize(
    "schema, pointer, message",
    [
        ({"type": 5}, "/input_schema", "not a valid Draft 2020-12 schema"),
        ({"pattern": "(a)\\1"}, "/input_schema/pattern", ""),  # a backreference: RE2 cannot run it
        ({"$ref": "https://example.com/s.json"}, "/input_schema/$ref", "only local references"),
        ("object", "/input_schema", ""),  # not a schema: the document's own JSON Schema refuses it
    ],
)
def test_D5_an_input_schema_is_checked_at_publish_like_a_payload_schema(
    client, headers, database, schema, pointer, message
):
    refused = publish(client, headers, with_input_schema(schema))
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED"), refused.text
    assert pointer in [e["pointer"] for e in refused.json["errors"]], refused.json
    assert message in refused.json["errors"][0]["message"]
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM definitions"))["n"] == 0


def test_D5_an_input_schema_has_the_limits_of_a_payload_schema_and_shares_the_publish_budget():
    """The same limits of shape (here: nesting), and one budget for every schema of the document:
    payload schemas within the budget alone are over it with the input schema beside them."""
    from weave.rules import definitions as definition_rules
    from weave.schemas import publish as limits

    nested: dict = {}
    for _ in range(limits.MAX_SCHEMA_DEPTH):
        nested = {"not": nested}
    (problem,) = definition_rules.problems(with_input_schema(nested))
    assert problem.pointer.startswith("/input_schema/not/not") and "nested deeper than" in problem.message

    items = limits.MAX_SCHEMA_CHARS // 3
    document = doc()
    document["steps"][1]["signal"]["payload_schema"] = {"title": "payment", "enum": [0] * items}
    assert definition_rules.problems(document) == []
    over = with_input_schema({"title": "input", "enum": [0] * items})
    over["steps"] = document["steps"]
    found = definition_rules.problems(over)
    assert [f"more than the {limits.PUBLISH_BUDGET_UNITS:,} units" in p.message for p in found] == [True]


def listed(client, headers, query="") -> dict:
    result = client.simulate_get("/v1/namespaces/acme/definitions", query_string=query, headers=headers)
    assert result.status_code == 200, result.text
    return result.json


def test_D5_the_list_gives_the_newest_version_of_each_name_in_name_order_page_by_page(client, headers, other_tenant):
    published = {}
    for name, versions in (("refund", 2), ("order", 3), ("Zeta", 1), ("audit.v2", 1), ("order-old", 1)):
        for timeout in range(1, versions + 1):
            published[name] = publish(client, headers, doc(name=name, timeout=timeout)).json
    outsider = other_tenant.headers("definitions:write", queues=("inventory",))
    client.simulate_post("/v1/namespaces/globex/definitions", json=doc(name="invoice"), headers=outsider)
    everything = listed(client, headers)
    names = sorted(published, key=str.encode)  # byte order: "Zeta" before "audit.v2"
    assert everything == {"definitions": [published[n] for n in names], "next_after": None}
    assert [d["version"] for d in everything["definitions"]] == [1, 1, 3, 1, 2]

    pages, after = [], ""
    while True:
        page = listed(client, headers, f"limit=2&after={after}")
        pages.append([d["name"] for d in page["definitions"]])
        if page["next_after"] is None:
            break
        assert page["next_after"] == page["definitions"][-1]["name"]
        after = page["next_after"]
    assert pages == [names[0:2], names[2:4], names[4:]]

    assert listed(client, headers, "name=order")["definitions"] == [published["order"]]
    assert listed(client, headers, "name=nothing") == {"definitions": [], "next_after": None}
    assert listed(client, headers, "after=refund") == {"definitions": [], "next_after": None}


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "name=a%20b", "after=" + "x" * 129])
def test_D5_list_parameters_that_break_their_rule_are_422(client, headers, query):
    refused = client.simulate_get("/v1/namespaces/acme/definitions", query_string=query, headers=headers)
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")
    assert refused.json["errors"][0]["pointer"] == "?" + query.split("=")[0]


def test_D5_the_list_needs_definitions_read_or_workflows_read_in_the_namespace(client, headers, tenant, other_tenant):
    publish(client, headers, doc())
    path = "/v1/namespaces/acme/definitions"
    assert client.simulate_get(path).status_code == 401
    for scopes in (("definitions:read",), ("workflows:read",)):
        assert [d["name"] for d in listed(client, tenant.headers(*scopes))["definitions"]] == ["order"]
    for scopes in (("definitions:write",), ("workflows:start", "workflows:signal")):
        refused = client.simulate_get(path, headers=tenant.headers(*scopes))
        assert (refused.status_code, refused.json["code"]) == (403, "FORBIDDEN")
    outsider = client.simulate_get(path, headers=other_tenant.headers("definitions:read", "workflows:read"))
    assert (outsider.status_code, outsider.json["code"]) == (404, "DEFINITION_NOT_FOUND")


DEFINITIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "definitions.md"


def worked_example() -> tuple[dict, list[tuple[str, list[str]]]]:
    """The definition of docs/definitions.md's worked example (its first json block), and each
    command of its first sh block with the lines printed below it (its `# ` comments)."""
    section = DEFINITIONS_MD.read_text().split("## A worked example", 1)[1]
    document = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    commands: list[tuple[str, list[str]]] = []
    for line in re.search(r"```sh\n(.*?)```", section, re.S).group(1).splitlines():
        if line.startswith("# "):
            commands[-1][1].append(line[2:])
        elif line.strip():
            commands.append((line, []))
    return document, commands


def test_D5_the_worked_example_of_docs_definitions_md_publishes_and_runs_as_written(
    live_url, tenant, database, monkeypatch, capsys, tmp_path
):
    """Each command of the example prints what the page shows under it (`…` stands for the rest of
    a line), and the refused start writes nothing."""
    from helpers import OPERATOR_SCOPES

    from weave.cli import main
    from weave.sql import tenancy

    tenancy.create_queue(database, "acme", "default", 4)  # as in `weave dev`
    monkeypatch.setenv("WEAVE_URL", live_url)
    monkeypatch.setenv("WEAVE_TOKEN", tenant.token(*OPERATOR_SCOPES, queues=("default",)))
    monkeypatch.setenv("WEAVE_NAMESPACE", "acme")
    document, commands = worked_example()
    (tmp_path / "order-fulfilment.json").write_text(json.dumps(document, indent=2))
    monkeypatch.chdir(tmp_path)
    assert [c.split()[:3] for c, _ in commands] == [
        ["weave", "definition", "publish"],
        ["weave", "definition", "list"],
        ["weave", "workflow", "start"],
        ["weave", "workflow", "start"],
    ]
    for command, shown in commands:
        main(shlex.split(command)[1:])
        out, err = capsys.readouterr()
        printed = (out + err).splitlines()
        assert len(printed) == len(shown), (command, printed)
        for line, expected in zip(printed, shown):
            if expected.endswith("…"):
                assert line.startswith(expected[:-1].rstrip()), (command, line, expected)
            else:
                assert line == expected, command
    rows = database.run(lambda tx: tx.all("SELECT workflow_id FROM instances"))
    assert [row["workflow_id"] for row in rows] == ["order-42"]
