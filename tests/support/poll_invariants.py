"""What must hold of POLL steps at any moment, read from the rows (SPEC §4 P1/P6, §6 S2.5, §7 C1-C5).

Shared by the model test (`test_poll_model.py`, after every step) and the crash test
(`test_poll_crash.py`, after every SIGKILL). The workflows are one POLL step with a final signal
(`definition`), correlated on `/input/order_id`; the step's result and the signal's payload are
`{"status": …}` objects.

`PollChecker.check()` reads every row once and asserts:
- Pulse: a queue's `permits_in_use` equals its RUNNING tasks and stays within 0..max_permits; a
  settled task has exactly one inbox event (outcome and time its own), an open one none; a
  consumed QUERY inbox event has exactly one QUERY_RESULT_RECORDED event, a pending one none;
- history: every instance's event seq is gap-free from 1;
- waits: at most one winner, the one CONSUMED signal of the wait, never replaced;
- decisions: at most one POLL_DECIDED that settles an activation (QUERY_WINS, SIGNAL_WINS,
  REVIEW), none after it, at most one TAKE_SIGNAL; the activation is ACTIVE exactly while it has
  none, and then ends SUCCEEDED or NEEDS_REVIEW as the decision says, with the instance;
- the winner is the one the facts' times give (`expected`, computed here from the rows without
  `weave.rules.poll`), and what an activation settled with never changes afterwards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from weave.db import Database

INTERVAL = 60
FINAL_SCHEMA = {"type": "object", "required": ["status"]}
SETTLING = ("QUERY_WINS", "SIGNAL_WINS", "REVIEW")
OPEN = ("QUEUED", "RUNNING")


def definition(timeout: int, interval: int = INTERVAL, max_attempts: int = 2) -> dict:
    """One POLL step, `track`, on queue `carrier`, whose final signal is correlated on the order id."""
    return {
        "name": "poll",
        "steps": [
            {
                "key": "track",
                "type": "POLL",
                "queue": "carrier",
                "interval_seconds": interval,
                "timeout_seconds": timeout,
                "max_attempts": max_attempts,
                "final_signal": {"name": "shipment.final", "payload_version": "v1", "payload_schema": FINAL_SCHEMA},
                "correlation": "/input/order_id",
            }
        ],
    }


def final_signal(correlation_key: str, result: dict) -> dict:
    return {
        "name": "shipment.final",
        "payload_version": "v1",
        "target_step_key": "track",
        "target_activation_sequence": 1,
        "correlation_key": correlation_key,
        "payload": {"state": "FINAL", "result": result},
        "reason": "carrier webhook",
    }


def ordered(text: str):
    """JSON text parsed with its member order kept: tells a query's result from the signal's
    when they are equal as JSON but written in another order."""
    return json.loads(text, object_pairs_hook=lambda pairs: pairs)


# ---- the oracle ------------------------------------------------------------------------------------------


def round_outcome(task: dict, worker_cancelled: set[int]) -> str:
    """What the round said: OPEN, PENDING, FINAL (a valid final answer), INVALID, FAILED, UNKNOWN,
    CANCELLED (by its worker) or WITHDRAWN (cancelled by Weave before it started)."""
    if task["status"] in OPEN:
        return "OPEN"
    if task["status"] == "CANCELLED":
        return "CANCELLED" if task["id"] in worker_cancelled else "WITHDRAWN"
    if task["status"] != "SUCCEEDED":
        return task["status"]
    report = json.loads(task["result"])
    if report == {"state": "PENDING"}:
        return "PENDING"
    if (
        isinstance(report, dict)
        and set(report) == {"state", "result"}
        and report["state"] == "FINAL"
        and isinstance(report["result"], dict)
        and "status" in report["result"]
    ):
        return "FINAL"
    return "INVALID"


REVIEW_REASONS = {
    "INVALID": "QUERY_RESULT_INVALID",
    "FAILED": "QUERY_FAILED",
    "CANCELLED": "QUERY_CANCELLED",
    "UNKNOWN": "QUERY_OUTCOME_UNKNOWN",
}


@dataclass(frozen=True)
class Expected:
    kind: str | None  # QUERY_WINS, SIGNAL_WINS, REVIEW; None: nothing may be settled yet
    reason: str | None = None  # of a REVIEW
    winner: int | None = None  # the signal the wait must hold
    at_deadline: bool = False  # a REVIEW that may only be decided at or after the deadline


def expected(current: dict, first: dict | None, deadline: datetime, taken_open: bool, worker_cancelled) -> Expected:
    """The decision the facts' times give (SPEC §7), from the current round `current` and the first
    matching on-time signal `first` (by accepted_at, id).

    The round was still open when the signal came if it had not ended by the signal's acceptance
    (a round that ends at the same instant ended first: the tie goes to the query), if it was
    withdrawn by Weave, or if the wait was seen holding the signal while the round ran
    (`taken_open`: then the round's report came later, even at an equal reading of a clock that
    does not tick between transactions).
    """
    outcome = round_outcome(current, worker_cancelled)
    open_at_signal = first is not None and (
        taken_open or outcome in ("OPEN", "WITHDRAWN") or current["completed_at"] > first["accepted_at"]
    )
    if outcome == "FINAL" and current["completed_at"] < deadline and not open_at_signal:
        return Expected("QUERY_WINS")  # C2.1
    if open_at_signal:
        if outcome == "OPEN":
            return Expected(None)  # C2.4: the step waits for Pulse
        query_result = json.loads(current["result"])["result"] if outcome == "FINAL" else None
        if outcome in ("PENDING", "WITHDRAWN", "FAILED", "CANCELLED") or (
            outcome == "FINAL" and query_result == json.loads(first["payload"])["result"]
        ):
            return Expected("SIGNAL_WINS", winner=first["id"])  # C2.3, C2.5
        reason = "QUERY_RESULT_CONFLICT" if outcome == "FINAL" else REVIEW_REASONS[outcome]  # UNKNOWN, INVALID
        return Expected("REVIEW", reason, winner=first["id"])  # C2.6: both facts kept
    if first is not None and outcome == "PENDING":
        return Expected("SIGNAL_WINS", winner=first["id"])  # C2.2
    if outcome in ("OPEN", "PENDING", "WITHDRAWN", "FINAL"):  # no final answer in time, no signal
        return Expected("REVIEW", "QUERY_DEADLINE_EXCEEDED", at_deadline=True)  # C2.7
    return Expected("REVIEW", REVIEW_REASONS[outcome])  # C1: the round ended without an answer


# ---- reading the rows --------------------------------------------------------------------------------------

FACTS = {
    "instances": "SELECT id, workflow_id, input, status, review_reason FROM instances",
    "activations": """
        SELECT id, instance_id, step_key, activation_sequence, status, result, review_reason, deadline_at
        FROM step_activations""",
    "waits": "SELECT id, activation_id, status, winner_signal_id FROM waits",
    "signals": """
        SELECT id, instance_id, correlation, accepted_at, status, disposition, payload, consumed_wait_id
        FROM signals ORDER BY accepted_at, id""",
    "tasks": """
        SELECT id, queue_id, activation_id, kind, status, attempt, result, completed_at, cancel_requested
        FROM tasks ORDER BY id""",
    "inbox": "SELECT id, task_id, outcome, completed_at, status FROM inbox_events",
    "queues": "SELECT id, max_permits, permits_in_use FROM queues",
    "histories": "SELECT instance_id, COUNT(*) AS n, MIN(seq) AS low, MAX(seq) AS top FROM events GROUP BY instance_id",
    "decisions": "SELECT instance_id, seq, at, data FROM events WHERE type = 'POLL_DECIDED' ORDER BY instance_id, seq",
    "recorded": "SELECT data FROM events WHERE type = 'QUERY_RESULT_RECORDED'",
}


def load(tx) -> dict[str, list[dict]]:
    return {name: tx.all(sql) for name, sql in FACTS.items()}


def by(rows: list[dict], key: str) -> dict:
    grouped: dict = {}
    for row in rows:
        grouped.setdefault(row[key], []).append(row)
    return grouped


@dataclass
class PollChecker:
    """Checks the invariants over the rows, remembering what it saw between looks."""

    database: Database
    worker_cancelled: set[int] = field(default_factory=set)  # tasks the test's worker reported CANCELLED
    settled: dict[int, tuple] = field(default_factory=dict)  # activation id -> what it settled with
    winners: dict[int, int] = field(default_factory=dict)  # wait id -> its winner
    taken_open: set[int] = field(default_factory=set)  # activations whose wait held a signal while the round ran

    def check(self) -> dict[str, list[dict]]:
        rows = self.database.read(load)
        check_pulse(rows)
        check_history(rows)
        tasks = by(rows["tasks"], "activation_id")
        waits = {w["activation_id"]: w for w in rows["waits"]}
        signals = by(rows["signals"], "instance_id")
        decisions = by(rows["decisions"], "instance_id")
        instances = {i["id"]: i for i in rows["instances"]}
        self.check_winners(rows)
        for activation in rows["activations"]:
            instance = instances[activation["instance_id"]]
            mine = [
                d
                for d in decisions.get(instance["id"], [])
                if json.loads(d["data"])["activation_sequence"] == activation["activation_sequence"]
            ]
            self.check_activation(
                instance,
                activation,
                tasks[activation["id"]],
                waits[activation["id"]],
                signals.get(instance["id"], []),
                mine,
            )
        return rows

    def check_winners(self, rows) -> None:
        """S2.5: one winner per wait, the one signal it consumed, never replaced."""
        consumed = by([s for s in rows["signals"] if s["status"] == "CONSUMED"], "consumed_wait_id")
        for wait in rows["waits"]:
            taken = consumed.get(wait["id"], [])
            assert [s["id"] for s in taken] == ([wait["winner_signal_id"]] if wait["winner_signal_id"] else []), wait
            if wait["winner_signal_id"] is not None:
                assert self.winners.setdefault(wait["id"], wait["winner_signal_id"]) == wait["winner_signal_id"]
            else:
                assert wait["id"] not in self.winners, f"wait {wait['id']} lost its winner"
        assert None not in consumed, "a CONSUMED signal without its wait"

    def check_activation(self, instance, activation, rounds, wait, signals, decided) -> None:
        current = rounds[-1]  # the newest round is the current one
        assert all(r["status"] not in OPEN for r in rounds[:-1]), f"an older round is still open: {rounds}"
        if wait["winner_signal_id"] is not None and current["status"] in OPEN:
            self.taken_open.add(activation["id"])
        kinds = [json.loads(d["data"])["decision"] for d in decided]
        settling = [d for d, kind in zip(decided, kinds) if kind in SETTLING]
        assert len(settling) <= 1, f"activation {activation['id']} was settled twice: {kinds}"
        assert kinds.count("TAKE_SIGNAL") <= 1, kinds
        if activation["status"] == "ACTIVE":
            assert not settling, f"decided {kinds} but the activation is ACTIVE"
            assert instance["status"] == "RUNNING", instance
        if not settling:
            assert activation["status"] == "ACTIVE", f"activation {activation['id']} settled without a decision"
        else:
            assert decided[-1] is settling[0], f"decided again after settling: {kinds}"
        key = json.loads(instance["input"])["order_id"].encode()
        first = next(
            (s for s in signals if s["correlation"] == key and s["accepted_at"] < activation["deadline_at"]), None
        )
        # The wait only ever holds the first matching on-time signal (S2.2); later ones come later.
        assert wait["winner_signal_id"] in (None, first and first["id"]), (wait, first)
        if activation["id"] in self.settled:
            seen = self.settled[activation["id"]]
            now = (activation["status"], activation["result"], activation["review_reason"], settling[0]["seq"])
            assert now == seen[:4], f"activation {activation['id']} changed after it settled: {seen} -> {now}"
            assert wait["winner_signal_id"] == seen[4]
            return
        want = expected(
            current, first, activation["deadline_at"], activation["id"] in self.taken_open, self.worker_cancelled
        )
        facts = f"round {current}, first signal {first}, deadline {activation['deadline_at']}"
        if not settling:
            return  # not decided yet: the scanner has not looked, or the step waits for Pulse (C2.4)
        decision = json.loads(settling[0]["data"])
        assert (decision["decision"], decision.get("review_reason"), wait["winner_signal_id"]) == (
            want.kind,
            want.reason,
            want.winner,
        ), f"decided {decision}, expected {want}; {facts}"
        assert decision["task_id"] == str(current["id"]), decision
        if want.at_deadline:
            assert settling[0]["at"] >= activation["deadline_at"], f"C2.7 before the deadline: {decision}"
        if want.kind == "QUERY_WINS":
            assert ordered(activation["result"]) == ordered(json.dumps(json.loads(current["result"])["result"]))
            assert all(s["status"] == "REJECTED" for s in signals if s["correlation"] == key), signals
        elif want.kind == "SIGNAL_WINS":
            assert ordered(activation["result"]) == ordered(json.dumps(json.loads(first["payload"])["result"]))
        expected_status = "NEEDS_REVIEW" if want.kind == "REVIEW" else "SUCCEEDED"
        assert activation["status"] == expected_status and activation["review_reason"] == want.reason, activation
        assert (instance["status"], instance["review_reason"]) == (expected_status, want.reason), instance
        self.settled[activation["id"]] = (
            activation["status"],
            activation["result"],
            activation["review_reason"],
            settling[0]["seq"],
            wait["winner_signal_id"],
        )

    def all_decided(self, rows: dict[str, list[dict]]) -> None:
        """Every instance has its one activation, settled by exactly one decision."""
        activations = by(rows["activations"], "instance_id")
        assert all(len(activations.get(i["id"], [])) == 1 for i in rows["instances"]), "an instance never activated"
        assert {a["status"] for a in rows["activations"]} <= {"SUCCEEDED", "NEEDS_REVIEW"}, "an activation is undecided"
        assert len(self.settled) == len(rows["activations"])


def check_pulse(rows) -> None:
    """P1, P6: permits equal running tasks; one inbox event per settled task, consumed once."""
    running = by([t for t in rows["tasks"] if t["status"] == "RUNNING"], "queue_id")
    for queue in rows["queues"]:
        assert 0 <= queue["permits_in_use"] <= queue["max_permits"], queue
        assert queue["permits_in_use"] == len(running.get(queue["id"], [])), (queue, running.get(queue["id"]))
    inbox = by(rows["inbox"], "task_id")
    recorded = [json.loads(e["data"])["task_id"] for e in rows["recorded"]]
    tasks = {t["id"]: t for t in rows["tasks"]}
    for task in rows["tasks"]:
        events = inbox.get(task["id"], [])
        if task["status"] in OPEN:
            assert events == [], task
            continue
        assert len(events) == 1, (task, events)
        assert (events[0]["outcome"], events[0]["completed_at"]) == (task["status"], task["completed_at"]), task
        if task["kind"] == "QUERY":
            times = recorded.count(str(task["id"]))
            assert times == (1 if events[0]["status"] == "CONSUMED" else 0), (task, events, times)
    assert all(int(task_id) in tasks for task_id in recorded)


def check_history(rows) -> None:
    for history in rows["histories"]:
        assert (history["low"], history["top"]) == (1, history["n"]), f"history with gaps: {history}"
