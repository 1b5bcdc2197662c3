"""SIGNAL steps (docs/rules.md#s2): activation opens the step's wait; the wait's looks take its winner among
the generation's signals, turn down what cannot win, or expire it at its deadline (S2.2-S2.8).

The wait's pieces (opening it, adjudicating, taking the winner, the acceptance proof, expiry) are
also the POLL step's, whose final signal races its query rounds (`engine.poll`)."""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from weave import jsontext
from weave.rules import correlation
from weave.rules import signals as signal_rules
from weave.rules import waits as wait_rules
from weave.sql import audit, checkpoints, events, instances, notifications, routing, signals, tasks, waits
from weave.sql.engine.steps import Outcome, Step, needs_review, succeeded, waiting
from weave.statuses import NotifyEvent
from weave.times import rfc3339
from weave.tx import Tx

CORRELATION_UNRESOLVED = "CORRELATION_UNRESOLVED"


def activate(tx: Tx, instance: dict, activation: dict, step: Step, announce: Callable[[dict], None]) -> Outcome | None:
    """The step's wait (S2.1), or review when its correlation key does not resolve."""
    data, review_reason = open_wait(tx, instance, activation, step)
    announce(data)
    return needs_review("ACTIVATED", review_reason) if review_reason else None


def look(tx: Tx, instance: dict, latest: dict, step: Step, actor: str) -> None:
    """A ROOT look decides nothing for a SIGNAL step: its deadline is its wait's own checkpoint."""
    return None


def look_at_wait(
    tx: Tx, instance: dict, activation: dict, wait: dict, pending: list[dict], step: Step, actor: str
) -> Outcome:
    """A WAIT checkpoint: take the winner, reject what cannot win, or expire at the deadline.

    The caller holds the instance, the activation, the wait and the generation's PENDING signals
    (`pending`, in lock order); everything commits together or not at all (S2.8)."""
    verdict = adjudicate(wait, pending, tx.now())
    reject(tx, instance, verdict.rejected)
    if verdict.winner is not None:
        winner = signals.read_candidate(tx, verdict.winner)
        if not proof_holds(winner):
            return refuse_tampered(tx, instance, activation, winner)
        take(tx, instance, wait, winner, actor)
        result = winner["payload"] if winner["payload_present"] and winner["payload"] is not None else "null"
        return succeeded("CONSUMED", result)
    if verdict.expire:
        expire(tx, instance, wait)
        return needs_review("EXPIRED", "WAIT_EXPIRED")
    return waiting("WAITING")


# ---- the wait's pieces, shared with POLL steps ----------------------------------------------------------


def open_wait(tx: Tx, instance: dict, activation: dict, step: Step) -> tuple[dict, str | None]:
    """A WAITING wait for the step's contract and the instance's correlation key, with a look now
    (the early signals, S2.1, and the parked facts it takes, B4) and one at the deadline (S2.6);
    (the activation event's data, the review reason when the key does not resolve)."""
    try:
        context = instances.context(tx, instance["id"], instance["workflow_id"], instance["input"], jsontext.loads)
        key = correlation.correlation_key(context, step.correlation)
    except correlation.Unresolved as exc:
        return {"problem": str(exc)}, CORRELATION_UNRESOLVED
    deadline_at = activation["deadline_at"]
    hashed = routing.route_hash(instance["namespace_id"], step.contract["name"], step.contract["payload_version"], key)
    wait_id = waits.insert(tx, instance["id"], activation, step.document, step.contract, key, deadline_at, hashed)
    routing.take_parked(tx, instance, wait_id, activation["activation_sequence"], step.document, key, hashed)
    checkpoints.schedule_wait(tx, instance["id"], wait_id, tx.now())
    checkpoints.schedule_wait(tx, instance["id"], wait_id, deadline_at)
    if notifications.subscribed(instance.get("notify_mask"), NotifyEvent.DEADLINE_NEAR):
        checkpoints.schedule_near(tx, instance["id"], wait_id, wait_rules.near_deadline(tx.now(), deadline_at))
    return {"wait_id": str(wait_id)}, None


def notify_deadline_near(tx: Tx, instance: dict, wait_id: int) -> str | None:
    """A NEAR checkpoint (N1): 80 % of the wait's time has passed. `wait.deadline_near` is
    recorded only when the wait is still WAITING (no winner, not expired, cancelled or
    superseded) and the namespace still subscribes to it. The caller holds the instance lock,
    under which every change of a wait happens, so the wait is read without a lock of its own."""
    wait = waits.read(tx, wait_id)
    if wait is None or wait["status"] != "WAITING":
        return None
    if not notifications.subscribed(instance.get("notify_mask"), NotifyEvent.DEADLINE_NEAR):
        return None
    data = {
        "workflow_id": instance["workflow_id"],
        "step_key": wait["step_key"],
        "activation_sequence": wait["activation_sequence"],
        "deadline_at": rfc3339(wait["deadline_at"]),
    }
    notifications.record(tx, instance["namespace_id"], NotifyEvent.DEADLINE_NEAR, instance["id"], data)
    return "DEADLINE_NEAR"


def adjudicate(wait: dict, pending: list[dict], now: datetime) -> wait_rules.Verdict:
    """Who wins the wait, and what the others become (`weave.rules.waits`)."""
    return wait_rules.adjudicate(
        wait_rules.WaitFacts(wait["name"], wait["payload_version"], wait["correlation"], wait["deadline_at"]),
        [
            wait_rules.PendingSignal(s["id"], s["name"], s["payload_version"], s["correlation"], s["accepted_at"])
            for s in pending
        ],
        now,
    )


def reject(tx: Tx, instance: dict, dispositions: dict[int, str]) -> None:
    for signal_id, disposition in dispositions.items():
        signals.reject(tx, signal_id, disposition)
        events.append(tx, instance["id"], "SIGNAL_REJECTED", {"signal_id": str(signal_id), "disposition": disposition})
    signals.notify_settled(tx, instance, list(dispositions))


def take(tx: Tx, instance: dict, wait: dict, winner: dict, actor: str) -> None:
    """The wait's one winner (S2.5): the signal CONSUMED, the wait SATISFIED, with event and audit."""
    signals.consume(tx, winner["id"], wait["id"])
    waits.satisfy(tx, wait["id"], winner["id"])
    signals.notify_settled(tx, instance, [winner["id"]])
    events.append(tx, instance["id"], "SIGNAL_CONSUMED", {"signal_id": str(winner["id"]), "wait_id": str(wait["id"])})
    audit.record(
        tx,
        instance["namespace_id"],
        actor,
        "signal.consume",
        {
            "signal_id": str(winner["id"]),
            "wait_id": str(wait["id"]),
            "step": wait["step_key"],
            "activation_sequence": wait["activation_sequence"],
        },
        instance_id=instance["id"],
    )


def refuse_tampered(tx: Tx, instance: dict, activation: dict, signal: dict) -> Outcome:
    """S1.12: a signal whose stored form no longer gives its recorded digest is never used. The
    step goes to review, and a POLL step's round with it (P5: a queued round is cancelled, a
    running one asked to stop), as for every other review of a step with work in flight."""
    events.append(tx, instance["id"], "SIGNAL_PROOF_MISMATCH", {"signal_id": str(signal["id"])})
    tasks.cancel_open_tasks(tx, activation["id"])
    return needs_review("PROOF_MISMATCH", "ACCEPTANCE_PROOF_MISMATCH")


def expire(tx: Tx, instance: dict, wait: dict) -> None:
    waits.settle(tx, wait["id"], "EXPIRED")
    events.append(tx, instance["id"], "WAIT_EXPIRED", {"wait_id": str(wait["id"]), "step": wait["step_key"]})


def proof_holds(signal: dict) -> bool:
    """S1.12: the stored signal still gives the digest recorded in its acceptance audit record."""
    fields = {
        "name": signal["name"],
        "payload_version": signal["payload_version"],
        "correlation_key": signal["correlation"].decode("utf-8", "surrogateescape"),
        "reason": signal["reason"],
        "evidence_ref": signal["evidence_ref"],
    }
    if signal["route_key"] is None:
        fields["target_step_key"] = signal["target_step_key"]
        fields["target_activation_sequence"] = signal["target_activation_sequence"]
        digest = signal_rules.request_digest
    else:  # sent by its business key (B1): its digest names no target
        fields["park_seconds"] = signal["park_seconds"]
        digest = signal_rules.route_digest
    try:
        payload = jsontext.loads(signal["payload"]) if signal["payload_present"] else signal_rules.ABSENT
    except jsontext.JsonRejected:
        return False
    recorded = signal["recorded_digest"]
    if recorded is None or recorded != signal["request_digest"]:
        return False
    return digest(fields, payload) == recorded
