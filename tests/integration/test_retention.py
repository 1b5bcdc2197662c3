"""Retention and purge (docs/rules.md#lifecycle, L1 and L3): instances of every kind and state,
every table counted before and after a purge; chunks cut mid-way; two scanners at once; the audit
retention; the command and the backlog."""

import threading
import time

import pytest
from helpers import payment, signal_flow_definition, task_steps
from test_poll import final_signal, poll_definition
from test_routing import fact, route

from weave import jsontext
from weave.db import connect
from weave.errors import WeaveError
from weave.scanner import LIFECYCLE, Scanner, backlog, lifecycle
from weave.sql import retention

RETENTION_DAYS = 3

# Every table is either owned by instances (and facts): a purge removes their rows; or shared:
# tenancy, definitions, the audit (which has its own retention), the scanners' bookkeeping. A
# table that is neither fails the count test until it is sorted here.
OWNED = (
    "instances",
    "step_activations",
    "waits",
    "signals",
    "tasks",
    "inbox_events",
    "checkpoints",
    "events",
    "notifications",
    "notification_attempts",
)
SHARED = {
    "namespaces",
    "applications",
    "queues",
    "credentials",
    "credential_queue_grants",
    "definitions",
    "audit_records",
    "signal_quota_windows",
    "console_sessions",
    "route_locks",
    "scanner_processes",
    "inbound_sources",
    "inbound_secrets",
    "inbound_deliveries",
    "notify_subscriptions",
}
# The rows of some instances, table by table (by their keys: each table's rows are those of the
# instance, or of its tasks, or of its notifications).
ROWS_OF = {
    "instances": "SELECT id FROM instances WHERE id IN %s",
    "notification_attempts": "SELECT a.id FROM notification_attempts a JOIN notifications n"
    " ON n.id = a.notification_id WHERE n.instance_id IN %s",
    "inbox_events": "SELECT e.id FROM inbox_events e JOIN tasks t ON t.id = e.task_id WHERE t.instance_id IN %s",
}


def rows_of(database, table: str, instance_ids: tuple) -> set[int]:
    sql = ROWS_OF.get(table, f"SELECT id FROM {table} WHERE instance_id IN %s")
    return {row["id"] for row in database.run(lambda tx: tx.all(sql, (instance_ids,)))}


def every_row(database, tables) -> dict[str, set[int]]:
    """The keys of every row of every owned table."""
    return {
        table: {row["id"] for row in database.run(lambda tx: tx.all(f"SELECT id FROM {table}"))} for table in tables
    }


def tables_with_instance_id(database) -> list[str]:
    return [
        row["t"]
        for row in database.run(
            lambda tx: tx.all(
                "SELECT table_name AS t FROM information_schema.columns WHERE table_schema = DATABASE()"
                " AND column_name = 'instance_id'"
            )
        )
    ]


# ---- building instances of every kind and state ------------------------------------------------------


def control(flow, workflow_id: str, action: str):
    headers = flow.tenant.headers("workflows:control", "workflows:read", queues=("inventory", "carrier"))
    answer = flow.client.simulate_post(
        f"{flow.ns}/workflows/{workflow_id}/{action}", json={"reason": "test"}, headers=headers
    )
    assert answer.status_code == 200, answer.text


def signal_instance(flow, workflow_id: str, finish: bool = True) -> None:
    """reserve (TASK) done, a signal refused (another order), the payment consumed, ship done."""
    order = f"o-{workflow_id}"
    flow.start(workflow_id, definition="flow", input={"order_id": order})
    flow.scan()
    flow.finish_task()
    assert flow.send(workflow_id, f"{workflow_id}-bad", payment("another")).status_code == 201
    if finish:
        send_payment(flow, workflow_id)
        flow.scan()
        flow.finish_task(queue="carrier")


def send_payment(flow, workflow_id: str) -> None:
    sent = flow.send(workflow_id, f"{workflow_id}-ok", payment(f"o-{workflow_id}"))
    assert sent.status_code == 201, sent.text


def task_instance(flow, clock, workflow_id: str, finish: bool = True) -> None:
    """One TASK step whose first attempt's lease expired (two attempts), then done."""
    flow.start(workflow_id, definition="tasks")
    flow.scan()
    assert flow.claim(lease_seconds=1).status_code == 200
    clock.advance(2)
    flow.scan()  # the lease expired: queued again, after a backoff
    clock.advance(10)
    if finish:
        flow.finish_task()


def poll_instance(flow, workflow_id: str, finish: bool = True) -> None:
    """A POLL step: one PENDING round, then the final signal; then its TASK step done."""
    order = f"o-{workflow_id}"
    flow.start(workflow_id, definition="track", input={"order_id": order})
    flow.scan()
    claimed = flow.claim("carrier")
    assert claimed.status_code == 200, claimed.text
    assert flow.complete(claimed.json, result={"state": "PENDING"}).status_code == 200
    flow.scan()
    if finish:
        sent = flow.send(workflow_id, f"{workflow_id}-final", final_signal(key=order))
        assert sent.status_code == 201, sent.text
        flow.scan()
        flow.finish_task()


def notify_rows(database, instance_ids) -> None:
    """Two notifications per instance (one delivered, one dropped: settled, so the purge does not
    wait for them), one attempt each (migration 0021)."""

    def insert(tx):
        now = tx.now()
        for instance_id in instance_ids:
            for status in ("DELIVERED", "DROPPED"):
                notification = tx.insert(
                    "INSERT INTO notifications (subscription_id, namespace_id, instance_id, event_type, webhook_id,"
                    " occurred_at, body, status, due_at, attempts) SELECT 1, namespace_id, id, 'workflow.succeeded',"
                    " CONCAT('msg_', id, %s), %s, '{}', %s, IF(%s = 'PENDING', %s, NULL), 1 FROM instances WHERE id = %s",
                    (status, now, status, status, now, instance_id),
                )
                tx.execute(
                    "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, duration_ms)"
                    " VALUES (%s, %s, 500, 3)",
                    (notification, now),
                )

    database.run(insert)


def instance_ids(flow, *workflow_ids: str) -> tuple:
    rows = flow.rows("SELECT id FROM instances WHERE workflow_id IN %s ORDER BY id", (workflow_ids,))
    return tuple(row["id"] for row in rows)


@pytest.fixture
def zoo(flow, clock, database):
    """Instances of every kind and state, facts of no instance, notifications; the namespace keeps
    ended instances RETENTION_DAYS days. Returns the workflow ids by what a purge must do."""
    flow.publish(signal_flow_definition())
    flow.publish({**poll_definition(), "name": "track"})
    flow.publish({**task_steps("work"), "name": "tasks"})
    # ended long ago: purged
    signal_instance(flow, "sig-ok")
    task_instance(flow, clock, "task-ok")
    poll_instance(flow, "poll-ok")
    signal_instance(flow, "sig-failed")
    poll_instance(flow, "poll-cancelled")
    flow.database.run(
        lambda tx: tx.execute("UPDATE instances SET status = 'FAILED' WHERE workflow_id IN ('sig-failed')")
    )
    flow.database.run(
        lambda tx: tx.execute("UPDATE instances SET status = 'CANCELLED' WHERE workflow_id IN ('poll-cancelled')")
    )
    assert route(flow, "fact-old", fact("nobody-waits", park_seconds=60)).json["route"] == "PARKED"
    clock.advance(61)
    flow.scan()  # the fact expires unrouted (B5)
    clock.advance(days=2)
    # ended within retention: kept
    signal_instance(flow, "sig-recent")
    # not ended: kept whatever their age
    signal_instance(flow, "sig-running", finish=False)  # a WAITING wait
    task_instance(flow, clock, "task-paused", finish=False)
    control(flow, "task-paused", "pause")
    poll_instance(flow, "poll-review", finish=False)
    flow.database.run(
        lambda tx: tx.execute("UPDATE instances SET status = 'NEEDS_REVIEW' WHERE workflow_id = 'poll-review'")
    )
    send_payment(flow, "sig-running")  # PENDING: no scan runs after it
    assert route(flow, "fact-parked", fact("still-nobody", park_seconds=30 * 86_400)).json["route"] == "PARKED"
    notify_rows(database, instance_ids(flow, "sig-ok", "task-ok", "poll-ok", "sig-recent", "sig-running"))
    # an ended instance's look still due (a WAIT look of a wait it left, say): a checkpoint row
    flow.database.run(
        lambda tx: tx.execute(
            "INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, created_at)"
            " SELECT id, 'ROOT', NULL, deadline_at, deadline_at, created_at FROM instances WHERE workflow_id = 'sig-failed'"
        )
    )
    retention.set_retention(database, "acme", RETENTION_DAYS)
    clock.advance(1, days=1)
    return {
        "purged": ("sig-ok", "task-ok", "poll-ok", "sig-failed", "poll-cancelled"),
        "kept": ("sig-recent", "sig-running", "task-paused", "poll-review"),
    }


def purge_all(database, rounds: int = 50) -> list[dict]:
    """Run the lifecycle sources until a batch finds nothing; the batch reports."""
    scanner = Scanner(database, sources=LIFECYCLE)
    reports = []
    for _ in range(rounds):
        report = scanner.run_once()
        reports.append(report)
        if not report.candidates:
            return reports
    raise AssertionError("the purge kept finding work")


def test_L1_L3_a_purge_removes_every_row_of_ended_instances_past_retention_and_none_of_the_others(
    zoo, flow, database, weave_tables
):
    assert set(weave_tables) == set(OWNED) | SHARED, "sort the new table into OWNED or SHARED"
    doomed, kept = instance_ids(flow, *zoo["purged"]), instance_ids(flow, *zoo["kept"])
    before = every_row(database, OWNED)
    doomed_rows = {table: rows_of(database, table, doomed) for table in OWNED}
    each = {i: {table: len(rows_of(database, table, (i,))) for table in OWNED} for i in doomed}
    kept_rows = {table: rows_of(database, table, kept) for table in OWNED}
    old_fact = {flow.rows("SELECT id FROM signals WHERE route_key = 'fact-old' AND status = 'EXPIRED'")[0]["id"]}
    # the zoo has rows in every owned table, for purged and for kept instances alike
    assert [table for table in OWNED if not doomed_rows[table]] == []
    assert [table for table in OWNED if not kept_rows[table]] == []

    purge_all(database)

    after = every_row(database, OWNED)
    for table in OWNED:
        gone = doomed_rows[table] | (old_fact if table == "signals" else set())
        assert after[table] == before[table] - gone, table
    for table in tables_with_instance_id(database):
        if table != "audit_records":  # L1: audit records stay (their own retention)
            assert not rows_of(database, table, doomed), table
    statuses = {row["workflow_id"]: row["status"] for row in flow.rows("SELECT workflow_id, status FROM instances")}
    assert statuses == {
        "sig-recent": "SUCCEEDED",
        "sig-running": "RUNNING",
        "task-paused": "PAUSED",
        "poll-review": "NEEDS_REVIEW",
    }
    assert [row["route_key"] for row in flow.rows("SELECT route_key FROM signals WHERE instance_id IS NULL")] == [
        "fact-parked"
    ]
    # L3: one record per purged instance, with the rows it removed, table by table
    records = flow.rows(
        "SELECT instance_id, details FROM audit_records WHERE action = 'workflow.purged' ORDER BY instance_id"
    )
    assert [row["instance_id"] for row in records] == list(doomed)
    for row in records:
        details = jsontext.loads(row["details"])
        assert details["rows"] == {table: n for table, n in each[row["instance_id"]].items() if n}
        assert details["workflow_id"] in zoo["purged"] and details["ended_at"]


# ---- one instance, purged in chunks --------------------------------------------------------------------


@pytest.fixture
def ended(flow, clock, database):
    """Two SUCCEEDED signal-flow instances with a few dozen rows each; retention 0 days."""
    flow.publish(signal_flow_definition())
    for workflow_id in ("w-1", "w-2"):
        signal_instance(flow, workflow_id)
    retention.set_retention(database, "acme", 0)
    return instance_ids(flow, "w-1")[0]


def rows_left(database, instance_id: int) -> dict[str, int]:
    return {table: n for table in OWNED if (n := len(rows_of(database, table, (instance_id,))))}


def purged_records(flow) -> list[dict]:
    rows = flow.rows("SELECT instance_id, details FROM audit_records WHERE action = 'workflow.purged' ORDER BY id")
    return [{"instance_id": row["instance_id"], **jsontext.loads(row["details"])} for row in rows]


def test_L1_retention_0_purges_an_ended_instance_at_the_next_pass(ended, flow, database):
    reports = purge_all(database)
    assert reports[0].by_source == {"purge": 2}
    assert flow.rows("SELECT id FROM instances") == []
    assert len(purged_records(flow)) == 2


def test_L1_a_retention_of_forever_keeps_everything_and_days_keep_until_they_passed(ended, flow, database, clock):
    retention.set_retention(database, "acme", None)
    assert purge_all(database)[0].candidates == 0
    retention.set_retention(database, "acme", 1)
    clock.advance(86_399)
    assert purge_all(database)[0].candidates == 0
    assert len(flow.rows("SELECT id FROM instances")) == 2
    clock.advance(1)
    purge_all(database)
    assert flow.rows("SELECT id FROM instances") == []


def test_L3_a_purge_cut_between_chunks_resumes_to_the_same_end_with_one_record_and_the_whole_count(
    ended, flow, database
):
    whole = rows_left(database, ended)
    assert sum(whole.values()) > 20
    assert retention.purge_instance(database, ended, chunk_rows=3) == retention.PURGING
    left = rows_left(database, ended)
    stored = jsontext.loads(flow.rows("SELECT purge_counts FROM instances WHERE id = %s", (ended,))[0]["purge_counts"])
    assert stored == {table: whole[table] - left.get(table, 0) for table in whole if whole[table] > left.get(table, 0)}
    assert 0 < sum(stored.values()) <= 3 * len(OWNED) and left  # one chunk went, at most 3 rows a table
    # the process dies here; a later pass (another process, a bigger chunk) goes on from there
    decisions = []
    while not decisions or decisions[-1] != retention.PURGED:
        decisions.append(retention.purge_instance(database, ended, chunk_rows=2))
    assert set(decisions[:-1]) == {retention.PURGING}
    assert rows_left(database, ended) == {}
    (record,) = [r for r in purged_records(flow) if r["instance_id"] == ended]
    assert record["rows"] == whole
    assert retention.purge_instance(database, ended) is None  # idempotent: nothing left to do


def test_L3_two_scanners_purging_one_instance_at_once_count_each_row_once(ended, flow, database):
    whole = rows_left(database, ended)
    decisions: list = []

    def purge():
        for _ in range(200):
            decision = retention.purge_instance(database, ended, chunk_rows=3)
            decisions.append(decision)
            if not flow.rows("SELECT id FROM instances WHERE id = %s", (ended,)):
                return

    threads = [threading.Thread(target=purge) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert decisions.count(retention.PURGED) == 1
    (record,) = [r for r in purged_records(flow) if r["instance_id"] == ended]
    assert record["rows"] == whole
    assert rows_left(database, ended) == {}


def test_L1_an_instance_whose_task_still_runs_is_purged_once_the_task_ended(flow, database, clock):
    flow.publish({**task_steps("work"), "name": "tasks"})
    flow.start("w-1", definition="tasks")
    flow.scan()
    claimed = flow.claim(lease_seconds=60)
    control(flow, "w-1", "cancel")  # the running task is asked to stop (P5); it holds its permit
    retention.set_retention(database, "acme", 0)
    assert Scanner(database, sources=LIFECYCLE).run_once().skipped == 1  # listed, left: its task runs
    assert flow.rows("SELECT status FROM tasks") == [{"status": "RUNNING"}]
    assert flow.complete(claimed.json, outcome="CANCELLED").status_code == 200
    flow.scan()
    purge_all(database)
    assert flow.rows("SELECT id FROM instances") == []
    assert flow.rows("SELECT permits_in_use FROM queues WHERE name = 'inventory'") == [{"permits_in_use": 0}]


def set_notifications(database, status: str, due_at=None) -> None:
    database.run(lambda tx: tx.execute("UPDATE notifications SET status = %s, due_at = %s", (status, due_at)))


def purge_pass(database) -> None:
    """One batch of the lifecycle sources (an instance the purge waits for is listed again by the next)."""
    Scanner(database, sources=LIFECYCLE).run_once()


@pytest.mark.parametrize("then", ["DELIVERED", "DROPPED", "a day later"])
def test_L1_N2_an_instance_whose_notification_is_still_to_be_sent_is_purged_once_it_was_sent(
    ended, flow, database, clock, then
):
    """A `workflow.*` notification written as the workflow ended is not taken by the purge before
    it was delivered or dropped with its subscription, alone or in a group; for a day at most, so
    that an endpoint down for good does not keep the workflow forever."""
    notify_rows(database, (ended,))
    set_notifications(database, "PENDING", clock.now())
    assert retention.purge_instance(database, ended) is None
    purge_pass(database)
    assert flow.rows("SELECT workflow_id FROM instances") == [{"workflow_id": "w-1"}]  # w-2 went
    assert rows_left(database, ended)["notifications"] == 2
    clock.advance(86_399)
    purge_pass(database)
    assert flow.rows("SELECT workflow_id FROM instances") == [{"workflow_id": "w-1"}]
    if then == "a day later":
        clock.advance(1)
    else:
        set_notifications(database, then)
    purge_all(database)
    assert flow.rows("SELECT id FROM instances") == []
    assert rows_left(database, ended) == {}
    assert [r["rows"]["notifications"] for r in purged_records(flow) if r["workflow_id"] == "w-1"] == [2]


def test_L1_a_purge_neither_waits_for_nor_blocks_a_transaction_that_holds_the_instance(
    ended, flow, database, migrated_url
):
    holder = connect(migrated_url)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (ended,))
            assert retention.purge_instance.once(database, ended) is None  # skipped at once, not waited
        holder.rollback()
    finally:
        holder.close()
    assert retention.purge_instance(database, ended) == retention.PURGED


# ---- audit retention ------------------------------------------------------------------------------------


def audit_actions(flow) -> list[str]:
    return [row["action"] for row in flow.rows("SELECT action FROM audit_records ORDER BY id")]


def test_L1_L3_audit_records_are_kept_the_longer_of_both_retentions(ended, flow, database, clock):
    retention.set_retention(database, "acme", 10, audit_days=2)
    assert retention.set_retention(database, "acme")["effective_audit_days"] == 10
    before = audit_actions(flow)
    clock.advance(days=9)
    purge_all(database)
    assert audit_actions(flow) == before  # younger than the instances' retention: kept
    clock.advance(1, days=1)
    purge_all(database)
    # the instances went (10 days), and with them every record of them older than 10 days; the
    # purge records themselves are younger: they follow the audit retention from now on
    assert flow.rows("SELECT id FROM instances") == []
    assert audit_actions(flow) == ["workflow.purged", "workflow.purged"]
    clock.advance(days=10)
    purge_all(database)
    assert audit_actions(flow) == []


def test_L1_audit_records_of_an_instance_still_stored_are_kept_past_the_audit_retention(flow, database, clock):
    flow.publish(signal_flow_definition())
    signal_instance(flow, "w-run", finish=False)
    retention.set_retention(database, "acme", 1, audit_days=1)
    clock.advance(days=5)
    purge_all(database)
    actions = audit_actions(flow)
    assert "workflow.start" in actions and "signal.send" in actions
    assert "namespace.create" not in actions  # a record of no instance goes


def test_L1_retention_of_an_unknown_namespace_or_out_of_range_is_refused(database, tenant):
    with pytest.raises(WeaveError):
        retention.set_retention(database, "nope", 1)
    with pytest.raises(WeaveError):
        retention.set_retention(database, "acme", -1)


# ---- operations -----------------------------------------------------------------------------------------


def test_L1_the_backlog_shows_the_purgeable_instances_and_the_purge_lag(ended, flow, database, clock):
    retention.set_retention(database, "acme", 1)
    figures = database.read(backlog, count_due=True)
    assert figures["purgeable"] == {"acme": 0} and figures["purge_lag_seconds"] == 0.0
    clock.advance(30, days=1)
    figures = database.read(backlog, count_due=True)
    assert figures["purgeable"] == {"acme": 2} and figures["purge_lag_seconds"] >= 30.0
    purge_all(database)
    figures = database.read(backlog, count_due=True)
    assert figures["purgeable"] == {"acme": 0} and figures["purge_lag_seconds"] == 0.0


def test_L1_a_signal_sent_between_two_chunks_goes_with_the_instance_and_one_after_finds_it_gone(ended, flow, database):
    assert retention.purge_instance(database, ended, chunk_rows=2) == retention.PURGING
    late = flow.send("w-1", "late-1", payment("o-w-1"))
    assert late.status_code == 201 and late.json["status"] == "REJECTED", late.text
    while retention.purge_instance(database, ended, chunk_rows=2) == retention.PURGING:
        pass
    assert rows_left(database, ended) == {}
    assert not flow.rows("SELECT id FROM signals WHERE idempotency_key = 'late-1'")
    gone = flow.send("w-1", "late-2", payment("o-w-1"))
    assert gone.status_code == 404 and gone.json["code"] == "WORKFLOW_NOT_FOUND", gone.text
    assert flow.rows("SELECT workflow_id FROM instances") == [{"workflow_id": "w-2"}]


# ---- several instances in one transaction, and a paced purge -------------------------------------------


def test_L1_L3_a_group_purge_removes_several_instances_in_one_transaction_with_one_record_each(ended, flow, database):
    ids = instance_ids(flow, "w-1", "w-2")
    whole = {i: rows_left(database, i) for i in ids}
    decisions = retention.purge_instances(database, tuple(reversed(ids)))
    assert decisions == dict.fromkeys(ids, retention.PURGED)
    assert flow.rows("SELECT id FROM instances") == []
    assert {i: rows_left(database, i) for i in ids} == {i: {} for i in ids}
    records = purged_records(flow)
    assert {r["instance_id"]: r["rows"] for r in records} == whole
    assert retention.purge_instances(database, ids) == dict.fromkeys(ids)  # nothing left to do


def test_L1_L3_a_group_purge_leaves_an_instance_bigger_than_a_chunk_to_the_purge_alone_and_resumes_a_cut_one(
    ended, flow, database
):
    first, second = instance_ids(flow, "w-1", "w-2")
    whole = {i: rows_left(database, i) for i in (first, second)}
    # each holds more than one row of some table: neither goes in a group, nothing is deleted
    assert retention.purge_instances(database, (first, second), chunk_rows=1) == dict.fromkeys(
        (first, second), retention.ALONE
    )
    assert {i: rows_left(database, i) for i in (first, second)} == whole
    assert retention.purge_instance(database, second, chunk_rows=2) == retention.PURGING  # a cut purge
    largest = max(whole[first].values())
    # each fits a chunk of `largest` rows a table, not both together: the second waits for a later batch
    decisions = retention.purge_instances(database, (first, second), chunk_rows=largest)
    assert decisions == {first: retention.PURGED, second: None}
    assert rows_left(database, first) == {} and rows_left(database, second)
    assert retention.purge_instances(database, (second,)) == {second: retention.PURGED}
    assert {r["instance_id"]: r["rows"] for r in purged_records(flow)} == whole  # the cut purge counted once


def test_L1_a_group_purge_skips_an_instance_another_transaction_holds_and_purges_the_others(
    ended, flow, database, migrated_url
):
    first, second = instance_ids(flow, "w-1", "w-2")
    holder = connect(migrated_url)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (first,))
            decisions = retention.purge_instances.once(database, (first, second))
        holder.rollback()
    finally:
        holder.close()
    assert decisions == {first: None, second: retention.PURGED}
    assert instance_ids(flow, "w-1") == (first,)


def test_L1_a_paced_purge_rests_after_its_work_and_is_not_listed_while_it_rests(ended, flow, database):
    sources = lifecycle(purge_share=0.001)
    purge = sources[0].process
    scanner = Scanner(database, sources=sources, batch_size=1)
    assert scanner.run_once().by_source == {"purge": 1}
    assert purge.capacity() == 0 and purge.resting_until > time.monotonic()
    assert scanner.run_once().candidates == 0  # the other instance waits: the purge rests
    assert len(flow.rows("SELECT id FROM instances")) == 1
    purge.resting_until = 0.0  # its rest is over
    assert scanner.run_once().by_source == {"purge": 1}
    assert flow.rows("SELECT id FROM instances") == []
