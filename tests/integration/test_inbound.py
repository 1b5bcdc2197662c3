"""Inbound webhooks over HTTP (SPEC §15, W2-W5): `POST /v1/inbound/{ns}/{source}` verifies a
provider's signed event, maps it to a fact and routes it by its key (§14); `GET {N}/inbound/{source}
/deliveries` lists what was recorded. Requests are signed with the providers' own libraries
(`standardwebhooks`, `stripe`) where they have one; GitHub and the generic HMAC are one line each."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import http.client
import json
import logging
import re
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import falcon.testing
import pytest
import standardwebhooks
import stripe
from helpers import Flow, captured_log, payment, signal_flow_definition
from prometheus_client import REGISTRY
from test_console import QUEUES, Console
from test_routing import open_payment_wait, payment_step

from weave import secretbox
from weave.app import create_app
from weave.config import Config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.resources import inbound as inbound_resource
from weave.sql import inbound, tenancy

INBOUND = "/v1/inbound/acme"
TOLERANCE = 300


def keyring() -> secretbox.Keyring:
    return secretbox.Keyring.from_env({secretbox.SECRET_KEY_VARIABLE: secretbox.new_key()})


@dataclass
class Provider:
    """A provider's side of one source: its scheme, secret and mapping, and signed events."""

    scheme: str
    source: str
    secret: str
    mapping: dict
    signature_header: str | None = None
    signed_at: float | None = None  # None: now

    def event(self, event_id: str, order: str, event_type: str | None = None, amount=12.5) -> tuple[bytes, dict]:
        """The body and headers of a delivery of `event_id` about `order`, signed."""
        event_type = event_type or self.mapping["rules"][0]["event"]
        at = int(self.signed_at if self.signed_at is not None else time.time())
        if self.scheme == "standard-webhooks":
            body = _json({"type": event_type, "data": {"order_id": order, "payment": {"amount": amount}}})
            moment = datetime.fromtimestamp(at, timezone.utc)
            signature = standardwebhooks.Webhook(self.secret).sign(event_id, moment, body.decode())
            return body, {"webhook-id": event_id, "webhook-timestamp": str(at), "webhook-signature": signature}
        if self.scheme == "stripe":
            body = _json(
                {
                    "id": event_id,
                    "type": event_type,
                    "data": {"object": {"amount": amount, "metadata": {"order_id": order}}},
                }
            )
            header = stripe.WebhookSignature.generate_signature_header(body.decode(), self.secret, timestamp=at)
            return body, {"Stripe-Signature": header}
        if self.scheme == "github":
            body = _json({"action": "completed", "order": {"id": order, "amount": amount}})
            digest = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            return body, {
                "X-GitHub-Event": event_type,
                "X-GitHub-Delivery": event_id,
                "X-Hub-Signature-256": f"sha256={digest}",
            }
        body = _json({"event": event_type, "delivery": event_id, "order_id": order, "payment": {"amount": amount}})
        return body, {self.signature_header: hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()}

    def forged(self, event_id: str, order: str) -> tuple[bytes, dict]:
        """A delivery signed with another secret of the same shape."""
        other = dataclasses.replace(self, secret=secret_for(self.scheme))
        return other.event(event_id, order)


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def secret_for(scheme: str) -> str:
    if scheme == "standard-webhooks":
        return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    if scheme == "stripe":
        return "whsec_" + secrets.token_hex(16)
    return secrets.token_hex(20)


def rule(event: str, correlation: str, payload: str | None, **extra) -> dict:
    found = {"event": event, "name": "payment.settled", "payload_version": "v1", "correlation_key": correlation}
    return {**found, **({"payload": payload} if payload else {}), **extra}


MAPPINGS = {
    "standard-webhooks": {
        "event_type": "/type",
        "rules": [rule("payment.succeeded", "/data/order_id", "/data/payment")],
    },
    "stripe": {
        "event_type": "/type",
        "rules": [
            rule("payment_intent.succeeded", "/data/object/metadata/order_id", "/data/object", reason="Stripe: paid")
        ],
    },
    "github": {"rules": [rule("check_suite", "/order/id", "/order")]},
    "hmac-sha256": {
        "event_type": "/event",
        "idempotency_key": "/delivery",
        "rules": [rule("paid", "/order_id", "/payment")],
    },
}
SCHEMES = tuple(MAPPINGS)


def make_source(
    database,
    keyring_,
    scheme: str,
    source: str | None = None,
    namespace="acme",
    application="app",
    mapping: dict | None = None,
    queues: tuple[str, ...] = QUEUES,
) -> Provider:
    """A source of `scheme` created as `weave admin inbound create` and `secret add` do."""
    provider = Provider(
        scheme,
        source or f"{scheme}-src",
        secret_for(scheme),
        mapping or MAPPINGS[scheme],
        "X-Carrier-Signature" if scheme == "hmac-sha256" else None,
    )
    inbound.create_source(
        database,
        namespace,
        provider.source,
        application,
        f"{provider.source}-bot",
        scheme,
        json.dumps(provider.mapping),
        list(queues),
        provider.signature_header.lower() if provider.signature_header else None,
    )
    inbound.add_secret(database, namespace, provider.source, keyring_.encrypt(provider.secret))
    return provider


@pytest.fixture
def keys() -> secretbox.Keyring:
    return keyring()


@pytest.fixture
def keyed(config, database, keys) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(create_app(dataclasses.replace(config, keyring=keys), database))


@pytest.fixture
def flow(keyed, tenant, database) -> Flow:
    flow = Flow(keyed, tenant, database)
    flow.publish(signal_flow_definition())
    return flow


@pytest.fixture(params=SCHEMES)
def provider(request, database, keys, tenant) -> Provider:
    return make_source(database, keys, request.param)


@pytest.fixture
def stripe_source(database, keys, tenant) -> Provider:
    return make_source(database, keys, "stripe")


def deliver(client, provider: Provider, body: bytes, headers: dict, namespace: str = "acme"):
    return client.simulate_post(
        f"/v1/inbound/{namespace}/{provider.source}", body=body, headers={"Content-Type": "application/json", **headers}
    )


def send(flow, provider: Provider, event_id: str, order: str = "o-1", **kwargs):
    return deliver(flow.client, provider, *provider.event(event_id, order, **kwargs))


def deliveries(flow, source: str, query: str = "", headers: dict | None = None):
    return flow.client.simulate_get(
        f"{flow.ns}/inbound/{source}/deliveries", query_string=query, headers=headers or flow.signaller
    )


def delivery_rows(flow) -> list[dict]:
    return flow.rows("SELECT event_id, event_type, outcome, signal_id, error FROM inbound_deliveries ORDER BY id")


def counts(flow, tables: list[str]) -> dict[str, int]:
    return {t: flow.rows(f"SELECT COUNT(*) AS n FROM `{t}`")[0]["n"] for t in tables}  # names from the schema


# ---- W2-W4: each scheme, end to end -------------------------------------------------------------------


def test_W2_W4_a_signed_event_of_each_scheme_is_routed_into_the_waiting_wait_and_consumed(flow, provider):
    open_payment_wait(flow, "w-1", "o-1")
    answer = send(flow, provider, "evt-1")
    assert answer.status_code == 200, answer.text
    assert list(answer.json) == ["outcome", "signal_id"] and answer.json["outcome"] == "ROUTED"
    flow.scan()
    step = payment_step(flow, "w-1")
    assert step["status"] == "SUCCEEDED" and step["wait"]["winner_signal_id"] == answer.json["signal_id"]
    state = flow.signal("w-1", answer.json["signal_id"]).json
    assert state["status"] == "CONSUMED" and state["payload"]["amount"] == 12.5  # the rule's payload pointer
    assert (
        state["evidence_ref"] == f"{provider.source}:evt-1" and state["idempotency_key"] == f"{provider.source}:evt-1"
    )
    assert state["actor"] == f"{provider.source}-bot"  # the source acts through its own credential (W1)
    event_type = provider.mapping["rules"][0]["event"]
    assert delivery_rows(flow) == [
        {
            "event_id": "evt-1",
            "event_type": event_type,
            "outcome": "ROUTED",
            "signal_id": int(answer.json["signal_id"]),
            "error": None,
        }
    ]


def test_W4_an_event_before_its_wait_opens_is_parked_then_taken_by_the_wait(flow, stripe_source):
    flow.start("w-1", input={"order_id": "o-1"})
    answer = send(flow, stripe_source, "evt_1")
    assert (answer.status_code, answer.json["outcome"]) == (200, "PARKED"), answer.text
    assert flow.rows("SELECT status FROM signals") == [{"status": "PARKED"}]
    flow.scan()
    flow.finish_task()  # the payment wait opens and takes the parked fact (B4)
    flow.scan()
    step = payment_step(flow, "w-1")
    assert step["status"] == "SUCCEEDED" and step["wait"]["winner_signal_id"] == answer.json["signal_id"]
    assert [row["outcome"] for row in delivery_rows(flow)] == ["PARKED"]


def test_W4_an_event_two_waits_share_is_ambiguous_and_recorded(flow, stripe_source):
    open_payment_wait(flow, "w-1", "o-1")
    open_payment_wait(flow, "w-2", "o-1")
    answer = send(flow, stripe_source, "evt_1")
    assert (answer.status_code, answer.json["outcome"]) == (200, "AMBIGUOUS")
    [fact] = flow.rows("SELECT id, status, disposition FROM signals")
    assert (str(fact["id"]), fact["status"], fact["disposition"]) == (
        answer.json["signal_id"],
        "REJECTED",
        "AMBIGUOUS_CORRELATION",
    )
    assert [row["outcome"] for row in delivery_rows(flow)] == ["AMBIGUOUS"]


def test_W4_an_event_type_the_mapping_does_not_name_is_ignored_and_recorded(flow, stripe_source):
    open_payment_wait(flow, "w-1", "o-1")
    answer = send(flow, stripe_source, "evt_1", event_type="customer.created")
    assert (answer.status_code, answer.json) == (200, {"outcome": "IGNORED", "signal_id": None})
    assert flow.rows("SELECT id FROM signals") == []
    assert delivery_rows(flow) == [
        {"event_id": "evt_1", "event_type": "customer.created", "outcome": "IGNORED", "signal_id": None, "error": None}
    ]


def test_W4_an_unmappable_event_is_422_and_recorded_and_a_corrected_mapping_lets_the_redelivery_through(
    flow, database, keys, tenant
):
    wrong = {
        "event_type": "/type",
        "rules": [rule("payment_intent.succeeded", "/data/object/metadata/order", "/data/object")],
    }
    provider = make_source(database, keys, "stripe", mapping=wrong)
    open_payment_wait(flow, "w-1", "o-1")
    body, headers = provider.event("evt_1", "o-1")
    refused = deliver(flow.client, provider, body, headers)
    assert refused.status_code == 422 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json["errors"][0]["pointer"] == "/data/object/metadata/order"
    assert flow.rows("SELECT id FROM signals") == []
    [recorded] = delivery_rows(flow)
    assert recorded["outcome"] == "UNMAPPABLE" and "/data/object/metadata/order" in recorded["error"]
    inbound.update_mapping(database, "acme", provider.source, json.dumps(MAPPINGS["stripe"]))
    again = deliver(flow.client, provider, body, headers)  # the provider's retry: the same bytes
    assert (again.status_code, again.json["outcome"]) == (200, "ROUTED"), again.text
    assert [row["outcome"] for row in delivery_rows(flow)] == ["UNMAPPABLE", "ROUTED"]


def test_W4_an_event_whose_payload_breaks_the_waits_contract_is_unmappable(flow, stripe_source):
    open_payment_wait(flow, "w-1", "o-1")
    answer = send(flow, stripe_source, "evt_1", amount="twelve")
    assert (answer.status_code, answer.json["code"]) == (422, "CONTRACT_MISMATCH"), answer.text
    assert flow.rows("SELECT id FROM signals") == []
    [recorded] = delivery_rows(flow)
    assert recorded["outcome"] == "UNMAPPABLE" and recorded["signal_id"] is None and recorded["error"]


# ---- W3: redelivery ----------------------------------------------------------------------------------


def test_W3_a_redelivery_answers_as_the_first_delivery_with_one_signal_row(flow, provider):
    open_payment_wait(flow, "w-1", "o-1")
    first = send(flow, provider, "evt-1")
    again = send(flow, provider, "evt-1")  # signed anew, as providers do on a retry
    assert first.status_code == again.status_code == 200
    assert again.json == first.json and first.json["outcome"] == "ROUTED"
    assert len(flow.rows("SELECT id FROM signals")) == 1
    assert [(r["outcome"], r["signal_id"]) for r in delivery_rows(flow)] == [
        ("ROUTED", int(first.json["signal_id"]))
    ] * 2


def test_W3_a_redelivery_after_the_mapping_changed_still_answers_as_the_first(flow, database, stripe_source):
    flow.start("w-1", input={"order_id": "o-1"})
    first = send(flow, stripe_source, "evt_1")
    assert first.json["outcome"] == "PARKED"
    changed = {**MAPPINGS["stripe"], "rules": [{**MAPPINGS["stripe"]["rules"][0], "reason": "Stripe: settled"}]}
    inbound.update_mapping(database, "acme", stripe_source.source, json.dumps(changed))
    again = send(flow, stripe_source, "evt_1")
    assert (again.status_code, again.json) == (200, first.json)
    assert len(flow.rows("SELECT id FROM signals")) == 1


# ---- W2: refusals that store nothing -------------------------------------------------------------------


def test_W2_a_bad_signature_an_unknown_source_and_another_namespaces_source_get_one_answer_and_store_nothing(
    flow, database, keys, stripe_source, other_tenant, weave_tables
):
    theirs = make_source(database, keys, "stripe", source="theirs", namespace="globex", queues=("inventory",))
    open_payment_wait(flow, "w-1", "o-1")
    before = counts(flow, weave_tables)
    body, headers = stripe_source.event("evt_1", "o-1")
    forged_body, forged = stripe_source.forged("evt_1", "o-1")
    unsigned = {k: v for k, v in headers.items() if k != "Stripe-Signature"}
    answers = [
        deliver(flow.client, stripe_source, forged_body, forged),  # another secret
        deliver(flow.client, stripe_source, body, unsigned),  # no signature
        deliver(flow.client, stripe_source, body + b" ", headers),  # a body that is not what was signed
        deliver(flow.client, dataclasses.replace(stripe_source, source="nobody"), body, headers),  # unknown source
        deliver(flow.client, theirs, *theirs.event("evt_1", "o-1")),  # globex's source, under acme's URL
    ]
    assert [a.status_code for a in answers] == [401] * 5
    assert len({a.content for a in answers}) == 1  # byte-identical bodies
    assert answers[0].json["code"] == "SIGNATURE_INVALID" and "WWW-Authenticate" not in answers[0].headers
    assert answers[0].json["detail"] == inbound_resource.NOT_VERIFIED and stripe_source.secret not in answers[0].text
    assert counts(flow, weave_tables) == before
    ok = deliver(flow.client, theirs, *theirs.event("evt_1", "o-1"), namespace="globex")
    assert (ok.status_code, ok.json["outcome"]) == (200, "PARKED")  # the same request where it belongs


def test_W2_a_deleted_source_answers_as_an_unknown_one(flow, database, stripe_source, weave_tables):
    inbound.delete_source(database, "acme", stripe_source.source)
    before = counts(flow, weave_tables)
    answer = send(flow, stripe_source, "evt_1")
    assert (answer.status_code, answer.json["code"]) == (401, "SIGNATURE_INVALID")
    assert counts(flow, weave_tables) == before


@pytest.mark.parametrize("scheme", ["standard-webhooks", "stripe"])
def test_W2_a_stale_timestamp_is_refused_before_any_database_work(config, database, keys, tenant, scheme):
    """With the database unreachable, a stale timestamp still answers 401, and a fresh one 503: the
    stale one was refused before anything asked the database."""
    provider = make_source(database, keys, scheme)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    unreachable = Database(DatabaseUrl("127.0.0.1", port, "weave", "", "weave_test"))
    try:
        client = falcon.testing.TestClient(create_app(dataclasses.replace(config, keyring=keys), unreachable))
        for skew in (-TOLERANCE - 60, TOLERANCE + 60):
            stale = dataclasses.replace(provider, signed_at=time.time() + skew)
            answer = deliver(client, provider, *stale.event("evt-1", "o-1"))
            assert (answer.status_code, answer.json["code"]) == (401, "SIGNATURE_INVALID"), skew
        fresh = deliver(client, provider, *provider.event("evt-1", "o-1"))
        assert (fresh.status_code, fresh.json["code"]) == (503, "UNAVAILABLE")
    finally:
        unreachable.close()


def test_W2_a_stale_but_well_signed_timestamp_is_refused_on_a_live_database(flow, stripe_source, weave_tables):
    before = counts(flow, weave_tables)
    stale = dataclasses.replace(stripe_source, signed_at=time.time() - TOLERANCE - 5)
    answer = deliver(flow.client, stripe_source, *stale.event("evt_1", "o-1"))
    assert (answer.status_code, answer.json["code"]) == (401, "SIGNATURE_INVALID")
    assert counts(flow, weave_tables) == before


class Unreadable:
    """A request body that must not be read."""

    def read(self, *args):
        raise AssertionError("the body was read")

    readline = readlines = read


def test_W5_a_body_declared_over_1_MiB_is_413_before_it_is_read(keyed, stripe_source, flow, weave_tables):
    before = counts(flow, weave_tables)
    environ = falcon.testing.create_environ(
        f"{INBOUND}/{stripe_source.source}",
        method="POST",
        headers={"Content-Type": "application/json", "Content-Length": str(1024 * 1024 + 1)},
    )
    environ["wsgi.input"] = Unreadable()
    answer = falcon.testing.StartResponseMock()
    body = b"".join(keyed.app(environ, answer))
    assert answer.status.startswith("413") and json.loads(body)["code"] == "PAYLOAD_TOO_LARGE"
    assert counts(flow, weave_tables) == before


def test_W1_without_a_keyring_the_inbound_route_answers_503(client, database, keys, tenant):
    provider = make_source(database, keys, "stripe")
    answer = deliver(client, provider, *provider.event("evt_1", "o-1"))
    assert (answer.status_code, answer.json["code"]) == (503, "UNAVAILABLE")
    assert int(answer.headers["Retry-After"]) > 0
    assert database.run(lambda tx: tx.all("SELECT id FROM inbound_deliveries")) == []


def test_W4_a_disabled_application_is_403_and_not_recorded(flow, database, stripe_source):
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    answer = send(flow, stripe_source, "evt_1")
    assert (answer.status_code, answer.json["code"]) == (403, "FORBIDDEN")
    assert delivery_rows(flow) == [] and flow.rows("SELECT id FROM signals") == []


def test_W4_a_used_up_quota_is_429_and_not_recorded(flow, database, keys):
    tenancy.create_application(database, "acme", "metered", 1)
    provider = make_source(database, keys, "stripe", application="metered")
    assert send(flow, provider, "evt_1").status_code == 200
    refused = send(flow, provider, "evt_2")
    assert (refused.status_code, refused.json["code"]) == (429, "QUOTA_EXCEEDED")
    assert int(refused.headers["Retry-After"]) > 0
    assert [row["event_id"] for row in delivery_rows(flow)] == ["evt_1"]


# ---- W5: the listing -------------------------------------------------------------------------------------


def test_W5_deliveries_are_listed_newest_first_paged_and_filtered_by_outcome(flow, stripe_source):
    open_payment_wait(flow, "w-1", "o-1")
    send(flow, stripe_source, "evt_1")  # ROUTED
    send(flow, stripe_source, "evt_2", event_type="customer.created")  # IGNORED
    send(flow, stripe_source, "evt_3", order="o-9")  # PARKED
    send(flow, stripe_source, "evt_4", event_type="charge.refunded")  # IGNORED
    seen, after = [], ""
    for _ in range(5):
        page = deliveries(flow, stripe_source.source, f"limit=3{after}")
        assert page.status_code == 200, page.text
        seen += page.json["deliveries"]
        if page.json["next_after"] is None:
            break
        after = f"&after={page.json['next_after']}"
    assert [d["event_id"] for d in seen] == ["evt_4", "evt_3", "evt_2", "evt_1"]
    assert [d["outcome"] for d in seen] == ["IGNORED", "PARKED", "IGNORED", "ROUTED"]
    assert list(seen[0]) == ["delivery_id", "received_at", "event_id", "event_type", "outcome", "signal_id", "error"]
    ignored = deliveries(flow, stripe_source.source, "outcome=IGNORED").json["deliveries"]
    assert [d["event_id"] for d in ignored] == ["evt_4", "evt_2"]
    wrong = deliveries(flow, stripe_source.source, "outcome=LOST")
    assert (wrong.status_code, wrong.json["errors"][0]["pointer"]) == (422, "?outcome")


def test_W5_an_unknown_source_and_another_namespaces_source_have_no_deliveries_to_list(
    flow, database, keys, stripe_source, other_tenant
):
    make_source(database, keys, "stripe", source="theirs", namespace="globex", queues=("inventory",))
    for source in ("nobody", "theirs"):
        answer = deliveries(flow, source)
        assert (answer.status_code, answer.json["code"]) == (404, "NOT_FOUND"), source
    outsider = other_tenant.headers("workflows:read")
    assert deliveries(flow, stripe_source.source, headers=outsider).status_code == 404


# ---- operating it: the metric and the log line -----------------------------------------------------------


def counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("weave_inbound_deliveries_total", {"outcome": outcome}) or 0.0


def test_W4_the_metric_counts_each_outcome(flow, database, keys, stripe_source):
    outcomes = ("ROUTED", "PARKED", "AMBIGUOUS", "IGNORED", "UNMAPPABLE", "signature_invalid", "refused")
    before = {outcome: counted(outcome) for outcome in outcomes}
    open_payment_wait(flow, "w-1", "o-1")
    open_payment_wait(flow, "w-2", "o-2")
    open_payment_wait(flow, "w-3", "o-2")
    statuses = [
        send(flow, stripe_source, "evt_1", order="o-1").status_code,  # ROUTED
        send(flow, stripe_source, "evt_1", order="o-1").status_code,  # ROUTED again (a redelivery)
        send(flow, stripe_source, "evt_2", order="o-9").status_code,  # PARKED
        send(flow, stripe_source, "evt_3", order="o-2").status_code,  # AMBIGUOUS
        send(flow, stripe_source, "evt_4", event_type="customer.created").status_code,  # IGNORED
        send(flow, stripe_source, "evt_5", order="o-1", amount="twelve").status_code,  # UNMAPPABLE
        deliver(flow.client, stripe_source, *stripe_source.forged("evt_6", "o-1")).status_code,  # signature_invalid
    ]
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    statuses.append(send(flow, stripe_source, "evt_7").status_code)  # refused
    assert statuses == [200, 200, 200, 200, 200, 422, 401, 403]
    added = {outcome: counted(outcome) - before[outcome] for outcome in outcomes}
    assert added == {
        "ROUTED": 2,
        "PARKED": 1,
        "AMBIGUOUS": 1,
        "IGNORED": 1,
        "UNMAPPABLE": 1,
        "signature_invalid": 1,
        "refused": 1,
    }


def test_W5_each_delivery_logs_one_line_without_the_signature_or_the_secret(flow, provider):
    open_payment_wait(flow, "w-1", "o-1")
    body, headers = provider.event("evt-1", "o-1")
    forged_body, forged = provider.forged("evt-2", "o-1")
    with captured_log(logging.INFO, "json") as log:
        assert deliver(flow.client, provider, body, headers).status_code == 200
        assert deliver(flow.client, provider, forged_body, forged).status_code == 401
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    delivered = [line for line in lines if line["logger"] == "weave.inbound"]
    assert [(d["outcome"], d["source"], d["namespace"]) for d in delivered] == [
        ("ROUTED", provider.source, "acme"),
        ("signature_invalid", provider.source, "acme"),
    ]
    assert delivered[0]["event_id"] == "evt-1" and delivered[0]["signal_id"] is not None
    assert delivered[1]["reason"]  # why, for the operator; the provider only sees SIGNATURE_INVALID
    text = log.getvalue()
    signatures = [value for name, value in {**headers, **forged}.items() if "signature" in name.lower()]
    secret_material = [provider.secret, provider.secret.removeprefix("whsec_")]
    for value in signatures + secret_material:
        for piece in re.split(r"[ ,=]", value):
            if len(piece) >= 16:
                assert piece not in text


# ---- the console --------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(flow, tenant):
    console = Console(flow.client)
    console.sign_in(tenant.token("workflows:read", queues=QUEUES, actor="ops-alice"))
    return console


def test_W5_the_console_lists_a_namespaces_sources_and_a_sources_deliveries(flow, signed_in, stripe_source):
    open_payment_wait(flow, "w-1", "o-1")
    routed = send(flow, stripe_source, "evt_1").json
    send(flow, stripe_source, "evt_2", event_type="customer.created")
    sources = signed_in.get("/console/ns/acme/inbound")
    listed = f"/console/ns/acme/inbound/{stripe_source.source}/deliveries"
    assert sources.status_code == 200 and f'href="{listed}"' in sources.text
    assert stripe_source.secret not in sources.text
    assert 'href="/console/ns/acme/inbound">Inbound</a>' in signed_in.get("/console/ns/acme/workflows").text
    page = signed_in.get(listed)
    assert page.status_code == 200
    api = deliveries(flow, stripe_source.source).json["deliveries"]
    shown = [int(i) for i in re.findall(r'<tr id="delivery-(\d+)"', page.text)]
    assert shown == [int(d["delivery_id"]) for d in api]  # the API's read, newest first
    assert f'<code class="signal-id">{routed["signal_id"]}</code>' in page.text and "customer.created" in page.text
    only = signed_in.get(listed, query_string="outcome=ROUTED")
    assert [int(i) for i in re.findall(r'<tr id="delivery-(\d+)"', only.text)] == [int(api[-1]["delivery_id"])]
    assert signed_in.get(listed, query_string="outcome=LOST").status_code == 422
    assert signed_in.get("/console/ns/acme/inbound/nobody/deliveries").status_code == 404


def test_issue_34_3_a_workflows_page_links_a_signal_that_came_as_a_webhook_to_its_sources_deliveries(
    flow, signed_in, stripe_source, tenant
):
    open_payment_wait(flow, "w-1", "o-1")
    routed = send(flow, stripe_source, "evt_1").json
    sent = flow.send("w-1", "by-hand", payment("o-1"))  # the same step's signal sent through the API
    assert sent.status_code == 201, sent.text
    page = signed_in.get("/console/ns/acme/workflows/w-1").text
    link = f'href="/console/ns/acme/inbound/{stripe_source.source}/deliveries">{stripe_source.source}</a>'
    assert page.count(link) == 1  # the webhook's signal only
    row = page[page.index(f'id="signal-{routed["signal_id"]}"') :]
    assert row.index(link) < row.index("</tr>")


def test_W5_the_console_pages_deliveries_by_id(flow, signed_in, stripe_source, monkeypatch):
    from weave.console import pages

    monkeypatch.setattr(pages, "LIST_PAGE", 2)
    for n in range(5):
        send(flow, stripe_source, f"evt_{n}", event_type="customer.created")
    seen, path, query = [], f"/console/ns/acme/inbound/{stripe_source.source}/deliveries", ""
    for _ in range(5):
        page = signed_in.get(path, query_string=query)
        assert page.status_code == 200
        seen += [int(i) for i in re.findall(r'<tr id="delivery-(\d+)"', page.text)]
        older = re.search(r'<a href="([^"?]+)\?([^"]+)" rel="next">', page.text)
        if older is None:
            break
        path, query = older.group(1), older.group(2).replace("&amp;", "&")
    assert seen == sorted(seen, reverse=True) and len(seen) == 5


def test_W1_a_secret_no_key_of_the_ring_opens_verifies_nothing_and_the_operator_is_told(
    config, database, tenant, stripe_source
):
    """The server's WEAVE_SECRET_KEY lost the key the secret was stored with: 401, and an error line."""
    client = falcon.testing.TestClient(create_app(dataclasses.replace(config, keyring=keyring()), database))
    with captured_log(logging.INFO) as log:
        answer = deliver(client, stripe_source, *stripe_source.event("evt_1", "o-1"))
    assert (answer.status_code, answer.json["code"]) == (401, "SIGNATURE_INVALID")
    assert "decrypts this stored secret" in log.getvalue() and stripe_source.secret not in log.getvalue()
    assert database.run(lambda tx: tx.all("SELECT id FROM inbound_deliveries")) == []


def test_W1_a_malformed_WEAVE_SECRET_KEY_stops_the_server_without_showing_the_key():
    key = secretbox.new_key()
    with pytest.raises(SystemExit) as stopped:
        Config.from_env("mysql://u@h/db", environ={secretbox.SECRET_KEY_VARIABLE: f"{key},{key[:-3]}"})
    assert "key 2 of 2" in str(stopped.value) and key[:-3] not in str(stopped.value)
    assert Config.from_env("mysql://u@h/db", environ={secretbox.SECRET_KEY_VARIABLE: key}).keyring is not None
    assert Config.from_env("mysql://u@h/db", environ={}).keyring is None
    assert key not in repr(Config.from_env("mysql://u@h/db", environ={secretbox.SECRET_KEY_VARIABLE: key}))


def test_W5_a_chunked_body_over_1_MiB_is_413_over_real_http(live_url, database, keys, tenant):
    """A body of undeclared length (chunked) is held to the same cap, read no further than it."""
    provider = make_source(database, keys, "stripe")
    host, port = live_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        chunks = (b"x" * 65536 for _ in range(17))  # 1 MiB and 64 KiB
        connection.request(
            "POST",
            f"{INBOUND}/{provider.source}",
            body=chunks,
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())["code"]) == (413, "PAYLOAD_TOO_LARGE")
    finally:
        connection.close()
    assert database.run(lambda tx: tx.all("SELECT id FROM inbound_deliveries")) == []
