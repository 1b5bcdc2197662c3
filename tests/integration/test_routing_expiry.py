"""The expiry of unrouted facts (B5): a PARKED fact whose `parked_until` passes ends
EXPIRED/EXPIRED_UNROUTED through the scanner's `fact_expiry` source, and a wait that opens after
that time does not take it, whether the scanner has expired it yet or not (the facts' times decide)."""

from __future__ import annotations

import threading

import pytest
from helpers import signal_flow_definition
from test_routing import fact, open_payment_wait, parse_rfc3339, payment_step, route, signal_rows
from test_routing_race import meets_the_held_side

from weave.scanner import SCANNED, Scanner, backlog
from weave.sql import backoff, routing
from weave.tx import Tx


@pytest.fixture
def published(flow):
    flow.publish(signal_flow_definition())
    return flow


def test_B5_a_parked_fact_expires_unrouted_at_its_parked_until_and_not_before(published, clock):
    flow = published
    receipt = route(flow, "pay-1", fact(park_seconds=60)).json
    assert receipt["route"] == "PARKED"
    clock.advance(59)
    flow.scan()
    [row] = signal_rows(flow)
    assert (row["status"], row["disposition"], row["settled_at"]) == ("PARKED", None, None)

    clock.advance(2)
    flow.scan()
    [row] = signal_rows(flow)
    assert (row["status"], row["disposition"]) == ("EXPIRED", "EXPIRED_UNROUTED")
    assert row["settled_at"] == clock.now() and row["instance_id"] is None
    assert row["expires_at"] == parse_rfc3339(receipt["parked_until"])  # its facts do not move
    read = flow.client.simulate_get(f"{flow.ns}/signals/{receipt['signal_id']}", headers=flow.headers)
    assert (read.json["status"], read.json["disposition"]) == ("EXPIRED", "EXPIRED_UNROUTED")
    # Nothing else changed: no instance, so no history; the audit holds the acceptance alone.
    assert flow.rows("SELECT COUNT(*) AS n FROM events") == [{"n": 0}]
    actions = flow.rows("SELECT action FROM audit_records WHERE signal_id = %s", (row["id"],))
    assert [a["action"] for a in actions] == ["signal.park"]


def test_B5_a_wait_that_opens_after_the_expiry_finds_nothing_to_take(published, clock):
    flow = published
    route(flow, "pay-1", fact(park_seconds=60))
    clock.advance(61)
    flow.scan()  # expired
    open_payment_wait(flow)
    [row] = signal_rows(flow)
    assert (row["status"], row["instance_id"]) == ("EXPIRED", None)
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"
    assert "SIGNAL_ROUTED" not in flow.events("w-1")


def test_B4_B5_a_wait_opening_after_parked_until_leaves_the_fact_though_no_scanner_expired_it_yet(
    published, database, clock
):
    """The take compares the fact's parked_until with its own time: a scanner that lags (here, one
    without the fact_expiry source) does not make a fact that ran out before the wait opened
    routable."""
    flow = published
    flow.scanner = Scanner(database, sources=tuple(s for s in SCANNED if s.name != "fact_expiry"))
    route(flow, "pay-1", fact(park_seconds=60))
    clock.advance(61)
    open_payment_wait(flow)
    [row] = signal_rows(flow)
    assert (row["status"], row["instance_id"]) == ("PARKED", None)
    assert "SIGNAL_ROUTED" not in flow.events("w-1")
    # The scanner with every source expires it afterwards.
    flow.scanner = Scanner(database)
    flow.scan()
    assert [(r["status"], r["disposition"]) for r in signal_rows(flow)] == [("EXPIRED", "EXPIRED_UNROUTED")]


def test_B5_K2_a_failed_expiry_is_backed_off_on_the_facts_row_and_its_times_stay(published, database, clock):
    flow = published
    receipt = route(flow, "pay-1", fact(park_seconds=60)).json
    clock.advance(61)
    signal_id = int(receipt["signal_id"])
    available_at = backoff.record_failure(database, routing.PARKED_FAILURES, signal_id, "boom")
    [row] = flow.rows("SELECT status, attempts, last_error, available_at, expires_at FROM signals")
    assert (row["status"], row["attempts"], row["last_error"]) == ("PARKED", 1, "boom")
    assert row["available_at"] == available_at > clock.now()
    assert row["expires_at"] == parse_rfc3339(receipt["parked_until"])
    flow.scan()  # not due again yet
    assert signal_rows(flow)[0]["status"] == "PARKED"
    clock.advance((available_at - clock.now()).total_seconds())
    flow.scan()
    assert signal_rows(flow)[0]["status"] == "EXPIRED"


def test_B5_the_lag_and_the_due_count_of_the_fact_expiry_source(published, database, clock):
    route(published, "pay-1", fact(park_seconds=60))
    clock.advance(65)
    figures = database.read(lambda tx: backlog(tx, count_due=True))
    assert figures["lag_seconds"]["fact_expiry"] == 5.0
    assert figures["due"]["fact_expiry"] == 1


def test_B4_B5_an_expiry_holding_the_fact_makes_the_take_wait_and_find_nothing(published, database, clock, monkeypatch):
    """The expiry holds the fact's row; a wait opening for the same key reads its parked facts with
    a locking read, so it waits for the expiry's COMMIT and then finds no PARKED fact."""
    flow = published
    flow.scanner = Scanner(database, sources=tuple(s for s in SCANNED if s.name != "fact_expiry"))
    route(flow, "pay-1", fact(park_seconds=60))
    flow.start("w-1", input={"order_id": "o-1"})
    flow.scan()  # w-1's reserve task is queued
    clock.advance(61)
    [parked] = signal_rows(flow)

    holding, release = threading.Event(), threading.Event()
    transition = Tx.transition

    def held_in_the_expiry(tx, *args, **kwargs):
        transition(tx, *args, **kwargs)
        if threading.current_thread() is expiring:  # the expiry's write is made: hold before COMMIT
            holding.set()
            release.wait(10)

    monkeypatch.setattr(Tx, "transition", held_in_the_expiry)
    expiring = threading.Thread(target=routing.expire_parked, args=(database, parked["id"]))
    expiring.start()
    assert holding.wait(10)
    opening = threading.Thread(target=flow.finish_task)  # activates payment: its take reads the key's facts
    opening.start()
    meets_the_held_side(database, opening, locking=True)  # waiting for the fact the expiry holds
    release.set()
    expiring.join(10)
    opening.join(30)
    assert not opening.is_alive()
    [row] = signal_rows(flow)
    assert (row["status"], row["disposition"], row["instance_id"]) == ("EXPIRED", "EXPIRED_UNROUTED", None)
    assert payment_step(flow, "w-1")["wait"]["status"] == "WAITING"
    assert "SIGNAL_ROUTED" not in flow.events("w-1")
