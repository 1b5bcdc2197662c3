"""Issue 18: Weave on a three-node MariaDB Galera cluster on loopback (`weave.devdb.GaleraCluster`).

Galera replicates writes, not row locks: two nodes can each take "the" lock of one instance and
decide at once. Weave makes every unit that locks an instance write its row (`instances.version`),
so two such units always write a common row and the cluster refuses one at certification (a
deadlock error; the unit is re-run whole). These tests run against the real cluster.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import falcon.testing
import load
import pymysql
import pytest
from helpers import Flow, make_tenant, payment, signal_flow_definition, wait_until

from weave import migrate
from weave.app import create_app
from weave.config import Config
from weave.db import Database, Retryable
from weave.dburl import DatabaseUrl
from weave.devdb import GaleraCluster, ServerNotFound, find_galera_provider, free_port
from weave.sql import instances

pytestmark = pytest.mark.slow

DATABASE = "weave_galera"
ROUNDS = 40
INSTANCES = 40  # per workload: 40 starts, 160 signal sends (+ replays), 80 tasks


@pytest.fixture(scope="module")
def cluster():
    try:
        find_galera_provider()
    except ServerNotFound as exc:
        pytest.skip(str(exc))
    folder = Path(tempfile.mkdtemp(prefix="weave-galera-"))
    nodes = GaleraCluster(folder, 3).start()
    try:
        url = DatabaseUrl.parse(nodes.urls(DATABASE)[0])
        migrate.ensure_database(url)
        migrate.apply(url)
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _app(url: str) -> tuple[falcon.testing.TestClient, Database]:
    database = Database(DatabaseUrl.parse(url))
    return falcon.testing.TestClient(create_app(Config(database_url=url), database)), database


DROP_EVENTS_KEY = "ALTER TABLE events DROP INDEX uq_events_instance_seq, ADD KEY ix_events_seq (instance_id, seq)"
RESTORE_EVENTS_KEY = (
    "ALTER TABLE events DROP INDEX ix_events_seq, ADD UNIQUE KEY uq_events_instance_seq (instance_id, seq)"
)


@pytest.fixture
def two_nodes(cluster, request):
    """A flow on node0 and one on node1 (each its own API app and pool) for one new tenant, with
    the events table's unique (instance_id, seq) key out of the way: only the instance row can make
    two decisions about one instance conflict."""
    (client0, db0), (client1, db1) = _app(cluster.urls(DATABASE)[0]), _app(cluster.urls(DATABASE)[1])
    tenant = make_tenant(db0, f"t{abs(hash(request.node.name)) % 10**8}", {"inventory": 4, "carrier": 2})
    db0.run(lambda tx: tx.execute(DROP_EVENTS_KEY))
    try:
        yield Flow(client0, tenant, db0), Flow(client1, tenant, db1)
    finally:  # the control test leaves twins behind: the histories of this database go with them
        db0.run(lambda tx: tx.execute("DELETE FROM events"))
        db0.run(lambda tx: tx.execute(RESTORE_EVENTS_KEY))
        db0.close()
        db1.close()


def _race(flows, workflow_id: str, rounds: int) -> list[int]:
    """`rounds` times, node0 and node1 accept a signal for the same instance at the same moment."""
    statuses: list[int] = []
    lock = threading.Lock()

    def send(flow, key):
        barrier.wait()
        result = flow.send(workflow_id, key, payment())
        with lock:
            statuses.append(result.status_code)

    for index in range(rounds):
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=send, args=(flow, f"r{index}-n{n}")) for n, flow in enumerate(flows)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return statuses


def _history(flow, workflow_id: str) -> list[int]:
    return [
        row["seq"]
        for row in flow.rows(
            "SELECT e.seq FROM events e JOIN instances i ON i.id = e.instance_id WHERE i.workflow_id = %s ORDER BY e.seq",
            (workflow_id,),
        )
    ]


def _signals(flow, workflow_id: str) -> int:
    return flow.rows(
        "SELECT COUNT(*) AS n FROM signals s JOIN instances i ON i.id = s.instance_id WHERE i.workflow_id = %s",
        (workflow_id,),
    )[0]["n"]


def test_two_nodes_deciding_for_one_instance_at_once_conflict_and_one_is_re_run(cluster, two_nodes):
    flow0, _ = two_nodes
    flow0.publish(signal_flow_definition())
    flow0.start("order-1", input={"order_id": "o-1"})
    refusals = cluster.certification_refusals()
    statuses = _race(two_nodes, "order-1", ROUNDS)
    assert statuses == [201] * (2 * ROUNDS)
    history = _history(flow0, "order-1")
    assert history == list(range(1, len(history) + 1))  # gap-free, no twins, though no key forbids them
    assert _signals(flow0, "order-1") == 2 * ROUNDS
    assert cluster.certification_refusals() > refusals  # the race happened, and certification settled it


def test_without_the_instance_write_the_same_race_breaks_the_history(cluster, two_nodes, monkeypatch):
    """The control: with every write of the instance row gone (`mark_deciding`, and the count of
    stored signals that acceptance keeps), both nodes append an event with the same seq."""
    monkeypatch.setattr(instances, "mark_deciding", lambda tx, instance_id: None)
    monkeypatch.setattr(instances, "count_stored_signal", lambda tx, instance_id: None)
    flow0, _ = two_nodes
    flow0.publish(signal_flow_definition())
    flow0.start("order-1", input={"order_id": "o-1"})
    _race(two_nodes, "order-1", ROUNDS)
    history = _history(flow0, "order-1")
    assert len(set(history)) < len(history)


# ---- a unit aborted by another node during its commit ----------------------------------------------

ABORT_PROBE = "CREATE TABLE IF NOT EXISTS abort_probe (id INT PRIMARY KEY, v INT NOT NULL)"
ABORT_TAIL = "CREATE TABLE IF NOT EXISTS abort_tail (id INT AUTO_INCREMENT PRIMARY KEY, attempt INT NOT NULL)"


def _abort_during_commit(cluster, commit_alone: bool) -> tuple[BaseException | None, list[dict]]:
    """A unit on node0 writes the probe row, then its commit round trip sleeps and inserts a tail
    row; while it sleeps, node1 writes the same probe row, whose replication brute-force aborts
    the unit on node0. Run once (`attempt`, no re-run): (what it raised, the tail rows kept)."""
    cluster.nodes[0].query(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    setup = pymysql.connect(unix_socket=str(cluster.nodes[0].socket_path), user="root", database=DATABASE)
    try:
        with setup.cursor() as cur:
            for statement in (
                ABORT_PROBE,
                ABORT_TAIL,
                "DELETE FROM abort_tail",
                "REPLACE INTO abort_probe VALUES (1, 0)",
            ):
                cur.execute(statement)
        setup.commit()
    finally:
        setup.close()
    time.sleep(0.5)  # node1 has the tables and the row
    database = Database(DatabaseUrl.parse(cluster.url(DATABASE)))

    def other_node_writes() -> None:
        time.sleep(0.5)  # inside the sleep of the commit round trip
        writer = pymysql.connect(
            unix_socket=str(cluster.nodes[1].socket_path), user="root", database=DATABASE, autocommit=True
        )
        try:
            with writer.cursor() as cur:
                cur.execute("UPDATE abort_probe SET v = 100 WHERE id = 1")
        finally:
            writer.close()

    def unit(tx):
        tx.execute("UPDATE abort_probe SET v = v + 1 WHERE id = 1")
        tx.later("DO SLEEP(2)")
        tx.later("INSERT INTO abort_tail (attempt) VALUES (1)")

    writing = threading.Thread(target=other_node_writes)
    raised = None
    try:
        writing.start()
        database.before_commit = lambda tx, name: setattr(tx, "commit_alone", commit_alone)
        try:
            database.attempt(unit)
        except Exception as exc:  # noqa: BLE001 - what it raised is the finding
            raised = exc
    finally:
        writing.join()
        database.close()
    time.sleep(0.5)
    rows = list(cluster.nodes[0].query(f"SELECT id, attempt FROM {DATABASE}.abort_tail"))
    return raised, rows


def test_a_unit_aborted_by_another_nodes_write_during_its_commit_round_trip_commits_nothing(cluster):
    """Galera's brute-force abort inside a multi-statement round trip rolls back its head and runs
    its tail in a new transaction, COMMIT included, reporting the deadlock only after: with COMMIT
    in its own round trip on a Galera node (`Tx.commit_alone`), the aborted unit keeps nothing and
    fails as a conflict, to be re-run whole."""
    raised, rows = _abort_during_commit(cluster, commit_alone=True)
    assert isinstance(raised, Retryable), raised
    assert rows == []


def test_without_commit_alone_the_aborted_units_tail_commits_without_its_head(cluster):
    """The control: COMMIT in the same round trip as the unit's writes keeps the tail row of a unit
    whose head another node's write rolled back."""
    _, rows = _abort_during_commit(cluster, commit_alone=False)
    assert len(rows) == 1, rows


# ---- causal reads -----------------------------------------------------------------------------------


def _reads_that_miss(flows, workflow_id: str, rounds: int) -> int:
    """Signals acknowledged through node0 that a read through node1, right after, does not find."""
    flow0, flow1 = flows
    missed = 0
    for index in range(rounds):
        sent = flow0.send(workflow_id, f"c{index}", payment())
        assert sent.status_code == 201, sent.text
        seen = flow1.signal(workflow_id, sent.json["signal_id"])
        assert seen.status_code in (200, 404), seen.text
        missed += seen.status_code == 404
    return missed


def test_a_read_through_one_node_sees_what_another_node_acknowledged(two_nodes):
    flow0, _ = two_nodes
    flow0.publish(signal_flow_definition())
    flow0.start("order-1", input={"order_id": "o-1"})
    assert _reads_that_miss(two_nodes, "order-1", ROUNDS) == 0


PAUSE_SECONDS = 0.5


def _committed_while_node1_lags(cluster, key: int, read) -> tuple[object, float]:
    """Commit row `key` through node0 while node1 has not applied it yet, and `read(key)` through
    node1 at once: (what the read found, how long it took). Node1 lags deterministically: a
    connection holds FLUSH TABLES WITH READ LOCK there, which pauses its applier for PAUSE_SECONDS
    (a commit elsewhere is acknowledged without waiting for it)."""
    writer = pymysql.connect(
        unix_socket=str(cluster.nodes[0].socket_path), user="root", database=DATABASE, autocommit=True
    )
    locked = threading.Event()

    def pause_node1() -> None:
        holder = pymysql.connect(unix_socket=str(cluster.nodes[1].socket_path), user="root", autocommit=True)
        try:
            with holder.cursor() as cur:
                cur.execute("FLUSH TABLES WITH READ LOCK")
                locked.set()
                time.sleep(PAUSE_SECONDS)
                cur.execute("UNLOCK TABLES")
        finally:
            holder.close()

    try:
        with writer.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS causal_probe (id INT PRIMARY KEY)")
        time.sleep(0.2)  # the table exists on node1 before its applier is paused
        pausing = threading.Thread(target=pause_node1)
        pausing.start()
        locked.wait(10)
        with writer.cursor() as cur:
            cur.execute("INSERT INTO causal_probe VALUES (%s)", (key,))
        started = time.monotonic()
        found = read(key)
        took = time.monotonic() - started
        pausing.join()
        return found, took
    finally:
        writer.close()


def test_a_read_only_unit_on_one_node_sees_a_commit_acknowledged_by_another(cluster):
    """A read-only unit (wsrep_sync_wait) through node1 waits until node1 applied what node0 had
    acknowledged, and finds it."""
    reader = Database(DatabaseUrl.parse(cluster.url(DATABASE)).on_host(1))
    try:
        found, took = _committed_while_node1_lags(
            cluster, 1, lambda key: reader.read(lambda tx: tx.one("SELECT id FROM causal_probe WHERE id = %s", (key,)))
        )
        assert found == {"id": 1} and took >= PAUSE_SECONDS / 2
    finally:
        reader.close()


def test_without_causal_reads_a_read_on_another_node_misses_the_commit(cluster):
    """The control: the same read without the wait answers from node1 as it was, without the row."""
    reader = pymysql.connect(
        unix_socket=str(cluster.nodes[1].socket_path), user="root", database=DATABASE, autocommit=True
    )

    def read(key):
        with reader.cursor() as cur:
            cur.execute("SELECT id FROM causal_probe WHERE id = %s", (key,))
            return cur.fetchone()

    try:
        found, _ = _committed_while_node1_lags(cluster, 2, read)
        assert found is None
    finally:
        reader.close()


# ---- a mixed workload over the cluster ---------------------------------------------------------------


def fresh_database(cluster, name: str) -> DatabaseUrl:
    """`name`, dropped if a test before made it, then migrated (DDL replicates to every node)."""
    cluster.nodes[0].query(f"DROP DATABASE IF EXISTS {name}")
    url = DatabaseUrl.parse(cluster.url(name))
    migrate.ensure_database(url)
    migrate.apply(url)
    return url


WORKLOAD_DATABASE = "weave_workload"
WORKLOAD_TABLES = ("instances", "signals", "tasks", "events", "audit_records")


def node_counts(node) -> dict:
    """What one node holds of the workload's rows, read on that node alone."""
    return {table: node.query(f"SELECT COUNT(*) FROM {WORKLOAD_DATABASE}.{table}")[0][0] for table in WORKLOAD_TABLES}


def test_two_api_processes_and_three_scanners_on_three_nodes_keep_every_invariant(cluster, tmp_path):
    """Requests land on either API process (node0 and node1 first), duplicate sends and replays
    included; a scanner runs on each node. Afterwards every invariant of tests/support/load.py holds."""
    url = fresh_database(cluster, WORKLOAD_DATABASE)
    database = Database(url.on_host(2))
    tokens = load.prepare(database)
    ports = [free_port(), free_port()]
    processes = [
        *(load.serve_process(url.on_host(i).url(), ports[i], tmp_path / f"serve-{i}.log") for i in range(2)),
        *(load.scan_process(url.on_host(i).url(), tmp_path / f"scan-{i}.log") for i in range(3)),
    ]
    refusals = cluster.certification_refusals()
    try:
        for port in ports:
            load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(ports, "acme", calls)
        workload = load.Workload(api, tokens, INSTANCES, start_pause=0.02)
        started = time.monotonic()
        workload.run()
        workload.finish(database, timeout=180)
        elapsed = time.monotonic() - started
        figures = load.check_outcome(database, api, workload)
        assert [p.poll() for p in processes] == [None] * len(processes)
    finally:
        load.stop_processes(processes)
        database.close()
    counts = [node_counts(node) for node in cluster.nodes]
    assert counts[0] == counts[1] == counts[2], counts  # every node holds the same rows
    print(
        f"galera workload: {figures}; answers by status {calls.summary()}; "
        f"{cluster.certification_refusals() - refusals} certification refusals; {elapsed:.1f} s"
    )


def test_an_api_process_whose_node_is_killed_goes_on_through_another_node(cluster, tmp_path):
    """SIGKILL of the node the API process uses (node2 first in its URL), under load: it goes on
    through node0 within seconds, loses no acknowledged write and answers no 500; the node comes
    back, rejoins and catches up."""
    url = fresh_database(cluster, WORKLOAD_DATABASE)
    database = Database(url)
    tokens = load.prepare(database)
    port = free_port()
    processes = [
        load.serve_process(url.on_host(2).url(), port, tmp_path / "serve.log"),
        load.scan_process(url.on_host(0).url(), tmp_path / "scan-0.log"),
        load.scan_process(url.on_host(1).url(), tmp_path / "scan-1.log"),
    ]
    try:
        load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(port, "acme", calls)
        workload = load.Workload(api, tokens, INSTANCES, start_pause=0.05)
        workload.run()
        wait_until(lambda: len(workload.started) >= INSTANCES // 3, timeout=60)
        cluster.kill_node(2)
        killed = time.monotonic()
        wait_until(
            lambda: (
                (
                    api.call("after-kill", "GET", "/workflows/o-0", tokens["starter"]) or load.Answer(0, {}, b"", 0)
                ).status
                == 200
            ),
            timeout=30,
            pause=0.1,
        )
        recovered = time.monotonic() - killed
        assert recovered < 10, recovered
        workload.finish(database, timeout=180)
        figures = load.check_outcome(database, api, workload)
        assert processes[0].poll() is None  # the same process, on another node
        rejoin_started = time.monotonic()
        cluster.start_node(2)
        rejoined = time.monotonic() - rejoin_started
    finally:
        load.stop_processes(processes)
        database.close()
    counts = [node_counts(node) for node in cluster.nodes]
    assert counts[2] == counts[0] == counts[1], counts  # the node that came back caught up
    print(
        f"galera node kill: the API went on through another node after {recovered:.2f} s; {figures}; "
        f"answers by status {calls.summary()}; node2 rejoined and caught up in {rejoined:.1f} s"
    )
