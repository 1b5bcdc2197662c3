"""B7: `Client.route_signal`, `get_routed_signal`, `wait_seconds`, `weave signal route` and `weave signal
show SIGNAL_ID`, against a real server."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from helpers import signal_flow_definition
from test_cli_client import ops, order, run  # noqa: F401 (fixtures)

from weave.sdk import RoutedReceipt

FACT = ("--name", "payment.settled", "--payload-version", "v1", "--reason", "PSP webhook")


def test_B7_route_signal_parks_the_fact_and_the_opening_wait_takes_it(ops, flow):  # noqa: F811
    ops.publish_definition(signal_flow_definition())
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    fact = {
        "name": "payment.settled",
        "payload_version": "v1",
        "correlation_key": "o-1",
        "reason": "PSP webhook",
        "payload": {"amount": 5},
        "idempotency_key": "psp-evt-1",
        "park_seconds": 600,
    }
    receipt = ops.route_signal(**fact)
    assert isinstance(receipt, RoutedReceipt) and not receipt.replayed
    assert (receipt.route, receipt.status, receipt.workflow_id) == ("PARKED", "PARKED", None)
    assert receipt.parked_until - receipt.accepted_at == timedelta(seconds=600)
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    step = next(s for s in ops.get_workflow("order-1").steps if s.key == "payment")
    assert step.status == "SUCCEEDED" and step.wait.winner_signal_id == receipt.signal_id
    again = ops.route_signal(**fact)
    assert again.replayed and again.raw == receipt.raw  # the first receipt, wherever the fact went


def test_B7_weave_signal_route_names_where_the_fact_went(order, flow, capsys):  # noqa: F811
    argv = ("signal", "route", *FACT, "--correlation-key", "o-1", "--payload", '{"amount":12.5}')
    code, out, err = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    assert (code, err) == (0, "")
    assert "routed to workflow order-1, step payment (activation 1); PENDING" in out and "psp-evt-1" in out
    code, out, _ = run(capsys, *argv, "--idempotency-key", "psp-evt-1")
    assert code == 0 and "a replay of the first send" in out
    code, out, _ = run(capsys, "signal", "route", *FACT, "--correlation-key", "o-404", "--park-seconds", "60")
    assert code == 0 and "parked until " in out and "PARKED" in out
    code, out, _ = run(capsys, "signal", "route", *FACT, "--correlation-key", "o-405", "--json")
    receipt = json.loads(out)
    assert receipt["route"] == "PARKED" and receipt["idempotency_key"].startswith("sdk-")
    with pytest.raises(SystemExit) as refused:  # argparse: a positive number
        run(capsys, "signal", "route", *FACT, "--correlation-key", "o-1", "--park-seconds", "0")
    assert refused.value.code == 2 and "must be a positive integer" in capsys.readouterr().err


def test_B7_get_routed_signal_reads_the_fact_wherever_it_is_and_waits_for_its_fate(ops, flow):  # noqa: F811
    ops.publish_definition(signal_flow_definition())
    ops.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    receipt = ops.route_signal(
        name="payment.settled", payload_version="v1", correlation_key="o-1", reason="PSP", payload={"amount": 5}
    )
    parked = ops.get_routed_signal(receipt.signal_id)
    assert (parked.route, parked.status, parked.workflow_id, parked.payload) == (
        "PARKED",
        "PARKED",
        None,
        {"amount": 5},
    )
    started = time.monotonic()
    assert ops.get_routed_signal(receipt.signal_id, wait_seconds=1).status == "PARKED"  # the time passed
    assert time.monotonic() - started >= 0.9
    assert [s.signal_id for s in ops.list_unrouted_signals(status="PARKED", correlation_key="o-1")] == [
        receipt.signal_id
    ]
    flow.scan()
    answers: dict = {}
    waiting = threading.Thread(target=lambda: answers.update(fact=ops.get_routed_signal(receipt.signal_id, 10)))
    waiting.start()
    flow.finish_task({"reservation_id": "r-1"})  # the payment wait opens, takes the fact, consumes it
    waiting.join(15)
    fate = answers["fact"]
    assert (fate.route, fate.status, fate.workflow_id, fate.target_step_key) == (
        "ROUTED",
        "CONSUMED",
        "order-1",
        "payment",
    )
    same = ops.get_signal("order-1", receipt.signal_id, wait_seconds=5)  # settled: answered at once
    assert same.raw == fate.raw and same.route == "ROUTED"
    assert list(ops.list_unrouted_signals()) == []


def test_B7_weave_signal_show_with_a_signal_id_alone_reads_the_routed_fact(order, flow, capsys):  # noqa: F811
    code, out, _ = run(capsys, "signal", "route", *FACT, "--correlation-key", "o-9", "--json")
    parked_id = json.loads(out)["signal_id"]
    code, out, err = run(capsys, "signal", "show", parked_id)
    assert (code, err) == (0, "") and "PARKED" in out and "route" in out
    code, out, _ = run(capsys, "signal", "show", parked_id, "--json", "--wait-seconds", "1")
    assert code == 0 and (json.loads(out)["route"], json.loads(out)["workflow_id"]) == ("PARKED", None)
    code, out, err = run(
        capsys, "signal", "route", *FACT, "--correlation-key", "o-1", "--payload", '{"amount": 1}', "--json"
    )
    assert code == 0, err
    routed_id = json.loads(out)["signal_id"]
    flow.scan()
    code, out, _ = run(capsys, "signal", "show", routed_id, "--json")
    shown = json.loads(out)
    assert (shown["route"], shown["status"], shown["workflow_id"]) == ("ROUTED", "CONSUMED", "order-1")
    code, out, _ = run(capsys, "signal", "show", "order-1", routed_id, "--json")
    assert json.loads(out) == shown
    code, _, err = run(capsys, "signal", "show", "999999")
    assert code == 1 and "SIGNAL_NOT_FOUND" in err
    with pytest.raises(SystemExit) as refused:
        run(capsys, "signal", "show", parked_id, "--wait-seconds", "21")
    assert refused.value.code == 2 and "from 0 to 20" in capsys.readouterr().err
