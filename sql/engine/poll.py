"""POLL steps (docs/rules.md#poll): query rounds on the step's queue race a final signal, decided by the facts'
times (`weave.rules.poll`) whichever path looks first: a round's report (its inbox event), the
wait's checkpoint, or the instance's ROOT look (`look_at_poll`, the one place they all come to)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

from weave import jsontext
from weave.rules import gate, poll
from weave.schemas import linear
from weave.schemas.payload import payload_errors
from weave.sql import activations, checkpoints, events, inbox, signals, tasks, waits
from weave.sql.engine import settle, signal
from weave.sql.engine.steps import Outcome, Step, needs_review, succeeded, waiting
from weave.times import rfc3339
from weave.tx import Tx

# A round's report held by another unit: it is applied by that unit, or backed off; look again.
INBOX_HELD_RECHECK = timedelta(seconds=1)


def activate(tx: Tx, instance: dict, activation: dict, step: Step, announce: Callable[[dict], None]) -> Outcome | None:
    """The wait for the final signal (when the step has one) and round 1, claimable now (C1)."""
    if step.contract is not None:
        data, review_reason = signal.open_wait(tx, instance, activation, step)
    else:  # no wait: the deadline is a ROOT look
        checkpoints.schedule_root(tx, instance["id"], activation["deadline_at"])
        data, review_reason = {}, None
    announce(data)
    if review_reason:
        return needs_review("ACTIVATED", review_reason)
    open_round(tx, instance, activation, step, 1, tx.now())
    return None


def look(tx: Tx, instance: dict, latest: dict, step: Step, actor: str) -> tuple[dict, Outcome]:
    """A ROOT look (e.g. a resume: a round the gate held back may open now)."""
    activation = activations.lock(tx, latest["id"])
    return activation, look_at_poll(tx, instance, activation, step, actor)


def look_at_wait(
    tx: Tx, instance: dict, activation: dict, wait: dict, pending: list[dict], step: Step, actor: str
) -> Outcome:
    """The final signal's wait is due (a signal came, or its deadline)."""
    return look_at_poll(tx, instance, activation, step, actor, wait=wait, pending=pending)


def on_report(tx: Tx, instance: dict, activation: dict, step: Step, event: dict, actor: str) -> Outcome:
    """A round's final report: recorded once, then the step is decided with it (while ACTIVE)."""
    record_report(tx, instance, activation, step, event)
    if activation["status"] != "ACTIVE":
        return waiting("RECORDED")  # later results do not reopen a settled or reviewed step (C2.7)
    return look_at_poll(tx, instance, activation, step, actor, inbox_path=True)


def look_at_poll(
    tx: Tx,
    instance: dict,
    activation: dict,
    step: Step,
    actor: str,
    *,
    wait: dict | None = None,
    pending: list[dict] | None = None,
    inbox_path: bool = False,
) -> Outcome:
    """Decide an ACTIVE POLL activation from its facts (`weave.rules.poll`).

    The caller holds the instance and activation locks (and the wait's and its PENDING signals',
    when it passes them); the rest is locked here, in order: the wait, the generation's PENDING
    signals, the current round's task, so no report or signal can arrive while the facts are read.
    """
    if wait is None and step.contract is not None:
        wait = waits.lock_of_activation(tx, activation["id"])
    waiting_wait = wait is not None and wait["status"] == "WAITING"
    if pending is None:
        pending = tx.all_together(signals.locking_pending_of_wait(wait["id"]))[0] if waiting_wait else []
    current = tasks.lock_current_round(tx, activation["id"])
    now = tx.now()
    if not inbox_path and current["status"] not in poll.OPEN:
        unconsumed = inbox.claim_of_task(tx, current["id"])
        if unconsumed is None and inbox.held_of_task(tx, current["id"]):
            # C5: another unit holds the round's report (one that applies it waits for this
            # instance lock; a failed try records its backoff): never decide without it.
            checkpoints.look_again(tx, instance["id"], now + INBOX_HELD_RECHECK)
            return waiting("DEFERRED")
        if unconsumed is not None and unconsumed["attempts"] > 0 and unconsumed["available_at"] > now:
            # C5: the round's report failed to apply and waits for its retry: never decide without it.
            checkpoints.look_again(tx, instance["id"], unconsumed["available_at"])
            return waiting("DEFERRED")
        if unconsumed is not None:
            # C5: decide with the stored report, and record it first, so the history shows every
            # fact before the decision it made.
            inbox.mark_consumed(tx, unconsumed["id"])
            record_report(tx, instance, activation, step, unconsumed)
    the_round = _round(current, step)
    candidate_row = taken = candidate = None
    if waiting_wait:
        verdict = signal.adjudicate(wait, pending, now)
        # Mismatched and late signals are refused whoever wins; matching losers wait for the winner.
        signal.reject(tx, instance, {i: d for i, d in verdict.rejected.items() if d != "WAIT_SETTLED"})
        if verdict.winner is not None:
            candidate_row = signals.read_candidate(tx, verdict.winner)
            candidate = _final_signal(candidate_row)
    elif wait is not None and wait["winner_signal_id"] is not None:
        taken = _final_signal(signals.read_payload(tx, wait["winner_signal_id"]))
    final = taken or candidate
    decision = poll.decide(
        poll.PollFacts(
            round=the_round,
            deadline_at=activation["deadline_at"],
            now=now,
            interval=timedelta(seconds=step.interval_seconds),
            taken=taken,
            candidate=candidate,
            same_result=final is not None
            and the_round.report == poll.FINAL
            and linear.identity(the_round.result) == linear.identity(final.result),
        )
    )
    if decision.kind == poll.WAIT:
        return waiting("WAITING")
    if decision.kind == poll.NEXT_ROUND:
        allowed = settle.new_work(tx, instance, actor)
        if allowed != gate.GO:
            return waiting(allowed)  # a resume (ROOT checkpoint) or the re-enabled application looks again
        open_round(tx, instance, activation, step, the_round.number + 1, decision.available_at)
        return waiting("ROUND_OPENED")
    if candidate_row is not None and decision.signal_id == candidate_row["id"]:
        # The signal wins, or is taken while the round runs, or was first before a report the
        # signal cannot overwrite (C2.6): in every case it is the wait's winner, whichever path
        # looked first.
        if not signal.proof_holds(candidate_row):
            return signal.refuse_tampered(tx, instance, activation, candidate_row)
        signal.take(tx, instance, wait, candidate_row, actor)
        signal.reject(tx, instance, {i: d for i, d in verdict.rejected.items() if d == "WAIT_SETTLED"})
    if decision.cancel_round:
        tasks.cancel_open_tasks(tx, activation["id"])
    events.append(tx, instance["id"], "POLL_DECIDED", _decision_data(activation, decision, the_round, final))
    if decision.kind == poll.QUERY_WINS:
        if waiting_wait:
            signal.reject(
                tx, instance, {i: "QUERY_SETTLED" for i, d in verdict.rejected.items() if d == "WAIT_SETTLED"}
            )
            if candidate is not None:
                signal.reject(tx, instance, {candidate.signal_id: "QUERY_SETTLED"})
            waits.satisfy(tx, wait["id"], None)
        return succeeded("QUERY_WON", jsontext.compact(the_round.result))
    if decision.kind == poll.SIGNAL_WINS:
        return succeeded("SIGNAL_WON", jsontext.compact(final.result))
    if decision.kind == poll.TAKE_SIGNAL:
        return waiting("SIGNAL_TAKEN")  # C3: the wait is SATISFIED, the step stays ACTIVE until Pulse reports
    if waiting_wait and decision.signal_id is None and now >= wait["deadline_at"]:
        signal.expire(tx, instance, wait)  # a wait that has just taken its signal (C2.6) is SATISFIED instead
    return needs_review("REVIEW", decision.reason)


def _report(result_text: str | None, step: Step) -> tuple[str, Any]:
    """(PENDING | FINAL | INVALID, the FINAL result) of a round that SUCCEEDED; a FINAL result must
    also fit the final signal's schema (C2.6)."""
    report, result = poll.parse_report(jsontext.loads(result_text) if result_text is not None else None)
    if report == poll.FINAL and step.contract is not None:
        if payload_errors(step.contract["payload_schema"], result):
            return poll.INVALID, None
    return report, result


def _round(task: dict, step: Step) -> poll.Round:
    """The current round's facts."""
    report = result = None
    if task["status"] == poll.SUCCEEDED:
        report, result = _report(task["result"], step)
    return poll.Round(
        task_id=task["id"],
        number=task["number"],
        status=task["status"],
        completed_at=task["completed_at"],
        report=report,
        result=result,
    )


def _final_signal(row: dict) -> poll.Signal:
    """A final signal's facts; its payload was checked at acceptance to be {"state": "FINAL", "result": …}."""
    return poll.Signal(row["id"], row["accepted_at"], jsontext.loads(row["payload"])["result"])


def open_round(tx: Tx, instance: dict, activation: dict, step: Step, number: int, available_at: datetime) -> None:
    """Round `number`: a QUERY task on the step's queue, claimable at `available_at` (C1)."""
    task_id = tasks.create(
        tx,
        instance["namespace_id"],
        step.queue,
        instance["id"],
        activation["id"],
        "QUERY",
        step.max_attempts,
        activation["deadline_at"],
        available_at,
    )
    events.append(
        tx,
        instance["id"],
        "QUERY_ROUND_STARTED",
        {
            "step": step.key,
            "activation_sequence": activation["activation_sequence"],
            "round": number,
            "task_id": str(task_id),
            "available_at": rfc3339(available_at),
        },
    )


def _decision_data(activation: dict, decision: poll.Decision, the_round: poll.Round, final) -> dict:
    """What a POLL decision is recorded with: the rule, and the facts' times that made it."""
    data = {
        "step": activation["step_key"],
        "activation_sequence": activation["activation_sequence"],
        "decision": decision.kind,
        "rule": decision.rule,
        "round": the_round.number,
        "task_id": str(the_round.task_id),
        "task_status": the_round.status,
        "report": the_round.report,
        "completed_at": rfc3339(the_round.completed_at),
    }
    if final is not None:
        data.update(signal_id=str(final.signal_id), accepted_at=rfc3339(final.accepted_at))
    if decision.reason:
        data["review_reason"] = decision.reason
    return data


def record_report(tx: Tx, instance: dict, activation: dict, step: Step, event: dict) -> None:
    """QUERY_RESULT_RECORDED, once per round's final report (its inbox event is consumed with it):
    Pulse's outcome, what the report says, and the report or error as the worker sent it."""
    data = {
        "step": activation["step_key"],
        "activation_sequence": activation["activation_sequence"],
        "task_id": str(event["task_id"]),
        "outcome": event["outcome"],
        "completed_at": rfc3339(event["completed_at"]),
    }
    if event["outcome"] == poll.SUCCEEDED:
        data["report"] = _report(event["result"], step)[0]
    if event["result"] is not None:
        data["result" if event["outcome"] == poll.SUCCEEDED else "error"] = jsontext.Raw(event["result"])
    events.append(tx, instance["id"], "QUERY_RESULT_RECORDED", data)
