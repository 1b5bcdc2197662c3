"""GET {N}/workflows (issue 12, item 2): newest first, paged with `after`, filtered by status and
definition name; only instances whose definition's queues the credential holds grants for."""

import pytest
from helpers import insert_instances

from weave.sql import instances

LIST = "/v1/namespaces/acme/workflows"
SUMMARY_FIELDS = {
    "workflow_id",
    "definition",
    "version",
    "status",
    "gate",
    "review_reason",
    "deadline_at",
    "created_at",
    "updated_at",
}
ORDER_V1 = {"name": "order", "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}]}
ORDER_V2 = {  # version 2 of `order` also ships: it runs on the carrier queue too
    "name": "order",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30},
        {"key": "ship", "type": "TASK", "queue": "carrier", "timeout_seconds": 30},
    ],
}
RETURNS = {"name": "returns", "steps": [{"key": "pick_up", "type": "TASK", "queue": "carrier", "timeout_seconds": 30}]}
BOTH_QUEUES = ("inventory", "carrier")


@pytest.fixture
def published(client, tenant):
    writer = tenant.headers("definitions:write")
    for document in (ORDER_V1, ORDER_V2, RETURNS):
        assert client.simulate_post("/v1/namespaces/acme/definitions", json=document, headers=writer).status_code == 201


def page(client, headers, **query):
    result = client.simulate_get(LIST, params={k: str(v) for k, v in query.items()}, headers=headers)
    assert result.status_code == 200, result.text
    return result.json


def walk(client, headers, **query) -> tuple[list[str], int]:
    """Every workflow_id the list shows, page after page; and the number of pages."""
    seen, pages, after = [], 0, None
    while True:
        body = page(client, headers, **query, **({"after": after} if after else {}))
        pages += 1
        seen += [item["workflow_id"] for item in body["workflows"]]
        after = body["next_after"]
        if after is None:
            return seen, pages
        assert isinstance(after, str) and after.isdigit()


def test_lists_started_workflows_newest_first_as_summaries(client, tenant, published):
    starter = tenant.headers("workflows:start", "workflows:read", queues=BOTH_QUEUES)
    for workflow_id, version in (("first", 1), ("second", 2), ("third", 1)):
        body = {"definition": "order", "version": version, "input": {"n": 1}, "deadline_seconds": 60}
        started = client.simulate_post(LIST, json={**body, "workflow_id": workflow_id}, headers=starter)
        assert started.status_code == 201
    body = page(client, starter)
    assert [item["workflow_id"] for item in body["workflows"]] == ["third", "second", "first"]
    assert body["next_after"] is None
    for item in body["workflows"]:
        assert set(item) == SUMMARY_FIELDS
        full = client.simulate_get(f"{LIST}/{item['workflow_id']}", headers=starter).json
        assert item == {field: full[field] for field in SUMMARY_FIELDS}
    assert body["workflows"][1]["version"] == 2 and body["workflows"][1]["status"] == "RUNNING"


def test_pages_through_more_than_a_thousand_workflows_of_one_status(client, tenant, published, database):
    statuses = ["NEEDS_REVIEW", "NEEDS_REVIEW", "NEEDS_REVIEW", "SUCCEEDED", "RUNNING"]
    rows = [(f"w{i:05d}", statuses[i % 5], "WAIT_EXPIRED" if i % 5 < 3 else None) for i in range(1800)]
    insert_instances(database, "acme", "order", 1, rows)
    reader = tenant.headers("workflows:read", queues=BOTH_QUEUES)

    in_review, pages = walk(client, reader, status="NEEDS_REVIEW", limit=100)
    expected = [wid for wid, status, _ in reversed(rows) if status == "NEEDS_REVIEW"]
    assert len(expected) == 1080 and in_review == expected  # each once, newest first
    assert pages == 11
    items = page(client, reader, status="NEEDS_REVIEW", limit=1000)["workflows"]
    assert {(item["status"], item["review_reason"]) for item in items} == {("NEEDS_REVIEW", "WAIT_EXPIRED")}
    everything, _ = walk(client, reader, limit=1000)
    assert everything == [wid for wid, *_ in reversed(rows)]


def test_a_walk_is_not_shifted_by_workflows_started_during_it(client, tenant, published, database):
    insert_instances(database, "acme", "order", 1, [(f"old{i}", "RUNNING", None) for i in range(10)])
    reader = tenant.headers("workflows:read", queues=BOTH_QUEUES)
    first = page(client, reader, limit=4)
    insert_instances(database, "acme", "order", 1, [("new", "RUNNING", None)])
    second = page(client, reader, limit=4, after=first["next_after"])
    assert [i["workflow_id"] for i in first["workflows"] + second["workflows"]] == [f"old{i}" for i in range(9, 1, -1)]
    assert page(client, reader, limit=1)["workflows"][0]["workflow_id"] == "new"  # the next walk starts with it


def test_definition_filter_lists_every_version_of_that_name_and_combines_with_status(
    client, tenant, published, database
):
    insert_instances(database, "acme", "order", 1, [("o1-run", "RUNNING", None), ("o1-rev", "NEEDS_REVIEW", "X")])
    insert_instances(database, "acme", "returns", 1, [("r1-rev", "NEEDS_REVIEW", "X")])
    insert_instances(database, "acme", "order", 2, [("o2-rev", "NEEDS_REVIEW", "X"), ("o2-run", "RUNNING", None)])
    reader = tenant.headers("workflows:read", queues=BOTH_QUEUES)

    assert walk(client, reader, definition="order", limit=2)[0] == ["o2-run", "o2-rev", "o1-rev", "o1-run"]
    assert walk(client, reader, definition="order", status="NEEDS_REVIEW", limit=1)[0] == ["o2-rev", "o1-rev"]
    assert walk(client, reader, definition="returns")[0] == ["r1-rev"]
    assert walk(client, reader, status="NEEDS_REVIEW")[0] == ["o2-rev", "r1-rev", "o1-rev"]
    assert page(client, reader, definition="nothing-by-this-name") == {"workflows": [], "next_after": None}
    assert page(client, reader, status="PAUSED") == {"workflows": [], "next_after": None}


def test_only_workflows_whose_definition_queues_are_all_granted_are_listed(client, tenant, published, database):
    """Every operation on an instance needs grants for all its definition's queues; the list leaves
    out the instances a credential could not read one by one (docs/decisions.md)."""
    insert_instances(database, "acme", "order", 1, [(f"o1-{i}", "NEEDS_REVIEW", "X") for i in range(12)])
    insert_instances(database, "acme", "order", 2, [(f"o2-{i}", "NEEDS_REVIEW", "X") for i in range(12)])
    insert_instances(database, "acme", "returns", 1, [(f"r1-{i}", "NEEDS_REVIEW", "X") for i in range(12)])
    insert_instances(database, "acme", "order", 1, [(f"o1-late-{i}", "NEEDS_REVIEW", "X") for i in range(3)])
    every = walk(client, tenant.headers("workflows:read", queues=BOTH_QUEUES), limit=1000)[0]
    assert len(every) == 39

    inventory_only = tenant.headers("workflows:read", queues=("inventory",))
    listed, pages = walk(client, inventory_only, status="NEEDS_REVIEW", limit=5)
    assert listed == [wid for wid in every if wid.startswith("o1-")] and pages == 3
    assert walk(client, inventory_only, definition="order", limit=4)[0] == listed
    assert walk(client, inventory_only, definition="returns")[0] == []
    assert walk(client, tenant.headers("workflows:read"))[0] == []  # no grant at all: nothing to read
    carrier_only = tenant.headers("workflows:read", queues=("carrier",))
    assert walk(client, carrier_only, limit=7)[0] == [wid for wid in every if wid.startswith("r1-")]
    # What the list shows, the credential can read; what it leaves out, it cannot.
    assert client.simulate_get(f"{LIST}/o1-0", headers=inventory_only).status_code == 200
    assert client.simulate_get(f"{LIST}/o2-0", headers=inventory_only).status_code == 403


def test_a_page_read_from_the_whole_namespace_still_checks_each_definition(tenant, published, database, monkeypatch):
    """A definition on a new queue may be published and started between the grant check and the
    page: the namespace-wide page checks every row's definition again."""
    insert_instances(database, "acme", "order", 1, [("readable", "RUNNING", None)])
    insert_instances(database, "acme", "returns", 1, [("hidden", "RUNNING", None)])
    monkeypatch.setattr(instances, "_versions_to_list", lambda tx, principal, name: None)
    principal = tenant.principal("workflows:read", queues=("inventory",))
    rows, next_after = instances.list_workflows(database, principal, None, None, None, 1)
    assert (rows, next_after is not None) == ([], True)  # the newest is hidden; the walk goes on
    rows, next_after = instances.list_workflows(database, principal, None, None, next_after, 1)
    assert [row["workflow_id"] for row in rows] == ["readable"]


def test_another_namespace_is_404_and_its_workflows_are_never_listed(client, tenant, other_tenant, database):
    other_tenant_writer = other_tenant.headers("definitions:write")
    globex = "/v1/namespaces/globex"
    assert client.simulate_post(f"{globex}/definitions", json=ORDER_V1, headers=other_tenant_writer).status_code == 201
    insert_instances(database, "globex", "order", 1, [("theirs", "NEEDS_REVIEW", "X")])
    reader = tenant.headers("workflows:read", queues=BOTH_QUEUES)
    result = client.simulate_get(f"{globex}/workflows", headers=reader)
    assert (result.status_code, result.json["code"]) == (404, "WORKFLOW_NOT_FOUND")
    assert page(client, reader) == {"workflows": [], "next_after": None}
    theirs = client.simulate_get(
        f"{globex}/workflows", headers=other_tenant.headers("workflows:read", queues=("inventory",))
    )
    assert [item["workflow_id"] for item in theirs.json["workflows"]] == ["theirs"]


def test_without_workflows_read_it_is_403(client, tenant):
    every_other = ("workflows:start", "workflows:signal", "workflows:control", "workflows:review", "definitions:read")
    result = client.simulate_get(LIST, headers=tenant.headers(*every_other, queues=BOTH_QUEUES))
    assert (result.status_code, result.json["code"]) == (403, "FORBIDDEN")
    assert client.simulate_get(LIST).status_code == 401


@pytest.mark.parametrize(
    "query, pointer",
    [
        ("status=DONE", "?status"),
        ("status=needs_review", "?status"),
        ("status=PENDING", "?status"),  # a signal status, not an instance status
        ("definition=no%20spaces", "?definition"),
        ("definition=" + "x" * 129, "?definition"),
        ("definition=%C3%A9t%C3%A9", "?definition"),
        ("after=-1", "?after"),
        ("after=x", "?after"),
        ("after=" + "9" * 21, "?after"),
        ("after=18446744073709551616", "?after"),
        ("limit=0", "?limit"),
        ("limit=1001", "?limit"),
    ],
)
def test_bad_parameters_are_422_naming_the_parameter(client, tenant, query, pointer):
    result = client.simulate_get(LIST, query_string=query, headers=tenant.headers("workflows:read"))
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert [e["pointer"] for e in result.json["errors"]] == [pointer]


def test_edge_values_of_the_parameters_are_accepted(client, tenant, published, database):
    insert_instances(database, "acme", "order", 1, [("only", "RUNNING", None)])
    reader = tenant.headers("workflows:read", queues=BOTH_QUEUES)
    for query in ("after=0", "after=18446744073709551615", "limit=1", "limit=1000", "status=&definition=", ""):
        result = client.simulate_get(LIST, query_string=query, headers=reader)
        assert result.status_code == 200 and [i["workflow_id"] for i in result.json["workflows"]] == ["only"], query


# ---- issue 26, item 6: partial grants over many versions cost one page statement ---------------------

VERSIONS = 1000


def many_versions(database, tenant, versions: int) -> None:
    """`versions` versions of `order` (inventory only) and one of `returns` (carrier), with two
    instances per version and a `returns` instance after each `order` one, interleaved by id."""
    from helpers import INSERT_INSTANCE_ROW

    from weave.sql import definitions

    publisher = tenant.principal("definitions:write")
    for timeout in range(1, versions + 1):
        document = {**ORDER_V1, "steps": [{**ORDER_V1["steps"][0], "timeout_seconds": timeout}]}
        definitions.publish_definition(database, publisher.namespace_id, document, publisher.credential_id, "t")
    definitions.publish_definition(database, publisher.namespace_id, RETURNS, publisher.credential_id, "t")
    now = database.run(lambda tx: tx.now())
    rows = []
    for round_ in range(2):
        for version in range(1, versions + 1):
            status = "NEEDS_REVIEW" if version % 10 == 0 else "RUNNING"
            for name, wid, v in (("order", f"o{version}-{round_}", version), ("returns", f"r{version}-{round_}", 1)):
                rows.append((wid, status, "OPEN", None, now, now, now, "acme", name, v))
    database.run(lambda tx: tx.executemany(INSERT_INSTANCE_ROW, rows))
    database.run(lambda tx: tx.execute("ANALYZE TABLE instances, definitions"))


def counted(database, call):
    """`call(tx)` run as the list runs (autocommit reads) on one session; the SELECT statements the
    server counted for it (Com_select) and its answer."""

    def run(tx):
        def selects():
            return int(tx.one("SHOW SESSION STATUS LIKE 'Com_select'")["Value"])

        idle = -selects() + selects()  # what reading the counter costs, if anything
        before = selects()
        answer = call(tx)
        return selects() - before - idle, answer

    return database.read(run)


def test_partial_grants_over_a_thousand_versions_cost_a_constant_number_of_statements(tenant, database):
    """Issue 26, item 6: a credential granted some of the queues listed its workflows with one
    statement per readable version (1,000 versions: seconds). The page is one statement, and how
    many statements the list sends does not depend on the number of versions."""
    import time

    list_page = instances.list_workflows.__wrapped__
    reader = tenant.principal("workflows:read", queues=("inventory",))
    many_versions(database, tenant, 3)
    small = {
        query: counted(database, lambda tx, q=query: list_page(tx, reader, *q, None, 100))[0]
        for query in ((None, None), ("NEEDS_REVIEW", None), (None, "order"), ("NEEDS_REVIEW", "order"))
    }
    database.run(lambda tx: tx.execute("DELETE FROM instances"))
    database.run(lambda tx: tx.execute("DELETE FROM definitions"))
    many_versions(database, tenant, VERSIONS)
    for (status, name), statements in small.items():
        started = time.perf_counter()
        count, (rows, next_after) = counted(database, lambda tx: list_page(tx, reader, status, name, None, 100))
        elapsed = time.perf_counter() - started
        print(f"\n{VERSIONS} versions, status={status}, definition={name}: {count} statements, {elapsed:.3f} s")
        assert count == statements <= 3, (status, name, count)
        expected_versions = [v for v in range(VERSIONS, 0, -1) if status is None or v % 10 == 0]
        expected = [f"o{v}-1" for v in expected_versions] + [f"o{v}-0" for v in expected_versions]
        assert [row["workflow_id"] for row in rows] == expected[:100]
        assert next_after is not None


# ---- search (issue 34, item 2) --------------------------------------------------------------------


@pytest.fixture
def orders(flow, client, tenant):
    """o-41 waits for its payment under key k-41; o-42's wait has key k-42, and a payment with the
    wrong key k-41 was sent to it (CORRELATION_MISMATCH); o-43 has not reached its wait yet, so no
    key is resolved for it. Operators read with every queue granted."""
    from helpers import payment, signal_flow_definition

    flow.publish(signal_flow_definition())
    for n in (41, 42, 43):
        flow.start(f"o-{n}", input={"order_id": f"k-{n}"})
    flow.scan()
    for _ in (41, 42):
        flow.finish_task({"reservation_id": "r"})
    flow.scan()
    assert flow.send("o-42", "pay-1", payment("k-41")).status_code == 201
    flow.scan()
    return tenant.headers("workflows:read", queues=("inventory", "carrier"))


def ids(client, headers, **query) -> list[str]:
    return [item["workflow_id"] for item in page(client, headers, **query)["workflows"]]


def test_a_correlation_key_finds_the_workflows_whose_wait_or_signal_has_exactly_it(client, orders, flow):
    assert flow.rows("SELECT disposition FROM signals")[0]["disposition"] == "CORRELATION_MISMATCH"
    assert ids(client, orders, correlation_key="k-41") == ["o-42", "o-41"]  # o-41's wait, o-42's signal
    assert ids(client, orders, correlation_key="k-42") == ["o-42"]
    assert ids(client, orders, correlation_key="k-43") == []  # its step has not started: no key yet
    assert ids(client, orders, correlation_key="k-4") == []  # exactly: not a prefix
    assert ids(client, orders, correlation_key="K-41") == []  # bytes, not a collation
    assert ids(client, orders, correlation_key="k-41", status="RUNNING", definition="flow") == ["o-42", "o-41"]
    assert ids(client, orders, correlation_key="k-41", definition="other") == []


def test_a_key_longer_than_the_indexed_prefix_is_compared_whole(client, flow, tenant):
    from helpers import signal_flow_definition

    flow.publish(signal_flow_definition())
    shared = "x" * 40  # the index holds 32 bytes: both keys share them
    for n, key in ((1, shared + "-one"), (2, shared + "-two")):
        flow.start(f"w-{n}", input={"order_id": key})
        flow.scan()
        flow.finish_task({"reservation_id": "r"})
        flow.scan()
    headers = tenant.headers("workflows:read", queues=("inventory", "carrier"))
    assert ids(client, headers, correlation_key=shared + "-two") == ["w-2"]


def test_an_id_prefix_finds_workflows_by_the_start_of_their_id_literally(client, tenant, published, database):
    rows = [(wid, "RUNNING", None) for wid in ("o-1", "o-10", "o-2", "o_1", "p-1", "o%1")]
    insert_instances(database, "acme", "order", 1, rows)
    headers = tenant.headers("workflows:read", queues=BOTH_QUEUES)
    assert ids(client, headers, workflow_id_prefix="o-1") == ["o-10", "o-1"]
    assert ids(client, headers, workflow_id_prefix="o_") == ["o_1"]  # _ is not a wildcard
    assert ids(client, headers, workflow_id_prefix="o%") == ["o%1"]  # nor is %
    assert ids(client, headers, workflow_id_prefix="o", limit=2) == ["o%1", "o_1"]
    seen, pages = walk(client, headers, workflow_id_prefix="o", limit=2)
    assert seen == ["o%1", "o_1", "o-2", "o-10", "o-1"] and pages == 3


def test_both_searches_together_list_what_both_find(client, orders, flow):
    assert ids(client, orders, correlation_key="k-41", workflow_id_prefix="o-41") == ["o-41"]
    assert ids(client, orders, correlation_key="k-42", workflow_id_prefix="o-41") == []


def test_a_search_finds_nothing_in_another_namespace_nor_what_the_credential_may_not_read(
    client, orders, other_tenant, tenant
):
    other = client.simulate_get(
        f"/v1/namespaces/{other_tenant.namespace}/workflows",
        params={"correlation_key": "k-41"},
        headers=other_tenant.headers("workflows:read"),
    )
    assert other.status_code == 200 and other.json["workflows"] == []
    inventory_only = tenant.headers("workflows:read", queues=("inventory",))  # the flow also runs on carrier
    assert ids(client, inventory_only, correlation_key="k-41") == []
    assert ids(client, inventory_only, workflow_id_prefix="o-") == []


def test_a_search_matching_too_many_is_refused_naming_its_parameter(client, orders, monkeypatch):
    monkeypatch.setattr(instances, "SEARCH_MATCHES", 2)
    for query, pointer in (({"workflow_id_prefix": "o-"}, "?workflow_id_prefix"), ({"correlation_key": "k-41"}, None)):
        result = client.simulate_get(LIST, params=query, headers=orders)
        if pointer is None:  # two instances match k-41: at the bound, still answered
            assert result.status_code == 200 and len(result.json["workflows"]) == 2
            continue
        assert result.status_code == 422 and result.json["errors"][0]["pointer"] == pointer
        assert "narrow it" in result.json["detail"]


@pytest.mark.parametrize(
    "query, pointer",
    [
        ({"correlation_key": "k" * 513}, "?correlation_key"),
        ({"workflow_id_prefix": "a/b"}, "?workflow_id_prefix"),
        ({"workflow_id_prefix": "x" * 129}, "?workflow_id_prefix"),
        ({"workflow_id_prefix": "é"}, "?workflow_id_prefix"),
    ],
)
def test_bad_search_parameters_are_422_naming_the_parameter(client, tenant, query, pointer):
    result = client.simulate_get(LIST, params=query, headers=tenant.headers("workflows:read"))
    assert result.status_code == 422 and result.json["errors"][0]["pointer"] == pointer
