"""POLL steps (C1-C5 of docs/rules.md): a query round's report against a final signal, decided by
the facts' times, never by which process looks first.

The engine gathers the facts of one ACTIVE POLL activation under the instance lock (with the
activation, the wait, the generation's signals and the round's task locked after it, so that a
task cannot complete while it is being decided) and calls `decide`. Every path that looks at a
POLL step (a round's inbox event, the wait's checkpoint, the instance's ROOT checkpoint) calls
the same function with the same facts, so the order in which they run never changes the outcome.

Times: a round's `completed_at` is the database time at which Pulse settled its task (read under
the task's lock), a signal's `accepted_at` the database time of its acceptance (read under the
instance lock). The C2 table in terms of those facts:

| facts                                                                         | decision              |
| ----------------------------------------------------------------------------- | --------------------- |
| a FINAL report completed before the deadline, at or before the first signal  | C2.1 the query wins   |
| a signal, the round not started                                               | C2.3 the signal wins, the round is cancelled |
| a signal, the round running                                                   | C2.4 the winner is saved, cancel intent; the step waits |
| the signal saved, then the round reports PENDING, the same FINAL, a known failure or a cancellation | C2.5 settle with the signal |
| the signal saved, then the round's effect is unknown, its report invalid or another FINAL | C2.6 review, both facts kept |
| a signal, the round settled before it without a final answer (PENDING)        | C2.2 the signal wins  |
| the deadline passes with the round running and no winner                      | C2.7 review, the task is kept (asked to stop) |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from weave.statuses import TaskStatus

# What a round's report says (C1). A report is PENDING or FINAL; anything else is INVALID.
PENDING = "PENDING"
FINAL = "FINAL"
INVALID = "INVALID"

# Pulse outcomes of a round's task, and its states before that.
QUEUED, RUNNING = TaskStatus.QUEUED, TaskStatus.RUNNING
SUCCEEDED, FAILED, CANCELLED, UNKNOWN = (
    TaskStatus.SUCCEEDED,
    TaskStatus.FAILED,
    TaskStatus.CANCELLED,
    TaskStatus.UNKNOWN,
)
OPEN = (QUEUED, RUNNING)

# Review reasons of a POLL step (docs/decisions.md).
QUERY_FAILED = "QUERY_FAILED"  # the round's attempts ran out with no final answer and no signal
QUERY_CANCELLED = "QUERY_CANCELLED"  # the worker reported CANCELLED though nobody asked it to
QUERY_OUTCOME_UNKNOWN = "QUERY_OUTCOME_UNKNOWN"  # the last attempt's lease expired: its effect is unknown
QUERY_RESULT_INVALID = "QUERY_RESULT_INVALID"  # neither {"state":"PENDING"} nor a valid FINAL
QUERY_RESULT_CONFLICT = "QUERY_RESULT_CONFLICT"  # a FINAL other than the signal that was taken
QUERY_DEADLINE_EXCEEDED = "QUERY_DEADLINE_EXCEEDED"  # the deadline passed with no final answer
OUTCOME_REVIEW = {FAILED: QUERY_FAILED, CANCELLED: QUERY_CANCELLED, UNKNOWN: QUERY_OUTCOME_UNKNOWN}


@dataclass(frozen=True)
class Round:
    """The current round: the activation's newest query task."""

    task_id: int
    number: int  # 1, 2, 3 …
    status: str  # QUEUED, RUNNING, or its Pulse outcome
    completed_at: datetime | None = None
    report: str | None = None  # PENDING, FINAL or INVALID when the task SUCCEEDED
    result: Any = None  # the FINAL result, parsed


@dataclass(frozen=True)
class Signal:
    """A final signal that matches the wait and was accepted on time (chosen by `waits.adjudicate`)."""

    signal_id: int
    accepted_at: datetime
    result: Any  # the `result` of its FINAL payload, parsed


@dataclass(frozen=True)
class PollFacts:
    round: Round
    deadline_at: datetime  # the step's (and its wait's) deadline
    now: datetime
    interval: timedelta
    taken: Signal | None = None  # the signal already saved as the wait's winner (C2.4 earlier)
    candidate: Signal | None = None  # the first matching PENDING signal, when none is taken yet
    same_result: bool = False  # the round's FINAL result equals the signal's (JSON equality)


# Decisions: what the engine writes.
WAIT = "WAIT"  # nothing to do until a fact arrives (the round reports, a signal, the deadline)
NEXT_ROUND = "NEXT_ROUND"  # open the next round, claimable at `available_at` (C1)
QUERY_WINS = "QUERY_WINS"  # C2.1: settle with the round's result; the signals end QUERY_SETTLED
SIGNAL_WINS = "SIGNAL_WINS"  # C2.2, C2.3, C2.5: settle with the signal's result
TAKE_SIGNAL = "TAKE_SIGNAL"  # C2.4: save the winner, ask the running round to stop; the step waits
REVIEW = "REVIEW"  # step and instance NEEDS_REVIEW with `reason`


@dataclass(frozen=True)
class Decision:
    kind: str
    rule: str  # the rule (docs/rules.md#c2) that decided it, recorded with the decision
    reason: str | None = None  # for REVIEW
    signal_id: int | None = None  # the signal that wins or is taken
    cancel_round: bool = False  # the round is no longer needed: cancel it by Pulse's rules (P5)
    available_at: datetime | None = None  # for NEXT_ROUND


def decide(facts: PollFacts) -> Decision:
    current = facts.round
    if facts.taken is not None:
        return _after_taking(facts, facts.taken)
    signal = facts.candidate
    reported_final_in_time = (
        current.status == SUCCEEDED and current.report == FINAL and current.completed_at < facts.deadline_at
    )
    if reported_final_in_time and (signal is None or current.completed_at <= signal.accepted_at):
        return Decision(QUERY_WINS, "C2.1")  # equal times: the query wins
    if signal is not None:
        if current.status == QUEUED:
            return Decision(SIGNAL_WINS, "C2.3", signal_id=signal.signal_id, cancel_round=True)
        if current.status == RUNNING:
            return Decision(TAKE_SIGNAL, "C2.4", signal_id=signal.signal_id, cancel_round=True)
        if current.completed_at > signal.accepted_at:
            # The round was queued or running when the signal came: as if it had been taken then.
            return _after_taking(facts, signal)
        # The round ended before the signal came; what it said then decides.
        if current.status == SUCCEEDED and current.report == PENDING:
            return Decision(SIGNAL_WINS, "C2.2", signal_id=signal.signal_id)
        return _without_final_answer(current)
    if current.status == SUCCEEDED and current.report == PENDING:
        if facts.now >= facts.deadline_at:
            return Decision(REVIEW, "C2.7", reason=QUERY_DEADLINE_EXCEEDED)
        available_at = current.completed_at + facts.interval
        if available_at >= facts.deadline_at:
            return Decision(WAIT, "C1")  # a round that could not start in time is not opened; the deadline decides
        return Decision(NEXT_ROUND, "C1", available_at=available_at)
    if current.status in OPEN:
        if facts.now >= facts.deadline_at:
            # C2.7: the gate closes. A round not started never will be; a running one is asked to
            # stop (P5) but keeps its task, lease and permit until Pulse reports, so an expired
            # lease cannot send it round again for a step that is in review.
            return Decision(REVIEW, "C2.7", reason=QUERY_DEADLINE_EXCEEDED, cancel_round=True)
        return Decision(WAIT, "C1")
    if current.status == SUCCEEDED and current.report == FINAL:
        return Decision(REVIEW, "C2.7", reason=QUERY_DEADLINE_EXCEEDED)  # reported at or after the deadline
    return _without_final_answer(current)


def _after_taking(facts: PollFacts, signal: Signal) -> Decision:
    """C2.4-C2.6: the signal was first while the round was queued or running."""
    current = facts.round
    if current.status in OPEN:
        return Decision(WAIT, "C2.4", signal_id=signal.signal_id)
    if current.status == UNKNOWN:
        return Decision(REVIEW, "C2.6", reason=QUERY_OUTCOME_UNKNOWN, signal_id=signal.signal_id)
    if current.status == SUCCEEDED and current.report == INVALID:
        return Decision(REVIEW, "C2.6", reason=QUERY_RESULT_INVALID, signal_id=signal.signal_id)
    if current.status == SUCCEEDED and current.report == FINAL and not facts.same_result:
        return Decision(REVIEW, "C2.6", reason=QUERY_RESULT_CONFLICT, signal_id=signal.signal_id)
    return Decision(SIGNAL_WINS, "C2.5", signal_id=signal.signal_id)  # PENDING, the same FINAL, FAILED, CANCELLED


def _without_final_answer(current: Round) -> Decision:
    """A settled round that gave no final answer, with no signal before it."""
    if current.status == SUCCEEDED:
        return Decision(REVIEW, "C2.6", reason=QUERY_RESULT_INVALID)
    return Decision(REVIEW, "C1", reason=OUTCOME_REVIEW[current.status])


def parse_report(report: Any) -> tuple[str, Any]:
    """(PENDING | FINAL | INVALID, the FINAL result) of a round's reported result (C1)."""
    if isinstance(report, dict) and report.get("state") == PENDING and set(report) == {"state"}:
        return PENDING, None
    if isinstance(report, dict) and report.get("state") == FINAL and set(report) == {"state", "result"}:
        return FINAL, report["result"]
    return INVALID, None
