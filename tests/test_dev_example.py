"""The README walk-through, for real: `weave dev`, the example worker and HTTP calls (issue 5)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from weave import migrate
from weave.devdb import free_port

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


def test_task_signal_task_example_runs_end_to_end_with_weave_dev_and_the_example_worker(dev_database, tmp_path):
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": dev_database.yoyo_url()}
    dev = subprocess.Popen(
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
            line = dev.stdout.readline()
            assert line, "weave dev exited early"
            printed.append(line)
        text = "".join(printed)
        client = re.search(r"client token .*?(wv_\S+)", text).group(1)
        worker = re.search(r"worker token .*?(wv_\S+)", text).group(1)
        start_body = json.loads(re.search(r"-d '(.*)'$", printed[-1].strip()).group(1))
        base = f"http://127.0.0.1:{port}"
        eventually(lambda: http("GET", f"{base}/readyz")[0] == 200)
        assert migrate.pending(dev_database) == []

        ns = f"{base}/v1/namespaces/demo"
        status, started = http("POST", f"{ns}/workflows", client, start_body)
        assert status == 201 and started["workflow_id"] == "order-1"
        worker_process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "scripts" / "example_worker.py"),
                "--token",
                worker,
                "--base",
                base,
                "--tasks",
                "2",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        waiting = eventually(
            lambda: (
                lambda wf: wf if wf["steps"][1]["wait"] and wf["steps"][1]["wait"]["status"] == "WAITING" else None
            )(http("GET", f"{ns}/workflows/order-1", client)[1])
        )
        assert waiting["steps"][0]["result"] == {"reservation_id": "res-order-1"}
        status, receipt = http(
            "POST",
            f"{ns}/workflows/order-1/signals",
            client,
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
        done = eventually(
            lambda: (lambda wf: wf if wf["status"] == "SUCCEEDED" else None)(
                http("GET", f"{ns}/workflows/order-1", client)[1]
            )
        )
        assert [s["status"] for s in done["steps"]] == ["SUCCEEDED"] * 3
        assert done["steps"][2]["result"] == {"tracking": "TRK-order-1", "paid": {"amount": 129.90}}
        output, _ = worker_process.communicate(timeout=30)
        assert worker_process.returncode == 0 and output.count("->") == 2
    finally:
        dev.send_signal(signal.SIGTERM)
        dev.wait(30)
    assert dev.returncode is not None
