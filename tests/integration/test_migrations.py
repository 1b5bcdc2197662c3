"""M1: migrations go up and down on an empty database; every table and column is commented;
there are no foreign keys; every query's index is used (EXPLAIN)."""

import pytest

from weave import migrate
from weave.db import connect

YOYO_TABLES = ("_yoyo_log", "_yoyo_migration", "_yoyo_version", "yoyo_lock")


@pytest.fixture
def scratch_url(scratch_database):
    url = scratch_database("scratch")
    migrate.ensure_database(url)
    return url


def _tables(url):
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = %s", (url.database,))
        found = {row["t"] for row in cur.fetchall()} - set(YOYO_TABLES)
    conn.close()
    return found


SHIPPED = [
    "0001.tenancy",
    "0002.workflows",
    "0003.pulse",
    "0004.signals_minimal",
    "0005.signal_identity",
    "0006.workflow_listing",
    "0007.audit_signal_id",
    "0008.console_sessions",
    "0009.instance_version",
    "0010.instance_signal_count",
    "0011.leaner_indexes",
    "0012.facts_times",
    "0013.definition_queues",
    "0014.console_session_limits",
    "0015.status_checks",
    "0016.deadline_checkpoints",
    "0017.routing",
    "0018.unrouted_facts",
    "0019.inbound",
    "0020.scanner_processes",
    "0021.notifications",
    "0022.retention",
    "0023.search",
]


def test_m1_migrations_apply_and_roll_back_on_an_empty_database(scratch_url):
    assert migrate.pending(scratch_url) == SHIPPED
    applied = migrate.apply(scratch_url)
    assert applied == SHIPPED
    assert migrate.pending(scratch_url) == []
    assert {"namespaces", "instances", "signals", "waits", "tasks", "inbox_events"} <= _tables(scratch_url)
    rolled = migrate.rollback(scratch_url)
    assert rolled == list(reversed(applied))
    assert _tables(scratch_url) == set()
    assert migrate.apply(scratch_url) == applied


def test_m1_migration_steps_survive_being_re_run(scratch_url):
    """yoyo records a migration only after all its steps: a crash between steps re-runs them."""
    applied = migrate.apply(scratch_url)
    conn = connect(scratch_url)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM _yoyo_migration")  # as if the process died before recording them
    conn.commit()
    conn.close()
    assert migrate.apply(scratch_url) == applied


def test_m1_every_table_and_column_has_a_comment(migrated_url):
    conn = connect(migrated_url)
    with conn.cursor() as cur:
        cur.execute(
            """SELECT table_name AS t, table_comment AS c FROM information_schema.tables
                       WHERE table_schema = %s""",
            (migrated_url.database,),
        )
        tables = [r for r in cur.fetchall() if r["t"] not in YOYO_TABLES]
        cur.execute(
            """SELECT table_name AS t, column_name AS col, column_comment AS c
                       FROM information_schema.columns WHERE table_schema = %s""",
            (migrated_url.database,),
        )
        columns = [r for r in cur.fetchall() if r["t"] not in YOYO_TABLES]
    conn.close()
    assert len(tables) >= 15
    assert [r["t"] for r in tables if not r["c"].strip()] == []
    assert len(columns) > 100
    assert [f"{r['t']}.{r['col']}" for r in columns if not r["c"].strip()] == []


def test_m1_there_are_no_foreign_keys(migrated_url):
    conn = connect(migrated_url)
    with conn.cursor() as cur:
        cur.execute(
            """SELECT COUNT(*) AS n FROM information_schema.referential_constraints
                       WHERE constraint_schema = %s""",
            (migrated_url.database,),
        )
        assert cur.fetchone()["n"] == 0
        cur.execute(
            """SELECT COUNT(*) AS n FROM information_schema.key_column_usage
                       WHERE table_schema = %s AND referenced_table_name IS NOT NULL""",
            (migrated_url.database,),
        )
        assert cur.fetchone()["n"] == 0
    conn.close()


def test_every_table_is_utf8mb4(migrated_url):
    conn = connect(migrated_url)
    with conn.cursor() as cur:
        cur.execute(
            """SELECT table_name AS t, table_collation AS c FROM information_schema.tables
                       WHERE table_schema = %s""",
            (migrated_url.database,),
        )
        rows = [r for r in cur.fetchall() if r["t"] not in YOYO_TABLES]
    conn.close()
    assert {r["c"] for r in rows} == {"utf8mb4_bin"}


def test_m4_readyz_refuses_while_migrations_are_pending(scratch_url):
    import falcon.testing

    from weave.app import create_app
    from weave.config import Config
    from weave.db import Database

    migrate.apply(scratch_url, upto="0004.signals_minimal")
    database = Database(scratch_url)
    client = falcon.testing.TestClient(create_app(Config(scratch_url.yoyo_url()), database))
    waiting = client.simulate_get("/readyz")
    assert (waiting.status_code, waiting.json["code"]) == (503, "UNAVAILABLE")
    assert "0005.signal_identity" in waiting.json["detail"] and waiting.headers["retry-after"] == "5"
    assert client.simulate_get("/healthz").status_code == 200  # alive, just not ready
    migrate.apply(scratch_url)
    assert client.simulate_get("/readyz").json == {"status": "ready"}
    database.close()


def test_readyz_answers_503_when_the_database_is_unreachable():
    import falcon.testing

    from weave.app import create_app
    from weave.config import Config
    from weave.db import Database
    from weave.devdb import free_port

    url = f"mysql://root@127.0.0.1:{free_port()}/nowhere"
    client = falcon.testing.TestClient(create_app(Config(url), Database(url, max_attempts=1)))
    result = client.simulate_get("/readyz")
    assert (result.status_code, result.json["code"]) == (503, "UNAVAILABLE")
    assert client.simulate_get("/healthz").status_code == 200


def test_migrations_run_on_the_first_host_that_answers(scratch_url):
    """A cluster's URL lists its nodes; `weave migrate` spoke to the first one only, down or not."""
    from dataclasses import replace

    from weave.devdb import free_port

    url = replace(scratch_url, host="127.0.0.1", port=free_port(), more_hosts=scratch_url.hosts)
    migrate.ensure_database(url)
    assert migrate.apply(url) == SHIPPED
    assert migrate.pending(url) == [] and migrate.pending(scratch_url) == []
