"""The README walk-throughs, for real: `weave dev` (API and scanner), the example worker
(scripts/example_worker.py, a `weave.sdk.Worker`) and the `weave workflow …` / `weave signal …`
commands run as a person runs them, with the exports `weave dev` printed. TASK -> SIGNAL -> TASK
(issue 5), and the POLL carrier-tracking runs (issue 11, item 6); on the SDK and the command line
since issue 13, item 3. The test waits for the workflows through the SDK."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Callable

import pytest
from helpers import weave_dev

from weave import migrate
from weave.devdb import free_port
from weave.sdk import Client, Workflow, dumps, loads

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


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


WEAVE = [sys.executable, "-m", "weave.cli"]  # the `weave` command of this checkout


@dataclass
class Dev:
    """A running `weave dev`: what it printed, and how to reach it."""

    base: str
    exports: dict  # WEAVE_URL, WEAVE_NAMESPACE, WEAVE_TOKEN, WEAVE_WORKER_TOKEN: its `export` line
    start: list[str]  # the `weave workflow start …` line it printed, without `weave`
    client: Client  # what the test waits with: the client token (every workflow scope)

    @property
    def env(self) -> dict:
        """A shell of the README's second terminal: the exports pasted in."""
        return {**os.environ, **self.exports}

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        """Run a `weave …` command as a person does."""
        return subprocess.run([*WEAVE, *argv], env=self.env, capture_output=True, text=True, timeout=60)

    def weave(self, *argv: str) -> str:
        """Run a `weave …` command; it must succeed and say nothing on stderr. What it printed."""
        done = self.run(*argv)
        assert (done.returncode, done.stderr) == (0, ""), (argv, done.stderr)
        return done.stdout

    def weave_json(self, *argv: str):
        return loads(self.weave(*argv, "--json"))

    def events(self, workflow_id: str) -> list[dict]:
        """`weave workflow events ID --json`: the whole history, exactly as the server sent it."""
        return self.weave_json("workflow", "events", workflow_id)["events"]

    def wait_until(self, workflow_id: str, ready: Callable[[Workflow], bool]) -> Workflow:
        def check():
            workflow = self.client.get_workflow(workflow_id)
            return workflow if ready(workflow) else None

        return eventually(check)

    def worker_process(self, *argv: str) -> subprocess.Popen:
        """`python scripts/example_worker.py …` in the checkout: the token and URL from the exports."""
        assert argv[0] == "scripts/example_worker.py"
        return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=self.env, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def dev(dev_database, tmp_path):
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": dev_database.yoyo_url()}
    process, printed = weave_dev(tmp_path, port, env)
    try:
        base = f"http://127.0.0.1:{port}"
        eventually(lambda: http("GET", f"{base}/readyz")[0] == 200)
        assert migrate.pending(dev_database) == []
        export = next(shlex.split(line) for line in printed if line.startswith("  export "))
        exports = dict(word.split("=", 1) for word in export[1:])
        text = "".join(printed)
        assert exports == {
            "WEAVE_URL": base,
            "WEAVE_NAMESPACE": "demo",
            "WEAVE_TOKEN": re.search(r"client token .*?(wv_\S+)", text).group(1),
            "WEAVE_WORKER_TOKEN": re.search(r"worker token .*?(wv_\S+)", text).group(1),
            "WEAVE_OPS_TOKEN": re.search(r"operator token .*?(wv_\S+)", text).group(1),
        }
        assert f"review console: {base}/console/" in text
        client = Client(base, exports["WEAVE_TOKEN"], exports["WEAVE_NAMESPACE"], timeout=10)
        yield Dev(base=base, exports=exports, start=shlex.split(printed[-1])[1:], client=client)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode is not None


def readme_commands(section: str | None = None) -> list[list[str]]:
    """The command lines of the README's `sh` blocks (of one section: its heading), split as a shell
    splits them (continued lines joined, comments and a trailing `&` dropped; a line whose quote
    closes on a later line is skipped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if words[-1:] == ["&"]:
                words.pop()
            if words:
                commands.append(words)
    return commands


def readme(*prefix: str, section: str | None = None) -> list[str]:
    """The README's one command line (of one section) that starts with these words, without its
    first (`weave`, `python`)."""
    found = [words for words in readme_commands(section) if words[: len(prefix)] == list(prefix)]
    assert len(found) == 1, (prefix, found)
    return found[0][1:]


def renamed(argv: list[str], names: dict[str, str]) -> list[str]:
    """The same command about another workflow: each old name replaced by the new one in every word."""
    for old, new in names.items():
        argv = [word.replace(old, new) for word in argv]
    return argv


# What a replayed send prints under its frozen receipt once the signal has won its wait.
NOW_WON = "  that receipt is frozen at the first acceptance; the signal now: CONSUMED (won)\n"


def send_signal(dev: Dev, argv: list[str]) -> tuple[str, str]:
    """`weave signal send …`: (the signal id, what the command printed)."""
    assert argv[:2] == ["signal", "send"]
    printed = dev.weave(*argv)
    return re.match(r"signal (\S+): ", printed).group(1), printed


def test_task_signal_task_example_runs_end_to_end_with_weave_dev_and_the_example_worker(dev):
    # The start command weave dev printed is the README's; run again, it finds the same workflow.
    assert dev.start == readme("weave", "workflow", "start", "order", "--version", "1", "--id", "order-1")
    assert dev.weave(*dev.start) == "workflow order-1: RUNNING, gate OPEN\n"
    assert dev.weave(*dev.start) == "workflow order-1: RUNNING, gate OPEN\n"
    started = dev.client.get_workflow("order-1")
    assert (started.definition, started.version, started.input) == ("order", 1, {"order_id": "o-1"})
    assert [w.workflow_id for w in dev.client.list_workflows()] == ["order-1"]

    first = "A first walk-through: TASK → SIGNAL → TASK"
    worker = dev.worker_process(*readme("python", "scripts/example_worker.py", "--tasks", "2", section=first))
    waiting = dev.wait_until(
        "order-1", lambda wf: wf.step("payment").wait and wf.step("payment").wait.status == "WAITING"
    )
    assert waiting.step("reserve").result == {"reservation_id": "res-order-1"}
    payment = readme("weave", "signal", "send", "order-1")
    signal_id, printed = send_signal(dev, payment)
    assert re.fullmatch(rf"signal {signal_id}: PENDING, accepted \S+ \S+, idempotency key psp-evt-1\n", printed)

    dev.wait_until("order-1", lambda wf: wf.status == "SUCCEEDED")
    shown = dev.weave_json("workflow", "show", "order-1")
    workflow = shown["workflow"]
    assert [s["status"] for s in workflow["steps"]] == ["SUCCEEDED"] * 3
    assert workflow["steps"][1]["wait"]["winner_signal_id"] == signal_id
    assert workflow["steps"][1]["result"] == {"amount": Decimal("129.90")}
    # The payment's exact digits reach the ship task and its result.
    assert dumps(workflow["steps"][2]["result"]) == '{"tracking":"TRK-order-1","paid":{"amount":129.90}}'
    assert [(s["signal_id"], s["status"], s["disposition"]) for s in shown["signals"]] == [
        (signal_id, "CONSUMED", None)
    ]
    assert dev.weave("workflow", "show", "order-1").splitlines()[0].startswith("workflow order-1: SUCCEEDED, ")
    kinds = [e["type"] for e in dev.events("order-1")]
    assert kinds[0] == "WORKFLOW_STARTED" and kinds[-1] == "WORKFLOW_SUCCEEDED" and "SIGNAL_CONSUMED" in kinds

    # The PSP retries its webhook: the same idempotency key answers the first receipt; one signal.
    assert send_signal(dev, payment) == (signal_id, printed[:-1] + ", a replay of the first send\n" + NOW_WON)
    assert [s.signal_id for s in dev.client.list_signals("order-1")] == [signal_id]

    # The README's error: code, detail and pointer on stderr, exit 1, nothing started.
    refused = dev.run(*readme("weave", "workflow", "start", "order", "--version", "1", "--input"))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.splitlines() == [
        "weave: VALIDATION_FAILED: /deadline_seconds: 0 is less than the minimum of 1",
        "  /deadline_seconds: 0 is less than the minimum of 1",
    ]
    assert [w.workflow_id for w in dev.client.list_workflows()] == ["order-1"]

    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert output.splitlines() == [
        'order-1 reserve -> {"reservation_id":"res-order-1"}',
        'order-1 ship -> {"tracking":"TRK-order-1","paid":{"amount":129.90}}',
    ]


# ---- the payment first, by key only (README "Sending the payment first, by key only", issue 29) ---------


def test_B4_the_payment_routed_by_key_before_its_wait_opens_is_parked_then_taken_and_consumed(dev):
    """The README's block, command by command: the fact sent by its key alone before reserve is
    done is PARKED (B3: no wait is open); the payment wait that opens when the worker completes
    reserve takes it (B4) with its first acceptance time, the scanner consumes it and ship runs.
    `weave signal show ID` (B6) and `weave workflow show` read it from its id alone."""
    section = readme_commands("Sending the payment first, by key only")
    assert [words[:3] for words in section] == [
        ["weave", "workflow", "start"],
        ["weave", "signal", "route"],
        ["python", "scripts/example_worker.py", "--tasks"],
        ["weave", "signal", "show"],
        ["weave", "workflow", "show"],
    ]
    start, route, work, show, shown_workflow = (words[1:] for words in section)
    assert dev.weave(*start) == "workflow order-2: RUNNING, gate OPEN\n"
    # The scanner activates reserve after the start commits: wait for its task, not for a guess.
    reserve = eventually(lambda: dev.client.get_workflow("order-2").step("reserve").task)
    assert reserve.status == "QUEUED"

    printed = dev.weave(*route)
    parked = re.fullmatch(
        r"signal (\S+): parked until (\S+ \S+): the wait that opens for its key takes it; "
        r"PARKED, accepted (\S+ \S+), idempotency key psp-evt-2\n",
        printed,
    )
    assert parked, printed
    signal_id = parked.group(1)
    fact = dev.client.get_routed_signal(signal_id)
    assert (fact.route, fact.status, fact.workflow_id) == ("PARKED", "PARKED", None)
    assert list(dev.client.list_signals("order-2")) == []  # it belongs to no workflow yet

    worker = dev.worker_process(*work)
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0
    assert output.splitlines() == [
        'order-2 reserve -> {"reservation_id":"res-order-2"}',
        'order-2 ship -> {"tracking":"TRK-order-2","paid":{"amount":59.00}}',
    ]
    dev.wait_until("order-2", lambda wf: wf.status == "SUCCEEDED")

    # The README's `signal show 2` is the id the route printed (2 after the first walk-through).
    assert show[:2] == ["signal", "show"] and len(show) == 3
    table_rows = dict(line.split(None, 1) for line in dev.weave(*show[:2], signal_id).splitlines()[1:])
    assert (table_rows["route"], table_rows["status"], table_rows["workflow_id"]) == ("ROUTED", "CONSUMED", "order-2")
    assert table_rows["target_step_key"] == "payment"
    taken = dev.client.get_routed_signal(signal_id)
    assert (taken.route, taken.status, taken.workflow_id) == ("ROUTED", "CONSUMED", "order-2")
    assert taken.accepted_at == fact.accepted_at  # B4: taken with its original acceptance time

    assert shown_workflow == ["workflow", "show", "order-2"]
    assert dev.weave(*shown_workflow).splitlines()[0].startswith("workflow order-2: SUCCEEDED, ")
    shown = dev.weave_json(*shown_workflow)
    payment = shown["workflow"]["steps"][1]
    assert payment["wait"]["winner_signal_id"] == signal_id
    assert payment["result"] == {"amount": Decimal("59.00")}
    assert [(s["signal_id"], s["status"], s["idempotency_key"]) for s in shown["signals"]] == [
        (signal_id, "CONSUMED", "psp-evt-2")
    ]


# ---- POLL: carrier tracking (README "A second walk-through: POLL") ------------------------------------------


def start_shipment(dev: Dev, argv: list[str]) -> None:
    workflow_id = argv[argv.index("--id") + 1]
    assert dev.weave(*argv) == f"workflow {workflow_id}: RUNNING, gate OPEN\n"
    started = dev.client.get_workflow(workflow_id)
    assert (started.definition, started.steps[0].type) == ("shipment", "POLL")


SHIPMENT_3 = {"shipment-2": "shipment-3", "TRK-2": "TRK-3", "carrier-evt-2": "carrier-evt-3"}


def settled(dev: Dev, workflow_id: str) -> dict:
    """Wait until the workflow succeeds; then `weave workflow show ID --json`."""
    dev.wait_until(workflow_id, lambda wf: wf.status == "SUCCEEDED")
    return dev.weave_json("workflow", "show", workflow_id)


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [e["data"] for e in events if e["type"] == kind]


def decided(events: list[dict]) -> list[tuple[str, str]]:
    return [(d["decision"], d["rule"]) for d in of_type(events, "POLL_DECIDED")]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_poll_example_pending_twice_then_final_and_a_run_where_the_carriers_webhook_wins(dev):
    from weave.cli import DEV_POLL_INTERVAL

    # Run 1: nobody sends a webhook. The worker answers rounds 1 and 2 PENDING and round 3 FINAL.
    start_shipment(dev, readme("weave", "workflow", "start", "shipment", "--version", "1", "--id", "shipment-1"))
    worker = dev.worker_process(*readme("python", "scripts/example_worker.py", "--tasks", "3"))
    shown = settled(dev, "shipment-1")
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    final_answer = {"status": "delivered", "tracking_number": "TRK-1", "source": "query"}
    assert output.splitlines() == [
        'shipment-1 track -> {"state":"PENDING"}',
        'shipment-1 track -> {"state":"PENDING"}',
        f"shipment-1 track -> {dumps({'state': 'FINAL', 'result': final_answer})}",
    ]
    track = shown["workflow"]["steps"][0]
    assert (track["status"], track["result"]) == ("SUCCEEDED", final_answer)
    # The query won with no signal at all: the wait is satisfied without a winner signal.
    assert (track["wait"]["status"], track["wait"]["winner_signal_id"]) == ("SATISFIED", None)
    assert shown["signals"] == []
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

    # Run 2: the carrier is slow (the worker takes 30 s per answer, heartbeating each second), and
    # its webhook comes while round 1 runs. That timing is certain: the round is RUNNING when the
    # signal is accepted and the worker cannot report before 30 s unless it is asked to stop.
    shipment_2 = readme("weave", "workflow", "start", "shipment", "--version", "1", "--id", "shipment-2")
    start_shipment(dev, shipment_2)
    worker = dev.worker_process(*readme("python", "scripts/example_worker.py", "--tasks", "1", "--query-seconds"))
    assert worker.args[-2:] == ["--query-seconds", "30"]
    dev.wait_until("shipment-2", lambda wf: wf.steps[0].task and wf.steps[0].task.status == "RUNNING")
    webhook = readme("weave", "signal", "send", "shipment-2")
    signal_id, printed = send_signal(dev, webhook)
    assert re.fullmatch(rf"signal {signal_id}: PENDING, accepted \S+ \S+, idempotency key carrier-evt-2\n", printed)
    shown = settled(dev, "shipment-2")
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert output.splitlines() == [
        "shipment-2 track: asking the carrier (slow)",
        "shipment-2 track -> CANCELLED (Weave asked to stop)",
    ]
    track = shown["workflow"]["steps"][0]
    assert track["result"] == {"status": "delivered", "signed_by": "R. Doe"}
    assert (track["wait"]["status"], track["wait"]["winner_signal_id"]) == ("SATISFIED", signal_id)
    assert track["task"]["status"] == "CANCELLED"
    assert [(s["signal_id"], s["status"], s["disposition"]) for s in shown["signals"]] == [
        (signal_id, "CONSUMED", None)
    ]
    events = dev.events("shipment-2")
    # C2.4: the signal was first while the round ran, so it was taken and the round asked to stop
    # (the worker saw cancel_requested on its heartbeat); C2.5: the round then reported CANCELLED,
    # which was collected, and the step settled with the signal. No further round.
    assert decided(events) == [("TAKE_SIGNAL", "C2.4"), ("SIGNAL_WINS", "C2.5")]
    assert [r["round"] for r in of_type(events, "QUERY_ROUND_STARTED")] == [1]
    assert [r["outcome"] for r in of_type(events, "QUERY_RESULT_RECORDED")] == ["CANCELLED"]
    # The carrier retries its webhook: the same idempotency key answers the first receipt.
    again = send_signal(dev, webhook)
    assert again == (signal_id, printed[:-1] + ", a replay of the first send\n" + NOW_WON)
    assert [s.signal_id for s in dev.client.list_signals("shipment-2")] == [signal_id]
    queue = Client(dev.base, dev.exports["WEAVE_WORKER_TOKEN"], "demo", timeout=10)
    assert queue.claim("default", "test") is None

    # The README's "slower than 30 s" case: round 1 answered PENDING, the worker stopped (--tasks 1),
    # and the webhook comes while round 2 waits unclaimed in the queue: C2.3, round 2 is cancelled.
    start_shipment(dev, renamed(shipment_2, SHIPMENT_3))
    worker = dev.worker_process("scripts/example_worker.py", "--tasks", "1")
    output, _ = worker.communicate(timeout=30)
    assert (worker.returncode, output.splitlines()) == (0, ['shipment-3 track -> {"state":"PENDING"}'])
    eventually(
        lambda: [e.data["round"] for e in dev.client.events("shipment-3") if e.type == "QUERY_ROUND_STARTED"] == [1, 2]
    )
    signal_id, printed = send_signal(dev, renamed(webhook, SHIPMENT_3))
    assert printed.startswith(f"signal {signal_id}: PENDING, ")
    track = settled(dev, "shipment-3")["workflow"]["steps"][0]
    assert track["result"] == {"status": "delivered", "signed_by": "R. Doe"}
    assert (track["task"]["status"], track["task"]["attempt"]) == ("CANCELLED", 0)  # never claimed
    events = dev.events("shipment-3")
    assert decided(events) == [("SIGNAL_WINS", "C2.3")]
    assert [r["round"] for r in of_type(events, "QUERY_ROUND_STARTED")] == [1, 2]


# ---- repairing a workflow (README "Repairing a workflow", issue 28 item 5) ----------------------------


def test_R2_the_repair_walk_through_runs_as_written_and_reaches_review_by_itself(dev):
    """Every command of the README's repair block, in its order, in one shell: `export` changes the
    shell's environment (with `$NAME` expanded), `sleep N` waits as long as the workflow needs to
    reach review (at most N seconds and a margin; N must outlast refund's wait), and each `weave …`
    must succeed. What they print is checked against the workflow's state."""
    from weave.cli import DEV_REVIEW_WAIT

    shell = dict(dev.exports)
    printed = []
    for words in readme_commands("Repairing a workflow"):
        here = replace(dev, exports=shell)
        if words[0] == "sleep":
            seconds = float(words[1])
            assert seconds > DEV_REVIEW_WAIT, words  # the README's wait outlasts the definition's
            in_review = lambda: dev.client.get_workflow("refund-1").status == "NEEDS_REVIEW"  # noqa: E731
            eventually(in_review, timeout=seconds + 20)
        elif words[0] == "export":
            for word in words[1:]:
                name, value = word.split("=", 1)
                shell[name] = re.sub(r"\$(\w+)", lambda m: shell[m.group(1)], value)
        else:
            assert words[0] == "weave", words
            printed.append((words[1:], here.weave(*words[1:])))

    commands = [argv[:2] + [argv[2]] for argv, _ in printed]
    assert commands == [
        ["workflow", "start", "refund"],
        ["signal", "send", "refund-1"],
        ["workflow", "list", "--status"],
        ["workflow", "show", "refund-1"],
        ["workflow", "review", "refund-1"],
        ["workflow", "review", "refund-1"],
        ["workflow", "show", "refund-1"],
    ]
    out = [text for _, text in printed]
    assert out[0] == "workflow refund-1: RUNNING, gate OPEN\n"
    # S2.3: accepted after the wait's deadline, the approval is stored and rejected as late.
    late = re.fullmatch(r"signal (\S+): REJECTED \(LATE\), accepted \S+ \S+, idempotency key approval-r-1\n", out[1])
    assert late, out[1]
    # With the operator's token: the workflow is listed in review, for its expired wait.
    assert shell["WEAVE_TOKEN"] == dev.exports["WEAVE_OPS_TOKEN"] != dev.exports["WEAVE_TOKEN"]
    (row,) = [line.split() for line in out[2].splitlines()[1:]]
    assert row[:5] == ["refund-1", "refund", "v1", "NEEDS_REVIEW", "CLOSED"] and "WAIT_EXPIRED" in row
    assert out[3].startswith("workflow refund-1: NEEDS_REVIEW (WAIT_EXPIRED), gate CLOSED\n")
    assert out[4] == "workflow refund-1: RUNNING, gate OPEN\n"  # retry_step: a new generation
    assert out[6].startswith("workflow refund-1: SUCCEEDED")

    shown = dev.weave_json("workflow", "show", "refund-1")
    (step,) = shown["workflow"]["steps"]
    assert (step["status"], step["activation_sequence"], step["result"]) == ("SUCCEEDED", 2, {"approved_by": "j.doe"})
    assert [(s["signal_id"], s["status"], s["disposition"]) for s in shown["signals"]] == [
        (late.group(1), "REJECTED", "LATE")
    ]
    # R2: both reviews recorded with the README's reasons.
    reviews = [e["data"]["review"] for e in dev.events("refund-1") if e["data"].get("review")]
    assert [(r["action"], r["reason"]) for r in reviews] == [
        ("retry_step", "approver was away, OPS-12"),
        ("complete_step", "late approval confirmed by phone, OPS-12"),
    ]
