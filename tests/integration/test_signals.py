"""S1.1-S1.12: identified, permission-checked, idempotent, exact signal acceptance and query."""

import json
import threading
from datetime import timedelta

import pytest
from helpers import ABSENT, RECEIPT_FIELDS, payment, signal_flow_definition

from weave import auth, driver
from weave.sql import tenancy


@pytest.fixture
def wf(flow):
    """A started workflow whose payment step is not active yet (early signals stay PENDING)."""
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    return flow


@pytest.fixture
def waiting(wf):
    """The payment step is active: its wait is WAITING."""
    wf.scan()
    wf.finish_task({"reservation_id": "r-1"})
    assert wf.workflow("order-1")["steps"][1]["status"] == "ACTIVE"
    return wf


def count(flow, table, where="1=1"):
    return flow.rows(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}")[0]["n"]


# ---- S1.1 / S1.2 / S1.8: who may send and read ---------------------------------------------------


def test_s1_1_send_needs_the_signal_scope_and_read_needs_the_read_scope(wf, tenant):
    reader = tenant.headers("workflows:read", queues=("inventory", "carrier"))
    refused = wf.send("order-1", "k1", payment(), headers=reader)
    assert (refused.status_code, refused.json["code"]) == (403, "FORBIDDEN")
    sender_only = tenant.headers("workflows:signal", queues=("inventory", "carrier"))
    sent = wf.send("order-1", "k1", payment(), headers=sender_only)
    assert sent.status_code == 201
    assert wf.signal("order-1", sent.json["signal_id"], headers=sender_only).status_code == 403
    listed = wf.client.simulate_get(f"{wf.ns}/workflows/order-1/signals", headers=sender_only)
    assert listed.status_code == 403
    assert wf.signal("order-1", sent.json["signal_id"], headers=reader).status_code == 200


def test_s1_1_every_queue_of_the_pinned_definition_must_be_granted(wf, tenant):
    partial = tenant.headers("workflows:signal", "workflows:read", queues=("inventory",))
    refused = wf.send("order-1", "k1", payment(), headers=partial)
    assert (refused.status_code, refused.json["code"]) == (403, "FORBIDDEN")
    assert "carrier" in refused.json["detail"]
    sent = wf.send("order-1", "k1", payment())
    assert wf.signal("order-1", sent.json["signal_id"], headers=partial).status_code == 403
    assert count(wf, "signals") == 1


def test_s1_1_revoked_or_expired_credentials_and_other_namespaces(wf, tenant, other_tenant, database, clock):
    token = tenant.token("workflows:signal", queues=("inventory", "carrier"), expires_in=60)
    headers = {"Authorization": f"Bearer {token}"}
    clock.advance(60)
    assert wf.send("order-1", "k1", payment(), headers=headers).status_code == 401
    token = tenant.token("workflows:signal", queues=("inventory", "carrier"))
    principal = tenancy.authenticate(database, auth.token_hash(token))
    tenancy.revoke_credential(database, "acme", principal.credential_id)
    assert wf.send("order-1", "k1", payment(), headers={"Authorization": f"Bearer {token}"}).status_code == 401
    outsider = other_tenant.headers("workflows:signal", "workflows:read", queues=("inventory",))
    result = wf.client.simulate_post(
        "/v1/namespaces/acme/workflows/order-1/signals", json=payment(), headers={**outsider, "Idempotency-Key": "k1"}
    )
    assert (result.status_code, result.json["code"]) == (404, "WORKFLOW_NOT_FOUND")
    assert count(wf, "signals") == 0


def test_s1_2_the_actor_comes_from_the_credential_and_cannot_be_named(wf):
    refused = wf.send("order-1", "k1", payment(actor="someone-else"))
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED")
    assert "actor" in refused.json["detail"]
    sent = wf.send("order-1", "k2", payment())
    assert wf.signal("order-1", sent.json["signal_id"]).json["actor"] == "payments-bot"
    audit = wf.rows("SELECT actor FROM audit_records WHERE action = 'signal.send'")
    assert audit == [{"actor": "payments-bot"}]


def test_s1_8_publishing_rights_give_no_signal_rights(wf, tenant):
    publisher = tenant.headers("definitions:write", "definitions:read", queues=("inventory", "carrier"))
    result = wf.send("order-1", "k1", payment(), headers=publisher)
    assert (result.status_code, result.json["code"]) == (403, "FORBIDDEN")


# ---- S1.3 / S1.4: order of checks, one transaction ------------------------------------------------


def test_s1_4_first_acceptance_writes_signal_checkpoint_event_audit_and_receipt_together(waiting, clock):
    sent = waiting.send("order-1", "k1", payment())
    assert sent.status_code == 201
    receipt = sent.json
    assert list(receipt) == list(RECEIPT_FIELDS)
    assert (receipt["status"], receipt["disposition"], receipt["idempotency_key"]) == ("PENDING", None, "k1")
    assert receipt["accepted_at"] == "2026-11-30T07:00:00.000000Z"
    assert receipt["expires_at"] == waiting.workflow("order-1")["deadline_at"]
    (row,) = waiting.rows("SELECT id, receipt, request_digest, actor FROM signals")
    # Frozen in the row: the stored text is the body after its first member, the row's own key.
    assert sent.text == '{"signal_id":"%d",' % row["id"] + row["receipt"]
    assert row["request_digest"] == receipt["request_digest"]
    due_now = waiting.rows("SELECT kind FROM checkpoints WHERE kind = 'WAIT' AND due_at = %s", (clock.now(),))
    assert due_now == [{"kind": "WAIT"}]
    assert waiting.events("order-1")[-1] == "SIGNAL_ACCEPTED"
    (audit,) = waiting.rows(
        "SELECT actor, request_digest, details, signal_id FROM audit_records WHERE action = 'signal.send'"
    )
    details = json.loads(audit["details"])
    assert audit["request_digest"] == receipt["request_digest"] and audit["actor"] == "payments-bot"
    assert audit["signal_id"] == row["id"] and details["signal_id"] == receipt["signal_id"]  # S1.12 finds it by key
    assert details["accepted_at"] == receipt["accepted_at"]
    assert details["instance_deadline_at"] == receipt["expires_at"]


def test_s1_4_a_failure_before_commit_leaves_nothing(waiting, database):
    before = {t: count(waiting, t) for t in ("signals", "checkpoints", "events", "audit_records")}

    def fail(tx, unit):
        if unit == "send_signal":
            raise RuntimeError("injected")

    database.before_commit = fail
    assert waiting.send("order-1", "k1", payment()).status_code == 500
    database.before_commit = None
    assert {t: count(waiting, t) for t in before} == before
    assert waiting.send("order-1", "k1", payment()).status_code == 201


def test_s1_3_quota_is_checked_before_the_idempotency_lookup(wf, database, tenant, clock):
    tenancy.create_application(database, "acme", "limited", 2)
    headers = tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="limited")
    assert wf.send("order-1", "k1", payment(), headers=headers).status_code == 201
    assert wf.send("order-1", "k1", payment(), headers=headers).status_code == 201  # a replay counts too
    over = wf.send("order-1", "k1", payment(), headers=headers)
    assert (over.status_code, over.json["code"]) == (429, "QUOTA_EXCEEDED")
    assert over.headers["retry-after"] == "60"
    clock.advance(59)
    assert wf.send("order-1", "k2", payment(), headers=headers).headers["retry-after"] == "1"
    clock.advance(1)  # a new minute
    assert wf.send("order-1", "k2", payment(), headers=headers).status_code == 201
    assert count(wf, "signals") == 2


def test_s1_3_a_single_send_reads_its_target_with_the_credential(wf, monkeypatch):
    """Issue 31: the idempotency lookup's read travels in the authentication's round trip, and is
    used only once the credential is found current and authorized (S1.1-S1.3 answer as before).
    A first acceptance then takes four round trips: the credential with the target; the locks
    with the facts; the signal's insert; COMMIT with the rest. A replay takes one."""
    sent = []
    query = driver.Connection.query

    def counted(connection, sql, unbuffered=False):
        sent.append(sql)
        return query(connection, sql, unbuffered)

    assert wf.send("order-1", "k0", payment()).status_code == 201  # this process now knows the credential
    monkeypatch.setattr(driver.Connection, "query", counted)
    assert wf.send("order-1", "k1", payment()).status_code == 201
    assert len(sent) == 4, sent
    assert tenancy.SELECT_CURRENT_CREDENTIAL.strip().split("\n")[0] in sent[0]
    assert "FROM instances i LEFT JOIN signals s" in sent[0]
    sent.clear()
    assert wf.send("order-1", "k1", payment()).headers["idempotent-replayed"] == "true"
    assert len(sent) == 1, sent


# ---- S1.5: idempotency -------------------------------------------------------------------------------


def test_s1_5_replay_returns_the_first_receipt_byte_for_byte(wf, clock):
    first = wf.send("order-1", "k1", payment())
    clock.advance(5)
    again = wf.send("order-1", "k1", payment())
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    # Member order does not change the canonical digest: still the same request.
    reordered = dict(reversed(list(payment().items())))
    assert wf.send("order-1", "k1", reordered).content == first.content
    assert count(wf, "signals") == 1


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"amount": 12.51}},
        {"reason": "other"},
        {"correlation_key": "o-1 "},
        {"payload": ABSENT},
        {"payload": None},
        {"evidence_ref": "psp:evt_1"},
    ],
)
def test_s1_5_same_key_other_content_is_409(wf, change):
    wf.send("order-1", "k1", payment())
    result = wf.send("order-1", "k1", payment(**change))
    assert (result.status_code, result.json["code"]) == (409, "IDEMPOTENCY_CONFLICT")
    assert count(wf, "signals") == 1


def test_s1_5_idempotency_is_scoped_to_the_instance(wf):
    wf.start("order-2", input={"order_id": "o-2"})
    assert wf.send("order-1", "k1", payment()).json["workflow_id"] == "order-1"
    assert wf.send("order-2", "k1", payment()).json["workflow_id"] == "order-2"
    assert count(wf, "signals") == 2


def test_s1_5_a_replay_still_passes_the_current_permission_checks(wf, tenant, database):
    token = tenant.token("workflows:signal", queues=("inventory", "carrier"))
    headers = {"Authorization": f"Bearer {token}"}
    assert wf.send("order-1", "k1", payment(), headers=headers).status_code == 201
    narrower = tenant.headers("workflows:signal", queues=("inventory",))
    assert wf.send("order-1", "k1", payment(), headers=narrower).status_code == 403
    principal = tenancy.authenticate(database, auth.token_hash(token))
    tenancy.revoke_credential(database, "acme", principal.credential_id)
    assert wf.send("order-1", "k1", payment(), headers=headers).status_code == 401


@pytest.mark.parametrize("key", [None, "", "x" * 129, "tab\tkey", "ключ"])
def test_s1_5_idempotency_key_header_is_required_and_printable(wf, key):
    headers = dict(wf.signaller)
    if key is not None:
        headers["Idempotency-Key"] = key
    result = wf.client.simulate_post(f"{wf.ns}/workflows/order-1/signals", json=payment(), headers=headers)
    assert (result.status_code, result.json["code"]) == (422, "VALIDATION_FAILED")
    assert count(wf, "signals") == 0


def test_s1_5_thirty_two_concurrent_duplicates_make_exactly_one_signal(wf):
    barrier = threading.Barrier(32)
    responses = []

    def send():
        barrier.wait()
        responses.append(wf.send("order-1", "same-key", payment()))

    threads = [threading.Thread(target=send) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in responses] == [201] * 32
    assert len({r.content for r in responses}) == 1
    assert sum(1 for r in responses if "idempotent-replayed" not in r.headers) == 1
    assert count(wf, "signals") == 1
    assert count(wf, "audit_records", "action = 'signal.send'") == 1
    assert wf.events("order-1").count("SIGNAL_ACCEPTED") == 1


# ---- S1.6: the per-instance limit ---------------------------------------------------------------------


def test_s1_6_the_1024th_signal_is_accepted_the_1025th_refused_replays_still_answer(wf, database, clock):
    first = wf.send("order-1", "k-first", payment())
    instance_id = wf.rows("SELECT id FROM instances")[0]["id"]

    # 1022 more stored signals, written directly with the instance's count of them (as acceptance
    # keeps it): the limit counts every signal, rejected and settled included.
    def store_1022(tx):
        tx.executemany(
            "INSERT INTO signals (instance_id, name, correlation, payload, status, disposition, accepted_at, created_at,"
            " idempotency_key) VALUES (%s, 'payment.settled', 'o-1', '{}', 'REJECTED', 'STEP_SETTLED', %s, %s, %s)",
            [(instance_id, clock.now(), clock.now(), f"bulk-{i}") for i in range(1022)],
        )
        tx.execute("UPDATE instances SET signals_stored = signals_stored + 1022 WHERE id = %s", (instance_id,))

    database.run(store_1022)
    assert count(wf, "signals") == 1023
    assert wf.rows("SELECT signals_stored FROM instances")[0]["signals_stored"] == 1023
    last = wf.send("order-1", "k-1024", payment())
    assert last.status_code == 201
    over = wf.send("order-1", "k-1025", payment())
    assert (over.status_code, over.json["code"]) == (409, "SIGNAL_LIMIT_REACHED")
    assert wf.send("order-1", "k-first", payment()).content == first.content
    assert wf.send("order-1", "k-1024", payment()).content == last.content
    assert count(wf, "signals") == 1024
    assert wf.rows("SELECT signals_stored FROM instances")[0]["signals_stored"] == 1024


# ---- S1.7: frozen receipt, current state ------------------------------------------------------------------


def test_s1_7_receipt_is_frozen_while_get_shows_the_current_state(waiting):
    sent = waiting.send("order-1", "k1", payment(evidence_ref="psp:evt_42"))
    waiting.scan()
    state = waiting.signal("order-1", sent.json["signal_id"]).json
    assert (state["status"], state["disposition"]) == ("CONSUMED", None)
    assert state["consumed_at"] == "2026-11-30T07:00:00.000000Z"
    assert {
        k: state[k]
        for k in (
            "name",
            "payload_version",
            "target_step_key",
            "target_activation_sequence",
            "correlation_key",
            "payload",
            "reason",
            "evidence_ref",
            "actor",
        )
    } == {
        "name": "payment.settled",
        "payload_version": "v1",
        "target_step_key": "payment",
        "target_activation_sequence": 1,
        "correlation_key": "o-1",
        "payload": {"amount": 12.5},
        "reason": "PSP webhook settled the payment",
        "evidence_ref": "psp:evt_42",
        "actor": "payments-bot",
    }
    replay = waiting.send("order-1", "k1", payment(evidence_ref="psp:evt_42"))
    assert replay.json["status"] == "PENDING"  # frozen at acceptance
    assert replay.content == sent.content


def test_s1_7_list_pages_and_filters_by_status(wf):
    for i in range(5):
        wf.send("order-1", f"k{i}", payment())
    url = f"{wf.ns}/workflows/order-1/signals"
    page = wf.client.simulate_get(url, query_string="limit=2", headers=wf.signaller).json
    assert len(page["signals"]) == 2 and page["next_after"] == page["signals"][1]["signal_id"]
    rest = wf.client.simulate_get(url, query_string=f"after={page['next_after']}", headers=wf.signaller).json
    assert len(rest["signals"]) == 3 and rest["next_after"] is None
    pending = wf.client.simulate_get(url, query_string="status=PENDING", headers=wf.signaller).json
    assert len(pending["signals"]) == 5
    none = wf.client.simulate_get(url, query_string="status=CONSUMED", headers=wf.signaller).json
    assert none == {"signals": [], "next_after": None}
    bad = wf.client.simulate_get(url, query_string="status=NOPE", headers=wf.signaller)
    assert bad.status_code == 422


def test_s1_7_unknown_signal_is_404(wf):
    for signal_id in ("999999", "abc"):
        result = wf.signal("order-1", signal_id)
        assert (result.status_code, result.json["code"]) == (404, "SIGNAL_NOT_FOUND")


# ---- S1.9: contract and input rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, code, pointer",
    [
        ({"name": "payment.refunded"}, "CONTRACT_MISMATCH", "/name"),
        ({"payload_version": "v2"}, "CONTRACT_MISMATCH", "/payload_version"),
        ({"target_step_key": "reserve"}, "CONTRACT_MISMATCH", "/target_step_key"),
        ({"target_step_key": "nope"}, "CONTRACT_MISMATCH", "/target_step_key"),
        ({"payload": {"amount": "12.50"}}, "CONTRACT_MISMATCH", "/payload/amount"),
        ({"payload": {}}, "CONTRACT_MISMATCH", "/payload"),
        ({"payload": ABSENT}, "CONTRACT_MISMATCH", "/payload"),
        ({"target_activation_sequence": 0}, "VALIDATION_FAILED", "/target_activation_sequence"),
        ({"target_activation_sequence": "1"}, "VALIDATION_FAILED", "/target_activation_sequence"),
        ({"target_activation_sequence": 1.5}, "VALIDATION_FAILED", "/target_activation_sequence"),
        ({"target_activation_sequence": 0.0}, "VALIDATION_FAILED", "/target_activation_sequence"),
        ({"correlation_key": ""}, "VALIDATION_FAILED", "/correlation_key"),
        ({"correlation_key": "é" * 257}, "VALIDATION_FAILED", "/correlation_key"),
        ({"reason": ""}, "VALIDATION_FAILED", "/reason"),
        ({"reason": "r" * 1025}, "VALIDATION_FAILED", "/reason"),
        ({"reason": ABSENT}, "VALIDATION_FAILED", ""),
        ({"evidence_ref": "has space"}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"evidence_ref": "line\nbreak"}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"evidence_ref": "em\u2003space"}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"evidence_ref": "no\u00a0break"}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"evidence_ref": "next\u0085line"}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"evidence_ref": "e" * 513}, "VALIDATION_FAILED", "/evidence_ref"),
        ({"name": "n" * 129}, "VALIDATION_FAILED", "/name"),
        ({"name": "payé"}, "VALIDATION_FAILED", "/name"),
        ({"payload_version": "v" * 33}, "VALIDATION_FAILED", "/payload_version"),
    ],
)
def test_s1_9_contract_and_input_violations_are_refused_and_store_nothing(wf, change, code, pointer):
    result = wf.send("order-1", "k1", payment(**change))
    assert (result.status_code, result.json["code"]) == (422, code), result.text
    assert pointer in [e["pointer"] for e in result.json["errors"]], result.json
    assert count(wf, "signals") == 0 and count(wf, "audit_records", "action = 'signal.send'") == 0


def test_s1_9_a_payload_integer_may_be_written_1_0_and_is_kept_as_written_but_1_5_is_refused(flow):
    """Issue 25 item 9: JSON Schema 2020-12 counts a number with a zero fraction as an integer, and
    Weave follows it exactly for the decimals it parses (`1.0`, `1e3`); the payload is stored and
    answered as it was written."""
    document = signal_flow_definition()
    document["steps"][1]["signal"]["payload_schema"] = {
        "type": "object",
        "required": ["amount", "units"],
        "properties": {"amount": {"type": "number"}, "units": {"type": "integer", "minimum": 1}},
    }
    flow.publish(document)
    flow.start("order-1", input={"order_id": "o-1"})
    accepted = flow.send("order-1", "k1", payment(payload={"amount": 12.5, "units": 1.0}))
    assert accepted.status_code == 201, accepted.text
    raw = json.dumps(payment(payload={"amount": 12.5, "units": 0})).replace('"units": 0', '"units": 1E+3')
    also = flow.client.simulate_post(
        f"{flow.ns}/workflows/order-1/signals",
        body=raw.encode(),
        headers={**flow.signaller, "Idempotency-Key": "k2", "Content-Type": "application/json"},
    )
    assert also.status_code == 201, also.text
    rows = flow.rows("SELECT payload FROM signals ORDER BY id")
    assert [row["payload"] for row in rows] == ['{"amount":12.5,"units":1.0}', '{"amount":12.5,"units":1E+3}']
    assert '"payload":{"amount":12.5,"units":1.0}' in flow.signal("order-1", accepted.json["signal_id"]).text
    for units in (1.5, 0.0, 1e-1):
        refused = flow.send("order-1", f"k-{units}", payment(payload={"amount": 12.5, "units": units}))
        assert (refused.status_code, refused.json["code"]) == (422, "CONTRACT_MISMATCH"), refused.text
        assert {e["pointer"] for e in refused.json["errors"]} == {"/payload/units"}
    assert count(flow, "signals") == 2


def test_s1_9_a_target_activation_sequence_of_1_0_is_the_sequence_1(wf):
    """Issue 25 item 9, for the API's own fields: `1.0` where the request schema says `integer` is
    accepted and handed on as the int 1, so it is the same request as one that wrote `1`."""
    first = wf.send("order-1", "k1", payment(sequence=1.0))
    assert first.status_code == 201, first.text
    again = wf.send("order-1", "k1", payment(sequence=1))
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (201, "true")
    assert again.text == first.text
    assert wf.signal("order-1", first.json["signal_id"]).json["target_activation_sequence"] == 1
    (row,) = wf.rows("SELECT target_activation_sequence FROM signals")
    assert row["target_activation_sequence"] == 1


def test_s1_9_correlation_key_limit_is_512_bytes_not_characters(wf):
    assert wf.send("order-1", "k1", payment(correlation_key="é" * 256)).status_code == 201  # 512 bytes
    assert wf.send("order-1", "k2", payment(correlation_key="x" * 512)).status_code == 201


def test_s1_9_payload_of_256_kib_is_accepted_and_one_byte_more_is_413(wf):
    filler = "x" * (256 * 1024 - len('{"amount":1,"note":""}'))
    exact = wf.send("order-1", "k1", payment(payload={"amount": 1, "note": filler}))
    assert exact.status_code == 201, exact.text
    over = wf.send("order-1", "k2", payment(payload={"amount": 1, "note": filler + "x"}))
    assert (over.status_code, over.json["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert count(wf, "signals") == 1


def test_s1_9_poll_final_signal_cannot_be_pending_and_must_be_a_final_envelope(flow):
    flow.publish(
        {
            "name": "flow",
            "steps": [
                {
                    "key": "track",
                    "type": "POLL",
                    "queue": "carrier",
                    "interval_seconds": 60,
                    "timeout_seconds": 600,
                    "correlation": "/input/order_id",
                    "final_signal": {
                        "name": "shipment.final",
                        "payload_version": "v1",
                        "payload_schema": {"type": "object", "required": ["delivered"]},
                    },
                }
            ],
        }
    )
    flow.start("ship-1", input={"order_id": "o-1"})
    base = {
        "name": "shipment.final",
        "payload_version": "v1",
        "target_step_key": "track",
        "target_activation_sequence": 1,
        "correlation_key": "o-1",
        "reason": "carrier webhook",
    }
    pending = flow.send("ship-1", "k1", {**base, "payload": {"state": "PENDING"}})
    assert (pending.status_code, pending.json["code"]) == (422, "CONTRACT_MISMATCH")
    assert pending.json["errors"][0]["pointer"] == "/payload/state"
    bad_result = flow.send("ship-1", "k2", {**base, "payload": {"state": "FINAL", "result": {}}})
    assert bad_result.json["errors"][0]["pointer"] == "/payload/result"
    assert flow.send("ship-1", "k3", {**base, "payload": {"state": "FINAL"}}).status_code == 422
    ok = flow.send("ship-1", "k4", {**base, "payload": {"state": "FINAL", "result": {"delivered": True}}})
    assert ok.status_code == 201
    assert count(flow, "signals") == 1


def test_s1_9_over_long_bodies_are_cut_off_before_parsing(wf):
    body = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    result = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/signals",
        body=body,
        headers={**wf.signaller, "Idempotency-Key": "k1", "Content-Type": "application/json"},
    )
    assert (result.status_code, result.json["code"]) == (413, "PAYLOAD_TOO_LARGE")


# ---- S1.10: the target checked at acceptance ------------------------------------------------------------


def test_s1_10_early_signal_for_a_step_not_active_yet_stays_pending(wf):
    sent = wf.send("order-1", "k1", payment(correlation_key="anything"))
    assert (sent.json["status"], sent.json["disposition"]) == ("PENDING", None)
    assert count(wf, "checkpoints", "kind = 'WAIT'") == 0


def test_s1_10_correlation_mismatch_against_an_active_wait_is_stored_rejected(waiting):
    sent = waiting.send("order-1", "k1", payment(correlation_key="o-1 "))  # trailing space: other bytes
    assert (sent.status_code, sent.json["status"], sent.json["disposition"]) == (
        201,
        "REJECTED",
        "CORRELATION_MISMATCH",
    )
    assert count(waiting, "signals", "status = 'REJECTED'") == 1


def test_s1_10_accepted_at_or_after_the_wait_deadline_is_late(waiting, clock):
    deadline = waiting.rows("SELECT deadline_at FROM waits")[0]["deadline_at"]
    clock.set(deadline - timedelta(microseconds=1))
    assert waiting.send("order-1", "k1", payment()).json["status"] == "PENDING"
    clock.set(deadline)
    late = waiting.send("order-1", "k2", payment())
    assert (late.json["status"], late.json["disposition"]) == ("REJECTED", "LATE")


def test_s1_10_settled_step_and_settled_instance(waiting):
    waiting.send("order-1", "k1", payment())
    waiting.scan()
    settled = waiting.send("order-1", "k2", payment())
    assert (settled.json["status"], settled.json["disposition"]) == ("REJECTED", "STEP_SETTLED")
    waiting.finish_task({"tracking": "T"}, queue="carrier")
    assert waiting.workflow("order-1")["status"] == "SUCCEEDED"
    done = waiting.send("order-1", "k3", payment())
    assert (done.json["status"], done.json["disposition"]) == ("REJECTED", "INSTANCE_SETTLED")


def test_s1_10_older_sequence_is_stale_and_a_future_sequence_is_refused(waiting, database):
    future = waiting.send("order-1", "k1", payment(sequence=2))
    assert (future.status_code, future.json["code"]) == (409, "ACTIVATION_NOT_FOUND")
    assert count(waiting, "signals") == 0
    # A recovery made activation 2 of the step (written directly here: review is its own feature).
    database.run(
        lambda tx: tx.execute(
            "INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status, activated_at)"
            " SELECT instance_id, step_key, step_index, 2, 'ACTIVE', activated_at FROM step_activations"
            " WHERE step_key = 'payment'"
        )
    )
    stale = waiting.send("order-1", "k2", payment(sequence=1))
    assert (stale.json["status"], stale.json["disposition"]) == ("REJECTED", "STALE_ACTIVATION")
    assert waiting.send("order-1", "k3", payment(sequence=3)).status_code == 409


# ---- S1.11: exactness ---------------------------------------------------------------------------------------


def test_s1_11_payload_is_stored_exactly_in_original_member_order(wf):
    body = (
        '{"name":"payment.settled","payload_version":"v1","target_step_key":"payment",'
        '"target_activation_sequence":1,"correlation_key":"o-1","reason":"r",'
        '"payload":{"z":"last first","amount":12345678901234567890.12345678901234567890,"fee":0.10}}'
    )
    result = wf.client.simulate_post(
        f"{wf.ns}/workflows/order-1/signals",
        body=body.encode(),
        headers={**wf.signaller, "Idempotency-Key": "k1", "Content-Type": "application/json"},
    )
    assert result.status_code == 201
    stored = '{"z":"last first","amount":12345678901234567890.12345678901234567890,"fee":0.10}'
    (row,) = wf.rows("SELECT payload, payload_sha256, payload_present FROM signals")
    assert row["payload"] == stored and row["payload_present"] == 1
    import hashlib

    assert row["payload_sha256"] == hashlib.sha256(stored.encode()).hexdigest()
    got = wf.signal("order-1", result.json["signal_id"])
    assert f'"payload":{stored}' in got.text


def test_s1_11_duplicate_keys_and_nan_are_refused(wf):
    for body in (b'{"name":"a","name":"b"}', b'{"payload": NaN}'):
        result = wf.client.simulate_post(
            f"{wf.ns}/workflows/order-1/signals",
            body=body,
            headers={**wf.signaller, "Idempotency-Key": "k1", "Content-Type": "application/json"},
        )
        assert (result.status_code, result.json["code"]) == (400, "INVALID_JSON")
    assert count(wf, "signals") == 0


def test_s1_11_explicit_null_differs_from_an_absent_payload(flow):
    document = signal_flow_definition()
    document["steps"][1]["signal"]["payload_schema"] = {}
    flow.publish(document)
    flow.start("order-9", input={"order_id": "o-9"})
    with_null = flow.send("order-9", "k-null", payment("o-9", payload=None))
    absent = flow.send("order-9", "k-absent", payment("o-9", payload=ABSENT))
    assert with_null.json["request_digest"] != absent.json["request_digest"]
    assert flow.signal("order-9", with_null.json["signal_id"]).json["payload"] is None
    assert "payload" not in flow.signal("order-9", absent.json["signal_id"]).json
    rows = flow.rows("SELECT payload, payload_present FROM signals ORDER BY id")
    assert rows == [{"payload": "null", "payload_present": 1}, {"payload": None, "payload_present": 0}]


def test_s1_4_a_connection_cut_mid_transaction_is_rolled_back_and_the_send_retried(wf, database, cut_connection):
    """The server kills our session just before COMMIT: nothing of that attempt stays, the unit is
    re-run whole on a new connection, and exactly one signal results."""
    killed = cut_connection("send_signal")
    sent = wf.send("order-1", "k1", payment())
    database.before_commit = None
    assert killed == ["send_signal"]
    assert sent.status_code == 201 and "idempotent-replayed" not in sent.headers
    assert count(wf, "signals") == 1
    assert count(wf, "audit_records", "action = 'signal.send'") == 1
    assert wf.events("order-1").count("SIGNAL_ACCEPTED") == 1
    assert wf.send("order-1", "k1", payment()).content == sent.content
