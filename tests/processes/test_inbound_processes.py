"""Inbound webhooks through real processes (W1-W5): `weave admin inbound` creates the sources and
takes their secrets on standard input, a `weave serve` with WEAVE_SECRET_KEY receives deliveries
signed as the providers sign them, a `weave scan` consumes the facts, and every workflow SUCCEEDS.
Then nothing holds a secret in plain text: no row of any table, no line of the server's log, and
not /metrics."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

import load
import pytest
import standardwebhooks
import stripe
from helpers import STRIPE_MAPPING, make_tenant, wait_until

from weave import secretbox
from weave.cli.demo import PAYMENT_STEP
from weave.devdb import free_port
from weave.processes import die_with_parent

pytestmark = pytest.mark.slow

NS = "shop"
QUEUE = "inventory"
# Per scheme: its mapping and the body of a delivery settling `order` (W3).
MAPPINGS = {
    "standard-webhooks": {
        "event_type": "/type",
        "rules": [
            {
                "event": "payment.succeeded",
                "name": "payment.settled",
                "payload_version": "v1",
                "correlation_key": "/data/order_id",
                "payload": "/data/payment",
            }
        ],
    },
    "stripe": STRIPE_MAPPING,
    "github": {
        "rules": [
            {
                "event": "check_suite",
                "name": "payment.settled",
                "payload_version": "v1",
                "correlation_key": "/order/id",
                "payload": "/order",
            }
        ]
    },
}
SECRETS = {
    "standard-webhooks": "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode(),
    "stripe": "whsec_" + secrets.token_hex(16),
    "github": secrets.token_hex(20),
}


def signed(scheme: str, secret: str, event_id: str, order: str) -> tuple[bytes, dict]:
    """A delivery of `scheme` about `order`, signed as the provider signs it."""
    now = int(time.time())
    if scheme == "standard-webhooks":
        body = json.dumps({"type": "payment.succeeded", "data": {"order_id": order, "payment": {"amount": 12.5}}})
        signature = standardwebhooks.Webhook(secret).sign(event_id, datetime.fromtimestamp(now, timezone.utc), body)
        return body.encode(), {"webhook-id": event_id, "webhook-timestamp": str(now), "webhook-signature": signature}
    if scheme == "stripe":
        body = json.dumps(
            {
                "id": event_id,
                "type": "payment_intent.succeeded",
                "data": {"object": {"amount": 1250, "metadata": {"order_id": order}}},
            }
        )
        return body.encode(), {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body, secret, now)}
    body = json.dumps({"action": "completed", "order": {"id": order, "amount": 3}}).encode()
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "X-GitHub-Event": "check_suite",
        "X-GitHub-Delivery": event_id,
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def weave(env: dict, *args: str, stdin: str | None = None) -> str:
    """A `weave` command run to its end; what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "weave.cli", *args], env=env, input=stdin, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_W1_W5_signed_deliveries_of_three_schemes_finish_workflows_and_no_secret_is_left_in_plain_text(
    config, database, tmp_path, weave_tables
):
    tenant = make_tenant(database, NS, {QUEUE: 8})
    key = secretbox.new_key()
    env = {**os.environ, "WEAVE_DATABASE_URL": config.database_url, secretbox.SECRET_KEY_VARIABLE: key}
    for scheme, mapping in MAPPINGS.items():
        mapping_file = tmp_path / f"{scheme}.json"
        mapping_file.write_text(json.dumps(mapping))
        weave(
            env,
            "admin",
            "inbound",
            "create",
            NS,
            scheme,
            "--app",
            tenant.application,
            "--actor",
            f"{scheme}-bot",
            "--scheme",
            scheme,
            "--mapping",
            str(mapping_file),
            "--queue",
            QUEUE,
        )
        weave(env, "admin", "inbound", "secret", "add", NS, scheme, stdin=SECRETS[scheme])
        listed = json.loads(weave(env, "admin", "inbound", "secret", "list", NS, scheme, "--json"))
        assert [set(s) for s in listed["secrets"]] == [{"secret_id", "created_at"}]

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "weave.cli", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=die_with_parent,
        )
    scanner = load.scan_process(config.database_url, tmp_path / "scan.log")
    api = f"http://127.0.0.1:{port}"
    try:
        load.wait_for_api(port)
        token = tenant.token("definitions:write", "workflows:start", "workflows:read", queues=(QUEUE,))
        bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        definition = {"name": "paid", "steps": [PAYMENT_STEP]}
        status, body = http("POST", f"{api}/v1/namespaces/{NS}/definitions", json.dumps(definition).encode(), bearer)
        assert status == 201, body
        for scheme in MAPPINGS:
            start = {
                "definition": "paid",
                "version": 1,
                "workflow_id": f"w-{scheme}",
                "input": {"order_id": f"o-{scheme}"},
                "deadline_seconds": 3600,
            }
            status, body = http("POST", f"{api}/v1/namespaces/{NS}/workflows", json.dumps(start).encode(), bearer)
            assert status == 201, body

        def waiting(workflow_id: str) -> bool:
            _, read = http("GET", f"{api}/v1/namespaces/{NS}/workflows/{workflow_id}", headers=bearer)
            return (json.loads(read)["steps"][0]["wait"] or {}).get("status") == "WAITING"

        wait_until(lambda: all(waiting(f"w-{scheme}") for scheme in MAPPINGS), timeout=30, pause=0.2)
        sent_signatures = []
        for scheme in MAPPINGS:
            body, headers = signed(scheme, SECRETS[scheme], f"evt-{scheme}-1", f"o-{scheme}")
            sent_signatures += [v for k, v in headers.items() if "signature" in k.lower()]
            headers = {**headers, "Content-Type": "application/json"}
            status, answer = http("POST", f"{api}/v1/inbound/{NS}/{scheme}", body, headers)
            assert (status, json.loads(answer)["outcome"]) == (200, "ROUTED"), (scheme, answer)
            forged, forged_headers = signed(scheme, SECRETS["github"][::-1], f"evt-{scheme}-2", f"o-{scheme}")
            assert http("POST", f"{api}/v1/inbound/{NS}/{scheme}", forged, forged_headers)[0] == 401

        def finished() -> bool:
            reads = [
                http("GET", f"{api}/v1/namespaces/{NS}/workflows/w-{scheme}", headers=bearer) for scheme in MAPPINGS
            ]
            return all(json.loads(read)["status"] == "SUCCEEDED" for _, read in reads)

        wait_until(finished, timeout=60, pause=0.2)
        for scheme in MAPPINGS:
            status, page = http("GET", f"{api}/v1/namespaces/{NS}/inbound/{scheme}/deliveries", headers=bearer)
            assert status == 200 and [d["outcome"] for d in json.loads(page)["deliveries"]] == ["ROUTED"], page
        status, exposed = http("GET", f"{api}/metrics")
        assert status == 200 and b'weave_inbound_deliveries_total{outcome="ROUTED"} 3.0' in exposed
        assert b'weave_inbound_deliveries_total{outcome="signature_invalid"} 3.0' in exposed
    finally:
        load.stop_processes([server, scanner])

    # Nothing holds a secret in plain text: every row of every table, the server's log, /metrics.
    def dump(tx) -> bytes:
        found = []
        for table in weave_tables:
            for row in tx.all(f"SELECT * FROM `{table}`"):  # names from the schema
                found += [v if isinstance(v, bytes) else str(v).encode() for v in row.values()]
        return b"\n".join(found)

    stored = database.run(dump)
    served_log = log.read_bytes()
    assert b"inbound delivery" in served_log  # the delivery lines are there, and they are what is searched
    for secret in SECRETS.values():
        for material in {secret, secret.removeprefix("whsec_")}:
            for place, text in (("tables", stored), ("log", served_log), ("metrics", exposed)):
                assert material.encode() not in text, (place, secret[:8])
    for signature in sent_signatures:
        assert signature.encode() not in served_log
    ciphertexts = database.run(lambda tx: tx.all("SELECT ciphertext FROM inbound_secrets"))
    assert len(ciphertexts) == 3 and all(row["ciphertext"] for row in ciphertexts)
