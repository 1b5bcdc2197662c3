"""`weave workflow …` and `weave signal …` through `weave.cli.main`, against a real server."""

from __future__ import annotations

import json

import pytest
from helpers import OPERATOR_SCOPES, sdk_client, signal_flow_definition, task_steps
from test_sdk import OPEN_CONTRACT, note

from weave.cli import main
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


def test_workflow_events(order, capsys):
    code, out, _ = run(capsys, "workflow", "events", "order-1")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["SEQ", "AT", "TYPE", "DATA"]
    assert [line.split()[3] for line in lines[1:]] == [e.type for e in order.events("order-1")]
    code, out, _ = run(capsys, "workflow", "events", "order-1", "--json")
    assert [e["seq"] for e in json.loads(out)["events"]] == [e.seq for e in order.events("order-1")]


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
