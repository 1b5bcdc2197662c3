"""B7: `Client.route_signal` and `weave signal route`, against a real server."""

from __future__ import annotations

import json
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
