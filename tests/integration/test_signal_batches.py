"""B8: a batch of signals, each item answered exactly as its single request would be (status and
body byte for byte), items independent; under a COMMIT cut by the fault proxy, every item is
accepted once or not at all, and the batch sent again answers the accepted ones as replays."""

from __future__ import annotations

import copy
import json
import threading

import falcon.testing
import pytest
import test_signals
from helpers import payment, sdk_client, signal_flow_definition
from test_routing import fact

from weave import sdk
from weave.app import create_app
from weave.cli import main
from weave.config import Config
from weave.db import connect
from weave.sql import tenancy

wf = test_signals.wf  # the fixture: order-1 started, its payment step not active yet
BATCH_MEMBERS = ("workflow_id", "idempotency_key")
REPLAYED = {"Idempotent-Replayed": "true"}  # what a replay's result carries
COUNTED = ("signals", "events", "audit_records", "signal_quota_windows")


def addressed(workflow_id: str, key: str, **overrides) -> dict:
    return {"workflow_id": workflow_id, "idempotency_key": key, **payment(**overrides)}


def routed(key: str, order: str, **overrides) -> dict:
    return {"idempotency_key": key, **fact(order, **overrides)}


def batch(flow, items: list, headers: dict | None = None, client=None):
    return (client or flow.client).simulate_post(
        f"{flow.ns}/signal-batches", json={"signals": items}, headers=headers or flow.signaller
    )


def alone(flow, item: dict, headers: dict | None = None):
    """The single request of a batch item: its body, its key as the header, its workflow in the path."""
    body = {name: value for name, value in item.items() if name not in BATCH_MEMBERS}
    path = f"{flow.ns}/workflows/{item['workflow_id']}/signals" if "workflow_id" in item else f"{flow.ns}/signals"
    return flow.client.simulate_post(
        path, json=body, headers={**(headers or flow.signaller), "Idempotency-Key": item["idempotency_key"]}
    )


def raw_results(answer) -> list[tuple[int, bytes, dict]]:
    """Each result's status, the exact bytes of its body within the answer, and its headers."""
    text = answer.text
    decoder = json.JSONDecoder()
    found, at = [], 0
    for result in answer.json["results"]:
        start = text.index('"body":', at) + len('"body":')
        _, end = decoder.raw_decode(text, start)
        found.append((result["status"], text[start:end].encode("utf-8"), result.get("headers", {})))
        at = end
    return found


def as_alone(single) -> tuple[int, bytes, dict]:
    """A single answer as a batch result shows it: status, body bytes, the headers it carries."""
    headers = {
        name: single.headers[name.lower()]
        for name in ("Idempotent-Replayed", "Retry-After")
        if name.lower() in single.headers
    }
    return single.status_code, single.content, headers


def stored_keys(flow) -> list[str]:
    """The idempotency key of every stored signal, oldest first (a fact's is its `route_key`)."""
    return [r["k"] for r in flow.rows("SELECT COALESCE(idempotency_key, route_key) AS k FROM signals ORDER BY id")]


def counts(flow) -> dict:
    return {table: flow.rows(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in COUNTED}


def test_B8_mixed_valid_invalid_replayed_and_conflicting_items_each_answer_as_alone(wf):
    first = alone(wf, addressed("order-1", "k-old"))
    assert first.status_code == 201
    items = [
        addressed("order-1", "k-new"),
        addressed("order-1", "k-bad", target_activation_sequence="one"),  # schema
        addressed("order-1", "k-old"),  # a replay
        addressed("order-1", "k-old", reason="another reason"),  # same key, other content
        {**addressed("order-1", "k-x"), "idempotency_key": "\t"},  # a key that breaks its rule
        addressed("no-such-order", "k-gone"),
        addressed("order/1", "k-path"),  # breaks the path rule of workflow_id: 404 as its path would
        routed("k-fact", "o-9"),  # parked: nothing waits for o-9
        routed("k-fact-bad", "o-9", target_step_key="payment"),  # B1: a fact names no step
        addressed("order-1", "k-big", payload={"note": "x" * (256 * 1024)}),  # S1.9: 413, alone
    ]
    before = counts(wf)
    answer = batch(wf, items)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    results = raw_results(answer)
    assert [status for status, _, _ in results] == [201, 422, 201, 409, 422, 404, 404, 201, 422, 413]
    codes = [json.loads(body).get("code") for _, body, _ in results]
    assert codes == [None, "VALIDATION_FAILED", None, "IDEMPOTENCY_CONFLICT", "VALIDATION_FAILED"] + [
        "WORKFLOW_NOT_FOUND",
        "WORKFLOW_NOT_FOUND",
        None,
        "VALIDATION_FAILED",
        "PAYLOAD_TOO_LARGE",
    ]
    assert json.loads(results[4][1])["errors"][0]["pointer"] == "/idempotency_key"
    # stored: the new item and the fact, once each, nothing for the refused ones
    assert stored_keys(wf) == [
        "k-old",
        "k-new",
        "k-fact",
    ]
    assert counts(wf)["signals"] == before["signals"] + 2
    # each result is the single request's answer, byte for byte: refusals sent alone now (they
    # change nothing), accepted items sent alone again (their replay is the first receipt)
    for index in (0, 1, 2, 3, 5, 7, 8, 9):
        status, body, headers = as_alone(alone(wf, items[index]))
        assert (results[index][0], results[index][1]) == (status, body), index
        assert results[index][2] == ({} if index in (0, 7) else headers), index
    assert results[2][2] == {"Idempotent-Replayed": "true"} and results[2][1] == first.content
    assert counts(wf)["signals"] == before["signals"] + 2


def test_B8_an_item_repeating_an_earlier_items_key_is_answered_as_its_replay_or_conflict(wf):
    """Alone, the second send of a key finds the first's receipt before it checks its contract:
    so within a batch too (the run of addressed items is cut before it)."""
    items = [
        addressed("order-1", "k-d"),
        addressed("order-1", "k-d", payload={"amount": "not a number"}),  # alone: 409, not 422
        addressed("order-1", "k-d"),
        addressed("order-1", "k-e", payload={"amount": "not a number"}),
    ]
    results = raw_results(batch(wf, items))
    assert [(s, h) for s, _, h in results] == [(201, {}), (409, {}), (201, REPLAYED), (422, {})]
    assert results[2][1] == results[0][1]
    for index, item in enumerate(items):
        assert results[index][:2] == as_alone(alone(wf, item))[:2], index
    assert stored_keys(wf) == ["k-d"]


def test_B8_items_for_an_instance_at_its_cap(wf, database, clock):
    first = alone(wf, addressed("order-1", "k-first"))
    instance_id = wf.rows("SELECT id FROM instances")[0]["id"]

    def fill_to_1023(tx):  # rejected signals count (S1.6): stored as acceptance stores its count
        rows = [(instance_id, clock.now(), clock.now(), f"old-{n}") for n in range(1022)]
        tx.executemany(
            "INSERT INTO signals (instance_id, name, correlation, payload, status, disposition, accepted_at,"
            " created_at, idempotency_key) VALUES (%s, 'payment.settled', 'o-1', 'null', 'REJECTED',"
            " 'STEP_SETTLED', %s, %s, %s)",
            rows,
        )
        tx.execute("UPDATE instances SET signals_stored = 1023 WHERE id = %s", (instance_id,))

    database.run(fill_to_1023)
    items = [
        addressed("order-1", "k-1024"),
        addressed("order-1", "k-1025"),
        addressed("order-1", "k-first"),  # a replay is answered before the limit (S1.6)
        addressed("order-1", "old-7"),  # an existing key of other content: a conflict, not the limit
    ]
    results = raw_results(batch(wf, items))
    assert [s for s, _, _ in results] == [201, 409, 201, 409]
    assert json.loads(results[1][1])["code"] == "SIGNAL_LIMIT_REACHED"
    assert json.loads(results[3][1])["code"] == "IDEMPOTENCY_CONFLICT"
    assert results[2][1] == first.content
    for index, item in enumerate(items):
        assert results[index][:2] == as_alone(alone(wf, item))[:2], index
    assert wf.rows("SELECT signals_stored, (SELECT COUNT(*) FROM signals) AS n FROM instances") == [
        {"signals_stored": 1024, "n": 1024}
    ]


def test_B8_a_batch_whose_items_are_all_refused_under_the_lock_writes_nothing(wf, database, clock):
    """Rule K: a unit that decides nothing writes nothing. Refused under the instance's lock (its
    queues locked first, S1.3), each item is refused as alone, where the refusal rolls back: the
    instance's row (its `version`, its `updated_at`) is as it was."""
    instance_id = wf.rows("SELECT id FROM instances")[0]["id"]
    database.run(lambda tx: tx.execute("UPDATE instances SET signals_stored = 1024 WHERE id = %s", (instance_id,)))
    before = wf.rows("SELECT * FROM instances")
    results = raw_results(batch(wf, [addressed("order-1", "k-1"), addressed("order-1", "k-2")]))
    assert [json.loads(body)["code"] for _, body, _ in results] == ["SIGNAL_LIMIT_REACHED"] * 2
    assert wf.rows("SELECT * FROM instances") == before
    assert wf.rows("SELECT COUNT(*) AS n FROM signals") == [{"n": 0}]


def open_wait(flow, workflow_id: str, order: str) -> None:
    flow.start(workflow_id, input={"order_id": order})
    flow.scan()
    flow.finish_task()


def test_B8_routed_items_are_routed_parked_and_ambiguous_as_alone(wf):
    wf.scan()
    wf.finish_task()  # order-1 waits for o-1
    open_wait(wf, "order-2", "o-3")
    open_wait(wf, "order-3", "o-3")
    items = [routed("f-1", "o-1"), routed("f-2", "o-2", park_seconds=60), routed("f-3", "o-3")]
    answer = batch(wf, items)
    results = raw_results(answer)
    bodies = [json.loads(body) for _, body, _ in results]
    assert [(s, b["route"], b["workflow_id"]) for (s, _, _), b in zip(results, bodies)] == [
        (201, "ROUTED", "order-1"),
        (201, "PARKED", None),
        (201, "AMBIGUOUS", None),
    ]
    assert [b["status"] for b in bodies] == ["PENDING", "PARKED", "REJECTED"]
    for index, item in enumerate(items):
        assert as_alone(alone(wf, item)) == (201, results[index][1], {"Idempotent-Replayed": "true"})
    again = raw_results(batch(wf, items))
    assert [(s, b, h) for s, b, h in again] == [(s, b, {"Idempotent-Replayed": "true"}) for s, b, _ in results]
    assert len(wf.rows("SELECT id FROM signals")) == 3


@pytest.mark.parametrize("size", [0, 101])
def test_B8_an_empty_batch_or_one_over_100_items_is_refused_whole(wf, size):
    before = counts(wf)
    refused = batch(wf, [addressed("order-1", f"k-{n}") for n in range(size)])
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")
    assert refused.json["errors"][0]["pointer"] == "/signals"
    assert counts(wf) == before


def test_B8_a_batch_over_the_body_cap_or_not_a_list_of_objects_is_refused_whole(wf, config, database):
    small = falcon.testing.TestClient(create_app(Config(config.database_url, max_body_bytes=4096), database))
    before = counts(wf)
    items = [addressed("order-1", f"k-{n}", reason="r" * 500) for n in range(10)]
    over = batch(wf, items, client=small)
    assert (over.status_code, over.json["code"]) == (413, "PAYLOAD_TOO_LARGE")
    not_objects = batch(wf, [addressed("order-1", "k-1"), "k-2"])
    assert (not_objects.status_code, not_objects.json["errors"][0]["pointer"]) == (422, "/signals/1")
    assert counts(wf) == before
    assert batch(wf, items[:1], client=small).json["results"][0]["status"] == 201


def test_B8_an_item_whose_instance_the_credential_may_not_signal_is_refused_as_alone(wf, tenant):
    local = copy.deepcopy(signal_flow_definition())
    local["name"] = "local"
    local["steps"][2]["queue"] = "inventory"  # every queue of this one is granted below
    wf.publish(local)
    wf.start("local-1", definition="local", input={"order_id": "o-1"})
    inventory_only = tenant.headers("workflows:signal", queues=("inventory",))
    items = [addressed("order-1", "k-1"), addressed("local-1", "k-2"), routed("k-3", "o-7")]
    results = raw_results(batch(wf, items, headers=inventory_only))
    assert [s for s, _, _ in results] == [403, 201, 201]
    assert "carrier" in json.loads(results[0][1])["detail"]
    assert results[0][:2] == as_alone(alone(wf, items[0], inventory_only))[:2]
    assert stored_keys(wf) == ["k-2", "k-3"]
    other_namespace = raw_results(batch(wf, [addressed("order-1", "k-4")], headers=wf.signaller))
    assert other_namespace[0][0] == 201  # the same item with the grants is accepted


def test_B8_the_quota_is_taken_per_item_and_runs_out_mid_batch(wf, database, tenant, clock):
    tenancy.create_application(database, tenant.namespace, "limited", 3)
    limited = tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="limited")
    items = [addressed("order-1", "k-1"), addressed("order-1", "k-bad", reason="")]  # refused before the quota
    items += [addressed("order-1", "k-1"), routed("k-2", "o-2"), addressed("order-1", "k-3")]
    results = raw_results(batch(wf, items, headers=limited))
    assert [s for s, _, _ in results] == [201, 422, 201, 201, 429]  # the replay counts (S1.3)
    problem = json.loads(results[4][1])
    assert problem["code"] == "QUOTA_EXCEEDED" and results[4][2] == {"Retry-After": "60"}
    assert results[4] == as_alone(alone(wf, items[4], limited))
    assert stored_keys(wf) == ["k-1", "k-2"]
    clock.advance(60)
    assert raw_results(batch(wf, items[4:], headers=limited))[0][0] == 201


def test_B8_concurrent_batches_and_singles_over_the_same_instances_store_each_key_once(wf):
    """Batches naming the same instances in other orders, and single sends of the same keys, at
    once: runs lock their instances in one order, so none waits on another forever; every key is
    stored once and every answer to it is its one receipt."""
    for n in (2, 3, 4):
        wf.start(f"order-{n}", input={"order_id": f"o-{n}"})
    keys = [(f"order-{n % 4 + 1}", f"k-{n}") for n in range(24)]
    orders = [keys, keys[::-1], keys[5:] + keys[:5], keys[::2] + keys[1::2]]
    barrier = threading.Barrier(len(orders) + 1)
    answers: dict[str, set[bytes]] = {key: set() for _, key in keys}
    statuses: list[int] = []

    def send_batch(order):
        barrier.wait()
        for (_, key), (status, body, _) in zip(order, raw_results(batch(wf, [addressed(w, k) for w, k in order]))):
            statuses.append(status)
            answers[key].add(body)

    def send_alone():
        barrier.wait()
        for workflow_id, key in keys[::3]:
            answer = alone(wf, addressed(workflow_id, key))
            statuses.append(answer.status_code)
            answers[key].add(answer.content)

    threads = [threading.Thread(target=send_batch, args=(order,)) for order in orders]
    threads.append(threading.Thread(target=send_alone))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [201] * (len(orders) * len(keys) + len(keys[::3]))
    assert all(len(bodies) == 1 for bodies in answers.values()), answers
    assert sorted(stored_keys(wf)) == sorted(key for _, key in keys)
    assert wf.rows("SELECT signals_stored FROM instances ORDER BY id") == [{"signals_stored": 6}] * 4


# ---- a COMMIT cut by the fault proxy in the middle of a batch -----------------------------------


ITEM_UNITS = ("send_signal", "send_signals", "_route")  # the units that accept items


class CutNthCommit:
    """The COMMIT of the `nth` unit that accepts items is cut: killed before it runs, or run with
    its answer lost through the fault proxy (the client cannot tell whether it landed)."""

    def __init__(self, proxied, proxy, migrated_url, nth: int, fault: str):
        self.proxy, self.url, self.nth, self.fault = proxy, migrated_url, nth, fault
        self.seen: list[str] = []
        proxied.before_commit = self.before_commit

    def before_commit(self, tx, unit: str) -> None:
        if unit not in ITEM_UNITS:
            return  # authentication's
        self.seen.append(unit)
        if len(self.seen) != self.nth:
            return
        if self.fault == "after_commit":
            self.proxy.lose_reply_to(b"COMMIT")
        else:
            killer = connect(self.url)
            with killer.cursor() as cur:
                cur.execute("KILL CONNECTION %s", (tx.cursor.connection.thread_id(),))
            killer.close()


# Two runs of instance-addressed items, each sent in one transaction, with routed facts between and after.
CUT_BATCH = [
    addressed("order-1", "k-1"),
    addressed("order-2", "k-2", correlation_key="o-2"),
    routed("k-3", "o-2"),  # routed to order-2's wait
    addressed("order-1", "k-4", correlation_key="o-x"),  # order-1 waits: rejected for its key
    addressed("order-2", "k-5", correlation_key="o-2"),
    addressed("order-1", "k-6"),
    routed("k-7", "o-7"),  # parked
]
CUT_UNITS = [("send_signals", [0, 1]), ("_route", [2]), ("send_signals", [3, 4, 5]), ("_route", [6])]


def order_1_and_2_wait(flow) -> None:
    flow.scan()
    flow.finish_task()  # order-1 waits for o-1
    open_wait(flow, "order-2", "o-2")


@pytest.mark.parametrize("fault", ["before_commit", "after_commit"])
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_B8_a_batch_cut_mid_commit_accepts_each_item_once_and_a_resend_replays_them(
    wf, config, proxied, proxy, migrated_url, fault, nth
):
    order_1_and_2_wait(wf)
    client = falcon.testing.TestClient(create_app(config, proxied))
    cut = CutNthCommit(proxied, proxy, migrated_url, nth, fault)
    answer = batch(wf, CUT_BATCH, client=client)
    proxied.before_commit = None
    unit, cut_items = CUT_UNITS[nth - 1]
    expected_units = [name for name, _ in CUT_UNITS]
    assert cut.seen == expected_units[:nth] + [unit] + expected_units[nth:]  # the cut unit ran again
    results = raw_results(answer)
    assert [s for s, _, _ in results] == [201] * 7
    bodies = [json.loads(body) for _, body, _ in results]
    assert [(b["status"], b["disposition"]) for b in bodies][2:4] == [
        ("PENDING", None),
        ("REJECTED", "CORRELATION_MISMATCH"),
    ]
    assert bodies[2]["route"] == "ROUTED" and bodies[6]["route"] == "PARKED"
    stored = wf.rows(
        "SELECT COALESCE(idempotency_key, route_key) AS k, COUNT(*) AS n FROM signals GROUP BY 1 ORDER BY 1"
    )
    assert stored == [{"k": f"k-{n}", "n": 1} for n in range(1, 8)]  # accepted once each
    audits = wf.rows(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT signal_id) AS signals FROM audit_records"
        " WHERE action IN ('signal.send', 'signal.route', 'signal.park')"
    )
    assert audits == [{"n": 7, "signals": 7}]  # one acceptance record each (S1.4)
    assert wf.rows("SELECT signals_stored FROM instances ORDER BY id") == [{"signals_stored": 3}, {"signals_stored": 3}]
    if fault == "after_commit":
        assert proxy.counts["cut_reply_lost"] == 1
    # a unit whose COMMIT answer was lost ran again and found its receipts: replays, as a single
    # send after a lost COMMIT answers; a killed one ran again and accepted
    landed = fault == "after_commit"
    assert [h for _, _, h in results] == [REPLAYED if landed and i in cut_items else {} for i in range(7)]
    again = raw_results(batch(wf, CUT_BATCH, client=client))
    assert again == [(s, b, REPLAYED) for s, b, _ in results]
    for index, item in enumerate(CUT_BATCH):
        assert as_alone(alone(wf, item)) == again[index], index


@pytest.mark.parametrize("fault", ["before_commit", "after_commit"])
@pytest.mark.parametrize("nth", [1, 2])
def test_B8_items_whose_commit_is_cut_without_a_retry_left_answer_503_and_the_resend_settles_them(
    wf, config, proxied, proxy, migrated_url, fault, nth
):
    """The cut unit has no attempt left: its items answer 503 as each alone would (accepted or
    not, unknown to the client), the other items are answered as usual, and the batch sent again
    answers the cut ones: replays when their COMMIT had landed, first acceptances when it had not."""
    proxied.max_attempts = 1
    client = falcon.testing.TestClient(create_app(config, proxied))
    items = [
        addressed("order-1", "k-1"),
        addressed("order-1", "k-2"),
        routed("k-3", "o-3"),
        addressed("order-1", "k-4"),
    ]
    cut_items = [[0, 1], [2]][nth - 1]
    CutNthCommit(proxied, proxy, migrated_url, nth, fault)
    results = raw_results(batch(wf, items, client=client))
    proxied.before_commit = None
    assert [s for s, _, _ in results] == [503 if i in cut_items else 201 for i in range(4)]
    for index in cut_items:
        assert json.loads(results[index][1])["code"] == "UNAVAILABLE" and results[index][2] == {"Retry-After": "1"}
    landed = fault == "after_commit"
    assert sorted(stored_keys(wf)) == [f"k-{n}" for n in range(1, 5) if landed or n - 1 not in cut_items]
    again = raw_results(batch(wf, items, client=client))
    assert [(s, h) for s, _, h in again] == [(201, REPLAYED if landed or i not in cut_items else {}) for i in range(4)]
    assert [again[i][1] for i in range(4) if i not in cut_items] == [
        results[i][1] for i in range(4) if i not in cut_items
    ]
    assert sorted(stored_keys(wf)) == ["k-1", "k-2", "k-3", "k-4"]


def test_B8_a_run_that_fails_together_for_another_reason_is_sent_again_item_by_item(wf, monkeypatch):
    """A run's transaction that fails otherwise than by the database's absence rolled back whole:
    each of its items is then sent alone and answers what it alone answers."""
    from weave.sql import signals

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the run's transaction")

    monkeypatch.setattr(signals, "send_signals", broken)
    items = [addressed("order-1", "k-1"), addressed("order-1", "k-1", reason="other"), addressed("order-1", "k-2")]
    results = raw_results(batch(wf, items))
    assert [s for s, _, _ in results] == [201, 409, 201]
    assert stored_keys(wf) == ["k-1", "k-2"]
    for index, item in enumerate(items):
        assert results[index][:2] == as_alone(alone(wf, item))[:2], index


# ---- the SDK and the command line (B7) ------------------------------------------------------------


def test_B7_B8_send_signals_returns_each_items_receipt_or_error_in_order(wf, live_url, tenant):
    client = sdk_client(live_url, tenant, "workflows:signal")
    unkeyed = {"workflow_id": "order-1", **payment()}
    items = [
        unkeyed,
        addressed("order-1", "k-1"),
        addressed("order-1", "k-1", reason="other"),
        routed("f-1", "o-5"),
        addressed("no-such-order", "k-2"),
        routed("f-2", "o-5", park_seconds=0),
    ]
    results = client.send_signals(items)
    assert [type(r) for r in results] == [
        sdk.Receipt,
        sdk.Receipt,
        sdk.IdempotencyConflict,
        sdk.RoutedReceipt,
        sdk.WorkflowNotFound,
        sdk.ValidationFailed,
    ]
    assert "idempotency_key" not in unkeyed and results[0].idempotency_key.startswith("sdk-")
    assert results[1].idempotency_key == "k-1" and not results[1].replayed
    assert (results[2].status, results[4].status) == (409, 404)
    assert results[3].route == "PARKED" and results[3].workflow_id is None
    assert results[5].errors[0]["pointer"] == "/park_seconds"
    assert sorted(stored_keys(wf)) == sorted(["f-1", "k-1", results[0].idempotency_key])
    again = client.send_signals(items[1:4])
    assert [r.replayed for r in again[::2]] == [True, True]
    assert [r.raw for r in again[::2]] == [results[1].raw, results[3].raw]
    with pytest.raises(sdk.ValidationFailed):
        client.send_signals([])


def test_B7_B8_signal_send_batch_prints_one_line_per_item(wf, live_url, tenant, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WEAVE_URL", live_url)
    monkeypatch.setenv("WEAVE_TOKEN", tenant.token("workflows:signal", queues=("inventory", "carrier")))
    monkeypatch.setenv("WEAVE_NAMESPACE", tenant.namespace)
    items = [addressed("order-1", "k-1"), addressed("order-1", "k-1", reason="other"), routed("f-1", "o-5")]
    path = tmp_path / "signals.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in items) + "\n\n")
    assert main(["signal", "send-batch", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids = [r["id"] for r in wf.rows("SELECT id FROM signals ORDER BY id")]
    assert len(lines) == 3
    assert lines[0].startswith(f"1: signal {ids[0]}: PENDING, accepted ") and "idempotency key k-1" in lines[0]
    assert lines[1].startswith("2: refused 409 IDEMPOTENCY_CONFLICT: Idempotency-Key 'k-1' was used for")
    assert lines[2].startswith(f"3: signal {ids[1]}: parked until ") and "; PARKED, accepted " in lines[2]
    assert main(["signal", "send-batch", str(path), "--json"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a.get("signal_id") for a in answers] == [str(ids[0]), None, str(ids[1])]
    assert answers[1]["code"] == "IDEMPOTENCY_CONFLICT" and answers[1]["status"] == 409
    path.write_text('{"workflow_id": "order-1"}\n[1]\n')
    with pytest.raises(SystemExit) as usage:
        main(["signal", "send-batch", str(path)])
    assert usage.value.code == 2 and "line 2 is not a JSON object" in capsys.readouterr().err
