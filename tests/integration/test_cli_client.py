"""`weave workflow …` and `weave signal …` through `weave.cli.main`, against a real server."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from helpers import OPERATOR_SCOPES, sdk_client, signal_flow_definition, task_steps
from test_poll import final, poll_definition
from test_sdk import OPEN_CONTRACT, note

from weave.cli import main
from weave.cli.client import EVENT_FIELDS_FIRST
from weave.sdk import dumps, loads

EXACT = '{"amount":129.90,"fx":{"rate":1.0000000000000000000000000001,"from":"EUR"}}'


@pytest.fixture
def ops(live_url, tenant, monkeypatch):
    """The SDK and the command line, with the same kind of operator credential (from the environment)."""
    monkeypatch.setenv("WEAVE_URL", live_url)
    monkeypatch.setenv("WEAVE_TOKEN", tenant.token(*OPERATOR_SCOPES, queues=("inventory", "carrier"), actor="alice"))
    monkeypatch.setenv("WEAVE_NAMESPACE", tenant.namespace)
    return sdk_client(live_url, tenant)


@pytest.fixture
def order(ops, flow):
    """order-1 has reserved its stock and waits for the payment."""
    ops.publish_definition(signal_flow_definition())
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    return ops


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SEND = ("--step", "payment", "--name", "payment.settled", "--payload-version", "v1", "--reason", "PSP webhook")


def test_signal_send_sends_a_payload_file_exactly_and_a_repeat_is_a_replay(order, flow, capsys, tmp_path):
    payload = tmp_path / "payment.json"
    payload.write_text(EXACT)
    argv = ("signal", "send", "order-1", *SEND, "--correlation-key", "o-1", "--payload", f"@{payload}")
    code, out, err = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    assert (code, err) == (0, "")
    assert out.startswith("signal ") and ": PENDING, accepted " in out and "idempotency key psp-evt-1" in out
    assert flow.rows("SELECT payload FROM signals")[0]["payload"] == EXACT
    code, out, _ = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    assert code == 0 and "a replay of the first send" in out
    code, out, _ = run(capsys, *argv[:-2], "--payload", '{"amount": 1}', "--correlation-key", "o-2", "--json")
    receipt = json.loads(out)
    assert (receipt["status"], receipt["disposition"]) == ("REJECTED", "CORRELATION_MISMATCH")
    assert receipt["idempotency_key"].startswith("sdk-")


def test_workflow_start_with_an_input_file_and_a_repeat_finds_the_same_workflow(ops, capsys, tmp_path):
    ops.publish_definition(signal_flow_definition())
    given = tmp_path / "input.json"
    given.write_text('{"order_id":"o-1","total":129.90}')
    start = ("workflow", "start", "flow", "--version", "1", "--deadline-seconds", "3600")
    argv = (*start, "--input", f"@{given}", "--id", "order-1")
    assert run(capsys, *argv) == (0, "workflow order-1: RUNNING, gate OPEN\n", "")
    assert dumps(ops.get_workflow("order-1").input) == '{"order_id":"o-1","total":129.90}'
    assert run(capsys, *argv) == (0, "workflow order-1: RUNNING, gate OPEN\n", "")
    code, out, _ = run(capsys, *start, "--input", '{"order_id": "o-2"}', "--json")
    started = loads(out)
    assert code == 0 and started["workflow_id"].startswith("wf_") and started["input"] == {"order_id": "o-2"}
    assert sorted(w.workflow_id for w in ops.list_workflows()) == sorted(["order-1", started["workflow_id"]])
    code, out, err = run(capsys, *start, "--input", '{"order_id": "o-3"}', "--id", "order-1")
    assert (code, out) == (1, "") and err.startswith("weave: WORKFLOW_EXISTS: ")
    code, out, err = run(capsys, *start, "--deadline-seconds", "0", "--input", "{}", "--id", "order-9")
    assert (code, out) == (1, "") and err.startswith("weave: VALIDATION_FAILED: ")
    assert err.splitlines()[1].startswith("  /deadline_seconds: ")


def test_workflow_show_lists_steps_waits_tasks_and_signals_with_dispositions(order, flow, capsys):
    for key, correlation in (("k1", "o-2"), ("k2", "o-1")):
        run(capsys, "signal", "send", "order-1", *SEND, "--correlation-key", correlation, "--payload", '{"amount":5}')
    flow.scan()
    code, out, err = run(capsys, "workflow", "show", "order-1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "workflow order-1: RUNNING, gate OPEN"
    steps = lines[lines.index(next(line for line in lines if line.startswith("STEP"))) :]
    assert steps[0].split() == ["STEP", "TYPE", "SEQ", "STATUS", "REVIEW", "TASK", "WAIT", "RESULT"]
    reserve = next(line for line in steps if line.startswith("reserve"))
    assert "SUCCEEDED" in reserve and '{"reservation_id":"r-1"}' in reserve
    payment = next(line for line in steps if line.startswith("payment"))
    assert "SATISFIED until" in payment and "key 'o-1'" in payment and "won by signal" in payment
    assert next(line for line in steps if line.startswith("ship")).split()[:4] == ["ship", "TASK", "1", "ACTIVE"]
    signals = lines[lines.index(next(line for line in lines if line.startswith("SIGNAL"))) :]
    assert "REJECTED" in signals[1] and "CORRELATION_MISMATCH" in signals[1] and "alice" in signals[1]
    assert "CONSUMED" in signals[2]
    code, out, _ = run(capsys, "workflow", "show", "order-1", "--json")
    shown = loads(out)
    assert shown["workflow"] == order.get_workflow("order-1").raw
    assert [s["status"] for s in shown["signals"]] == ["REJECTED", "CONSUMED"]


def event_blocks(out: str) -> list[str]:
    """The rows of `workflow events`, each with its wrapped lines joined (those start with spaces)."""
    blocks: list[str] = []
    for line in out.splitlines()[1:]:
        if line.startswith(" "):
            blocks[-1] += " " + line.strip()
        else:
            blocks.append(line)
    return blocks


def test_workflow_events(order, capsys):
    code, out, _ = run(capsys, "workflow", "events", "order-1")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["SEQ", "AT", "TYPE", "DATA"]
    assert [block.split()[3] for block in event_blocks(out)] == [e.type for e in order.events("order-1")]
    code, out, _ = run(capsys, "workflow", "events", "order-1", "--json")
    assert [e["seq"] for e in json.loads(out)["events"]] == [e.seq for e in order.events("order-1")]


def test_workflow_events_show_every_member_of_the_data_and_a_decision_its_rule_first(ops, flow, capsys):
    """Issue 28 item 12: the decision, the rule and the outcome are shown whole (they were cut at 60
    characters), first in their rows, and every other member follows, wrapped, not cut."""
    ops.publish_definition(poll_definition())
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="shipment-1")
    flow.scan()
    flow.finish_task(final(), queue="carrier")
    code, out, err = run(capsys, "workflow", "events", "shipment-1")
    assert (code, err) == (0, "")
    assert all(len(line) <= 140 for line in out.splitlines())
    blocks = dict(zip([e.seq for e in ops.events("shipment-1")], event_blocks(out)))
    for event in ops.events("shipment-1"):
        shown = blocks[event.seq].split(None, 4)[4]  # after SEQ, the date and time of AT, and TYPE
        first = [name for name in EVENT_FIELDS_FIRST if name in event.data]
        assert [part.split("=", 1)[0] for part in shown.split()] == first + [n for n in event.data if n not in first]
        if event.type == "POLL_DECIDED":
            assert shown.startswith("decision=QUERY_WINS rule=C2.1 report=FINAL"), shown
        if event.type == "QUERY_RESULT_RECORDED":
            assert shown.startswith("outcome=SUCCEEDED report=FINAL"), shown
            assert 'result={"state":"FINAL","result":{"status":"delivered"' in shown


def test_a_replayed_send_says_its_receipt_is_frozen_and_prints_the_current_state(order, flow, capsys, tenant):
    """Issue 28 item 13: the replay's receipt still says PENDING (S1.7); the line below it says what
    the signal is now, read with one GET, and a winner's disposition is `won`."""
    argv = ("signal", "send", "order-1", *SEND, "--correlation-key", "o-1", "--payload", '{"amount":5}')
    code, first, _ = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    assert code == 0 and len(first.splitlines()) == 1 and "replay" not in first
    flow.scan()  # the wait takes it
    code, again, err = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    receipt, now = again.splitlines()
    assert (code, err) == (0, "")
    assert receipt.startswith(first.split(",")[0] + ", accepted ") and ": PENDING, " in receipt
    assert receipt.endswith("a replay of the first send")
    assert now == "  that receipt is frozen at the first acceptance; the signal now: CONSUMED (won)"
    code, out, _ = run(capsys, "signal", "list", "order-1")
    assert out.splitlines()[1].split()[4:6] == ["CONSUMED", "won"]
    signal_id = out.splitlines()[1].split()[0]
    code, out, _ = run(capsys, "signal", "show", "order-1", signal_id)
    assert ["disposition", "won"] in [line.split() for line in out.splitlines()]
    code, out, _ = run(capsys, "signal", "show", "order-1", signal_id, "--json")
    assert loads(out)["disposition"] is None  # the server's answer, unchanged

    # A credential that may send but not read: the receipt, and why the current state is not shown.
    sender = tenant.token("workflows:signal", queues=("inventory", "carrier"))
    code, again, err = run(capsys, *argv, "--idempotency-key", "psp-evt-1", "--token", sender)
    assert (code, err) == (0, "")
    assert again.splitlines()[1].endswith("the signal now: not readable with this token (reading needs workflows:read)")


def test_signal_list_and_show(ops, capsys):
    ops.publish_definition(OPEN_CONTRACT)
    ops.start_workflow("open", 1, {"order_id": "o-1"}, 3600, workflow_id="n-1")
    ops.send_signal("n-1", **note(), idempotency_key="k1")
    ops.send_signal("n-1", **note(), payload={"seen": True}, idempotency_key="k2")
    code, out, _ = run(capsys, "signal", "list", "n-1", "--status", "PENDING", "--json")
    absent, present = json.loads(out)["signals"]
    assert "payload" not in absent and present["payload"] == {"seen": True}
    code, out, _ = run(capsys, "signal", "show", "n-1", absent["signal_id"])
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[-1] == ["payload", "(absent)"] and ["idempotency_key", "k1"] in rows
    code, out, _ = run(capsys, "signal", "show", "n-1", present["signal_id"], "--json")
    assert loads(out)["payload"] == {"seen": True}
    code, out, _ = run(capsys, "signal", "list", "n-1")
    assert [line.split()[4] for line in out.splitlines()[1:]] == ["PENDING", "PENDING"]
    code, out, _ = run(capsys, "signal", "list", "n-1", "--status", "EXPIRED")
    assert out == "no signals\n"


def test_pause_resume_cancel(order, capsys):
    assert run(capsys, "workflow", "pause", "order-1", "--reason", "hold") == (
        0,
        "workflow order-1: PAUSED, gate CLOSED\n",
        "",
    )
    code, out, _ = run(capsys, "workflow", "resume", "order-1", "--reason", "go", "--json")
    assert (code, json.loads(out)["status"]) == (0, "RUNNING")
    assert run(capsys, "workflow", "cancel", "order-1", "--reason", "dup")[1] == (
        "workflow order-1: CANCELLED, gate CLOSED\n"
    )
    code, out, err = run(capsys, "workflow", "pause", "order-1", "--reason", "again")
    assert (code, out) == (1, "") and err.startswith("weave: INVALID_STATE: ")


def test_review_complete_step_with_a_result_file(ops, flow, capsys, tmp_path):
    ops.publish_definition(task_steps("reserve", max_attempts=1))
    ops.start_workflow("flow", 1, {}, 3600, workflow_id="order-1")
    flow.scan()
    claimed = flow.claim()
    flow.complete(claimed.json, outcome="FAILED", error={"message": "no", "retryable": False})
    flow.scan()
    result = tmp_path / "result.json"
    result.write_text('{"reservation_id":"manual","cost":0.10}')
    argv = ("workflow", "review", "order-1", "--action", "complete_step", "--step", "reserve", "--reason", "OPS-7")
    code, out, err = run(capsys, *argv, "--result", f"@{result}")
    assert (code, err) == (0, "") and out.startswith("workflow order-1: ")
    assert dumps(ops.get_workflow("order-1").step("reserve").result) == '{"reservation_id":"manual","cost":0.10}'


def test_review_errors_print_code_detail_and_pointers(ops, flow, capsys):
    ops.publish_definition(task_steps("reserve"))
    ops.start_workflow("flow", 1, {}, 3600, workflow_id="order-1")
    code, out, err = run(capsys, "workflow", "review", "order-1", "--action", "complete_step", "--reason", "x")
    assert (code, out) == (1, "")
    assert err.splitlines()[0].startswith("weave: VALIDATION_FAILED: ")
    assert any(line.startswith("  /") for line in err.splitlines()[1:])


def test_R2_R4_a_workflow_stopped_by_time_is_refused_a_step_action_with_what_now_and_extended(ops, flow, clock, capsys):
    ops.publish_definition(task_steps("reserve", "ship"))
    ops.start_workflow("flow", 1, {}, 100, workflow_id="order-1")
    clock.advance(100)
    flow.scan()  # stopped at its deadline before its first step (I4)
    code, out, err = run(capsys, "workflow", "show", "order-1")
    assert code == 0 and "NEEDS_REVIEW (DEADLINE_EXCEEDED), gate CLOSED" in out
    assert "what now: weave workflow review order-1 --action extend_deadline --deadline-seconds S" in out
    argv = ("workflow", "review", "order-1", "--reason", "OPS-7")
    code, out, err = run(capsys, *argv, "--action", "retry_step", "--step", "reserve")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith("weave: INVALID_STATE: step 'reserve' is NOT_STARTED, not under review")
    assert "extend_deadline (with deadline_seconds) lets it go on" in lines[0]
    assert lines[1:] == [
        "  what now: weave workflow review order-1 --action extend_deadline --deadline-seconds S --reason TEXT"
        "   (it then goes on)",
        "  what now: weave workflow review order-1 --action fail|cancel --reason TEXT",
    ]
    code, out, err = run(capsys, *argv, "--action", "extend_deadline", "--deadline-seconds", "600")
    assert (code, err, out) == (0, "", "workflow order-1: RUNNING, gate OPEN\n")
    assert ops.get_workflow("order-1").step("reserve").status == "ACTIVE"
    extended = ops.review("order-1", "extend_deadline", "OPS-8", deadline_seconds=60)  # the SDK's call (R4)
    assert extended.raw["deadline_at"] == (clock.now() + timedelta(seconds=60)).isoformat(timespec="microseconds") + "Z"


def test_issue_34_4_review_all_retries_each_listed_workflow_on_its_own_with_a_dry_run_first(ops, flow, clock, capsys):
    ops.publish_definition(signal_flow_definition(timeout=60))
    for n in (1, 2, 3):
        ops.start_workflow("flow", 1, {"order_id": f"o-{n}"}, 3600, workflow_id=f"order-{n}")
    flow.scan()
    for _ in range(3):
        flow.finish_task({"reservation_id": "r"})
    flow.scan()
    clock.advance(60)
    flow.scan()  # all three in review: WAIT_EXPIRED
    ops.review("order-3", "fail", "already refunded")
    ops.publish_definition(task_steps("reserve"))
    ops.start_workflow("flow", 2, {}, 3600, workflow_id="order-9")  # running: not listed
    argv = ("workflow", "review", "--all", "--reason-code", "WAIT_EXPIRED", "--action", "retry_step", "--reason", "x")
    code, out, _ = run(capsys, *argv, "--dry-run")
    assert code == 0 and out.splitlines() == [
        "order-2: would retry_step step payment",
        "order-1: would retry_step step payment",
    ]
    assert {w.status for w in ops.list_workflows(status="NEEDS_REVIEW")} == {"NEEDS_REVIEW"}  # nothing done
    code, out, _ = run(capsys, *argv[:-1], "carrier back, OPS-7")
    assert code == 0 and out.splitlines() == [
        "order-2: retry_step done: RUNNING, gate OPEN",
        "order-1: retry_step done: RUNNING, gate OPEN",
    ]
    assert [ops.get_workflow(f"order-{n}").steps[1].activation_sequence for n in (1, 2)] == [2, 2]
    reviews = flow.rows("SELECT instance_id FROM audit_records WHERE action = 'workflow.review'")
    assert len(reviews) == 3 and len({r["instance_id"] for r in reviews}) == 3  # order-3's fail, then one each
    # Nothing in review any more: nothing matches; a refusal per workflow is reported as such
    code, out, _ = run(capsys, *argv)
    assert (code, out) == (0, "no workflow matched\n")
    code, out, _ = run(
        capsys, "workflow", "review", "--all", "--status", "FAILED", "--action", "cancel", "--reason", "x", "--json"
    )
    results = json.loads(out)["results"]
    assert code == 1 and [(r["workflow_id"], r["done"], r["problem"]["code"]) for r in results] == [
        ("order-3", False, "INVALID_STATE")
    ]


def test_issue_34_4_review_takes_one_workflow_id_or_all(ops, capsys):
    for argv in (
        ("workflow", "review", "--action", "fail", "--reason", "x"),
        ("workflow", "review", "order-1", "--all", "--action", "fail", "--reason", "x"),
        ("workflow", "review", "--all", "--action", "complete_step", "--reason", "x"),
        ("workflow", "review", "order-1", "--dry-run", "--action", "fail", "--reason", "x"),
    ):
        with pytest.raises(SystemExit) as usage:
            main(list(argv))
        assert usage.value.code == 2, argv
    capsys.readouterr()


def test_workflow_list(ops, capsys):
    ops.publish_definition(task_steps("reserve"))
    for workflow_id in ("order-1", "order-2"):
        ops.start_workflow("flow", 1, {}, 3600, workflow_id=workflow_id)
    ops.pause("order-2", "hold")
    code, out, _ = run(capsys, "workflow", "list")
    assert code == 0 and out.splitlines()[0].split()[:4] == ["WORKFLOW", "DEFINITION", "STATUS", "GATE"]
    assert sorted(line.split()[0] for line in out.splitlines()[1:]) == ["order-1", "order-2"]
    code, out, _ = run(capsys, "workflow", "list", "--status", "PAUSED", "--json")
    assert [w["workflow_id"] for w in json.loads(out)["workflows"]] == ["order-2"]
    code, out, _ = run(capsys, "workflow", "list", "--id-prefix", "order-1", "--json")
    assert [w["workflow_id"] for w in json.loads(out)["workflows"]] == ["order-1"]


def test_issue_34_2_workflow_list_finds_the_workflow_waiting_on_a_business_key(order, capsys):
    code, out, _ = run(capsys, "workflow", "list", "--correlation-key", "o-1")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["order-1"]
    code, out, _ = run(capsys, "workflow", "list", "--correlation-key", "o-2", "--json")
    assert json.loads(out)["workflows"] == []
    assert [w.workflow_id for w in order.list_workflows(correlation_key="o-1", status="RUNNING")] == ["order-1"]


def test_errors_and_missing_settings(ops, capsys, monkeypatch, live_url):
    code, out, err = run(capsys, "workflow", "show", "no-such-order")
    assert (code, out) == (1, "") and err.startswith("weave: WORKFLOW_NOT_FOUND: ")
    code, _, err = run(capsys, "workflow", "show", "order-1", "--token", "wv_wrong")
    assert code == 1 and err.startswith("weave: UNAUTHENTICATED: ")
    code, _, err = run(capsys, "workflow", "show", "order-1", "--url", "http://127.0.0.1:9", "--timeout", "2")
    assert code == 1 and err.startswith("weave: CONNECTION_FAILED: ")
    monkeypatch.delenv("WEAVE_TOKEN")
    code, _, err = run(capsys, "workflow", "show", "order-1")
    assert code == 2 and "WEAVE_TOKEN" in err
    with pytest.raises(SystemExit) as usage:
        main(["signal", "send", "order-1", *SEND, "--correlation-key", "o-1", "--payload", "{not json"])
    assert usage.value.code == 2 and "is not JSON" in capsys.readouterr().err


def test_with_json_an_error_prints_its_problem_document_on_stderr(ops, flow, capsys):
    """Issue 34 item 5: a program that reads `--json` answers reads errors the same way: the
    server's problem+json as it answered it, one line on standard error; and one made in the same
    shape for an error without an answer."""
    code, out, err = run(capsys, "workflow", "show", "no-such-order", "--json")
    assert (code, out) == (1, "")
    problem = json.loads(err)
    assert (problem["code"], problem["status"], problem["type"]) == (
        "WORKFLOW_NOT_FOUND",
        404,
        "urn:weave:problem:WORKFLOW_NOT_FOUND",
    )
    ops.publish_definition(task_steps("reserve"))
    ops.start_workflow("flow", 1, {}, 3600, workflow_id="order-1")
    argv = ("workflow", "review", "order-1", "--action", "complete_step", "--reason", "x", "--json")
    code, _, err = run(capsys, *argv)
    problem = json.loads(err)
    assert code == 1 and problem["code"] == "VALIDATION_FAILED" and "pointer" in problem["errors"][0]
    argv = ("workflow", "show", "order-1", "--url", "http://127.0.0.1:9", "--timeout", "2", "--json")
    code, _, err = run(capsys, *argv)
    problem = json.loads(err)
    assert code == 1 and (problem["code"], problem["status"]) == ("CONNECTION_FAILED", None)


def test_D5_definition_publish_list_and_show(ops, capsys, tmp_path, monkeypatch):
    document = signal_flow_definition()
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(document))
    code, out, err = run(capsys, "definition", "publish", str(path))
    published = ops.get_definition("flow", 1)
    assert (code, err) == (0, "") and out == f"definition flow v1: published, digest {published.digest}\n"
    code, out, _ = run(capsys, "definition", "publish", str(path))
    assert out == f"definition flow v1: identical to the latest version: nothing published, digest {published.digest}\n"
    document["input_schema"] = {"type": "object", "required": ["order_id"]}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(document)))
    code, out, _ = run(capsys, "definition", "publish", "-", "--json")
    assert (code, loads(out)["version"]) == (0, 2)
    ops.publish_definition(task_steps("reserve") | {"name": "audit"})

    code, out, _ = run(capsys, "definition", "list")
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "VERSION", "PUBLISHED", "DIGEST"]
    newest = {d.name: d for d in ops.list_definitions()}
    assert [(r[0], r[1], r[4]) for r in rows[1:]] == [
        (name, str(newest[name].version), newest[name].digest[:12]) for name in ("audit", "flow")
    ]
    code, out, _ = run(capsys, "definition", "list", "--name", "flow", "--json")
    assert [(d["name"], d["version"]) for d in loads(out)["definitions"]] == [("flow", 2)]
    assert run(capsys, "definition", "list", "--name", "nothing")[1] == "no definitions\n"

    code, out, _ = run(capsys, "definition", "show", "flow")  # the newest: version 2
    lines = out.splitlines()
    assert lines[0].startswith("definition flow v2, published ")
    assert lines[2] == 'input schema {"type":"object","required":["order_id"]}'
    steps = [line.split() for line in lines[lines.index("") + 1 :]]
    assert steps[0] == ["STEP", "TYPE", "QUEUE", "TIMEOUT", "ATTEMPTS", "EVERY", "SIGNAL", "CORRELATION"]
    assert steps[2] == ["payment", "SIGNAL", "-", "3600s", "-", "-", "payment.settled", "v1", "/input/order_id"]
    code, out, _ = run(capsys, "definition", "show", "flow", "--version", "1")
    assert out.splitlines()[0].startswith("definition flow v1, ") and "input schema (none: any input)" in out
    code, out, _ = run(capsys, "definition", "show", "flow", "--version", "1", "--json")
    assert loads(out)["document"] == signal_flow_definition()

    for argv in (("show", "nothing"), ("show", "flow", "--version", "9")):
        code, out, err = run(capsys, "definition", *argv)
        assert (code, out) == (1, "") and err.startswith("weave: DEFINITION_NOT_FOUND: "), argv
    path.write_text(json.dumps({**document, "input_schema": {"type": 5}}))
    code, out, err = run(capsys, "definition", "publish", str(path))
    assert (code, out) == (1, "") and err.splitlines()[1].startswith("  /input_schema: not a valid Draft 2020-12")
    with pytest.raises(SystemExit) as usage:
        main(["definition", "publish", str(tmp_path / "missing.json")])
    assert usage.value.code == 2 and "cannot read" in capsys.readouterr().err
