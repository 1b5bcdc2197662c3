"""Test harness: a real MySQL-compatible server, migrated once per session, emptied per test.

Where the server comes from, first that answers:
1. `WEAVE_TEST_DATABASE_URL` (its database is used as it is and emptied between tests);
2. testcontainers MySQL 8 when a Docker engine answers;
3. a private `mariadbd`/`mysqld` from PATH started in a temporary folder;
4. otherwise the session stops with a message saying what to install.
Only the test database is touched, never the server's other databases.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import falcon.testing
import pytest

from weave.sql import tenancy
from weave import auth, migrate
from weave.app import create_app
from weave.config import Config
from weave.db import ControlledClock, Database, DatabaseUrl, connect
from weave.devdb import PrivateServer, ServerNotFound

TEST_DATABASE = "weave_test"
MIGRATION_TABLES = ("_yoyo_log", "_yoyo_migration", "_yoyo_version", "yoyo_lock")


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def server_url(tmp_path_factory):
    """A DatabaseUrl of a server we may use, naming the test database (not yet created)."""
    explicit = os.environ.get("WEAVE_TEST_DATABASE_URL")
    if explicit:
        yield DatabaseUrl.parse(explicit)
        return
    if _docker_answers():
        from testcontainers.mysql import MySqlContainer

        with MySqlContainer("mysql:8.0", username="root", password="weave", dbname=TEST_DATABASE) as mysql:
            url = DatabaseUrl("127.0.0.1", int(mysql.get_exposed_port(3306)), "root", "weave", TEST_DATABASE)
            yield url
        return
    try:
        server = PrivateServer(tmp_path_factory.mktemp("mariadb"), fast_and_unsafe=True).start()
    except ServerNotFound as exc:
        pytest.exit(str(exc), returncode=3)
    try:
        yield DatabaseUrl.parse(server.url(TEST_DATABASE))
    finally:
        server.stop()


@pytest.fixture
def scratch_database(server_url):
    """A factory of extra databases on the test server, named after the test database; dropped after."""
    made = []

    def make(suffix: str) -> DatabaseUrl:
        url = server_url.with_database(f"{server_url.database}_{suffix}")
        made.append(url)
        return url

    yield make
    for url in made:
        conn = connect(url, database=False)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{url.database}`")  # our own name, not input
        finally:
            conn.close()


@pytest.fixture(scope="session")
def migrated_url(server_url) -> DatabaseUrl:
    migrate.ensure_database(server_url)
    migrate.apply(server_url)
    return server_url


@pytest.fixture(scope="session")
def weave_tables(migrated_url) -> list[str]:
    conn = connect(migrated_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = %s",
                        (migrated_url.database,))
            return sorted(row["t"] for row in cur.fetchall() if row["t"] not in MIGRATION_TABLES)
    finally:
        conn.close()


@pytest.fixture(scope="session")
def clock() -> ControlledClock:
    return ControlledClock()


@pytest.fixture(scope="session")
def session_database(migrated_url, clock):
    database = Database(migrated_url, clock=clock)
    yield database
    database.close()


@pytest.fixture
def database(session_database, weave_tables, clock) -> Database:
    """The session's Database, every Weave table empty, the clock back at its start."""
    clock.set(ControlledClock().now())
    session_database.before_commit = None

    def empty(tx):
        for table in weave_tables:
            tx.execute(f"DELETE FROM `{table}`")  # names come from information_schema, not input

    session_database.run(empty)
    return session_database


@pytest.fixture
def config(migrated_url) -> Config:
    return Config(database_url=migrated_url.yoyo_url())


@pytest.fixture
def client(config, database) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(create_app(config, database))


@pytest.fixture
def cut_connection(database, migrated_url):
    """`cut_connection("unit")`: the server kills the session running that unit once, just before
    its COMMIT. Returns the list that records the cut."""
    killed: list[str] = []

    def arm(unit_name: str) -> list[str]:
        def cut(tx, unit):
            if unit == unit_name and not killed:
                killer = connect(migrated_url)
                with killer.cursor() as cur:
                    cur.execute("KILL CONNECTION %s", (tx.cursor.connection.thread_id(),))
                killer.close()
                killed.append(unit)

        database.before_commit = cut
        return killed

    yield arm
    database.before_commit = None


@dataclass
class Tenant:
    """One namespace with an application and queues, and a way to mint credentials in it."""

    database: Database
    namespace: str
    application: str

    def token(self, *scopes: str, queues: tuple[str, ...] = (), actor: str = "tester",
              expires_in: int | None = None, application: str | None = None) -> str:
        token = auth.new_token()
        tenancy.create_credential(self.database, self.namespace, application or self.application, actor,
                                  list(scopes), list(queues), auth.token_hash(token), expires_in)
        return token

    def headers(self, *scopes: str, **kwargs) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(*scopes, **kwargs)}"}


def make_tenant(database: Database, namespace: str, queues: dict[str, int]) -> Tenant:
    tenancy.create_namespace(database, namespace)
    tenancy.create_application(database, namespace, "app", None)
    for name, permits in queues.items():
        tenancy.create_queue(database, namespace, name, permits)
    return Tenant(database, namespace, "app")


@pytest.fixture
def tenant(database) -> Tenant:
    return make_tenant(database, "acme", {"inventory": 4, "carrier": 2})


@pytest.fixture
def other_tenant(database) -> Tenant:
    return make_tenant(database, "globex", {"inventory": 4})


class Flow:
    """Drives workflows through the HTTP API the way clients and workers do, plus the scanner."""

    def __init__(self, client, tenant: Tenant, database: Database):
        from weave.scanner import Scanner

        self.client = client
        self.database = database
        self.ns = f"/v1/namespaces/{tenant.namespace}"
        self.headers = tenant.headers("definitions:write", "workflows:start", "workflows:read",
                                      queues=("inventory", "carrier"))
        self.worker = tenant.headers("tasks:work", queues=("inventory", "carrier"), actor="worker")
        self.signaller = tenant.headers("workflows:signal", "workflows:read", queues=("inventory", "carrier"),
                                        actor="payments-bot")
        self.scanner = Scanner(database)

    def publish(self, document: dict) -> int:
        result = self.client.simulate_post(f"{self.ns}/definitions", json=document, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json["version"]

    def start(self, workflow_id: str, definition: str = "flow", version: int = 1, input=None,
              deadline_seconds: int = 3600) -> dict:
        body = {"definition": definition, "version": version, "input": input if input is not None else {},
                "deadline_seconds": deadline_seconds, "workflow_id": workflow_id}
        result = self.client.simulate_post(f"{self.ns}/workflows", json=body, headers=self.headers)
        assert result.status_code in (200, 201), result.text
        return result.json

    def workflow(self, workflow_id: str) -> dict:
        result = self.client.simulate_get(f"{self.ns}/workflows/{workflow_id}", headers=self.headers)
        assert result.status_code == 200, result.text
        return result.json

    def events(self, workflow_id: str) -> list[str]:
        result = self.client.simulate_get(f"{self.ns}/workflows/{workflow_id}/events", query_string="limit=1000",
                                          headers=self.headers)
        return [e["type"] for e in result.json["events"]]

    def scan(self, rounds: int = 20) -> None:
        """Run scanner batches until one finds nothing to do."""
        for _ in range(rounds):
            report = self.scanner.run_once()
            if not report.candidates and not report.leases:
                return
        raise AssertionError("the scanner kept finding work")

    def claim(self, queue: str = "inventory", lease_seconds: int = 60, wait_seconds: int = 0, worker="w1"):
        return self.client.simulate_post(f"{self.ns}/queues/{queue}/claim", headers=self.worker,
                                         json={"worker_id": worker, "lease_seconds": lease_seconds,
                                               "wait_seconds": wait_seconds})

    def complete(self, task: dict, outcome: str = "SUCCEEDED", **body):
        return self.client.simulate_post(f"{self.ns}/tasks/{task['task_id']}/complete", headers=self.worker,
                                         json={"lease_token": task["lease_token"], "outcome": outcome, **body})

    def heartbeat(self, task: dict, lease_seconds: int = 60):
        return self.client.simulate_post(f"{self.ns}/tasks/{task['task_id']}/heartbeat", headers=self.worker,
                                         json={"lease_token": task["lease_token"], "lease_seconds": lease_seconds})

    def send(self, workflow_id: str, key: str, body: dict, headers: dict | None = None):
        return self.client.simulate_post(f"{self.ns}/workflows/{workflow_id}/signals", json=body,
                                         headers={**(headers or self.signaller), "Idempotency-Key": key})

    def signal(self, workflow_id: str, signal_id: str, headers: dict | None = None):
        return self.client.simulate_get(f"{self.ns}/workflows/{workflow_id}/signals/{signal_id}",
                                        headers=headers or self.signaller)

    def finish_task(self, result=None, queue: str = "inventory") -> dict:
        """Claim the next task, complete it, and let the scanner react."""
        claimed = self.claim(queue)
        assert claimed.status_code == 200, claimed.text
        assert self.complete(claimed.json, result=result if result is not None else {}).status_code == 200
        self.scan()
        return claimed.json

    def rows(self, sql: str, params=()) -> list[dict]:
        return self.database.run(lambda tx: tx.all(sql, params))


@pytest.fixture
def flow(client, tenant, database) -> Flow:
    return Flow(client, tenant, database)


def task_steps(*keys: str, queue: str = "inventory", max_attempts: int = 3, timeout: int = 300) -> dict:
    return {"name": "flow", "steps": [{"key": key, "type": "TASK", "queue": queue, "max_attempts": max_attempts,
                                       "timeout_seconds": timeout} for key in keys]}


PAYMENT_SCHEMA = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}


def signal_flow_definition(timeout: int = 3600) -> dict:
    """reserve (TASK) -> payment (SIGNAL, correlated on the order id) -> ship (TASK)."""
    return {"name": "flow", "steps": [
        {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 300},
        {"key": "payment", "type": "SIGNAL", "timeout_seconds": timeout, "correlation": "/input/order_id",
         "signal": {"name": "payment.settled", "payload_version": "v1", "payload_schema": PAYMENT_SCHEMA}},
        {"key": "ship", "type": "TASK", "queue": "carrier", "timeout_seconds": 300},
    ]}


def payment(correlation_key: str = "o-1", sequence: int = 1, **overrides) -> dict:
    body = {"name": "payment.settled", "payload_version": "v1", "target_step_key": "payment",
            "target_activation_sequence": sequence, "correlation_key": correlation_key,
            "payload": {"amount": 12.5}, "reason": "PSP webhook settled the payment"}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ABSENT}


ABSENT = object()
