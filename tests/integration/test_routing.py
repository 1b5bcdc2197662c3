"""Routing a fact by its business key (SPEC §14): the route `POST {N}/signals` (B1-B3) and the take
of parked facts by the wait that opens for them (B4), every outcome with its rows and answers."""

from __future__ import annotations

import ast
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import PAYMENT_SCHEMA, RECEIPT_FIELDS, signal_flow_definition

from weave.sql import routing, tenancy

ROUTE_FIELDS = (*RECEIPT_FIELDS, "route", "target_step_key", "target_activation_sequence")  # B3


def parse_rfc3339(text: str) -> datetime:
    """A receipt's time as the database's naive UTC value."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def fact(order: str = "o-1", **overrides) -> dict:
    body = {
        "name": "payment.settled",
        "payload_version": "v1",
        "correlation_key": order,
        "payload": {"amount": 12.5},
        "reason": "PSP webhook settled the payment",
    }
    body.update(overrides)
    return body


def route(flow, key: str, body: dict, headers: dict | None = None):
    return flow.client.simulate_post(
        f"{flow.ns}/signals", json=body, headers={**(headers or flow.signaller), "Idempotency-Key": key}
    )


def signal_rows(flow) -> list[dict]:
    return flow.rows(
        "SELECT id, instance_id, namespace_id, target_step_key, target_activation_sequence, status, disposition,"
        " idempotency_key, route_key, accepted_at, expires_at, available_at, settled_at FROM signals ORDER BY id"
    )


def payment_step(flow, workflow_id: str) -> dict:
    return next(s for s in flow.workflow(workflow_id)["steps"] if s["key"] == "payment")


def park_then_open(flow, body: dict | None = None, headers: dict | None = None) -> dict:
    """w-1 started, a fact of its key parked, then its payment wait opened (the take); the receipt."""
    flow.start("w-1", input={"order_id": "o-1"})
    receipt = route(flow, "a", body or fact(), headers).json
    assert receipt["route"] == "PARKED"
    flow.scan()
    flow.finish_task()
    return receipt


def open_payment_wait(flow, workflow_id: str = "w-1", order: str = "o-1") -> None:
    """An instance whose payment step waits (its reserve task done)."""
    flow.start(workflow_id, input={"order_id": order})
    flow.scan()
    flow.finish_task()
    assert payment_step(flow, workflow_id)["wait"]["status"] == "WAITING"


@pytest.fixture
def published(flow):
    flow.publish(signal_flow_definition())
    return flow


# ---- B2/B3: the three routes -------------------------------------------------------------------------


def test_B2_B3_one_waiting_wait_takes_the_fact_as_a_signal_of_its_activation(published):
    flow = published
    open_payment_wait(flow)
    answer = route(flow, "pay-1", fact())
    assert answer.status_code == 201, answer.text
    receipt = answer.json
    assert list(receipt) == list(ROUTE_FIELDS)
    assert receipt["route"] == "ROUTED" and receipt["status"] == "PENDING" and receipt["disposition"] is None
    assert (receipt["workflow_id"], receipt["target_step_key"], receipt["target_activation_sequence"]) == (
        "w-1",
        "payment",
        1,
    )
    [row] = signal_rows(flow)
    assert row["instance_id"] is not None and row["target_step_key"] == "payment"
    assert row["idempotency_key"] is None and row["route_key"] == "pay-1" and row["namespace_id"] is not None
    flow.scan()
    step = payment_step(flow, "w-1")
    assert step["status"] == "SUCCEEDED" and step["wait"]["winner_signal_id"] == receipt["signal_id"]
    state = flow.signal("w-1", receipt["signal_id"]).json  # readable where it went, under its key
    assert state["status"] == "CONSUMED" and state["idempotency_key"] == "pay-1"
    assert "SIGNAL_ACCEPTED" in flow.events("w-1") and "SIGNAL_CONSUMED" in flow.events("w-1")


def test_B2_B3_no_wait_parks_the_fact_until_parked_until(published):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    answer = route(flow, "pay-1", fact(park_seconds=600))
    assert answer.status_code == 201, answer.text
    receipt = answer.json
    assert receipt["route"] == "PARKED" and receipt["status"] == "PARKED" and receipt["workflow_id"] is None
    assert receipt["target_step_key"] is None and receipt["target_activation_sequence"] is None
    accepted = parse_rfc3339(receipt["accepted_at"])
    assert (
        parse_rfc3339(receipt["parked_until"])
        == accepted + timedelta(seconds=600)
        == parse_rfc3339(receipt["expires_at"])
    )
    [row] = signal_rows(flow)
    assert row["status"] == "PARKED" and row["instance_id"] is None and row["target_step_key"] is None
    assert row["settled_at"] is None and row["available_at"] == row["expires_at"]
    assert flow.rows("SELECT action FROM audit_records WHERE signal_id = %s", (row["id"],)) == [
        {"action": "signal.park"}
    ]


def test_B2_park_seconds_defaults_to_a_day(published):
    flow = published
    receipt = route(flow, "pay-1", fact()).json
    assert parse_rfc3339(receipt["parked_until"]) - parse_rfc3339(receipt["accepted_at"]) == timedelta(days=1)


def test_B2_two_waiting_waits_make_the_fact_ambiguous_and_it_goes_nowhere(published):
    flow = published
    open_payment_wait(flow, "w-1", "o-1")
    open_payment_wait(flow, "w-2", "o-1")
    answer = route(flow, "pay-1", fact())
    assert answer.status_code == 201, answer.text
    receipt = answer.json
    assert (receipt["route"], receipt["status"], receipt["disposition"]) == (
        "AMBIGUOUS",
        "REJECTED",
        "AMBIGUOUS_CORRELATION",
    )
    [row] = signal_rows(flow)
    assert row["instance_id"] is None and row["settled_at"] is not None
    flow.scan()
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"
    assert payment_step(flow, "w-2")["wait"]["status"] == "WAITING"


def test_B2_a_wait_of_another_key_or_contract_is_no_candidate(published):
    flow = published
    open_payment_wait(flow, "w-1", "o-1")
    assert route(flow, "k1", fact("o-1 ")).json["route"] == "PARKED"  # exact bytes: a trailing space differs
    assert route(flow, "k2", fact(payload_version="v2")).json["route"] == "PARKED"
    assert route(flow, "k3", fact(name="payment.refunded")).json["route"] == "PARKED"
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"


def test_B2_a_wait_of_another_namespace_is_no_candidate(published, other_tenant):
    flow = published
    open_payment_wait(flow)
    other = other_tenant.headers("workflows:signal", queues=("inventory",), actor="other")
    answer = flow.client.simulate_post(
        f"/v1/namespaces/{other_tenant.namespace}/signals", json=fact(), headers={**other, "Idempotency-Key": "k"}
    )
    assert answer.json["route"] == "PARKED"
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"


def test_B2_an_instance_the_credential_may_not_signal_is_no_candidate(published):
    flow = published
    open_payment_wait(flow)
    inventory_only = flow.tenant.headers("workflows:signal", queues=("inventory",), actor="narrow")
    receipt = route(flow, "pay-1", fact(), inventory_only).json
    assert receipt["route"] == "PARKED"
    [row] = signal_rows(flow)
    assert row["status"] == "PARKED"


def test_B2_a_routed_payload_is_checked_against_the_waits_contract(published):
    flow = published
    open_payment_wait(flow)
    answer = route(flow, "pay-1", fact(payload={"amount": "twelve"}))
    assert answer.status_code == 422 and answer.json["code"] == "CONTRACT_MISMATCH"
    assert answer.json["errors"][0]["pointer"] == "/payload/amount"
    assert signal_rows(flow) == []


def test_B2_a_routed_fact_after_the_waits_deadline_is_late(published, clock):
    flow = published
    flow.publish({**signal_flow_definition(timeout=60)})
    flow.start("w-1", version=2, input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task()
    clock.advance(61)
    receipt = route(flow, "pay-1", fact()).json
    assert (receipt["route"], receipt["status"], receipt["disposition"]) == ("ROUTED", "REJECTED", "LATE")


# ---- B1: the body, idempotency, quota ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("workflow_id", "w-1"),
        ("target_step_key", "payment"),
        ("target_activation_sequence", 1),
        ("park_seconds", 0),
        ("park_seconds", 2_592_001),
        ("actor", "someone"),
    ],
)
def test_B1_a_body_naming_a_target_or_breaking_a_limit_is_refused_and_stores_nothing(published, member, value):
    flow = published
    open_payment_wait(flow)
    answer = route(flow, "pay-1", fact(**{member: value}))
    assert answer.status_code == 422 and answer.json["code"] == "VALIDATION_FAILED"
    assert signal_rows(flow) == []


@pytest.mark.parametrize("missing", ["name", "payload_version", "correlation_key", "reason"])
def test_B1_every_field_of_section_5_is_required(published, missing):
    body = fact()
    del body[missing]
    answer = route(published, "pay-1", body)
    assert answer.status_code == 422 and signal_rows(published) == []


def test_B1_the_idempotency_key_header_is_required(published):
    answer = published.client.simulate_post(f"{published.ns}/signals", json=fact(), headers=published.signaller)
    assert answer.status_code == 422 and answer.json["errors"][0]["pointer"] == "header:Idempotency-Key"


def test_B1_a_replay_answers_the_first_receipt_byte_for_byte_wherever_the_fact_went(published):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    first = route(flow, "pay-1", fact())
    assert first.json["route"] == "PARKED"
    flow.scan()
    flow.finish_task()  # the wait opens and takes the fact
    assert signal_rows(flow)[0]["status"] in ("PENDING", "CONSUMED")
    again = route(flow, "pay-1", fact())
    assert again.status_code == 201 and again.text == first.text
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert len(signal_rows(flow)) == 1


def test_B1_the_same_key_with_other_content_is_a_conflict(published):
    flow = published
    route(flow, "pay-1", fact())
    for other in (fact(payload={"amount": 13}), fact(park_seconds=60), fact("o-2")):
        answer = route(flow, "pay-1", other)
        assert answer.status_code == 409 and answer.json["code"] == "IDEMPOTENCY_CONFLICT"
    assert len(signal_rows(flow)) == 1


def test_B1_an_absent_park_seconds_is_the_default_for_idempotency(published):
    flow = published
    first = route(flow, "pay-1", fact())
    assert route(flow, "pay-1", fact(park_seconds=86_400)).text == first.text


def test_B1_keys_are_scoped_to_the_namespace_not_to_an_instance(published):
    """A route key and an instance-addressed key of the same text are two facts."""
    flow = published
    open_payment_wait(flow)
    routed = route(flow, "same", fact()).json
    sent = flow.send(
        "w-1",
        "same",
        {
            **fact(),
            "target_step_key": "payment",
            "target_activation_sequence": 1,
        },
    ).json
    assert routed["signal_id"] != sent["signal_id"] and len(signal_rows(flow)) == 2


def test_B1_the_application_quota_applies(published, database):
    flow = published
    tenancy.create_application(database, flow.tenant.namespace, "limited", 1)
    limited = flow.tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="limited")
    assert route(flow, "a", fact(), limited).status_code == 201
    answer = route(flow, "b", fact("o-2"), limited)
    assert answer.status_code == 429 and answer.json["code"] == "QUOTA_EXCEEDED" and answer.headers["Retry-After"]
    assert len(signal_rows(flow)) == 1


def test_B1_a_disabled_application_may_not_route(published, database):
    flow = published
    headers = flow.signaller
    tenancy.set_application_status(database, flow.tenant.namespace, "app", "DISABLED")
    assert route(flow, "a", fact(), headers).status_code == 403
    assert signal_rows(flow) == []


def test_B1_the_route_needs_the_signal_scope(published):
    reader = published.tenant.headers("workflows:read", queues=("inventory", "carrier"))
    assert route(published, "a", fact(), reader).status_code == 403


# ---- B4: the take ----------------------------------------------------------------------------------------


def test_B4_the_wait_that_opens_takes_the_parked_fact_with_its_original_times(published, clock):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    receipt = route(flow, "pay-1", fact(park_seconds=7200)).json
    clock.advance(30)
    flow.scan()
    flow.finish_task()  # activates payment: the take, then the wait's first look consumes it
    [row] = signal_rows(flow)
    assert row["status"] == "CONSUMED" and row["target_step_key"] == "payment"
    assert row["target_activation_sequence"] == 1
    assert row["accepted_at"] == parse_rfc3339(receipt["accepted_at"])
    assert row["expires_at"] == parse_rfc3339(receipt["parked_until"])
    step = payment_step(flow, "w-1")
    assert step["status"] == "SUCCEEDED" and step["wait"]["winner_signal_id"] == receipt["signal_id"]
    history = flow.events("w-1")
    assert history.index("SIGNAL_ROUTED") < history.index("SIGNAL_CONSUMED")
    actions = [r["action"] for r in flow.rows("SELECT action FROM audit_records WHERE signal_id = %s", (row["id"],))]
    assert actions == ["signal.park", "signal.route"]
    assert flow.rows("SELECT signals_stored FROM instances") == [{"signals_stored": 1}]


def test_B4_the_first_accepted_of_several_parked_facts_wins_the_others_lose(published, clock):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    first = route(flow, "a", fact(payload={"amount": 1})).json
    clock.advance(1)
    second = route(flow, "b", fact(payload={"amount": 2})).json
    flow.scan()
    flow.finish_task()
    rows = {str(r["id"]): r for r in signal_rows(flow)}
    assert rows[first["signal_id"]]["status"] == "CONSUMED"
    assert (rows[second["signal_id"]]["status"], rows[second["signal_id"]]["disposition"]) == (
        "REJECTED",
        "WAIT_SETTLED",
    )


def test_B4_a_fact_is_taken_once_a_second_wait_of_the_key_finds_it_gone(published):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    flow.start("w-2", input={"order_id": "o-1"})
    route(flow, "a", fact())
    flow.scan()
    flow.finish_task()
    flow.finish_task()
    [row] = signal_rows(flow)
    assert row["status"] == "CONSUMED"
    waits = sorted(payment_step(flow, w)["wait"]["status"] for w in ("w-1", "w-2"))
    assert waits == ["SATISFIED", "WAITING"]


def test_B4_a_revoked_credential_s_fact_is_not_taken_and_stays_parked(published, database):
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    token = flow.tenant.token("workflows:signal", queues=("inventory", "carrier"), actor="revoked-bot")
    receipt = route(flow, "a", fact(), {"Authorization": f"Bearer {token}"}).json
    [row] = flow.rows("SELECT credential_id FROM signals")
    tenancy.revoke_credential(database, flow.tenant.namespace, row["credential_id"])
    flow.scan()
    flow.finish_task()
    [stored] = signal_rows(flow)
    assert stored["status"] == "PARKED" and stored["instance_id"] is None
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"
    noted = flow.rows("SELECT data FROM events WHERE type = 'SIGNAL_NOT_ROUTED'")
    assert len(noted) == 1 and receipt["signal_id"] in noted[0]["data"] and "CREDENTIAL_NOT_CURRENT" in noted[0]["data"]


def test_B4_a_fact_of_a_disabled_application_is_not_taken(published, database):
    flow = published
    tenancy.create_application(database, flow.tenant.namespace, "senders", None)
    sender = flow.tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="senders")
    flow.start("w-1", input={"order_id": "o-1"})
    route(flow, "a", fact(), sender)
    tenancy.set_application_status(database, flow.tenant.namespace, "senders", "DISABLED")
    flow.scan()
    flow.finish_task()  # the take, with the sender's application disabled since
    assert signal_rows(flow)[0]["status"] == "PARKED"
    [noted] = flow.rows("SELECT data FROM events WHERE type = 'SIGNAL_NOT_ROUTED'")
    assert "CREDENTIAL_NOT_CURRENT" in noted["data"]


def test_B4_a_fact_whose_credential_lost_a_grant_is_not_taken(published, database):
    """The grants that count are those for the queues of the instance the wait belongs to: a
    definition on a queue the sender holds no grant for does not take its fact."""
    flow = published
    tenancy.create_queue(database, flow.tenant.namespace, "vault", 1)
    document = signal_flow_definition()
    document["steps"][2]["queue"] = "vault"
    flow.headers = flow.tenant.headers(
        "definitions:write", "workflows:start", "workflows:read", queues=("inventory", "carrier", "vault")
    )
    version = flow.publish(document)
    flow.start("w-1", version=version, input={"order_id": "o-1"})
    route(flow, "a", fact())  # the signaller has inventory and carrier, not vault
    flow.scan()
    flow.finish_task()  # the take: the instance runs on vault too
    assert signal_rows(flow)[0]["status"] == "PARKED"
    [noted] = flow.rows("SELECT data FROM events WHERE type = 'SIGNAL_NOT_ROUTED'")
    assert "QUEUE_GRANTS_MISSING" in noted["data"]


def test_B4_a_parked_payload_that_breaks_the_waits_contract_is_not_taken(published):
    flow = published
    park_then_open(flow, fact(payload={"amount": "twelve"}))
    assert signal_rows(flow)[0]["status"] == "PARKED"
    [noted] = flow.rows("SELECT data FROM events WHERE type = 'SIGNAL_NOT_ROUTED'")
    assert "CONTRACT_MISMATCH" in noted["data"]
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"


def test_B4_a_poll_steps_final_signal_wait_takes_its_parked_fact(flow):
    flow.publish(
        {
            "name": "flow",
            "steps": [
                {
                    "key": "check",
                    "type": "POLL",
                    "queue": "inventory",
                    "interval_seconds": 60,
                    "timeout_seconds": 3600,
                    "correlation": "/input/order_id",
                    "final_signal": {"name": "check.done", "payload_version": "v1", "payload_schema": PAYMENT_SCHEMA},
                }
            ],
        }
    )
    flow.start("w-1", input={"order_id": "o-9"})
    body = fact("o-9", name="check.done", payload={"state": "FINAL", "result": {"amount": 3}})
    assert route(flow, "a", body).json["route"] == "PARKED"
    flow.scan()
    [row] = signal_rows(flow)
    assert row["target_step_key"] == "check" and row["status"] in ("PENDING", "CONSUMED")


def test_B4_routing_into_an_instance_holding_its_limit_refuses_the_fact_in_the_namespace(published):
    """docs/decisions.md: parked facts count against no instance; routed into a full one, a fact is
    REJECTED/SIGNAL_LIMIT_REACHED and stays a namespace fact (the instance holds no 1,025th)."""
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    route(flow, "parked", fact())
    flow.rows("UPDATE instances SET signals_stored = 1024")
    flow.scan()
    flow.finish_task()
    [row] = signal_rows(flow)
    assert (row["status"], row["disposition"], row["instance_id"]) == ("REJECTED", "SIGNAL_LIMIT_REACHED", None)
    receipt = route(flow, "late", fact()).json  # the wait is open: routed, and refused the same way
    assert (receipt["route"], receipt["workflow_id"], receipt["disposition"]) == (
        "ROUTED",
        "w-1",
        "SIGNAL_LIMIT_REACHED",
    )
    assert flow.rows("SELECT signals_stored FROM instances") == [{"signals_stored": 1024}]


# ---- the hash --------------------------------------------------------------------------------------------


def test_B2_the_migrations_sql_hash_is_the_codes(published):
    """Migration 0017 hashes the waits of before in SQL: the same value as `routing.route_hash`."""
    flow = published
    open_payment_wait(flow, order="ø-1 ")
    [wait] = flow.rows("SELECT route_hash, correlation FROM waits")
    flow.rows("UPDATE waits SET route_hash = NULL")
    path = Path(__file__).resolve().parents[2] / "migrations" / "0017.routing.py"
    statement = next(
        ast.literal_eval(node.value)
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign) and node.targets[0].id == "HASH_WAITING_WAITS"
    )
    flow.rows(statement)
    [again] = flow.rows("SELECT route_hash FROM waits")
    namespace_id = flow.rows("SELECT id FROM namespaces WHERE name = %s", (flow.tenant.namespace,))[0]["id"]
    assert again["route_hash"] == wait["route_hash"]
    assert wait["route_hash"] == routing.route_hash(namespace_id, "payment.settled", "v1", "ø-1 ".encode())


def test_B4_a_parked_fact_changed_after_acceptance_fails_its_proof_S1_12(published):
    """The take carries the digest of the fact's acceptance record (`signal.park`) into the
    instance's record: a stored fact changed since is never used, as for any signal."""
    flow = published
    flow.start("w-1", input={"order_id": "o-1"})
    route(flow, "a", fact())
    flow.rows("UPDATE signals SET payload = '{\"amount\":999}'")  # after acceptance, before the take
    flow.scan()
    flow.finish_task()
    step = payment_step(flow, "w-1")
    assert step["status"] == "NEEDS_REVIEW" and step["review_reason"] == "ACCEPTANCE_PROOF_MISMATCH"
    [row] = flow.rows("SELECT request_digest FROM audit_records WHERE action = 'signal.route'")
    [parked] = flow.rows("SELECT request_digest FROM audit_records WHERE action = 'signal.park'")
    assert row == parked


# ---- a route that finds its wait changed under it ------------------------------------------------------


def stale_first(monkeypatch, times: int) -> list[int]:
    """The route's first `times` reads of candidates also find settled waits (as a read just before
    the wait settled would); the count of reads made."""
    reads = []
    real = routing._candidates

    def candidates(tx, principal, request, hashed):
        reads.append(1)
        if len(reads) > times:
            return real(tx, principal, request, hashed)
        rows = tx.all(
            routing.SELECT_CANDIDATE_WAITS.replace("w.status = 'WAITING'", "w.status <> 'X'"),
            (
                hashed,
                request.fields["name"],
                request.fields["payload_version"],
                request.correlation,
                principal.namespace_id,
            ),
        )
        return rows

    monkeypatch.setattr(routing, "_candidates", candidates)
    return reads


def test_B2_a_wait_settled_since_the_read_is_rechecked_under_the_instance_lock(published, monkeypatch):
    """The one candidate found without a lock is re-checked under its instance's lock: settled
    since, the route starts again, finds no wait, and parks the fact."""
    flow = published
    open_payment_wait(flow)
    route(flow, "first", fact())
    flow.scan()  # the wait takes the first fact: SATISFIED
    reads = stale_first(monkeypatch, 1)
    receipt = route(flow, "second", fact()).json
    assert receipt["route"] == "PARKED" and len(reads) >= 3  # stale, then again: none, and none under the bucket
    assert [r["status"] for r in signal_rows(flow)] == ["CONSUMED", "PARKED"]


def test_B2_a_route_whose_waits_keep_changing_answers_503_and_stores_nothing(published, monkeypatch):
    flow = published
    open_payment_wait(flow)
    route(flow, "first", fact())
    flow.scan()
    reads = stale_first(monkeypatch, 1000)
    answer = route(flow, "second", fact())
    assert answer.status_code == 503 and answer.headers.get("Retry-After")
    assert len(reads) == routing.ROUTE_ATTEMPTS and len(signal_rows(flow)) == 1
