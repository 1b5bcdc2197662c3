"""B4's race: a fact routed by its key and the activation of the wait that waits for it, arriving
together, never both miss (the fact parked while its wait is open) and never both take (a fact in
two places). docs/decisions.md, "Routing by business key: the race".

The deterministic proof holds each side just before its COMMIT (the `before_commit` seam of
`weave.db`) while the other runs, in both orders; with the route lock switched off, the same
schedule loses the fact, which shows that the test can fail. A threaded stress test then races a
few hundred facts against their activations with two scanners and two senders in one process."""

from __future__ import annotations

import random
import threading

import pytest
from helpers import signal_flow_definition, wait_until
from test_routing import fact, payment_step, route, signal_rows

from weave.scanner import Scanner
from weave.sql import routing

HOLD_SECONDS = 90  # a side held before COMMIT is released by the test long before this
JOIN_SECONDS = 30


class Hold:
    """Pause the first unit that `matches(tx, unit)` just before its COMMIT, until released."""

    def __init__(self, database, matches):
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._matches = matches
        self._taken = False
        database.before_commit = self

    def __call__(self, tx, unit: str) -> None:
        if not self._taken and self._matches(tx, unit):
            self._taken = True
            self.arrived.set()
            assert self.release.wait(HOLD_SECONDS), "the held side was never released"


def meets_the_held_side(database, thread: threading.Thread, locking: bool) -> None:
    """With the locks, the other side ends up waiting for a lock the held one has (the server
    shows a transaction in LOCK WAIT); without them it runs to its end while the held one waits."""
    if not locking:
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive(), "without the locks nothing should wait"
        return
    wait_until(
        lambda: (
            database.read(
                lambda tx: tx.one(
                    "SELECT COUNT(*) AS n FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
                )
            )["n"]
            == 1
        ),
        timeout=JOIN_SECONDS,
        pause=0.25,  # InnoDB refreshes that table only when it was not read for 0.1 s
    )
    assert thread.is_alive()


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """Run `fn` in a thread; its result (or exception) lands in the returned dict."""
    out: dict = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: dict):
    thread.join(JOIN_SECONDS)
    assert not thread.is_alive(), "the side did not finish"
    if "error" in out:
        raise out["error"]
    return out["result"]


def opens_a_wait(tx, unit: str) -> bool:
    """The activation of the payment step: its unit has written a WAITING wait (seen by itself only)."""
    return unit != "_route" and tx.one("SELECT COUNT(*) AS n FROM waits WHERE status = 'WAITING'")["n"] > 0


def parks(tx, unit: str) -> bool:
    return unit == "_route"


@pytest.fixture
def reserved(flow):
    """w-1 of order o-1 with its reserve task reported: the next scanner batch opens its payment wait."""
    flow.publish(signal_flow_definition())
    flow.start("w-1", input={"order_id": "o-1"})
    flow.scan()
    claimed = flow.claim()
    assert flow.complete(claimed.json, result={}).status_code == 200
    return flow


def unlocked(monkeypatch, locking_read: bool = False) -> None:
    """The route lock switched off, and the take's locking read too unless `locking_read`: what
    the race proof must catch."""
    monkeypatch.setattr(routing, "lock_bucket", lambda tx, hashed: None)
    if not locking_read:
        monkeypatch.setattr(routing, "LOCK_PARKED", routing.LOCK_PARKED.replace("FOR UPDATE", ""))


@pytest.mark.parametrize("locking", [True, False], ids=["route-lock", "no-locks"])
def test_B4_a_route_while_the_activation_is_held_before_commit(reserved, database, monkeypatch, locking):
    """The activation has written its wait and taken the bucket (it found no parked fact) and is
    held before COMMIT. The route does not see the wait (uncommitted), takes the bucket and waits;
    once the activation commits, its fresh read finds the wait, and it starts again: ROUTED."""
    flow = reserved
    if not locking:
        unlocked(monkeypatch)
    hold = Hold(database, opens_a_wait)
    activation, activated = in_thread(flow.scan)
    assert hold.arrived.wait(HOLD_SECONDS)
    sender, sent = in_thread(lambda: route(flow, "pay-1", fact()))
    meets_the_held_side(database, sender, locking)  # with the lock, the route waits for the activation's COMMIT
    hold.release.set()
    finished(activation, activated)
    receipt = finished(sender, sent).json
    flow.scan()
    [row] = signal_rows(flow)
    wait = payment_step(flow, "w-1")["wait"]
    if not locking:  # both missed: the fact parked, its wait open
        assert (receipt["route"], row["status"], wait["status"]) == ("PARKED", "PARKED", "WAITING")
        return
    assert (receipt["route"], receipt["workflow_id"], receipt["status"]) == ("ROUTED", "w-1", "PENDING")
    assert row["status"] == "CONSUMED" and row["instance_id"] is not None
    assert (wait["status"], wait["winner_signal_id"]) == ("SATISFIED", receipt["signal_id"])


@pytest.mark.parametrize("locking", [True, False], ids=["route-lock", "no-locks"])
def test_B4_an_activation_while_the_route_is_held_before_commit(reserved, database, monkeypatch, locking):
    """The route found no wait, took the bucket, wrote the fact PARKED and is held before COMMIT.
    The activation writes its wait, then waits for the bucket; once the route commits, its read
    of the parked facts (after the lock) finds the fact and takes it."""
    flow = reserved
    if not locking:
        unlocked(monkeypatch)
    hold = Hold(database, parks)
    sender, sent = in_thread(lambda: route(flow, "pay-1", fact()))
    assert hold.arrived.wait(HOLD_SECONDS)
    activation, activated = in_thread(flow.scan)
    meets_the_held_side(database, activation, locking)  # with the lock, the activation waits for the route's COMMIT
    hold.release.set()
    receipt = finished(sender, sent).json
    finished(activation, activated)
    flow.scan()
    assert receipt["route"] == "PARKED"
    [row] = signal_rows(flow)
    wait = payment_step(flow, "w-1")["wait"]
    if not locking:  # both missed
        assert (row["status"], wait["status"]) == ("PARKED", "WAITING")
        return
    assert row["status"] == "CONSUMED" and row["target_step_key"] == "payment"
    assert (wait["status"], wait["winner_signal_id"]) == ("SATISFIED", receipt["signal_id"])


def test_B4_on_one_server_the_takes_locking_read_alone_waits_for_the_held_route(reserved, database, monkeypatch):
    """Without the bucket, the take's FOR UPDATE read still waits for the route's uncommitted
    insert (InnoDB locks a new index record until COMMIT), so one server closes this order twice.
    A Galera cluster does not: FOR UPDATE is local to a node there, the bucket's write is what its
    certification sees (docs/decisions.md)."""
    flow = reserved
    unlocked(monkeypatch, locking_read=True)
    hold = Hold(database, parks)
    sender, sent = in_thread(lambda: route(flow, "pay-1", fact()))
    assert hold.arrived.wait(HOLD_SECONDS)
    activation, activated = in_thread(flow.scan)
    meets_the_held_side(database, activation, True)
    hold.release.set()
    finished(sender, sent)
    finished(activation, activated)
    flow.scan()
    assert signal_rows(flow)[0]["status"] == "CONSUMED"


# ---- the stress: hundreds of facts racing their activations, in one process ----------------------------

ORDERS = 200


def test_B4_hundreds_of_facts_racing_their_activations_end_each_in_its_own_wait(flow, database):
    """Each instance's first step waits for the payment of its own order; the facts are sent while
    two scanners open the waits. Every fact ends CONSUMED by exactly its instance's wait; none is
    left parked, none taken twice."""
    flow.publish(
        {
            "name": "flow",
            "steps": [signal_flow_definition()["steps"][1], signal_flow_definition()["steps"][2]],
        }
    )
    for n in range(ORDERS):
        flow.start(f"w-{n}", input={"order_id": f"o-{n}"})
    orders = list(range(ORDERS))
    random.Random(29).shuffle(orders)
    done = threading.Event()

    def scanner():
        scanning = Scanner(database)
        while not done.is_set():
            scanning.run_once()

    def sender(share: list[int]):
        return [route(flow, f"pay-{n}", fact(f"o-{n}")).json for n in share]

    scanners = [in_thread(scanner) for _ in range(2)]
    senders = [in_thread(lambda share=orders[i::2]: sender(share)) for i in range(2)]
    receipts = [receipt for thread, out in senders for receipt in finished(thread, out)]
    done.set()
    for thread, out in scanners:
        finished(thread, out)
    flow.scan(rounds=200)

    assert all(r.get("route") in ("ROUTED", "PARKED") for r in receipts), receipts
    rows = flow.rows(
        "SELECT s.id, s.status, s.route_key, i.workflow_id FROM signals s LEFT JOIN instances i ON i.id = s.instance_id"
    )
    assert len(rows) == ORDERS
    assert {(r["status"], r["route_key"][4:] == r["workflow_id"][2:]) for r in rows} == {("CONSUMED", True)}
    winners = flow.rows(
        "SELECT w.winner_signal_id, w.status FROM waits w WHERE w.step_key = 'payment' ORDER BY w.instance_id"
    )
    assert len(winners) == ORDERS and {w["status"] for w in winners} == {"SATISFIED"}
    assert sorted(w["winner_signal_id"] for w in winners) == sorted(r["id"] for r in rows)
