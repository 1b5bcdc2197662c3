"""Settling a step and moving the instance, with their events and audit records, and the gate
(I3, I4, I6): the writes every step kind's outcome, control and review come down to."""

from __future__ import annotations

from datetime import timedelta

from weave import views
from weave.rules import gate
from weave.sql import activations, audit, checkpoints, events, instances, notifications
from weave.statuses import NotifyEvent
from weave.times import rfc3339
from weave.tx import Tx

# A disabled application blocks new work; nothing announces its re-enabling, so look again later.
DISABLED_APPLICATION_RECHECK = timedelta(seconds=60)


def settle_step(
    tx: Tx,
    instance: dict,
    activation: dict,
    status: str,
    result_text: str | None,
    review_reason: str | None,
    actor: str,
    from_status: str = "ACTIVE",
) -> None:
    """The locked activation ends in `status`, with its event and audit record."""
    activations.settle(tx, activation["id"], status, result_text, review_reason, from_status)
    data = {"step": activation["step_key"], "activation_sequence": activation["activation_sequence"]}
    if review_reason:
        data["review_reason"] = review_reason
    events.append(tx, instance["id"], f"STEP_{status}", data)
    audit.record(
        tx, instance["namespace_id"], actor, "step.settle", {**data, "status": status}, instance_id=instance["id"]
    )


def review_step(tx: Tx, instance: dict, activation: dict, reason: str, actor: str) -> dict:
    """The step needs an operator: it goes NEEDS_REVIEW and takes the instance with it (gate
    CLOSED) unless the instance has already ended. Returns the instance as it is afterwards."""
    settle_step(tx, instance, activation, "NEEDS_REVIEW", None, reason, actor)
    if instance["status"] in gate.TERMINAL:
        return instance
    return move_instance(tx, instance, "NEEDS_REVIEW", gate.CLOSED, reason, actor, {"step": activation["step_key"]})


def move_instance(
    tx: Tx,
    instance: dict,
    status: str,
    gate_state: str,
    review_reason: str | None,
    actor: str,
    event_data: dict | None = None,
    event_type: str | None = None,
) -> dict:
    """Move the locked instance to (status, gate, review_reason) with its event (`WORKFLOW_<status>`
    unless `event_type` names it) and audit record; returns the instance as it is afterwards."""
    moved = instances.move(tx, instance, status, gate_state, review_reason)
    if status != instance["status"]:
        notify_workflow(tx, moved)
    data = {"status": status, "gate": gate_state, "review_reason": review_reason, **(event_data or {})}
    events.append(tx, instance["id"], event_type or f"WORKFLOW_{status}", data)
    audit.record(
        tx,
        instance["namespace_id"],
        actor,
        "workflow.state",
        {"from": {"status": instance["status"], "gate": instance["gate"]}, "to": data},
        instance_id=instance["id"],
    )
    return moved


# The instance statuses that are notified on entry (N1), by their event type.
NOTIFIED_STATUSES = {
    "NEEDS_REVIEW": NotifyEvent.NEEDS_REVIEW,
    "SUCCEEDED": NotifyEvent.SUCCEEDED,
    "FAILED": NotifyEvent.FAILED,
    "CANCELLED": NotifyEvent.CANCELLED,
}


def notify_workflow(tx: Tx, instance: dict) -> None:
    """N2: the locked instance has just entered its status; when that status is notified and the
    namespace subscribes to it (`notify_mask`, read with the instance lock), the workflow
    representation of §11 as it is now is recorded, in this transaction. Otherwise nothing is
    read or rendered."""
    event = NOTIFIED_STATUSES.get(instance["status"])
    if event is None or not notifications.subscribed(instance.get("notify_mask"), event):
        return
    facts = instances.read_facts(tx, instance["namespace_id"], instance["workflow_id"])
    notifications.record(tx, instance["namespace_id"], event, instance["id"], views.workflow_view(facts))


def _gate_facts(tx: Tx, instance: dict) -> gate.GateFacts:
    return gate.GateFacts(
        instance["status"], instance["gate"], instance["application_status"], instance["deadline_at"], tx.now()
    )


def close_at_deadline(tx: Tx, instance: dict, actor: str) -> dict:
    """I6: a look at a running instance past its total deadline closes its gate, with a
    DEADLINE_PASSED event, so that the gate shown is the gate in force; the work already started
    goes on (its results are collected, S2.4) and what needs new work goes to review (I4). Once
    only: the gate is closed afterwards. Returns the instance as it is afterwards."""
    if not gate.passes_deadline(_gate_facts(tx, instance)):
        return instance
    return move_instance(
        tx,
        instance,
        instance["status"],
        gate.CLOSED,
        instance["review_reason"],
        actor,
        {"deadline_at": rfc3339(instance["deadline_at"])},
        event_type="DEADLINE_PASSED",
    )


def new_work(tx: Tx, instance: dict, actor: str) -> str:
    """May the instance start new work now (I3)? Past its total deadline it goes to review (I4);
    held back by a disabled application, it looks again later (nothing announces re-enabling)."""
    verdict = gate.new_work(_gate_facts(tx, instance))
    if verdict == gate.DEADLINE_EXCEEDED:
        move_instance(tx, instance, "NEEDS_REVIEW", gate.CLOSED, "DEADLINE_EXCEEDED", actor)
    elif verdict == gate.HOLD and instance["application_status"] != "ACTIVE" and instance["status"] == "RUNNING":
        checkpoints.schedule_root(tx, instance["id"], tx.now() + DISABLED_APPLICATION_RECHECK)
    return verdict
