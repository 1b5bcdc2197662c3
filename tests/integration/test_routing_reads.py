"""Reading a fact sent by its business key (SPEC §14, B6): `GET {N}/signals/{signal_id}` wherever the
fact is, the namespace's list of facts that belong to no instance, and `?wait_seconds` on both signal
reads, counted against the process's cap of waiting claims."""

from __future__ import annotations

import threading
import time

import falcon.testing
import pytest
from helpers import signal_flow_definition
from test_routing import fact, open_payment_wait, park_then_open, route

from weave.app import create_app
from weave.config import Config


@pytest.fixture
def published(flow):
    flow.publish(signal_flow_definition())
    return flow


def read_fact(flow, signal_id, headers=None, query: str = "", client=None):
    return (client or flow.client).simulate_get(
        f"{flow.ns}/signals/{signal_id}", query_string=query, headers=headers or flow.signaller
    )


def listed(flow, query: str = "", headers=None):
    answer = flow.client.simulate_get(f"{flow.ns}/signals", query_string=query, headers=headers or flow.signaller)
    assert answer.status_code == 200, answer.text
    return answer.json


def in_thread(call) -> tuple[threading.Thread, dict]:
    """`call()` in a thread; the dict gets its answer and the seconds it took."""
    out: dict = {}

    def run():
        started = time.monotonic()
        out["answer"] = call()
        out["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def until(predicate, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


# ---- one fact, wherever it is ------------------------------------------------------------------------


def test_B6_a_parked_fact_is_readable_by_any_reader_of_the_namespace_and_by_no_other(published, other_tenant):
    flow = published
    receipt = route(flow, "pay-1", fact(park_seconds=600)).json
    no_grants = flow.tenant.headers("workflows:read")  # no queue of any definition
    answer = read_fact(flow, receipt["signal_id"], no_grants)
    assert answer.status_code == 200, answer.text
    state = answer.json
    assert (state["route"], state["status"], state["disposition"], state["workflow_id"]) == (
        "PARKED",
        "PARKED",
        None,
        None,
    )
    assert state["expires_at"] == receipt["parked_until"] and state["idempotency_key"] == "pay-1"
    assert (state["correlation_key"], state["payload"], state["actor"]) == ("o-1", {"amount": 12.5}, "payments-bot")
    assert read_fact(flow, receipt["signal_id"], flow.tenant.headers("workflows:signal")).status_code == 403
    # Another namespace's reader is answered as for an id that exists nowhere.
    elsewhere = read_fact(flow, receipt["signal_id"], other_tenant.headers("workflows:read"))
    nowhere = read_fact(flow, int(receipt["signal_id"]) + 1000, no_grants)
    assert elsewhere.status_code == nowhere.status_code == 404
    assert elsewhere.json["code"] == nowhere.json["code"] == "SIGNAL_NOT_FOUND"


def test_B6_a_signal_sent_to_a_workflow_is_not_a_fact_of_the_namespace(published):
    flow = published
    open_payment_wait(flow)
    sent = flow.client.simulate_post(
        f"{flow.ns}/workflows/w-1/signals",
        json={**fact(), "target_step_key": "payment", "target_activation_sequence": 1},
        headers={**flow.signaller, "Idempotency-Key": "direct"},
    )
    assert sent.status_code == 201, sent.text
    assert read_fact(flow, sent.json["signal_id"]).status_code == 404
    assert "route" not in flow.signal("w-1", sent.json["signal_id"]).json


def test_B6_a_routed_fact_needs_its_instances_grants_and_reads_as_the_workflows_signal_read(published):
    flow = published
    open_payment_wait(flow)
    receipt = route(flow, "pay-1", fact()).json
    assert receipt["route"] == "ROUTED"
    assert read_fact(flow, receipt["signal_id"], flow.tenant.headers("workflows:read")).status_code == 403
    narrow = flow.tenant.headers("workflows:read", queues=("inventory",))  # the definition uses carrier too
    assert read_fact(flow, receipt["signal_id"], narrow).status_code == 403
    pending = read_fact(flow, receipt["signal_id"]).json
    assert (pending["route"], pending["status"], pending["workflow_id"]) == ("ROUTED", "PENDING", "w-1")
    assert (pending["target_step_key"], pending["target_activation_sequence"]) == ("payment", 1)
    assert pending == flow.signal("w-1", receipt["signal_id"]).json  # one body for one signal
    flow.scan()
    consumed = read_fact(flow, receipt["signal_id"]).json
    assert (consumed["route"], consumed["status"], consumed["consumed_at"] is not None) == ("ROUTED", "CONSUMED", True)
    assert consumed == flow.signal("w-1", receipt["signal_id"]).json


def test_B6_a_parked_fact_taken_by_the_wait_that_opened_for_it_reads_as_routed(published):
    flow = published
    receipt = park_then_open(flow)  # parked, then taken and consumed by w-1's payment wait
    state = read_fact(flow, receipt["signal_id"]).json
    assert (state["route"], state["status"], state["workflow_id"], state["target_step_key"]) == (
        "ROUTED",
        "CONSUMED",
        "w-1",
        "payment",
    )
    assert state["accepted_at"] == receipt["accepted_at"]  # its original acceptance (B4)
    assert listed(flow)["signals"] == []  # no longer the namespace's


# ---- the namespace's list ----------------------------------------------------------------------------


def expire_by_hand(flow, signal_id: str) -> None:
    """The row as the expiry of unrouted facts (B5) leaves it."""
    flow.database.run(
        lambda tx: tx.execute(
            "UPDATE signals SET status = 'EXPIRED', disposition = 'EXPIRED_UNROUTED', settled_at = UTC_TIMESTAMP(6)"
            " WHERE id = %s AND status = 'PARKED'",
            (signal_id,),
        )
    )


def test_B6_the_list_holds_the_facts_of_no_instance_newest_first_filtered_and_paged(published, other_tenant):
    flow = published
    parked = [route(flow, f"p{i}", fact(f"o-{i}")).json["signal_id"] for i in range(4)]
    other_name = route(flow, "n1", fact("o-1", name="refund.settled")).json["signal_id"]
    expire_by_hand(flow, parked[0])
    for workflow_id in ("w-a", "w-b"):  # two waits of one key: AMBIGUOUS
        open_payment_wait(flow, workflow_id, "o-9")
    ambiguous = route(flow, "amb", fact("o-9")).json
    assert (ambiguous["route"], ambiguous["status"]) == ("AMBIGUOUS", "REJECTED")
    open_payment_wait(flow, "w-c", "o-7")
    routed = route(flow, "r", fact("o-7")).json  # in an instance: not listed
    assert routed["route"] == "ROUTED"

    def ids(query: str = "", headers=None) -> list[str]:
        return [s["signal_id"] for s in listed(flow, query, headers)["signals"]]

    everything = [ambiguous["signal_id"], other_name, parked[3], parked[2], parked[1], parked[0]]
    assert ids() == everything
    assert ids("", flow.tenant.headers("workflows:read")) == everything  # any reader of the namespace
    assert ids("status=PARKED") == [other_name, parked[3], parked[2], parked[1]]
    assert ids("status=EXPIRED") == [parked[0]]
    assert ids("status=REJECTED") == [ambiguous["signal_id"]]
    assert ids("name=refund.settled") == [other_name]
    assert ids("correlation_key=o-1") == [other_name, parked[1]]
    assert ids("status=PARKED&name=payment.settled&correlation_key=o-2") == [parked[2]]
    assert ids("correlation_key=o-1 ") == []  # exact bytes
    assert ids("after=0") == everything  # from the newest
    assert ids(f"after={parked[2]}") == [parked[1], parked[0]]
    states = {s["signal_id"]: s for s in listed(flow)["signals"]}
    assert (states[ambiguous["signal_id"]]["route"], states[ambiguous["signal_id"]]["disposition"]) == (
        "AMBIGUOUS",
        "AMBIGUOUS_CORRELATION",
    )
    assert (states[parked[0]]["route"], states[parked[0]]["disposition"]) == ("PARKED", "EXPIRED_UNROUTED")
    assert all(s["workflow_id"] is None for s in states.values())
    for status in ("", "status=PARKED&"):  # pages of two, by the cursor, with and without a status
        pages, after = [], None
        while True:
            page = listed(flow, f"{status}limit=2" + (f"&after={after}" if after else ""))
            pages.append([s["signal_id"] for s in page["signals"]])
            after = page["next_after"]
            if after is None:
                break
        expected = ids(status.rstrip("&"))
        assert [i for p in pages for i in p] == expected and all(len(p) <= 2 for p in pages)
        assert len(pages) == (len(expected) + 1) // 2
    globex = other_tenant.headers("workflows:read")
    assert flow.client.simulate_get(f"{flow.ns}/signals", headers=globex).status_code == 404
    own = flow.client.simulate_get("/v1/namespaces/globex/signals", headers=globex)
    assert own.status_code == 200 and own.json == {"signals": [], "next_after": None}


@pytest.mark.parametrize(
    "query",
    [
        "status=PENDING",
        "status=CONSUMED",
        "name=a%20b",
        "limit=0",
        "limit=1001",
        "after=-1",
        "correlation_key=" + "k" * 513,
    ],
)
def test_B6_the_list_refuses_bad_filters_with_a_problem(published, query):
    answer = published.client.simulate_get(f"{published.ns}/signals", query_string=query, headers=published.signaller)
    assert answer.status_code == 422 and answer.json["code"] == "VALIDATION_FAILED", answer.text
    assert answer.json["errors"][0]["pointer"].startswith("?")


# ---- wait_seconds ------------------------------------------------------------------------------------


def test_B6_wait_seconds_answers_as_soon_as_a_parked_fact_is_consumed(published):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    receipt = route(flow, "pay-1", fact()).json
    flow.scan()  # its reserve task is queued; no wait is open yet
    thread, out = in_thread(lambda: read_fact(flow, receipt["signal_id"], query="wait_seconds=10"))
    time.sleep(0.3)
    assert "answer" not in out  # still PARKED: it waits
    flow.finish_task()  # the payment wait opens, takes the fact and consumes it
    thread.join(15)
    answer = out["answer"]
    assert answer.status_code == 200 and (answer.json["status"], answer.json["route"]) == ("CONSUMED", "ROUTED")
    assert out["seconds"] < 8


def test_B6_wait_seconds_on_a_workflows_signal_answers_when_the_wait_consumes_it(published):
    flow = published
    open_payment_wait(flow)
    receipt = route(flow, "pay-1", fact()).json
    assert receipt["status"] == "PENDING"
    thread, out = in_thread(
        lambda: flow.client.simulate_get(
            f"{flow.ns}/workflows/w-1/signals/{receipt['signal_id']}",
            query_string="wait_seconds=10",
            headers=flow.signaller,
        )
    )
    time.sleep(0.3)
    assert "answer" not in out
    flow.scan()  # the wait consumes it
    thread.join(15)
    assert out["answer"].json["status"] == "CONSUMED" and out["seconds"] < 8


def test_B6_wait_seconds_answers_the_state_then_once_the_time_has_passed(published):
    flow = published
    receipt = route(flow, "pay-1", fact()).json
    started = time.monotonic()
    answer = read_fact(flow, receipt["signal_id"], query="wait_seconds=1")
    assert 0.9 <= time.monotonic() - started < 5
    assert answer.status_code == 200 and answer.json["status"] == "PARKED"
    settled = time.monotonic()
    expire_by_hand(flow, receipt["signal_id"])
    assert read_fact(flow, receipt["signal_id"], query="wait_seconds=10").json["status"] == "EXPIRED"
    assert time.monotonic() - settled < 1  # a settled fact is answered at once


@pytest.mark.parametrize("value", ["21", "-1", "x"])
def test_B6_wait_seconds_beyond_0_to_20_is_refused(published, value):
    flow = published
    open_payment_wait(flow)
    receipt = route(flow, "pay-1", fact()).json
    for path in (
        f"{flow.ns}/signals/{receipt['signal_id']}",
        f"{flow.ns}/workflows/w-1/signals/{receipt['signal_id']}",
    ):
        answer = flow.client.simulate_get(path, query_string=f"wait_seconds={value}", headers=flow.signaller)
        assert answer.status_code == 422 and answer.json["errors"][0]["pointer"] == "?wait_seconds"


def test_B6_a_waiting_signal_read_takes_a_slot_of_the_waiting_claims_cap(config, database, published):
    """A cap of one: a read waiting on a parked fact holds it, so a claim that would wait is turned
    away; a read beyond the cap answers at once with the state it read; the slot comes back."""
    flow = published
    client = falcon.testing.TestClient(create_app(Config(config.database_url, max_waiting_claims=1), database))
    receipt = route(flow, "pay-1", fact()).json
    slots = next(r for p, r in _routes(client) if p.endswith("/signals/{signal_id}")).slots
    thread, out = in_thread(lambda: read_fact(flow, receipt["signal_id"], query="wait_seconds=3", client=client))
    until(lambda: slots._waiting)
    started = time.monotonic()
    claim = client.simulate_post(
        f"{flow.ns}/queues/inventory/claim",
        json={"worker_id": "w1", "lease_seconds": 30, "wait_seconds": 5},
        headers=flow.worker,
    )
    assert claim.status_code == 204 and "retry-after" in claim.headers
    beyond = read_fact(flow, receipt["signal_id"], query="wait_seconds=5", client=client)
    assert beyond.status_code == 200 and beyond.json["status"] == "PARKED"
    assert time.monotonic() - started < 1.5  # neither waited
    thread.join(10)
    assert out["answer"].json["status"] == "PARKED" and out["seconds"] >= 2.9
    assert slots._waiting == {}


def _routes(client):
    """(path, resource) of the app's routes."""
    from test_authorization import mounted

    return mounted(client.app)


def test_B6_a_read_that_waited_checks_its_credential_again_before_it_answers(published, database):
    """A credential revoked while its read waits gets 401 at the end of the wait, not the state."""
    from weave import auth
    from weave.sql import tenancy

    flow = published
    receipt = route(flow, "pay-1", fact()).json
    token = flow.tenant.token("workflows:read")
    credential_id = tenancy.authenticate(database, auth.token_hash(token)).credential_id
    headers = {"Authorization": f"Bearer {token}"}
    thread, out = in_thread(lambda: read_fact(flow, receipt["signal_id"], headers, "wait_seconds=1"))
    time.sleep(0.3)
    tenancy.revoke_credential(database, "acme", credential_id)
    thread.join(10)
    assert (out["answer"].status_code, out["answer"].json["code"]) == (401, "UNAUTHENTICATED")
