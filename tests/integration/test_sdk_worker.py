"""weave.sdk.Worker on a real waitress server and database: handlers per step key for TASK and
QUERY tasks, a handler that raises, a lost lease (on heartbeat and on report), cancellation
handed to the handler, several threads, and a clean stop on SIGTERM (in a subprocess)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal

import pytest
from helpers import sdk_client, serving, task_steps
from test_poll import poll_definition

from weave.app import create_app
from weave.config import Config
from weave.sdk import Cancelled, Fail, Worker, dumps, final, pending
from weave.server import create_server

QUEUES = ("inventory", "carrier")


@pytest.fixture
def ops(live_url, tenant):
    return sdk_client(live_url, tenant)


@pytest.fixture
def run_worker(live_url, tenant):
    """`run_worker(handlers, **options)`: a Worker running in a thread; stopped after the test."""
    running = []
    client = sdk_client(live_url, tenant, "tasks:work", actor="worker")

    def start(handlers, queue="inventory", **options) -> Worker:
        worker = Worker(client, queue, handlers, **{"poll_seconds": 1, "grace_seconds": 5, **options})
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
    for worker, thread in running:
        thread.join(15)
        assert not thread.is_alive(), "the worker did not stop"


def until(check, flow=None, clock=None, advance: float = 0, timeout: float = 20):
    """Run the scanner (and move the test clock) until `check()` is true."""
    deadline = time.monotonic() + timeout
    while True:
        if flow is not None:
            flow.scan()
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        if advance:
            clock.advance(advance)
        time.sleep(0.05)


def status(ops, workflow_id="order-1"):
    return ops.get_workflow(workflow_id).status


def completions(flow) -> list[dict]:
    rows = flow.rows("SELECT details FROM audit_records WHERE action = 'task.complete' ORDER BY id")
    return [json.loads(row["details"]) for row in rows]


def test_a_raising_handler_reports_a_retryable_failure_and_the_next_attempt_succeeds(
    ops, run_worker, flow, clock, caplog
):
    ops.publish_definition(task_steps("reserve", "ship", timeout=86400))
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 86400, workflow_id="order-1")
    attempts = []

    def reserve(task):
        attempts.append((task.kind, task.attempt))
        if task.attempt == 1:
            raise RuntimeError("stock service timed out")
        return {"reservation_id": "r-1", "price": Decimal("9.90")}

    def ship(task):
        return {"tracking": task.input["steps"]["reserve"]["result"]["reservation_id"] + "-t"}

    run_worker({"reserve": reserve, "ship": ship})
    until(lambda: status(ops) == "SUCCEEDED", flow, clock, advance=1)
    assert attempts == [("TASK", 1), ("TASK", 2)]
    workflow = ops.get_workflow("order-1")
    assert dumps(workflow.step("reserve").result) == '{"reservation_id":"r-1","price":9.90}'
    assert workflow.step("ship").result == {"tracking": "r-1-t"}
    assert [(c["reported"], c["retryable"], c["attempt"]) for c in completions(flow)] == [
        ("FAILED", True, 1),
        ("SUCCEEDED", False, 2),
        ("SUCCEEDED", False, 1),
    ]
    first_error = flow.rows("SELECT error FROM tasks ORDER BY id")[0]["error"]
    assert json.loads(first_error) == {"message": "RuntimeError: stock service timed out", "retryable": True}
    assert "handler for step 'reserve' raised" in caplog.text


def test_fail_reports_a_failure_that_is_not_retried(ops, run_worker, flow):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    ops.start_workflow("flow", 1, {}, 86400, workflow_id="order-1")

    def reserve(task):
        raise Fail("card declined", details={"psp": "do_not_honor"})

    run_worker({"reserve": reserve})
    until(lambda: status(ops) == "NEEDS_REVIEW", flow)
    row = flow.rows("SELECT status, attempt, max_attempts, error FROM tasks")[0]
    assert (row["status"], row["attempt"], row["max_attempts"]) == ("FAILED", 1, 3)
    assert json.loads(row["error"]) == {
        "message": "card declined",
        "retryable": False,
        "details": {"psp": "do_not_honor"},
    }


def test_a_result_weave_cannot_store_is_a_failure_that_says_why(ops, run_worker, flow):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    ops.start_workflow("flow", 1, {}, 86400, workflow_id="order-1")
    run_worker({"reserve": lambda task: {"when": object()}})
    until(lambda: status(ops) == "NEEDS_REVIEW", flow)
    error = json.loads(flow.rows("SELECT error FROM tasks")[0]["error"])
    assert error["retryable"] is False and "cannot write object as JSON" in error["message"]


def test_a_lease_lost_on_heartbeat_is_abandoned_quietly_and_the_worker_goes_on(ops, run_worker, flow, clock):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    ops.start_workflow("flow", 1, {}, 86400, workflow_id="order-1")
    started = threading.Event()
    seen = []

    def reserve(task):
        seen.append(task.attempt)
        if task.attempt == 1:
            started.set()
            woke = task.wait(15)  # ends early when the lease is lost
            seen.append(("woke", woke, task.lease_lost, task.cancel_requested))
            return {"too": "late"}
        return {"reservation_id": "r-2"}

    run_worker({"reserve": reserve}, lease_seconds=30, heartbeat_seconds=0.1)
    until(started.is_set, flow)
    clock.advance(60)  # 30 s of lease, on the server's clock, have passed: the next heartbeat is LEASE_LOST
    until(lambda: len(seen) == 2)
    assert seen == [1, ("woke", True, True, False)]
    until(lambda: status(ops) == "SUCCEEDED", flow, clock, advance=1)  # expiry re-queues; attempt 2 runs
    assert seen[2:] == [2]
    assert [(c["reported"], c["attempt"]) for c in completions(flow)] == [("SUCCEEDED", 2)]
    assert ops.get_workflow("order-1").step("reserve").result == {"reservation_id": "r-2"}


def test_a_lease_lost_when_reporting_is_quiet_and_the_worker_goes_on(ops, run_worker, flow, clock, caplog):
    caplog.set_level(logging.INFO, logger="weave.sdk.worker")
    ops.publish_definition(task_steps("reserve", timeout=86400))
    ops.start_workflow("flow", 1, {}, 86400, workflow_id="order-1")
    started, release = threading.Event(), threading.Event()

    def reserve(task):
        if task.attempt == 1:
            started.set()
            release.wait(15)
        return {"attempt": task.attempt}

    run_worker({"reserve": reserve}, lease_seconds=30, heartbeat_seconds=3600)
    until(started.is_set, flow)
    clock.advance(60)
    flow.scan()  # the expired lease re-queues the task (P4)
    release.set()
    until(lambda: status(ops) == "SUCCEEDED", flow, clock, advance=1)
    assert ops.get_workflow("order-1").step("reserve").result == {"attempt": 2}
    assert [(c["reported"], c["attempt"]) for c in completions(flow)] == [("SUCCEEDED", 2)]
    assert "lease lost when reporting SUCCEEDED" in caplog.text
    assert not [r for r in caplog.records if r.name == "weave.sdk.worker" and r.levelname == "ERROR"]


def test_cancellation_reaches_the_running_handler(ops, run_worker, flow):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    ops.start_workflow("flow", 1, {}, 86400, workflow_id="order-1")
    started = threading.Event()

    def reserve(task):
        started.set()
        task.wait(15)
        task.raise_if_cancel_requested()
        return {"not": "cancelled"}

    run_worker({"reserve": reserve}, heartbeat_seconds=0.1)
    until(started.is_set, flow)
    ops.cancel("order-1", "customer cancelled")
    until(lambda: flow.rows("SELECT status FROM tasks")[0]["status"] == "CANCELLED", flow)
    assert [c["reported"] for c in completions(flow)] == ["CANCELLED"]
    assert status(ops) == "CANCELLED"
    assert issubclass(Cancelled, Exception)


def test_query_handlers_report_pending_then_final(ops, run_worker, flow, clock):
    ops.publish_definition(poll_definition())
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 86400, workflow_id="order-1")
    rounds = []

    def track(task):
        rounds.append(task.kind)
        return pending() if len(rounds) == 1 else final({"status": "delivered"})

    run_worker({"track": track}, queue="carrier")
    run_worker({"notify": lambda task: {"notified": task.input["steps"]["track"]["result"]["status"]}})
    until(lambda: status(ops) == "SUCCEEDED", flow, clock, advance=5)
    assert rounds == ["QUERY", "QUERY"]
    workflow = ops.get_workflow("order-1")
    assert workflow.step("track").result == {"status": "delivered"}
    assert workflow.step("notify").result == {"notified": "delivered"}


def test_threads_run_tasks_side_by_side(ops, run_worker, flow):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    for workflow_id in ("order-1", "order-2"):
        ops.start_workflow("flow", 1, {}, 86400, workflow_id=workflow_id)
    both = threading.Barrier(2, timeout=10)  # only passes when two handlers run at once

    def reserve(task):
        both.wait()
        return {"ok": True}

    run_worker({"reserve": reserve}, threads=2)
    until(lambda: status(ops, "order-1") == status(ops, "order-2") == "SUCCEEDED", flow)
    assert [(c["reported"], c["attempt"]) for c in completions(flow)] == [("SUCCEEDED", 1)] * 2


def test_a_claim_turned_away_says_when_to_come_back_and_the_worker_waits_that_long(config, database, tenant):
    """A server with its cap of waiting claims answers 204 at once with Retry-After (here: always)."""
    turned_away = Config(config.database_url, threads=2, max_waiting_claims=0)
    listener = socket.create_server(("127.0.0.1", 0))
    with serving(create_server(create_app(turned_away, database), listener, turned_away)):
        client = sdk_client(f"http://127.0.0.1:{listener.getsockname()[1]}", tenant, "tasks:work")
        task, retry_after = client._claim("inventory", "w1", 30, 3)
        assert task is None and 1 <= retry_after <= 3
        claims = []
        real_claim = client._claim

        def counted_claim(*args):
            claims.append(time.monotonic())
            return real_claim(*args)

        client._claim = counted_claim
        worker = Worker(client, "inventory", {}, poll_seconds=3, grace_seconds=1)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        time.sleep(2.5)
        worker.stop()
        thread.join(10)
    assert 1 <= len(claims) <= 3  # not a busy loop: each answer's Retry-After (1-3 s) was waited for
    assert all(b - a >= 0.9 for a, b in zip(claims, claims[1:]))


# ---- SIGTERM, in a process of its own ----------------------------------------------------------------

WORKER_SCRIPT = textwrap.dedent(
    """
    import logging, pathlib, sys, time
    from weave.sdk import Client, Worker

    url, token, namespace, marks, handler_seconds, grace = sys.argv[1:7]
    marks = pathlib.Path(marks)

    def reserve(task):
        (marks / "started").write_text(task.workflow_id)
        time.sleep(float(handler_seconds))  # still running when SIGTERM comes
        (marks / "finished").write_text(task.workflow_id)
        return {"reservation_id": "r-1"}

    logging.basicConfig(level=logging.INFO)
    client = Client(url, token, namespace, timeout=10)
    Worker(client, "inventory", {"reserve": reserve}, poll_seconds=1, grace_seconds=float(grace)).run()
    (marks / "returned").write_text("")
    """
)


@pytest.fixture
def worker_process(live_url, tenant, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    token = tenant.token("tasks:work", queues=QUEUES, actor="worker")
    started = []

    def start(handler_seconds: float, grace: float) -> subprocess.Popen:
        args = [live_url, token, tenant.namespace, str(tmp_path), str(handler_seconds), str(grace)]
        started.append(subprocess.Popen([sys.executable, str(script), *args], stderr=subprocess.PIPE, text=True))
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def two_orders(ops, flow):
    ops.publish_definition(task_steps("reserve", timeout=86400))
    for workflow_id in ("order-1", "order-2"):
        ops.start_workflow("flow", 1, {}, 86400, workflow_id=workflow_id)
    flow.scan()


@pytest.mark.slow
def test_sigterm_lets_the_running_handler_finish_and_report_then_claims_nothing_more(
    ops, flow, worker_process, tmp_path
):
    two_orders(ops, flow)
    process = worker_process(handler_seconds=1.5, grace=10)
    until(lambda: (tmp_path / "started").exists(), timeout=30)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, process.stderr.read()
    assert (tmp_path / "finished").exists() and (tmp_path / "returned").exists()
    done = (tmp_path / "finished").read_text()
    other = "order-2" if done == "order-1" else "order-1"
    assert ops.get_workflow(done).step("reserve").task.status == "SUCCEEDED"  # reported before exiting
    assert ops.get_workflow(other).step("reserve").task.status == "QUEUED"  # never claimed after SIGTERM
    assert "worker stopped" in process.stderr.read()


@pytest.mark.slow
def test_sigterm_abandons_a_handler_that_outlives_the_grace_period(ops, flow, worker_process, tmp_path):
    two_orders(ops, flow)
    process = worker_process(handler_seconds=60, grace=0.5)
    until(lambda: (tmp_path / "started").exists(), timeout=30)
    began = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0
    assert time.monotonic() - began < 10
    assert not (tmp_path / "finished").exists() and (tmp_path / "returned").exists()
    running = ops.get_workflow((tmp_path / "started").read_text()).step("reserve").task
    assert running.status == "RUNNING"  # not reported: its lease will expire and Pulse retries it (P4)
    assert completions(flow) == []
    assert "their leases will expire" in process.stderr.read()
