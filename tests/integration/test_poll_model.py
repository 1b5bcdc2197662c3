"""A model of POLL steps (SPEC §7, C1-C5) run by hypothesis against the real database.

Random interleavings of: a worker claiming the current round and reporting PENDING, the same FINAL
as the signal, another FINAL, an invalid report, a retryable or final failure, or CANCELLED (also
with a lease it has lost); heartbeats; final signals sent with the instance's correlation key or
another one; the controlled clock moving on (sometimes past a lease or the step deadline); and the
scanner's units (weave.scanner.SOURCES and its lease expiry, `weave.scanner.LEASE_EXPIRY`) run one
candidate at a time in a random order, some of them failing once and backing off (K2, C5). After
every step `poll_invariants.PollChecker` checks the rows: one settling decision per activation and
the final status it gives, never changed afterwards; the winner the facts' times give; one wait
winner; permits equal to the running tasks; one inbox event per settled task; gap-free histories.

Each example starts from empty tables, as the `database` fixture does before a test (hypothesis
runs all examples inside one test), with two instances of a one-step POLL definition, and ends by
letting time pass with nobody working until every instance is decided (each exactly once).

Bounded to well under a minute: EXAMPLES examples of at most STEPS steps. A longer soak:
`WEAVE_SOAK=1 scripts/test -k poll_model` runs 20 times as many examples of twice as many steps
(WEAVE_SOAK=N: N times that).
"""

from __future__ import annotations

import collections
import functools
import json
import os

import pytest
from helpers import Flow, empty_database, make_tenant, run_units_until_idle
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from poll_invariants import INTERVAL, PollChecker, definition, final_signal

from weave.scanner import SOURCES
from weave.sql import backoff, tasks

pytestmark = pytest.mark.slow

SOAK = int(os.environ.get("WEAVE_SOAK") or 0)
EXAMPLES = 50 * (20 * SOAK if SOAK else 1)
STEPS = 40 * (2 if SOAK else 1)

TIMEOUT = 600  # the step (and its wait's) deadline, after activation
LEASE = 60
# A task the worker can claim now (the queue has a permit for every instance).
CLAIMABLE = "SELECT COUNT(*) AS n FROM tasks WHERE status = 'QUEUED' AND available_at <= %s"
ORDERS = ("o-1", "o-2")  # workflow ids, and the correlation key of each one's final signal
RESULT = {"status": "delivered", "at": "2026-11-30T09:00:00Z"}  # what every final signal says
REPORTS = {
    "PENDING": ("SUCCEEDED", {"result": {"state": "PENDING"}}),
    # the signal's result in another member order: equal as JSON, and the step's result tells who won
    "SAME_FINAL": ("SUCCEEDED", {"result": {"state": "FINAL", "result": {"at": RESULT["at"], "status": "delivered"}}}),
    "OTHER_FINAL": ("SUCCEEDED", {"result": {"state": "FINAL", "result": {"status": "lost"}}}),
    "INVALID": ("SUCCEEDED", {"result": {"state": "SHIPPED"}}),
    "FINAL_AGAINST_SCHEMA": ("SUCCEEDED", {"result": {"state": "FINAL", "result": {"where": "depot"}}}),
    "RETRYABLE_FAILURE": ("FAILED", {"error": {"message": "carrier answered 503", "retryable": True}}),
    "FINAL_FAILURE": ("FAILED", {"error": {"message": "no such parcel", "retryable": False}}),
    "CANCELLED": ("CANCELLED", {}),
}


ENABLED = {}  # rule name -> whether it may run now


def nothing_else_to_do(self, name: str) -> bool:
    return not any(enabled(self) for other, enabled in ENABLED.items() if other != name)


def step(*, when=None, limit: int | None = None, **strategies):
    """A rule of the model, enabled while `when(self)` holds and at most `limit` times an example
    (so that cheap rules do not crowd out the others); it counts itself, so that teardown knows
    whether every step passed its checks."""

    def wrap(fn):
        @functools.wraps(fn)
        def counted(self, **kwargs):
            self.steps += 1
            self.uses[fn.__name__] += 1
            return fn(self, **kwargs)

        def enabled(self) -> bool:
            return (limit is None or self.uses[fn.__name__] < limit) and (when is None or bool(when(self)))

        ENABLED[fn.__name__] = enabled
        return precondition(enabled)(rule(**strategies)(counted))

    return wrap


def test_poll_model(database, weave_tables, client, clock):
    seen = collections.Counter()

    class PollModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            empty_database(database, weave_tables, clock)
            self.flow = Flow(client, make_tenant(database, "acme", {"inventory": 1, "carrier": 2}), database)
            self.flow.publish(definition(TIMEOUT))
            for order in ORDERS:
                self.flow.start(order, definition="poll", input={"order_id": order}, deadline_seconds=86400)
            self.checker = PollChecker(database)
            self.leases: list[dict] = []  # claimed rounds the worker holds (some leases may be lost)
            self.sent = 0  # signals, for their idempotency keys
            self.steps = self.checked = 0
            self.uses = collections.Counter()

        @initialize(activated=st.booleans())
        def activate(self, activated):
            """Half the examples start with both steps active; in the others the scanner's first
            units activate them, maybe after final signals came early (S2.1)."""
            if activated:
                run_units_until_idle(database)

        # ---- the worker ----

        @step(when=lambda self: claimable())
        def claim(self):
            claimed = self.flow.claim("carrier", lease_seconds=LEASE)
            assert claimed.status_code in (200, 204), claimed.text
            if claimed.status_code == 200:
                assert claimed.json["kind"] == "QUERY", claimed.json
                self.leases.append(claimed.json)

        @step(when=lambda self: self.leases, data=st.data(), report=st.sampled_from(sorted(REPORTS)))
        def report(self, data, report):
            task = self.leases.pop(data.draw(st.integers(0, len(self.leases) - 1), label="lease"))
            outcome, body = REPORTS[report]
            done = self.flow.complete(task, outcome=outcome, **body)
            assert done.status_code in (200, 409), done.text
            if done.status_code == 409:
                assert done.json["code"] == "LEASE_LOST", done.text
            elif outcome == "CANCELLED":
                self.checker.worker_cancelled.add(int(task["task_id"]))

        @step(when=lambda self: self.leases, limit=3, data=st.data())
        def heartbeat(self, data):
            task = data.draw(st.sampled_from(self.leases), label="lease")
            beat = self.flow.heartbeat(task, lease_seconds=LEASE)
            assert beat.status_code in (200, 409), beat.text
            if beat.status_code == 200:  # P3/C2.4: the worker learns whether it should stop
                row = self.flow.rows("SELECT cancel_requested FROM tasks WHERE id = %s", (task["task_id"],))[0]
                assert beat.json["cancel_requested"] is bool(row["cancel_requested"])

        # ---- the outside world ----

        @step(limit=4, order=st.sampled_from(ORDERS), matching=st.booleans())
        def send_final_signal(self, order, matching):
            self.sent += 1
            body = final_signal(order if matching else f"{order}-elsewhere", RESULT)
            sent = self.flow.send(order, f"k{self.sent}", body)
            assert sent.status_code == 201, sent.text

        @step(
            when=lambda self: self.uses["advance_clock"] < 8 or nothing_else_to_do(self, "advance_clock"),
            seconds=st.sampled_from([1, 5, INTERVAL, LEASE + 1, TIMEOUT // 2]),
        )
        def advance_clock(self, seconds):
            clock.advance(seconds)

        # ---- the scanner's units, one candidate at a time ----

        @step(when=lambda self: due_units(), data=st.data())
        def run_a_unit(self, data):
            due = due_units()
            source, candidate = due[data.draw(st.sampled_from(list(due)), label="unit")]
            source.process(database, candidate)

        @step(when=lambda self: due_units(), limit=2, data=st.data())
        def fail_a_unit(self, data):
            """K2: a try fails (a lost connection, say) and its source row is backed off."""
            due = due_units()
            source, candidate = due[data.draw(st.sampled_from(list(due)), label="failing unit")]
            backoff.record_failure(database, source.failures, candidate, "Retryable: injected by the test")

        @step(when=lambda self: expired_leases(), data=st.data())
        def expire_a_lease(self, data):
            row = data.draw(st.sampled_from(expired_leases()), label="expired lease")
            tasks.expire_lease(database, row["id"], row["queue_id"])

        @invariant()
        def poll_invariants_hold(self):
            self.checker.check()
            self.checked = self.steps

        def teardown(self):
            if self.checked != self.steps:
                return  # a step failed: that is the failure to report
            rows = None
            for _ in range(20):  # time passes with nobody working: leases expire, the deadline comes
                run_units_until_idle(database)
                rows = self.checker.check()
                if all(a["status"] != "ACTIVE" for a in rows["activations"]) and len(rows["activations"]) == 2:
                    break
                clock.advance(LEASE * 5)
            self.checker.all_decided(rows)
            for decided in rows["decisions"]:
                data = json.loads(decided["data"])
                seen[" ".join(filter(None, (data["rule"], data["decision"], data.get("review_reason"))))] += 1

    def due_units() -> dict[str, tuple]:
        """'source id' -> (source, id) of every candidate due now, in the sources' order (due time,
        id): ids differ from one run of an example to the next, their order does not, and
        hypothesis must see the same choices when it runs an example again."""
        return {f"{s.name} {row['id']}": (s, row["id"]) for s in SOURCES for row in database.read(s.due, 100)}

    def expired_leases() -> list[dict]:
        return sorted(database.read(tasks.expired_lease_candidates, 100), key=lambda row: row["id"])

    def claimable() -> bool:
        return bool(database.read(lambda tx: tx.all(CLAIMABLE, (clock.now(),)))[0]["n"])

    run_state_machine_as_test(
        PollModel,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    # What the examples reached (shown with -s): a model that never reaches a rule does not test it.
    print("POLL decisions reached:", dict(sorted(seen.items())))
