"""Plain helpers that test modules import (`from helpers import ...`); fixtures stay in conftest.py.

`Tenant`/`make_tenant` set up a namespace to test in, `Flow` drives workflows through the HTTP API
and the scanner, `serving` runs a real waitress server in a thread, and the rest are definition
documents and signal bodies that several tests share.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from waitress import wasyncore

from weave import auth
from weave.db import Database
from weave.sql import tenancy


@dataclass
class Tenant:
    """One namespace with an application and queues, and a way to mint credentials in it."""

    database: Database
    namespace: str
    application: str

    def token(
        self,
        *scopes: str,
        queues: tuple[str, ...] = (),
        actor: str = "tester",
        expires_in: int | None = None,
        application: str | None = None,
    ) -> str:
        token = auth.new_token()
        tenancy.create_credential(
            self.database,
            self.namespace,
            application or self.application,
            actor,
            list(scopes),
            list(queues),
            auth.token_hash(token),
            expires_in,
        )
        return token

    def headers(self, *scopes: str, **kwargs) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(*scopes, **kwargs)}"}

    def principal(self, *scopes: str, **kwargs) -> auth.Principal:
        """What a request with a new credential of these scopes and grants is authorized as."""
        return tenancy.authenticate(self.database, auth.token_hash(self.token(*scopes, **kwargs)))


@contextlib.contextmanager
def serving(server):
    """Run a waitress server (from `weave.server.create_server`) in a thread; stop it afterwards."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.task_dispatcher.shutdown()
        wasyncore.close_all(server._map)  # every connection and the listener: the loop then ends
        thread.join(10)


def make_tenant(database: Database, namespace: str, queues: dict[str, int]) -> Tenant:
    tenancy.create_namespace(database, namespace)
    tenancy.create_application(database, namespace, "app", None)
    for name, permits in queues.items():
        tenancy.create_queue(database, namespace, name, permits)
    return Tenant(database, namespace, "app")


class Flow:
    """Drives workflows through the HTTP API the way clients and workers do, plus the scanner."""

    def __init__(self, client, tenant: Tenant, database: Database):
        from weave.scanner import Scanner

        self.client = client
        self.database = database
        self.tenant = tenant
        self.ns = f"/v1/namespaces/{tenant.namespace}"
        self.headers = tenant.headers(
            "definitions:write", "workflows:start", "workflows:read", queues=("inventory", "carrier")
        )
        self.worker = tenant.headers("tasks:work", queues=("inventory", "carrier"), actor="worker")
        self.signaller = tenant.headers(
            "workflows:signal", "workflows:read", queues=("inventory", "carrier"), actor="payments-bot"
        )
        self.scanner = Scanner(database)

    def publish(self, document: dict) -> int:
        result = self.client.simulate_post(f"{self.ns}/definitions", json=document, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json["version"]

    def start(
        self, workflow_id: str, definition: str = "flow", version: int = 1, input=None, deadline_seconds: int = 3600
    ) -> dict:
        body = {
            "definition": definition,
            "version": version,
            "input": input if input is not None else {},
            "deadline_seconds": deadline_seconds,
            "workflow_id": workflow_id,
        }
        result = self.client.simulate_post(f"{self.ns}/workflows", json=body, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json

    def workflow(self, workflow_id: str) -> dict:
        result = self.client.simulate_get(f"{self.ns}/workflows/{workflow_id}", headers=self.headers)
        assert result.status_code == 200, result.text
        return result.json

    def events(self, workflow_id: str) -> list[str]:
        result = self.client.simulate_get(
            f"{self.ns}/workflows/{workflow_id}/events", query_string="limit=1000", headers=self.headers
        )
        return [e["type"] for e in result.json["events"]]

    def scan(self, rounds: int = 20) -> None:
        """Run scanner batches until one finds nothing to do."""
        for _ in range(rounds):
            report = self.scanner.run_once()
            if not report.candidates and not report.leases:
                return
        raise AssertionError("the scanner kept finding work")

    def claim(self, queue: str = "inventory", lease_seconds: int = 60, wait_seconds: int = 0, worker="w1"):
        return self.client.simulate_post(
            f"{self.ns}/queues/{queue}/claim",
            headers=self.worker,
            json={"worker_id": worker, "lease_seconds": lease_seconds, "wait_seconds": wait_seconds},
        )

    def complete(self, task: dict, outcome: str = "SUCCEEDED", **body):
        return self.client.simulate_post(
            f"{self.ns}/tasks/{task['task_id']}/complete",
            headers=self.worker,
            json={"lease_token": task["lease_token"], "outcome": outcome, **body},
        )

    def heartbeat(self, task: dict, lease_seconds: int = 60):
        return self.client.simulate_post(
            f"{self.ns}/tasks/{task['task_id']}/heartbeat",
            headers=self.worker,
            json={"lease_token": task["lease_token"], "lease_seconds": lease_seconds},
        )

    def send(self, workflow_id: str, key: str, body: dict, headers: dict | None = None):
        return self.client.simulate_post(
            f"{self.ns}/workflows/{workflow_id}/signals",
            json=body,
            headers={**(headers or self.signaller), "Idempotency-Key": key},
        )

    def signal(self, workflow_id: str, signal_id: str, headers: dict | None = None):
        return self.client.simulate_get(
            f"{self.ns}/workflows/{workflow_id}/signals/{signal_id}", headers=headers or self.signaller
        )

    def finish_task(self, result=None, queue: str = "inventory") -> dict:
        """Claim the next task, complete it, and let the scanner react."""
        claimed = self.claim(queue)
        assert claimed.status_code == 200, claimed.text
        assert self.complete(claimed.json, result=result if result is not None else {}).status_code == 200
        self.scan()
        return claimed.json

    def rows(self, sql: str, params=()) -> list[dict]:
        return self.database.run(lambda tx: tx.all(sql, params))


def task_steps(*keys: str, queue: str = "inventory", max_attempts: int = 3, timeout: int = 300) -> dict:
    return {
        "name": "flow",
        "steps": [
            {"key": key, "type": "TASK", "queue": queue, "max_attempts": max_attempts, "timeout_seconds": timeout}
            for key in keys
        ],
    }


PAYMENT_SCHEMA = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}


def signal_flow_definition(timeout: int = 3600) -> dict:
    """reserve (TASK) -> payment (SIGNAL, correlated on the order id) -> ship (TASK)."""
    return {
        "name": "flow",
        "steps": [
            {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 300},
            {
                "key": "payment",
                "type": "SIGNAL",
                "timeout_seconds": timeout,
                "correlation": "/input/order_id",
                "signal": {"name": "payment.settled", "payload_version": "v1", "payload_schema": PAYMENT_SCHEMA},
            },
            {"key": "ship", "type": "TASK", "queue": "carrier", "timeout_seconds": 300},
        ],
    }


ABSENT = object()  # `payment(payload=ABSENT)` leaves the member out of the body


def payment(correlation_key: str = "o-1", sequence: int = 1, **overrides) -> dict:
    body = {
        "name": "payment.settled",
        "payload_version": "v1",
        "target_step_key": "payment",
        "target_activation_sequence": sequence,
        "correlation_key": correlation_key,
        "payload": {"amount": 12.5},
        "reason": "PSP webhook settled the payment",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ABSENT}


INSERT_INSTANCE_ROW = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest, status, gate,
                       review_reason, deadline_at, created_at, updated_at)
SELECT d.namespace_id, %s, d.id, a.id, '{}', REPEAT('0', 64), %s, %s, %s, %s, %s, %s
FROM definitions d JOIN applications a ON a.namespace_id = d.namespace_id AND a.name = 'app'
WHERE d.namespace_id = (SELECT id FROM namespaces WHERE name = %s) AND d.name = %s AND d.version = %s
"""


def insert_instances(database: Database, namespace: str, definition: str, version: int, rows: list[tuple]) -> None:
    """Instances written straight into the table (not started: no steps, checkpoint or history), fast.

    `rows` are `(workflow_id, status, review_reason)`; the definition version must be published.
    """
    now = database.run(lambda tx: tx.now())
    gates = {"RUNNING": "OPEN"}
    database.run(
        lambda tx: tx.executemany(
            INSERT_INSTANCE_ROW,
            [
                (wid, status, gates.get(status, "CLOSED"), reason, now, now, now, namespace, definition, version)
                for wid, status, reason in rows
            ],
        )
    )


# ---- the SDK --------------------------------------------------------------------------------------

OPERATOR_SCOPES = (
    "definitions:write",
    "definitions:read",
    "workflows:start",
    "workflows:read",
    "workflows:signal",
    "workflows:control",
    "workflows:review",
)


def sdk_client(url: str, tenant: Tenant, *scopes: str, actor: str = "ops", **kwargs):
    """A `weave.sdk.Client` of a new credential (every operator scope, both queues, unless told)."""
    from weave.sdk import Client

    token = tenant.token(*(scopes or OPERATOR_SCOPES), queues=("inventory", "carrier"), actor=actor)
    return Client(url, token, tenant.namespace, **{"timeout": 10, **kwargs})
