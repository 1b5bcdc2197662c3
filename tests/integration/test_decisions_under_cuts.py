"""Control and review calls whose connections are cut before and after COMMIT, while scans, sends
and other operators' calls interleave with their retries (issue 25, "done when"): every decision a
caller was told about is stored exactly once, and none it was refused is stored at all.

Each call goes through the fault proxy (tests/support/faultproxy.py), armed at random for that call: the
server kills the session just before COMMIT (rolled back, the client cannot tell), the COMMIT's
answer is cut after the server ran it (committed, the client cannot tell), or nothing. Between a
call's attempts (`weave.db` sleeps before it re-runs a unit) another unit runs on the plain
database: a scanner batch, a signal, or another operator's control call. Every call carries a
reason of its own, so the audit records say which calls were stored. The instance's final state
is then the replay of the stored records alone.

`WEAVE_STRESS_SEEDS` (default 6) sets how many random runs of `OPERATIONS` calls each.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest
from faultproxy import FaultProxy
from helpers import payment, signal_flow_definition

from weave import db
from weave.db import Database, Unavailable, connect
from weave.errors import WeaveError
from weave.rules import control as control_rules
from weave.rules import signals as signal_rules
from weave.sql import engine

QUEUES = ("inventory", "carrier")
WORKFLOWS = ("o-1", "o-2", "o-3")
OPERATIONS = 40
SEEDS = int(os.environ.get("WEAVE_STRESS_SEEDS", "6"))
CONTROLS = ("pause", "resume", "cancel")


class Cuts:
    """Arms one fault for the next COMMIT of the proxied database."""

    def __init__(self, proxied: Database, proxy: FaultProxy, migrated_url):
        self.proxied, self.proxy, self.url = proxied, proxy, migrated_url
        self.kill_next = False
        proxied.before_commit = self._before_commit

    def arm(self, fault: str | None) -> None:
        if fault == "after_commit":
            self.proxy.lose_reply_to(b"COMMIT")
        self.kill_next = fault == "before_commit"

    def disarm(self) -> None:
        self.kill_next = False
        with self.proxy._lock:  # a call refused before its COMMIT leaves the arming unspent
            self.proxy._lose_reply_to.clear()

    def _before_commit(self, tx, unit: str) -> None:
        if self.kill_next:
            self.kill_next = False
            killer = connect(self.url)
            with killer.cursor() as cur:
                cur.execute("KILL CONNECTION %s", (tx.cursor.connection.thread_id(),))
            killer.close()


def replay(actions: list[tuple[str, str]]) -> str:
    """The instance status the stored control records lead to, checking each was allowed (R1)."""
    status = "RUNNING"
    for action, _ in actions:
        target = control_rules.transition(action, status)
        assert target is not None, f"{action} was stored for a workflow that was {status}: {actions}"
        status = target.status
    return status


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_every_acknowledged_control_is_stored_once_under_cuts_before_and_after_commit(
    flow, database, proxied, proxy, migrated_url, monkeypatch, seed
):
    rng = random.Random(seed)
    flow.publish(signal_flow_definition())
    for workflow_id in WORKFLOWS:
        flow.start(workflow_id, input={"order_id": workflow_id})
    operator = flow.tenant.principal("workflows:control", queues=QUEUES)
    cuts = Cuts(proxied, proxy, migrated_url)
    told: dict[str, str] = {}  # reason -> "done" | "refused" | "unknown"
    sent, calls = [0], [0]
    pause = time.sleep

    def control(database_, workflow_id: str, action: str) -> None:
        calls[0] += 1
        reason = f"ticket {calls[0]}"  # a call may run inside another's retry: counted before either ends
        try:
            engine.control(database_, operator, workflow_id, action, reason)
            told[reason] = "done"
        except WeaveError:
            told[reason] = "refused"
        except Unavailable:
            told[reason] = "unknown"

    def something_else() -> None:
        """What runs between two attempts of a call: a scan, a signal, another operator."""
        choice = rng.choice(("scan", "send", "control"))
        if choice == "scan":
            flow.scanner.run_once()
        elif choice == "send":
            sent[0] += 1
            flow.send(rng.choice(WORKFLOWS), f"k{sent[0]}", payment(rng.choice(WORKFLOWS)))
        else:
            control(database, rng.choice(WORKFLOWS), rng.choice(CONTROLS))

    def between_attempts(seconds):
        if rng.random() < 0.7:
            something_else()
        pause(seconds)

    monkeypatch.setattr(db.time, "sleep", between_attempts)
    faults = {"before_commit": 0, "after_commit": 0}

    def likely_action(workflow_id: str) -> str:
        """Mostly what the instance allows now (pause, resume), sometimes anything, rarely a cancel."""
        (row,) = flow.rows("SELECT status FROM instances WHERE workflow_id = %s", (workflow_id,))
        draw = rng.random()
        if draw < 0.05:
            return "cancel"
        if draw < 0.25:
            return rng.choice(CONTROLS)
        return "resume" if row["status"] == "PAUSED" else "pause"

    for _ in range(OPERATIONS):
        fault = rng.choice((None, "before_commit", "after_commit"))
        workflow_id = rng.choice(WORKFLOWS)
        cuts.arm(fault)
        control(proxied, workflow_id, likely_action(workflow_id))
        cuts.disarm()
        if fault is not None and told[next(reversed(told))] != "refused":
            faults[fault] += 1
        if rng.random() < 0.3:
            something_else()
    monkeypatch.setattr(db.time, "sleep", pause)
    assert faults["before_commit"] and faults["after_commit"], faults  # both kinds of cut were met

    records = flow.rows(
        "SELECT i.workflow_id, a.action, a.details FROM audit_records a JOIN instances i ON i.id = a.instance_id"
        " WHERE a.action IN ('workflow.pause', 'workflow.resume', 'workflow.cancel') ORDER BY a.id"
    )
    stored: dict[str, int] = {}
    for record in records:
        reason = json.loads(record["details"])["reason"]
        stored[reason] = stored.get(reason, 0) + 1
    for reason, outcome in told.items():
        if outcome == "done":
            assert stored.get(reason) == 1, (reason, stored.get(reason), told)
        elif outcome == "refused":
            assert reason not in stored, (reason, told)
        else:
            assert stored.get(reason, 0) <= 1
    assert set(stored) <= set(told)
    for workflow_id in WORKFLOWS:
        actions = [
            (r["action"].removeprefix("workflow."), r["details"]) for r in records if r["workflow_id"] == workflow_id
        ]
        (row,) = flow.rows("SELECT status FROM instances WHERE workflow_id = %s", (workflow_id,))
        assert row["status"] == replay(actions), (workflow_id, actions)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["before_commit", "after_commit"])
def test_every_acknowledged_review_is_stored_once_under_cuts(
    expired, database, proxied, proxy, migrated_url, monkeypatch, fault
):
    """A retry_step whose COMMIT is cut, with a scan and a signal between its attempts: one new
    generation, one audit record, and the caller is told so."""
    reviewer = expired.tenant.principal("workflows:review", queues=QUEUES)
    cuts = Cuts(proxied, proxy, migrated_url)
    pause, others = time.sleep, []

    def between_attempts(seconds):
        if not others:
            others.append(expired.scanner.run_once())
            others.append(expired.send("order-1", "k-late", payment()).status_code)
        pause(seconds)

    monkeypatch.setattr(db.time, "sleep", between_attempts)
    cuts.arm(fault)
    facts = engine.review(proxied, reviewer, "order-1", "retry_step", "payment", signal_rules.ABSENT, "ticket R-1")
    cuts.disarm()
    assert others, "the call was not re-run"
    assert facts.activations["payment"]["activation_sequence"] == 2
    sequences = expired.rows("SELECT activation_sequence FROM step_activations WHERE step_key = 'payment' ORDER BY 1")
    assert sequences == [{"activation_sequence": 1}, {"activation_sequence": 2}]
    assert len(expired.rows("SELECT id FROM audit_records WHERE action = 'workflow.review'")) == 1
