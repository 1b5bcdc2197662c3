"""Prometheus metrics (issue 15, SPEC §12): GET /metrics counts what happened, by the labels it says.

Counters are process-wide, so tests in one process compare a scrape after the traffic with one
before it; the tests of real `weave serve --processes 2` and `weave scan` processes read the
absolute values.
"""

import base64
import hashlib
import http.client
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    ABSENT,
    insert_instances,
    payment,
    scanner_process,
    signal_flow_definition,
    task_steps,
    use_real_time,
    wait_until,
    weave_serve,
)
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from test_routing import fact, open_payment_wait, route

from weave import metrics
from weave.db import Database
from weave.devdb import free_port
from weave.driver import DictCursor
from weave.scanner import Scanner, backlog
from weave.sql import tenancy
from weave.sql.engine import moves

SIGNALS = "/v1/namespaces/{namespace}/workflows/{workflow_id}/signals"
WORKFLOW = "/v1/namespaces/{namespace}/workflows/{workflow_id}"
PINNED = {  # SPEC §12: name -> labels (None: not pinned)
    "weave_http_requests_total": {"route", "method", "status"},
    "weave_http_request_duration_seconds": None,
    "weave_signals_accepted_total": {"status", "disposition"},
    "weave_signals_routed_total": {"route"},
    "weave_db_retries_total": {"code"},
    "weave_scanner_lag_seconds": {"source"},
    "weave_scanner_decisions_total": {"kind"},
    "weave_notifications_total": {"event", "outcome"},
    "weave_notifications_oldest_undelivered_seconds": None,
    "weave_notify_subscriptions_failing": None,
}


def parse(text: str) -> dict[tuple, float]:
    """Every sample of a scrape: (name, ((label, value), ...)) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client) -> dict:
    result = client.simulate_get("/metrics")
    assert result.status_code == 200 and result.headers["content-type"] == metrics.CONTENT_TYPE
    return parse(result.text)


class Delta:
    """What a scrape after the traffic says minus what one before it said."""

    def __init__(self, client):
        self.client = client
        self.before = scrape(client)

    def __call__(self, name: str, **labels) -> float:
        return value(scrape(self.client), name, **labels) - value(self.before, name, **labels)


@pytest.fixture
def wf(flow):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    return flow


def test_the_pinned_metrics_exist_with_their_labels(client):
    """Scraped from a fresh app: families with samples, and those that have none yet (their HELP line)."""
    client.simulate_get("/healthz")
    text = client.simulate_get("/metrics").text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in PINNED:
        family_name = name.removesuffix("_total")
        assert family_name in families, name
    http = families["weave_http_requests"]
    assert {key for sample in http.samples for key in sample.labels} == PINNED["weave_http_requests_total"]
    assert families["weave_http_request_duration_seconds"].type == "histogram"
    assert families["weave_scanner_lag_seconds"].type == "gauge"
    assert {sample.labels["source"] for sample in families["weave_scanner_lag_seconds"].samples} == {
        "inbox",
        "checkpoint",
        "signal_expiry",
        "fact_expiry",
    }
    recorded = {metric._name: metric for metric in vars(metrics).values() if hasattr(metric, "_labelnames")}
    for name, labels in PINNED.items():
        metric = recorded.get(name.removesuffix("_total"))
        if labels is not None and metric is not None:  # the lag is read at scrape time, not recorded
            assert set(metric._labelnames) == labels, name


def test_requests_are_counted_by_route_template_method_and_status(client):
    delta = Delta(client)
    for _ in range(2):
        assert client.simulate_get("/v1/namespaces/acme/workflows/w-1").status_code == 401
    assert client.simulate_get("/healthz").status_code == 200
    assert client.simulate_get("/no/such/route").status_code == 404
    assert client.simulate_request("BREW", "/healthz").status_code == 400  # a client picks the method
    assert delta("weave_http_requests_total", route=WORKFLOW, method="GET", status="401") == 2
    assert delta("weave_http_requests_total", route="/healthz", method="GET", status="200") == 1
    assert delta("weave_http_requests_total", route="unrouted", method="GET", status="404") == 1
    assert delta("weave_http_requests_total", route="/healthz", method="OTHER", status="400") == 1
    assert delta("weave_http_request_duration_seconds_count", route=WORKFLOW, method="GET") == 2
    assert delta("weave_http_request_duration_seconds_bucket", route=WORKFLOW, method="GET", le="+Inf") == 2
    assert delta("weave_http_request_duration_seconds_sum", route=WORKFLOW, method="GET") > 0


def test_signal_outcomes_accepted_replayed_conflict_and_quota(wf, tenant, database):
    delta = Delta(wf.client)
    assert wf.send("order-1", "k1", payment()).status_code == 201  # early: kept PENDING
    assert wf.send("order-1", "k1", payment()).status_code == 201  # a replay
    conflict = wf.send("order-1", "k1", payment(reason="another reason"))
    assert conflict.json["code"] == "IDEMPOTENCY_CONFLICT"
    assert wf.send("order-1", "k2", payment(sequence=2)).json["code"] == "ACTIVATION_NOT_FOUND"
    tenancy.create_application(database, "acme", "limited", 0)
    limited = tenant.headers("workflows:signal", queues=("inventory", "carrier"), application="limited")
    assert wf.send("order-1", "k3", payment(), headers=limited).json["code"] == "QUOTA_EXCEEDED"
    assert delta("weave_signals_accepted_total", status="PENDING", disposition="none") == 1
    assert delta("weave_signal_requests_total", outcome="accepted") == 1
    assert delta("weave_signal_requests_total", outcome="replayed") == 1
    assert delta("weave_signal_requests_total", outcome="IDEMPOTENCY_CONFLICT") == 1
    assert delta("weave_signal_requests_total", outcome="ACTIVATION_NOT_FOUND") == 1
    assert delta("weave_signal_requests_total", outcome="QUOTA_EXCEEDED") == 1
    assert delta("weave_http_requests_total", route=SIGNALS, method="POST", status="201") == 2


def test_B3_facts_sent_by_key_are_counted_by_route_once_each_replays_not(flow):
    """weave_signals_routed_total{route}: one per new fact accepted by POST {N}/signals (B2/B3), none
    for a replay or a refusal; the routed one also counts as an accepted signal of its instance."""
    flow.publish(signal_flow_definition())
    open_payment_wait(flow, "w-1", "o-1")
    open_payment_wait(flow, "w-2", "o-2")
    open_payment_wait(flow, "w-3", "o-2")
    delta = Delta(flow.client)
    assert route(flow, "r1", fact("o-1")).json["route"] == "ROUTED"
    assert route(flow, "r1", fact("o-1")).headers["Idempotent-Replayed"] == "true"
    assert route(flow, "p1", fact("o-9")).json["route"] == "PARKED"
    assert route(flow, "p2", fact("o-8")).json["route"] == "PARKED"
    assert route(flow, "p2", fact("o-8")).status_code == 201  # a replay
    assert route(flow, "a1", fact("o-2")).json["route"] == "AMBIGUOUS"
    assert route(flow, "a1", fact("o-3")).json["code"] == "IDEMPOTENCY_CONFLICT"
    assert delta("weave_signals_routed_total", route="ROUTED") == 1
    assert delta("weave_signals_routed_total", route="PARKED") == 2
    assert delta("weave_signals_routed_total", route="AMBIGUOUS") == 1
    assert delta("weave_signal_requests_total", outcome="accepted") == 4
    assert delta("weave_signal_requests_total", outcome="replayed") == 2
    assert delta("weave_signals_accepted_total", status="REJECTED", disposition="AMBIGUOUS_CORRELATION") == 1


def test_task_claims_completions_and_lost_leases(flow, clock):
    flow.publish(task_steps("a", "b"))
    flow.start("w-1")
    flow.scan()
    delta = Delta(flow.client)
    claimed = flow.claim().json
    assert flow.claim().status_code == 204
    assert flow.complete(claimed, result={}).status_code == 200
    assert flow.heartbeat(claimed).json["code"] == "LEASE_LOST"
    assert flow.complete(claimed, result={}).json["code"] == "LEASE_LOST"
    assert delta("weave_task_claims_total", result="claimed") == 1
    assert delta("weave_task_claims_total", result="empty") == 1
    assert delta("weave_tasks_completed_total", outcome="SUCCEEDED") == 1
    assert delta("weave_tasks_leases_lost_total", operation="heartbeat") == 1
    assert delta("weave_tasks_leases_lost_total", operation="complete") == 1


def test_a_retried_unit_is_counted_by_its_error_code(wf, cut_connection):
    delta = Delta(wf.client)
    cut_connection("send_signal")
    assert wf.send("order-1", "k1", payment()).status_code == 201
    assert delta("weave_db_retries_total", code="2013") == 1


def test_the_pool_reports_its_size_and_open_connections(migrated_url):
    pool = Database(migrated_url, pool_size=3)

    def scraped(metric: str) -> float:
        return REGISTRY.get_sample_value(metric, {"database": migrated_url.database}) or 0.0

    before = {metric: scraped(metric) for metric in ("weave_db_pool_connections", "weave_db_connections_opened_total")}
    pool.run(lambda tx: pool.ping())  # a second connection while the first is held
    assert scraped("weave_db_pool_connections") - before["weave_db_pool_connections"] == 2
    assert scraped("weave_db_connections_opened_total") - before["weave_db_connections_opened_total"] == 2
    pool.close()
    assert scraped("weave_db_pool_connections") == before["weave_db_pool_connections"]
    assert scraped("weave_db_pool_max_connections") >= 32 + 3


def test_a_checkout_that_waits_for_a_free_connection_is_counted(migrated_url):
    pool = Database(migrated_url, pool_size=1)

    def waits() -> float:
        return REGISTRY.get_sample_value("weave_db_pool_waits_total", {"database": migrated_url.database}) or 0.0

    before = waits()
    holding, release = threading.Event(), threading.Event()

    def hold(tx):
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=pool.run, args=(hold,))
    holder.start()
    holding.wait(10)
    threading.Timer(0.2, release.set).start()
    pool.ping()  # waits until the holder is done
    holder.join()
    assert waits() - before == 1
    pool.close()


def test_the_scanner_counts_batches_candidates_decisions_failures_backoffs_and_expired_leases(
    flow, database, clock, monkeypatch
):
    def recorded(name: str, **labels) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    counted = [
        ("weave_scanner_batches_total", {}),
        ("weave_scanner_batch_duration_seconds_count", {}),
        ("weave_scanner_candidates_total", {"source": "checkpoint"}),
        ("weave_scanner_decisions_total", {"kind": "ACTIVATED"}),
        ("weave_scanner_failures_total", {"source": "checkpoint"}),
        ("weave_scanner_backoffs_total", {"source": "checkpoint"}),
        ("weave_scanner_leases_expired_total", {"decision": "REQUEUE"}),
    ]
    before = [recorded(name, **labels) for name, labels in counted]
    flow.publish(task_steps("a"))
    flow.start("w-1")
    flow.start("w-2")
    poisoned = flow.rows("SELECT id FROM instances WHERE workflow_id = 'w-2'")[0]["id"]
    real_activate = moves.activate

    def activate(tx, instance, *args):
        if instance["id"] == poisoned:
            tx.execute("SELECT no_such_column FROM instances")  # a real SQL error (1054)
        return real_activate(tx, instance, *args)

    monkeypatch.setattr(moves, "activate", activate)
    report = Scanner(database).run_once()  # w-1 is activated, w-2 fails and is backed off
    assert (report.candidates, report.done, report.failed) == (2, 1, 1)
    assert flow.claim(lease_seconds=1).status_code == 200
    monkeypatch.setattr(moves, "activate", real_activate)
    clock.advance(2)
    report = Scanner(database).run_once()  # w-2 is due again and activated; w-1's lease expired
    assert (report.leases, report.done) == ({"REQUEUE": 1}, 1)
    after = [recorded(name, **labels) for name, labels in counted]
    assert [round(a - b) for a, b in zip(after, before)] == [2, 2, 3, 2, 1, 1, 1]


# ---- the backlog: read from the database when scraped ------------------------------------------------


def test_lag_is_the_age_of_the_oldest_due_candidate_of_each_source(wf, database, clock):
    """A started workflow's ROOT checkpoint is due at once, a task's outcome when the task
    completed, an early signal's expiry at the instance's deadline."""
    assert database.read(backlog)["lag_seconds"] == {
        "inbox": 0.0,
        "checkpoint": 0.0,
        "signal_expiry": 0.0,
        "fact_expiry": 0.0,
    }
    clock.advance(30)
    assert database.read(backlog)["lag_seconds"]["checkpoint"] == 30.0
    scraped = scrape(wf.client)
    assert value(scraped, "weave_scanner_lag_seconds", source="checkpoint") == 30.0
    assert value(scraped, "weave_scanner_lag_seconds", source="inbox") == 0.0
    wf.scan()
    assert database.read(backlog)["lag_seconds"]["checkpoint"] == 0.0
    wf.complete(wf.claim().json, result={})
    clock.advance(2)
    figures = database.read(backlog, count_due=True)
    assert figures["lag_seconds"] == {"inbox": 2.0, "checkpoint": 0.0, "signal_expiry": 0.0, "fact_expiry": 0.0}
    assert figures["due"] == {"inbox": 1, "checkpoint": 0, "signal_expiry": 0, "fact_expiry": 0}
    wf.scan()
    wf.start("order-2", input={"order_id": "o-2"}, deadline_seconds=60)  # not scanned: its step never waits
    assert wf.send("order-2", "early", payment("o-2")).json["status"] == "PENDING"
    clock.advance(65)
    figures = database.read(backlog, count_due=True)
    assert figures["lag_seconds"]["signal_expiry"] == 5.0
    assert figures["due"]["signal_expiry"] == 1


def test_N2_notifications_counted_by_event_and_outcome_oldest_undelivered_and_failing_subscriptions(
    client, database, clock
):
    from notifying import KEYRING, Receiver, enqueue, subscribe

    from weave.delivery import Deliveries

    pool = Deliveries(database, KEYRING, 2, True)
    delta = Delta(client)
    try:
        with Receiver(answers=[500]) as failing, Receiver() as answering:
            stuck = subscribe(database, failing.url, name="failing")
            enqueue(database, stuck, event="workflow.failed")
            enqueue(database, subscribe(database, answering.url, name="fine"), event="workflow.succeeded")
            clock.advance(7)
            scanner = Scanner(database, deliveries=pool)
            scanner.run_once()
            assert pool.wait_idle(10)
    finally:
        pool.close()
    assert delta("weave_notifications_total", event="workflow.succeeded", outcome="delivered") == 1
    assert delta("weave_notifications_total", event="workflow.failed", outcome="failed") == 1
    scraped = scrape(client)
    assert value(scraped, "weave_notifications_oldest_undelivered_seconds") == 7.0  # the failed one waits
    assert value(scraped, "weave_notify_subscriptions_failing") == 1
    assert database.read(backlog)["notifications"] == {"oldest_undelivered_seconds": 7.0, "failing_subscriptions": 1}


def test_workflows_in_review_are_counted_by_namespace(flow, database, other_tenant):
    flow.publish(signal_flow_definition())
    rows = [("r-1", "NEEDS_REVIEW", "a task failed"), ("r-2", "NEEDS_REVIEW", "expired"), ("ok", "RUNNING", None)]
    insert_instances(database, "acme", "flow", 1, rows)
    assert database.read(backlog)["needs_review"] == {"acme": 2, "globex": 0}
    # One total: /metrics needs no token, and namespace names are the tenants'.
    assert value(scrape(flow.client), "weave_workflows_needs_review") == 2


def test_L1_purged_instances_are_counted_and_the_purge_lag_is_the_age_past_retention(flow, database, clock):
    """weave_purge_lag_seconds: how long ago the retention of the oldest ended instance still stored
    passed; weave_purged_instances_total: the instances a purge removed."""
    from test_retention import signal_instance

    from weave.scanner import LIFECYCLE
    from weave.sql import retention

    flow.publish(signal_flow_definition())
    signal_instance(flow, "w-1")
    retention.set_retention(database, "acme", 1)
    assert database.read(backlog)["purge_lag_seconds"] == 0.0
    clock.advance(30, days=1)
    before = scrape(flow.client)
    assert value(before, "weave_purge_lag_seconds") == 30.0
    Scanner(database, sources=LIFECYCLE).run_once()
    after = scrape(flow.client)
    assert value(after, "weave_purged_instances_total") == value(before, "weave_purged_instances_total") + 1
    assert database.read(backlog)["purge_lag_seconds"] == 0.0


def test_a_database_that_does_not_answer_leaves_the_backlog_out_of_the_scrape():
    def unreachable():
        raise ConnectionRefusedError

    registry = metrics.CollectorRegistry()
    registry.register(metrics.Backlog(unreachable))
    assert list(registry.collect()) == []


# ---- the backlog is read at most once a second (issue 26, item 9) ----------------------------------


class Statements:
    """Counts the statements this process sends to the database (every connection's cursor)."""

    def __init__(self, monkeypatch):
        self.count = 0
        self._lock = threading.Lock()
        execute = DictCursor.execute

        def counted(cursor, *args, **kwargs):
            with self._lock:
                self.count += 1
            return execute(cursor, *args, **kwargs)

        monkeypatch.setattr(DictCursor, "execute", counted)


def test_issue_26_9_concurrent_scrapes_read_the_backlog_at_most_once_a_second(live_url, monkeypatch, wf, database):
    """200 scrapes from 8 clients at once, on a real server of 8 threads: each has the backlog, and
    the database was asked for it at most once per second they took, not 200 times."""
    port = int(live_url.rsplit(":", 1)[1])
    statements = Statements(monkeypatch)
    database.attempt(backlog)
    per_read, statements.count = statements.count, 0  # the candidate sources' reads, the review count, ROLLBACK
    lags = []

    def scrapes():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        for _ in range(25):
            conn.request("GET", "/metrics")
            scraped = parse(conn.getresponse().read().decode())
            lags.append(value(scraped, "weave_scanner_lag_seconds", source="checkpoint"))
        conn.close()

    started = time.monotonic()
    clients = [threading.Thread(target=scrapes) for _ in range(8)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    seconds = time.monotonic() - started
    print(f"200 scrapes in {seconds:.2f} s: {statements.count} statements ({per_read} per read of the backlog)")
    assert len(lags) == 200 and all(lag == 0.0 for lag in lags)  # order-1's checkpoint is due now: lag 0
    assert statements.count <= per_read * (math.floor(seconds / metrics.BACKLOG_MAX_AGE_SECONDS) + 1)


def test_issue_26_9_the_backlog_is_read_anew_once_a_second_old_one_read_at_a_time():
    now = [100.0]
    reads = []
    release = threading.Event()

    def read():
        reads.append(now[0])
        release.wait(10)
        return {"lag_seconds": {"inbox": float(len(reads))}, "needs_review": {}}

    backlog = metrics.Backlog(read, clock=lambda: now[0])
    scrapes = [threading.Thread(target=lambda: list(backlog.collect())) for _ in range(5)]
    for scrape_ in scrapes:
        scrape_.start()
    wait_until(lambda: reads, timeout=5)
    time.sleep(0.1)  # the other four scrapes wait for that read, none starts its own
    release.set()
    for scrape_ in scrapes:
        scrape_.join(10)
    assert reads == [100.0]

    def lag() -> float:
        return next(family for family in backlog.collect() if family.name == metrics.LAG).samples[0].value

    now[0] += 0.9
    assert lag() == 1.0 and len(reads) == 1  # read 0.9 s ago: the same figures
    now[0] += 0.1
    assert lag() == 2.0 and reads == [100.0, 101.0]


def test_issue_26_9_a_database_that_does_not_answer_is_asked_once_a_second_not_per_scrape():
    now = [0.0]
    attempts = []

    def unreachable():
        attempts.append(now[0])
        raise ConnectionRefusedError

    backlog = metrics.Backlog(unreachable, clock=lambda: now[0])
    assert list(backlog.collect()) == [] and list(backlog.collect()) == []
    now[0] += 1.0
    assert list(backlog.collect()) == []
    assert attempts == [0.0, 1.0]


def test_issue_26_9_scrapes_that_come_together_share_one_rendering_begun_after_they_came():
    """One scrape renders while four arrive: they wait for the next rendering (theirs must begin
    after they came, so that it counts everything before them) and share it; a scrape alone gets
    its own."""
    renderings = []
    release = threading.Event()

    class Renderings:  # a collector whose one figure is how often it was collected
        def collect(self):
            renderings.append(threading.get_ident())
            if len(renderings) == 1:
                release.wait(10)
            yield GaugeMetricFamily("renderings", "renderings so far", value=len(renderings))

    exposed = metrics.CollectorRegistry()
    exposed.register(Renderings())
    exposition = metrics.Exposition(exposed)
    texts: dict[str, bytes] = {}

    def scrape_as(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: texts.__setitem__(name, exposition.text()))
        thread.start()
        return thread

    first = scrape_as("first")
    wait_until(lambda: renderings, timeout=5)
    together = [scrape_as(f"together-{i}") for i in range(4)]
    time.sleep(0.1)  # they wait: none renders while the first does
    release.set()
    for thread in [first, *together]:
        thread.join(10)
    assert len(renderings) == 2
    assert value(parse(texts.pop("first").decode()), "renderings") == 1
    assert {value(parse(text.decode()), "renderings") for text in texts.values()} == {2}
    assert value(parse(exposition.text().decode()), "renderings") == 3


def test_every_metric_api_processes_record_has_labels():
    """Multiprocess mode is chosen after import (weave.metrics.use_multiprocess)."""
    assert all(metric._labelnames for metric in metrics.API_METRICS)


# ---- real processes: `weave serve --processes 2`, `weave scan --metrics-port P` ------------------------


def call(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, object, dict]:
    """One request on a new connection (so that the kernel spreads them over the API processes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
        response = conn.getresponse()
        data = response.read().decode()
        is_json = response.getheader("Content-Type", "").startswith("application/")
        return response.status, json.loads(data) if is_json and data else data, dict(response.getheaders())
    finally:
        conn.close()


def scrape_port(port: int) -> dict:
    status, text, _ = call(port, "GET", "/metrics")
    assert status == 200
    return parse(text)


def admin(url, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
    return subprocess.run(
        [sys.executable, "-m", "weave.cli", "admin", *args], env=env, capture_output=True, text=True, timeout=60
    )


def workers_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
def test_two_api_processes_count_every_request_and_log_no_secret(flow, migrated_url, database, clock, tmp_path):
    """Done-when of issue 15: real traffic through `weave serve --processes 2`; every scrape, whichever
    process answers it, counts the requests of both; after a worker is killed and replaced, its
    counts still count; the metric files go with the server. Every log line of the run (the admin command that made the credential, the
    API) is JSON and holds no token, token hash or payload."""
    use_real_time(database, clock)
    flow.publish(signal_flow_definition())
    created = admin(
        migrated_url, "credential", "create", "acme", "app", "--actor", "webhook", "--json",
        *("--scope", "workflows:start", "--scope", "workflows:signal", "--queue", "inventory", "--queue", "carrier"),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    marker = "payload-marker-7f3a"
    log_path = tmp_path / "serve.log"
    with (
        log_path.open("w") as log,
        weave_serve(migrated_url, "--processes", "2", "--threads", "4", stderr=log) as (
            parent,
            port,
        ),
    ):
        wait_until(lambda: len(workers_of(parent.pid)) == 2, timeout=20)
        for i in range(10):
            body = {"definition": "flow", "version": 1, "input": {"order_id": f"o-{i}"}, "deadline_seconds": 3600}
            status, started, _ = call(
                port, "POST", "/v1/namespaces/acme/workflows", {**body, "workflow_id": f"w-{i}"}, headers
            )
            assert status == 201, started
        for i in range(20):
            signal_body = payment(f"o-{i % 10}", payload={"amount": 1, "note": marker})
            keyed = {**headers, "Idempotency-Key": f"k-{i}", "X-Request-Id": f"trace-{i}"}
            status, receipt, answer = call(
                port, "POST", f"/v1/namespaces/acme/workflows/w-{i % 10}/signals", signal_body, keyed
            )
            assert (status, receipt["status"], answer["X-Request-Id"]) == (201, "PENDING", f"trace-{i}")
        replay = {**headers, "Idempotency-Key": "k-0"}
        assert (
            call(
                port,
                "POST",
                "/v1/namespaces/acme/workflows/w-0/signals",
                payment("o-0", payload={"amount": 1, "note": marker}),
                replay,
            )[0]
            == 201
        )
        wrong = {**headers, "Authorization": f"Bearer {token[:-4]}AAAA", "Idempotency-Key": "k-x"}
        assert call(port, "POST", "/v1/namespaces/acme/workflows/w-0/signals", payment(), wrong)[0] == 401

        def counts(scraped: dict) -> dict:
            return {
                "accepted": value(scraped, "weave_signal_requests_total", outcome="accepted"),
                "replayed": value(scraped, "weave_signal_requests_total", outcome="replayed"),
                "stored": value(scraped, "weave_signals_accepted_total", status="PENDING", disposition="none"),
                "201": value(scraped, "weave_http_requests_total", route=SIGNALS, method="POST", status="201"),
                "401": value(scraped, "weave_http_requests_total", route=SIGNALS, method="POST", status="401"),
                "timed": value(scraped, "weave_http_request_duration_seconds_count", route=SIGNALS, method="POST"),
                "started": value(scraped, "weave_http_requests_total", route="/v1/namespaces/{namespace}/workflows", method="POST", status="201"),
                "pool": value(scraped, "weave_db_pool_max_connections", database=migrated_url.database),
            }  # fmt: skip

        expected = {"accepted": 20, "replayed": 1, "stored": 20, "201": 21, "401": 1, "timed": 22, "started": 10}
        for _ in range(6):  # on new connections: both processes answer some of them
            assert counts(scrape_port(port)) == {**expected, "pool": 2 * (4 + 4)}
        first, second = workers_of(parent.pid)
        (directory,) = {path.parent for path in Path(tempfile.gettempdir()).glob(f"weave-metrics-*/counter_{first}.db")}
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(workers := workers_of(parent.pid)) == 2 and first not in workers, timeout=20)
        # The replacement's pool exists once it has started: the dead worker's gauge no longer counts.
        wait_until(lambda: counts(scrape_port(port))["pool"] == 2 * (4 + 4), timeout=20)
        for _ in range(4):
            assert counts(scrape_port(port)) == {**expected, "pool": 2 * (4 + 4)}
    assert parent.returncode == 0 and not directory.exists()  # stopped by SIGTERM: its files are gone
    lines = created.stderr.splitlines() + log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    requests = [r for r in records if r["logger"] == "weave.access" and r["route"] == SIGNALS]
    assert len(requests) == 22
    assert len({r["pid"] for r in requests}) == 2  # both processes served signals
    traced = next(r for r in requests if r.get("request_id") == "trace-7")
    assert {k: traced[k] for k in ("method", "status", "namespace", "actor")} == {
        "method": "POST",
        "status": 201,
        "namespace": "acme",
        "actor": "webhook",
    }
    assert traced["duration_ms"] > 0 and traced["time"].endswith("Z")
    refused = next(r for r in requests if r["status"] == 401)
    assert (refused["namespace"], refused["actor"]) == ("acme", None)
    digest = hashlib.sha256(token.encode()).digest()
    secrets = [token, token[3:], token[:-4], digest.hex(), base64.b64encode(digest).decode(), marker]
    text = "\n".join(lines)
    assert [secret for secret in secrets if secret in text] == []


@pytest.mark.slow
def test_the_lag_rises_while_no_scanner_runs_and_falls_once_one_caught_up(flow, migrated_url, database, clock, config):
    """Done-when of issue 15: with the scanner stopped, the lag the API reports grows with the
    oldest due checkpoint's age; `weave scan --metrics-port P` processes the backlog, and then its
    endpoint and the API's both report no lag, and the scanner's counters say what it did."""
    use_real_time(database, clock)
    flow.publish(task_steps("a"))
    with weave_serve(migrated_url) as (_, port):
        token = flow.tenant.token("workflows:start", queues=("inventory",))
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for i in range(5):
            body = {"definition": "flow", "version": 1, "input": {}, "deadline_seconds": 3600, "workflow_id": f"w-{i}"}
            assert call(port, "POST", "/v1/namespaces/acme/workflows", body, headers)[0] == 201

        def lag(scraped: dict) -> float:
            return value(scraped, "weave_scanner_lag_seconds", source="checkpoint")

        first = lag(scrape_port(port))
        time.sleep(1.5)
        second = lag(scrape_port(port))
        assert second >= first + 1.4, (first, second)
        metrics_port = free_port()
        scanner = scanner_process(config, "--metrics-port", str(metrics_port))
        try:
            wait_until(
                lambda: scanner_says(metrics_port, "weave_scanner_decisions_total", kind="ACTIVATED") == 5, timeout=30
            )
            wait_until(lambda: lag(scrape_port(metrics_port)) == 0.0, timeout=30)
            scraped = scrape_port(metrics_port)
            assert value(scraped, "weave_scanner_candidates_total", source="checkpoint") == 5
            assert value(scraped, "weave_scanner_batches_total") >= 1
            assert value(scraped, "weave_scanner_lag_seconds", source="inbox") == 0.0
            # The API read its backlog at most a second ago (issue 26, item 9): within a second more, no lag.
            wait_until(lambda: lag(scrape_port(port)) == 0.0, timeout=1 + metrics.BACKLOG_MAX_AGE_SECONDS)
        finally:
            scanner.send_signal(signal.SIGTERM)
            _, err = scanner.communicate(timeout=30)
    assert scanner.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines()]
    assert lines[0]["message"] == f"metrics on http://127.0.0.1:{metrics_port}/metrics"
    assert sum(line["done"] for line in lines if line.get("event") == "scan_batch") == 5


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_issue_26_9_weave_serve_metrics_port_serves_metrics_for_every_process_and_the_api_port_none(
    migrated_url, database, processes
):
    """`weave serve [--processes 2] --metrics-port P`: /metrics on P, whichever process answers,
    sums every process's requests and has the backlog; the API's port answers /metrics 404 like
    any path it does not serve."""
    metrics_port = free_port()
    with weave_serve(
        migrated_url,
        *("--processes", str(processes), "--threads", "4", "--metrics-port", str(metrics_port)),
        stderr=subprocess.PIPE,
    ) as (parent, port):
        if processes > 1:
            wait_until(lambda: len(workers_of(parent.pid)) == processes, timeout=20)
        for _ in range(10):
            assert call(port, "GET", "/healthz")[0] == 200
        status, problem, _ = call(port, "GET", "/metrics")
        assert (status, problem["code"]) == (404, "NOT_FOUND")
        for _ in range(6):  # on new connections: both processes answer some of them
            scraped = scrape_port(metrics_port)
            assert value(scraped, "weave_http_requests_total", route="/healthz", method="GET", status="200") == 10
            assert value(scraped, "weave_http_requests_total", route="unrouted", method="GET", status="404") == 1
            assert ("weave_scanner_lag_seconds", (("source", "inbox"),)) in scraped
        parent.terminate()
        _, err = parent.communicate(timeout=20)
    announced = [json.loads(line)["message"] for line in err.decode().splitlines()]
    assert announced.count(f"metrics on http://127.0.0.1:{metrics_port}/metrics") == processes  # one line each


def scanner_says(port: int, name: str, **labels) -> float:
    try:
        return value(scrape_port(port), name, **labels)
    except OSError:  # not listening yet
        return -1.0


def test_B8_each_item_of_a_batch_is_counted_as_its_single_send(wf):
    delta = Delta(wf.client)
    items = [
        {"workflow_id": "order-1", "idempotency_key": key, **payment(**overrides)}
        for key, overrides in (("k1", {}), ("k2", {}), ("k1", {}), ("k1", {"reason": "other"}), ("k3", {"sequence": 2}))
    ]
    items.append({"idempotency_key": "f1", **payment("o-9", target_step_key=ABSENT, target_activation_sequence=ABSENT)})
    answer = wf.client.simulate_post(f"{wf.ns}/signal-batches", json={"signals": items}, headers=wf.signaller)
    assert [r["status"] for r in answer.json["results"]] == [201, 201, 201, 409, 409, 201]
    assert delta("weave_signal_requests_total", outcome="accepted") == 3
    assert delta("weave_signal_requests_total", outcome="replayed") == 1
    assert delta("weave_signal_requests_total", outcome="IDEMPOTENCY_CONFLICT") == 1
    assert delta("weave_signal_requests_total", outcome="ACTIVATION_NOT_FOUND") == 1
    assert delta("weave_signals_accepted_total", status="PENDING", disposition="none") == 2
    assert delta("weave_signals_routed_total", route="PARKED") == 1
    assert (
        delta(
            "weave_http_requests_total", route="/v1/namespaces/{namespace}/signal-batches", method="POST", status="200"
        )
        == 1
    )
