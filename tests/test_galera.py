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
from pathlib import Path

import falcon.testing
import pytest
from helpers import Flow, make_tenant, payment, signal_flow_definition

from weave import migrate
from weave.app import create_app
from weave.config import Config
from weave.db import Database, DatabaseUrl
from weave.devdb import GaleraCluster, ServerNotFound, find_galera_provider
from weave.sql import instances

pytestmark = pytest.mark.slow

DATABASE = "weave_galera"
ROUNDS = 40


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


def _certification_refusals(cluster) -> int:
    """Transactions the nodes refused at certification or aborted for a replicated one, so far."""
    total = 0
    for node in cluster.nodes:
        status = dict(
            node.query(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
            )
        )
        total += sum(int(value) for value in status.values())
    return total


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
    refusals = _certification_refusals(cluster)
    statuses = _race(two_nodes, "order-1", ROUNDS)
    assert statuses == [201] * (2 * ROUNDS)
    history = _history(flow0, "order-1")
    assert history == list(range(1, len(history) + 1))  # gap-free, no twins, though no key forbids them
    assert _signals(flow0, "order-1") == 2 * ROUNDS
    assert _certification_refusals(cluster) > refusals  # the race happened, and certification settled it


def test_without_the_instance_write_the_same_race_breaks_the_history(cluster, two_nodes, monkeypatch):
    """The control: with `mark_deciding` gone, both nodes append an event with the same seq."""
    monkeypatch.setattr(instances, "mark_deciding", lambda tx, instance_id: None)
    flow0, _ = two_nodes
    flow0.publish(signal_flow_definition())
    flow0.start("order-1", input={"order_id": "o-1"})
    _race(two_nodes, "order-1", ROUNDS)
    history = _history(flow0, "order-1")
    assert len(set(history)) < len(history)
