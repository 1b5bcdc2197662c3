"""Test harness: a real MySQL-compatible server, migrated once per session, emptied per test.

Where the server comes from, first that answers:
1. `WEAVE_TEST_DATABASE_URL` (its database is used as it is and emptied between tests);
2. testcontainers MySQL 8 when a Docker engine answers;
3. a private `mariadbd`/`mysqld` from PATH started in a temporary folder;
4. otherwise the session stops with a message saying what to install.
Only the test database is touched, never the server's other databases.
Plain helpers that tests import (`Flow`, `payment`, …) live in `helpers.py`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import falcon.testing
import pytest
from clock import ControlledClock
from faultproxy import FaultProxy
from helpers import Flow, Tenant, empty_database, make_tenant, serving, signal_flow_definition

from weave import migrate
from weave.app import create_app
from weave.config import Config
from weave.db import Database, connect
from weave.dburl import DatabaseUrl
from weave.devdb import PrivateServer, ServerNotFound
from weave.server import create_server

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
            cur.execute(
                "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = %s",
                (migrated_url.database,),
            )
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
    empty_database(session_database, weave_tables, clock)
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


@pytest.fixture
def proxy(migrated_url):
    """The fault proxy (tests/support/faultproxy.py) in front of the test server."""
    with FaultProxy(migrated_url.port, upstream_host=migrated_url.host) as proxy:
        yield proxy


@pytest.fixture
def proxied(database, proxy, migrated_url, clock):
    """A Database on the test database whose connections go through the fault proxy."""
    url = DatabaseUrl("127.0.0.1", proxy.port, migrated_url.user, migrated_url.password, migrated_url.database)
    proxied = Database(url, clock=clock)
    yield proxied
    proxied.close()


@pytest.fixture
def tenant(database) -> Tenant:
    return make_tenant(database, "acme", {"inventory": 4, "carrier": 2})


@pytest.fixture
def other_tenant(database) -> Tenant:
    return make_tenant(database, "globex", {"inventory": 4})


@pytest.fixture
def flow(client, tenant, database) -> Flow:
    return Flow(client, tenant, database)


# ---- a real HTTP server, for the SDK and the command line ---------------------------------------


@pytest.fixture
def live_url(config, database):
    """Weave's waitress server on a free 127.0.0.1 port, serving the app on the test database; its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(create_app(config, database), listener, Config(config.database_url, threads=8))
    with serving(server):
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def expired(flow, clock):
    """order-1 waits for its payment; the wait expired: step and instance in review (S2.6)."""
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    clock.advance(600)
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "WAIT_EXPIRED"
    return flow
