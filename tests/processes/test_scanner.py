"""K1-K3: the scanner loop shares work across processes, survives SIGKILL, backs off failures."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from helpers import run_scanners_until, run_with_kills, task_steps, use_real_time

from weave import scanner as scanner_module
from weave.config import DEFAULT_SCAN_IDLE_SECONDS
from weave.scanner import Scanner
from weave.sql import instances, tasks
from weave.sql.engine import moves

pytestmark = pytest.mark.slow


def start_backlog(flow, database, count, document):
    flow.publish(document)
    starter = flow.tenant.principal("workflows:start", queues=("inventory", "carrier"))
    for i in range(count):
        request = instances.StartRequest(f"b{i}", "flow", 1, "{}", 3600, f"{i:064d}")
        instances.start_workflow(database, starter, request)
    return starter.namespace_id


def due_checkpoints(flow):
    return flow.rows("SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= UTC_TIMESTAMP(6)")[0]["n"]


def activations_and_tasks_per_instance(flow) -> list[dict]:
    return flow.rows(
        "SELECT i.id, COUNT(DISTINCT a.id) AS activations, COUNT(DISTINCT t.id) AS tasks "
        "FROM instances i LEFT JOIN step_activations a ON a.instance_id = i.id "
        "LEFT JOIN tasks t ON t.instance_id = i.id GROUP BY i.id"
    )


def test_k1_two_scanner_processes_process_every_candidate_exactly_once(flow, database, clock, config):
    use_real_time(database, clock)
    start_backlog(flow, database, 300, task_steps("work"))
    results = run_scanners_until(config, 2, lambda: due_checkpoints(flow) == 0)
    assert [code for code, _ in results] == [0, 0]  # K3: clean stop on SIGTERM
    done = [n for _, n in results]
    assert sum(done) == 300, done
    assert all(n > 0 for n in done), done  # both processes took a share
    per_instance = activations_and_tasks_per_instance(flow)
    assert len(per_instance) == 300
    assert {(r["activations"], r["tasks"]) for r in per_instance} == {(1, 1)}
    assert flow.rows("SELECT COUNT(*) AS n FROM events WHERE type = 'STEP_ACTIVATED'")[0]["n"] == 300


def test_k1_one_scanner_with_threads_processes_every_candidate_exactly_once(flow, database, clock):
    """`weave scan --threads N`: the threads of one process share a batch like scanner processes do."""
    use_real_time(database, clock)
    start_backlog(flow, database, 250, task_steps("work"))
    scanner = Scanner(database, threads=4)
    reports = [scanner.run_once() for _ in range(3)]
    assert [(r.candidates, r.done, r.skipped, r.failed) for r in reports] == [
        (100, 100, 0, 0),
        (100, 100, 0, 0),
        (50, 50, 0, 0),
    ]
    assert scanner.run_once().candidates == 0
    per_instance = activations_and_tasks_per_instance(flow)
    assert len(per_instance) == 250 and {(r["activations"], r["tasks"]) for r in per_instance} == {(1, 1)}


def check_consistency(flow):
    """No partial transition: every fact has the facts that must come with it."""
    for row in flow.rows(
        "SELECT id, (SELECT COUNT(*) FROM events e WHERE e.instance_id = i.id) AS n,"
        " (SELECT MAX(seq) FROM events e WHERE e.instance_id = i.id) AS top FROM instances i"
    ):
        assert row["n"] == row["top"]  # gap-free history
    activations = flow.rows(
        "SELECT a.id, a.step_key, a.status, (SELECT COUNT(*) FROM tasks t WHERE "
        "t.activation_id = a.id) AS tasks, (SELECT COUNT(*) FROM events e WHERE e.instance_id = "
        "a.instance_id AND e.type = 'STEP_ACTIVATED' AND e.data LIKE CONCAT('%%\"', a.step_key, "
        "'\"%%')) AS activated FROM step_activations a"
    )
    assert all(a["tasks"] == 1 and a["activated"] == 1 for a in activations), activations[:3]
    # A consumed inbox event always comes with its settled step and the successor's activation.
    for row in flow.rows(
        "SELECT i.status, a.status AS step, (SELECT COUNT(*) FROM step_activations n WHERE "
        "n.instance_id = a.instance_id AND n.step_index = a.step_index + 1) AS successors "
        "FROM inbox_events i JOIN tasks t ON t.id = i.task_id "
        "JOIN step_activations a ON a.id = t.activation_id"
    ):
        if row["status"] == "CONSUMED":
            assert (row["step"], row["successors"]) == ("SUCCEEDED", 1)
        else:
            assert (row["step"], row["successors"]) == ("ACTIVE", 0)


def test_k2_scanner_killed_with_sigkill_mid_batch_loses_nothing_and_leaves_no_partial_transition(
    flow, database, clock, config
):
    use_real_time(database, clock)
    ns = start_backlog(flow, database, 200, task_steps("first", "second"))
    run_with_kills(config, 4, lambda: check_consistency(flow))
    run_scanners_until(config, 1, lambda: due_checkpoints(flow) == 0)
    check_consistency(flow)
    assert flow.rows("SELECT COUNT(*) AS n FROM step_activations")[0]["n"] == 200

    # Finish every first task, then consume the outcomes under more SIGKILLs.
    use_real_time(database, clock)  # the tasks became available at the scanner processes' database time
    for _ in range(200):
        claimed = tasks.claim_task(database, ns, "inventory", "w", 600, 1, "w")
        tasks.complete_task(
            database,
            ns,
            claimed.task_id,
            claimed.lease_token,
            tasks.Completion("SUCCEEDED", '{"ok":true}'),
            frozenset({"inventory"}),
            1,
            "w",
        )
    pending = lambda: flow.rows("SELECT COUNT(*) AS n FROM inbox_events WHERE status = 'PENDING'")[0]["n"]
    assert pending() == 200
    run_with_kills(config, 4, lambda: check_consistency(flow))
    run_scanners_until(config, 1, lambda: pending() == 0)
    check_consistency(flow)
    assert flow.rows("SELECT COUNT(*) AS n FROM step_activations WHERE step_key = 'second'")[0]["n"] == 200


def test_k2_an_sql_error_on_one_candidate_backs_it_off_and_the_batch_goes_on(flow, database, clock, monkeypatch):
    flow.publish(task_steps("work"))
    for i in range(5):
        flow.start(f"wf-{i}")
    poisoned = flow.rows("SELECT id FROM instances WHERE workflow_id = 'wf-2'")[0]["id"]
    real_activate = moves.activate

    def activate(tx, instance, *args):
        if instance["id"] == poisoned:
            tx.execute("SELECT no_such_column FROM instances")  # a real server-side SQL error (1054)
        return real_activate(tx, instance, *args)

    monkeypatch.setattr(moves, "activate", activate)
    report = Scanner(database).run_once()
    assert (report.candidates, report.done, report.failed) == (5, 4, 1)
    (checkpoint,) = flow.rows(
        "SELECT instance_id, due_at, available_at, attempts, last_error FROM checkpoints WHERE available_at > due_at"
    )
    assert checkpoint["instance_id"] == poisoned
    assert checkpoint["attempts"] == 1 and "1054" in checkpoint["last_error"]
    assert checkpoint["due_at"] == clock.now()  # the fact is kept; only the next try moved
    assert (checkpoint["available_at"] - checkpoint["due_at"]).total_seconds() == 1
    assert flow.rows("SELECT COUNT(*) AS n FROM step_activations")[0]["n"] == 4
    assert flow.rows("SELECT id FROM step_activations WHERE instance_id = %s", (poisoned,)) == []

    assert Scanner(database).run_once().candidates == 0  # backed off: not due yet
    monkeypatch.setattr(moves, "activate", real_activate)
    clock.advance(1)
    assert Scanner(database).run_once().done == 1
    assert flow.rows("SELECT COUNT(*) AS n FROM step_activations")[0]["n"] == 5


def test_k1_batch_is_cut_to_the_batch_size_oldest_first(flow, database, clock):
    flow.publish(task_steps("work"))
    for i in range(7):
        flow.start(f"wf-{i}")
        clock.advance(1)
    scanner = Scanner(database, batch_size=3)
    batch = scanner.look()
    assert len(batch) == 3
    assert [c.due_at for c in batch] == sorted(c.due_at for c in batch)
    first_three = flow.rows("SELECT id FROM checkpoints ORDER BY due_at, id LIMIT 3")
    assert [c.id for c in batch] == [r["id"] for r in first_three]


def test_P4_K2_an_expired_lease_is_a_candidate_of_the_batch_retried_by_the_next_one(flow, database, clock, monkeypatch):
    """Lease expiry is one of the scanner's candidate sources: an expired lease is listed with the
    others, merged into the batch, and its decision counted in the batch report's `leases`. A failure
    leaves the task as it was (there is no row to back off: the lease is still expired, K2) and the
    next batch expires it."""
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    claimed = flow.claim(lease_seconds=1).json
    clock.advance(2)
    scanner = Scanner(database)
    (candidate,) = scanner.look()
    (task,) = flow.rows("SELECT id, queue_id FROM tasks")
    assert (candidate.source, candidate.id, candidate.more) == (
        scanner_module.LEASE_EXPIRY,
        task["id"],
        (task["queue_id"],),
    )

    real_requeue = tasks._requeue

    def requeue(tx, task, error_text):
        tx.execute("SELECT no_such_column FROM tasks")  # a real SQL error (1054)

    monkeypatch.setattr(tasks, "_requeue", requeue)
    report = scanner.run_once()
    assert (report.candidates, report.failed, report.leases, report.by_source) == (1, 1, {}, {"lease": 1})
    assert flow.rows("SELECT status, attempt, lease_token FROM tasks") == [
        {"status": "RUNNING", "attempt": 1, "lease_token": claimed["lease_token"]}
    ]
    monkeypatch.setattr(tasks, "_requeue", real_requeue)
    report = scanner.run_once()
    assert (report.candidates, report.done, report.failed, report.leases) == (1, 0, 0, {"REQUEUE": 1})
    assert flow.rows("SELECT status, attempt FROM tasks") == [{"status": "QUEUED", "attempt": 1}]


def test_k3_scan_once_prints_one_structured_line(flow, database, clock, config):
    use_real_time(database, clock)
    start_backlog(flow, database, 3, task_steps("work"))
    done = subprocess.run(
        [sys.executable, "-m", "weave.cli", "scan", "--once"],
        capture_output=True,
        text=True,
        env={**os.environ, "WEAVE_DATABASE_URL": config.database_url},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["event"] == "scan_batch" and line["done"] == 3 and line["by_source"] == {"checkpoint": 3}


def waiting_backlog(flow, database, clock, count):
    """`count` instances whose payment wait is WAITING, set up through the units (fast, real time)."""
    from helpers import signal_flow_definition

    use_real_time(database, clock)
    flow.publish(signal_flow_definition(timeout=3600))
    starter = flow.tenant.principal("workflows:start", queues=("inventory", "carrier"))
    ns = starter.namespace_id
    for i in range(count):
        request = instances.StartRequest(f"w{i}", "flow", 1, '{"order_id":"o-%d"}' % i, 3600, f"{i:064d}")
        instances.start_workflow(database, starter, request)
    flow.scan(rounds=200)
    while (claimed := tasks.claim_task(database, ns, "inventory", "w", 600, 1, "w")) is not None:
        tasks.complete_task(
            database,
            ns,
            claimed.task_id,
            claimed.lease_token,
            tasks.Completion("SUCCEEDED", "{}"),
            frozenset({"inventory"}),
            1,
            "w",
        )
    flow.scan(rounds=200)
    assert flow.rows("SELECT COUNT(*) AS n FROM waits WHERE status = 'WAITING'")[0]["n"] == count


def test_s2_5_one_winner_when_twenty_matching_signals_race_two_scanner_processes(flow, database, clock, config):
    from helpers import payment

    waiting_backlog(flow, database, clock, 16)
    for i in range(16):
        for k in range(20):  # each acceptance schedules its own WAIT checkpoint, due now
            assert flow.send(f"w{i}", f"k{k}", payment(f"o-{i}", payload={"amount": k})).status_code == 201
    results = run_scanners_until(config, 2, lambda: due_checkpoints(flow) == 0)
    assert all(done > 0 for _, done in results)
    for i in range(16):
        rows = flow.rows(
            "SELECT s.id, s.status, s.disposition FROM signals s JOIN instances i ON i.id = s.instance_id "
            "WHERE i.workflow_id = %s ORDER BY s.accepted_at, s.id",
            (f"w{i}",),
        )
        assert [r["status"] for r in rows] == ["CONSUMED"] + ["REJECTED"] * 19
        assert {r["disposition"] for r in rows[1:]} == {"WAIT_SETTLED"}
        winner = flow.rows(
            "SELECT w.winner_signal_id FROM waits w JOIN instances i ON i.id = w.instance_id WHERE i.workflow_id = %s",
            (f"w{i}",),
        )
        assert winner == [{"winner_signal_id": rows[0]["id"]}]


def check_consumption_is_whole(flow):
    """S2.8: a consumed signal always comes with its wait, its settled step and the successor's task."""
    rows = flow.rows("""
        SELECT s.status AS signal_status, w.status AS wait_status, w.winner_signal_id = s.id AS is_winner, a.status AS step,
               (SELECT COUNT(*) FROM step_activations n JOIN tasks t ON t.activation_id = n.id
                 WHERE n.instance_id = s.instance_id AND n.step_key = 'ship') AS successor_tasks,
               (SELECT COUNT(*) FROM events e WHERE e.instance_id = s.instance_id AND e.type = 'SIGNAL_CONSUMED') AS ev
        FROM signals s JOIN waits w ON w.instance_id = s.instance_id JOIN step_activations a ON a.id = w.activation_id
    """)
    for row in rows:
        if row["signal_status"] == "CONSUMED":
            assert (row["wait_status"], row["is_winner"], row["step"], row["successor_tasks"], row["ev"]) == (
                "SATISFIED",
                1,
                "SUCCEEDED",
                1,
                1,
            ), row
        else:
            assert (row["signal_status"], row["wait_status"], row["step"], row["successor_tasks"], row["ev"]) == (
                "PENDING",
                "WAITING",
                "ACTIVE",
                0,
                0,
            ), row
    return sum(1 for r in rows if r["signal_status"] == "CONSUMED")


def test_s2_8_sigkill_at_random_points_of_consumption_never_leaves_a_partial_one(flow, database, clock, config):
    from helpers import payment

    total = 500
    waiting_backlog(flow, database, clock, total)
    for i in range(total):
        flow.send(f"w{i}", "k", payment(f"o-{i}"))
    consumed = [0]
    consumed_now = lambda: flow.rows("SELECT COUNT(*) AS n FROM signals WHERE status = 'CONSUMED'")[0]["n"]
    # Each process is killed wherever it is while it consumes.
    run_with_kills(config, 24, lambda: consumed.append(check_consumption_is_whole(flow)), working=consumed_now, seed=11)
    assert consumed[-1] < total, "the backlog ran out before the last kill"
    assert consumed == sorted(consumed) and len(set(consumed)) == len(consumed)
    run_scanners_until(
        config, 1, lambda: flow.rows("SELECT COUNT(*) AS n FROM signals WHERE status = 'PENDING'")[0]["n"] == 0
    )
    assert check_consumption_is_whole(flow) == total


def test_k2_a_connection_cut_mid_candidate_backs_it_off_and_loses_nothing(flow, database, clock, cut_connection):
    flow.publish(task_steps("work"))
    flow.start("wf-0")
    killed = cut_connection("process_checkpoint")
    report = Scanner(database).run_once()
    database.before_commit = None
    assert killed == ["process_checkpoint"] and (report.failed, report.done) == (1, 0)
    (checkpoint,) = flow.rows(  # the look due now (the one at the total deadline is not due, I6)
        "SELECT attempts, last_error, due_at, available_at FROM checkpoints WHERE due_at <= %s", (clock.now(),)
    )
    assert checkpoint["attempts"] == 1 and checkpoint["last_error"].startswith("Retryable")
    assert checkpoint["available_at"] == checkpoint["due_at"] + timedelta(seconds=1)
    assert flow.rows("SELECT id FROM step_activations") == []
    clock.advance(1)
    flow.scan()
    assert flow.rows("SELECT status FROM step_activations") == [{"status": "ACTIVE"}]


@pytest.mark.parametrize(
    "idle_for, pause",
    [
        (0.0, scanner_module.BUSY_SECONDS),  # work just now: look again almost at once
        (0.01, scanner_module.BUSY_SECONDS),
        (0.1, 0.025),  # a quarter of the time since the last work
        (0.5, 0.125),
        (1.0, DEFAULT_SCAN_IDLE_SECONDS),  # idle: the longest sleep, and no longer
        (3600.0, DEFAULT_SCAN_IDLE_SECONDS),
    ],
)
def test_k1_the_scanner_sleeps_briefly_while_work_arrives_and_longer_once_idle(idle_for, pause):
    assert scanner_module.pause_after(idle_for) == pytest.approx(pause)
    assert scanner_module.pause_after(idle_for, longest=0.05) == pytest.approx(min(pause, 0.05))
