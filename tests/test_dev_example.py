"""The README walk-throughs, for real: `weave dev` (API and scanner), the example worker and HTTP
calls. TASK -> SIGNAL -> TASK (issue 5), and the POLL carrier-tracking runs (issue 11, item 6)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from weave import migrate
from weave.devdb import free_port
from weave.sdk import dumps

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def http(method, url, token=None, body=None, headers=None):
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Content-Type": "application/json",
            **(headers or {}),
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read() or b"null")


def eventually(check, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except OSError:  # the server is not listening yet
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def dev_database(scratch_database):
    return scratch_database("dev")


@dataclass
class Dev:
    """A running `weave dev`: what it printed, and how to reach it."""

    base: str
    client: str  # the client token
    worker: str  # the worker token
    start_body: dict  # the body of the curl line it printed

    @property
    def ns(self) -> str:
        return f"{self.base}/v1/namespaces/demo"

    def get(self, path: str):
        return http("GET", f"{self.ns}/{path}", self.client)[1]

    def events(self, workflow_id: str) -> list[dict]:
        return self.get(f"workflows/{workflow_id}/events?limit=1000")["events"]

    def worker_process(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, str(ROOT / "scripts" / "example_worker.py"), "--token", self.worker]
        return subprocess.Popen([*command, "--url", self.base, *args], stdout=subprocess.PIPE, text=True)


@pytest.fixture
def dev(dev_database, tmp_path):
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": dev_database.yoyo_url()}
    process = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "dev", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        printed = []
        while not any("curl" in line for line in printed):
            line = process.stdout.readline()
            assert line, "weave dev exited early"
            printed.append(line)
        text = "".join(printed)
        base = f"http://127.0.0.1:{port}"
        eventually(lambda: http("GET", f"{base}/readyz")[0] == 200)
        assert migrate.pending(dev_database) == []
        yield Dev(
            base=base,
            client=re.search(r"client token .*?(wv_\S+)", text).group(1),
            worker=re.search(r"worker token .*?(wv_\S+)", text).group(1),
            start_body=json.loads(re.search(r"-d '(.*)'$", printed[-1].strip()).group(1)),
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode is not None


def test_task_signal_task_example_runs_end_to_end_with_weave_dev_and_the_example_worker(dev):
    ns = dev.ns
    status, started = http("POST", f"{ns}/workflows", dev.client, dev.start_body)
    assert status == 201 and started["workflow_id"] == "order-1"
    worker_process = dev.worker_process("--tasks", "2")
    waiting = eventually(
        lambda: (lambda wf: wf if wf["steps"][1]["wait"] and wf["steps"][1]["wait"]["status"] == "WAITING" else None)(
            dev.get("workflows/order-1")
        )
    )
    assert waiting["steps"][0]["result"] == {"reservation_id": "res-order-1"}
    status, receipt = http(
        "POST",
        f"{ns}/workflows/order-1/signals",
        dev.client,
        {
            "name": "payment.settled",
            "payload_version": "v1",
            "target_step_key": "payment",
            "target_activation_sequence": 1,
            "correlation_key": "o-1",
            "payload": {"amount": 129.90},
            "reason": "PSP webhook: payment settled",
        },
        headers={"Idempotency-Key": "psp-evt-1"},
    )
    assert (status, receipt["status"]) == (201, "PENDING")
    done = eventually(lambda: (lambda wf: wf if wf["status"] == "SUCCEEDED" else None)(dev.get("workflows/order-1")))
    assert [s["status"] for s in done["steps"]] == ["SUCCEEDED"] * 3
    assert done["steps"][2]["result"] == {"tracking": "TRK-order-1", "paid": {"amount": 129.90}}
    output, _ = worker_process.communicate(timeout=30)
    assert worker_process.returncode == 0
    assert output.splitlines() == [
        'order-1 reserve -> {"reservation_id":"res-order-1"}',
        'order-1 ship -> {"tracking":"TRK-order-1","paid":{"amount":129.9}}',  # json.dumps(129.90) sent 129.9
    ]


# ---- POLL: carrier tracking (README "A second walk-through: POLL") ------------------------------------------


def start_shipment(dev: Dev, workflow_id: str, tracking_number: str) -> None:
    body = {
        "definition": "shipment",
        "version": 1,
        "workflow_id": workflow_id,
        "input": {"tracking_number": tracking_number},
        "deadline_seconds": 3600,
    }
    status, started = http("POST", f"{dev.ns}/workflows", dev.client, body)
    assert status == 201 and started["steps"][0]["type"] == "POLL"


def carrier_webhook(dev: Dev, workflow_id: str, tracking_number: str, key: str):
    """The README's curl line: the carrier's final answer, sent with an Idempotency-Key."""
    return http(
        "POST",
        f"{dev.ns}/workflows/{workflow_id}/signals",
        dev.client,
        {
            "name": "shipment.final",
            "payload_version": "v1",
            "target_step_key": "track",
            "target_activation_sequence": 1,
            "correlation_key": tracking_number,
            "payload": {"state": "FINAL", "result": {"status": "delivered", "signed_by": "R. Doe"}},
            "reason": "carrier webhook: delivered",
        },
        headers={"Idempotency-Key": key},
    )


def settled(dev: Dev, workflow_id: str) -> dict:
    return eventually(
        lambda: (lambda wf: wf if wf["status"] == "SUCCEEDED" else None)(dev.get(f"workflows/{workflow_id}"))
    )


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [e["data"] for e in events if e["type"] == kind]


def decided(events: list[dict]) -> list[tuple[str, str]]:
    return [(d["decision"], d["rule"]) for d in of_type(events, "POLL_DECIDED")]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_poll_example_pending_twice_then_final_and_a_run_where_the_carriers_webhook_wins(dev):
    from weave.cli import DEV_POLL_INTERVAL

    # Run 1: nobody sends a webhook. The worker answers rounds 1 and 2 PENDING and round 3 FINAL.
    start_shipment(dev, "shipment-1", "TRK-1")
    worker = dev.worker_process("--tasks", "3")
    done = settled(dev, "shipment-1")
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    final_answer = {"status": "delivered", "tracking_number": "TRK-1", "source": "query"}
    assert output.splitlines() == [
        'shipment-1 track -> {"state":"PENDING"}',
        'shipment-1 track -> {"state":"PENDING"}',
        f"shipment-1 track -> {dumps({'state': 'FINAL', 'result': final_answer})}",
    ]
    track = done["steps"][0]
    assert (track["status"], track["result"]) == ("SUCCEEDED", final_answer)
    # The query won with no signal at all: the wait is satisfied without a winner signal.
    assert (track["wait"]["status"], track["wait"]["winner_signal_id"]) == ("SATISFIED", None)
    events = dev.events("shipment-1")
    rounds, reports = of_type(events, "QUERY_ROUND_STARTED"), of_type(events, "QUERY_RESULT_RECORDED")
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert [r["outcome"] for r in reports] == ["SUCCEEDED"] * 3
    # C1: each next round became claimable exactly interval_seconds after the PENDING report.
    for report, following in zip(reports, rounds[1:]):
        assert at(following["available_at"]) - at(report["completed_at"]) == timedelta(seconds=DEV_POLL_INTERVAL)
    # A PENDING report decides nothing (no POLL_DECIDED for it); the FINAL one, with no final
    # signal accepted before it, wins by C2.1.
    assert decided(events) == [("QUERY_WINS", "C2.1")]
    assert http("GET", f"{dev.ns}/workflows/shipment-1/signals", dev.client)[1]["signals"] == []

    # Run 2: the carrier is slow (the worker takes 20 s per answer, heartbeating each second), and
    # its webhook comes while round 1 runs. That timing is certain: the round is RUNNING when the
    # signal is accepted and the worker cannot report before 20 s unless it is asked to stop.
    start_shipment(dev, "shipment-2", "TRK-2")
    worker = dev.worker_process("--tasks", "1", "--query-seconds", "20")
    eventually(lambda: (dev.get("workflows/shipment-2")["steps"][0]["task"] or {}).get("status") == "RUNNING")
    status, receipt = carrier_webhook(dev, "shipment-2", "TRK-2", "carrier-evt-2")
    assert (status, receipt["status"]) == (201, "PENDING")
    done = settled(dev, "shipment-2")
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert output.splitlines() == [
        "shipment-2 track: asking the carrier (slow)",
        "shipment-2 track -> CANCELLED (Weave asked to stop)",
    ]
    track = done["steps"][0]
    assert track["result"] == {"status": "delivered", "signed_by": "R. Doe"}
    assert (track["wait"]["status"], track["wait"]["winner_signal_id"]) == ("SATISFIED", receipt["signal_id"])
    assert track["task"]["status"] == "CANCELLED"
    signal_state = dev.get(f"workflows/shipment-2/signals/{receipt['signal_id']}")
    assert (signal_state["status"], signal_state["disposition"]) == ("CONSUMED", None)
    events = dev.events("shipment-2")
    # C2.4: the signal was first while the round ran, so it was taken and the round asked to stop
    # (the worker saw cancel_requested on its heartbeat); C2.5: the round then reported CANCELLED,
    # which was collected, and the step settled with the signal. No further round.
    assert decided(events) == [("TAKE_SIGNAL", "C2.4"), ("SIGNAL_WINS", "C2.5")]
    assert [r["round"] for r in of_type(events, "QUERY_ROUND_STARTED")] == [1]
    assert [r["outcome"] for r in of_type(events, "QUERY_RESULT_RECORDED")] == ["CANCELLED"]
    # The carrier retries its webhook: the same Idempotency-Key answers the first receipt.
    assert carrier_webhook(dev, "shipment-2", "TRK-2", "carrier-evt-2") == (201, receipt)
    assert http("POST", f"{dev.ns}/queues/default/claim", dev.worker, {"worker_id": "t"})[0] == 204

    # The README's "slower than 30 s" case: round 1 answered PENDING, the worker stopped (--tasks 1),
    # and the webhook comes while round 2 waits unclaimed in the queue: C2.3, round 2 is cancelled.
    start_shipment(dev, "shipment-3", "TRK-3")
    worker = dev.worker_process("--tasks", "1")
    output, _ = worker.communicate(timeout=30)
    assert (worker.returncode, output.splitlines()) == (0, ['shipment-3 track -> {"state":"PENDING"}'])
    eventually(lambda: [r["round"] for r in of_type(dev.events("shipment-3"), "QUERY_ROUND_STARTED")] == [1, 2])
    status, receipt = carrier_webhook(dev, "shipment-3", "TRK-3", "carrier-evt-3")
    assert (status, receipt["status"]) == (201, "PENDING")
    track = settled(dev, "shipment-3")["steps"][0]
    assert track["result"] == {"status": "delivered", "signed_by": "R. Doe"}
    assert (track["task"]["status"], track["task"]["attempt"]) == ("CANCELLED", 0)  # never claimed
    events = dev.events("shipment-3")
    assert decided(events) == [("SIGNAL_WINS", "C2.3")]
    assert [r["round"] for r in of_type(events, "QUERY_ROUND_STARTED")] == [1, 2]
