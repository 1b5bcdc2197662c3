"""The engine's transaction entry points: the scanner's looks (`process_checkpoint`,
`consume_inbox_event`) and the API's operator actions (`control`, R1; `review`, R2-R4).

Each is one unit of work: it locks the instance first, then what hangs off it in the global order
(instance -> activation -> wait -> signals -> tasks), and commits; one that decides nothing is
rolled back (`weave.tx.Tx.decided`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from weave import jsontext
from weave.auth import Principal
from weave.db import unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import control as control_rules
from weave.rules import gate
from weave.rules import review as review_rules
from weave.rules import signals as signal_rules
from weave.sql import activations, audit, checkpoints, events, inbox, instances, signals, tasks, waits
from weave.sql.engine import moves, settle, signal
from weave.sql.engine.steps import SCANNER, Step, named, of_instance
from weave.sql.instances import WorkflowFacts
from weave.times import rfc3339
from weave.tx import Tx

# ---- the scanner's units ----------------------------------------------------------------------------


@unit_of_work
def process_checkpoint(tx: Tx, checkpoint_id: int) -> str | None:
    """Look at an instance at a due checkpoint; the checkpoint is deleted in the same transaction."""
    checkpoint = checkpoints.claim(tx, checkpoint_id)
    if checkpoint is None:
        return None  # another scanner has it, or it is done
    instance = instances.lock(tx, checkpoint["instance_id"])
    if checkpoint["available_at"] > tx.now():
        return None  # backed off after a failure: not due yet
    checkpoints.delete(tx, checkpoint_id)
    if checkpoint["kind"] == "WAIT":
        return moves.consume_wait(tx, instance, checkpoint["wait_id"], SCANNER)
    if checkpoint["kind"] == "NEAR":
        return signal.notify_deadline_near(tx, instance, checkpoint["wait_id"])
    # Every ROOT look closes the gate of a running instance past its deadline (I6), the one due at
    # the deadline first of all; then the instance advances with the gate in force.
    return moves.advance(tx, settle.close_at_deadline(tx, instance, SCANNER))


@unit_of_work
def consume_inbox_event(tx: Tx, inbox_id: int) -> str | None:
    """Apply one task outcome to its step (P7, C2); returns what happened, or None when there was
    nothing to do. The inbox row is claimed first, then the instance and the activation are locked;
    the task row is final and only read."""
    event = inbox.claim(tx, inbox_id)
    if event is None:
        return None  # another scanner has it, or it is consumed
    instance = instances.lock(tx, event["instance_id"])
    if event["available_at"] > tx.now():
        return None  # backed off after a failure: not due yet
    task = tasks.read(tx, event["task_id"])
    activation = activations.lock(tx, task["activation_id"])
    inbox.mark_consumed(tx, inbox_id)
    step = named(tx, instance, activation["step_key"])
    outcome = moves.KINDS[step.type].on_report(tx, instance, activation, step, event, SCANNER)
    return moves.apply(tx, instance, activation, outcome, SCANNER)


# ---- control (R1) -------------------------------------------------------------------------------------


@unit_of_work
def control(tx: Tx, principal: Principal, workflow_id: str, action: str, reason: str) -> WorkflowFacts:
    """R1: pause, resume or cancel, audited with the reason; 409 INVALID_STATE when not allowed. A
    re-run after its own lost COMMIT answers the instance it left (`decided_by_lost_commit`)."""
    namespace_id, actor = principal.namespace_id, principal.actor
    instance_id = instances.addressed(tx, principal, workflow_id)["id"]
    instance = instances.lock(tx, instance_id)
    if instances.decided_by_lost_commit(tx, instance, f"workflow.{action}"):
        return instances.read_facts(tx, namespace_id, workflow_id)
    deadline_passed = tx.now() >= instance["deadline_at"]
    target = control_rules.transition(action, instance["status"], deadline_passed)
    if target is None:
        raise WeaveError(Code.INVALID_STATE, f"cannot {action} a workflow that is {instance['status']}")
    if action == "cancel":
        _end_steps(tx, instance, "CANCELLED", actor)
    settle.move_instance(tx, instance, target.status, target.gate, None, actor, {"action": action, "reason": reason})
    audit.record(
        tx,
        namespace_id,
        actor,
        f"workflow.{action}",
        {"workflow_id": workflow_id, "reason": reason, "call_id": instances.call_id(tx)},
        instance_id=instance_id,
        credential_id=principal.credential_id,
    )
    if action == "resume":
        checkpoints.schedule_root(tx, instance_id, tx.now())
    return instances.read_facts(tx, namespace_id, workflow_id)


def _end_steps(tx: Tx, instance: dict, status: str, actor: str) -> None:
    """The instance ends (cancel, fail): every step that has not ended ends in `status`, waits are
    cancelled, PENDING signals REJECTED/INSTANCE_SETTLED, queued tasks cancelled and running ones
    asked to stop (P5). In lock order: activations, waits, signals, tasks."""
    unended = activations.lock_unended(tx, instance["id"])
    for activation in unended:
        settle.settle_step(tx, instance, activation, status, None, None, actor, from_status=activation["status"])
    for wait_id in waits.lock_waiting(tx, instance["id"]):
        waits.settle(tx, wait_id, "CANCELLED")
    signals.reject_all_pending(tx, instance, "INSTANCE_SETTLED")
    for activation in unended:
        tasks.cancel_open_tasks(tx, activation["id"])


# ---- review (R2, R3) ----------------------------------------------------------------------------


@unit_of_work
def review(
    tx: Tx,
    principal: Principal,
    workflow_id: str,
    action: str,
    step_key: str | None,
    result: Any,
    reason: str,
    deadline_seconds: int | None = None,
) -> WorkflowFacts:
    """R2, R4: an operator repairs an instance in NEEDS_REVIEW: retry a step (a new generation),
    complete it with a result, fail the instance or cancel it; or sets a new total deadline
    (`extend_deadline`, `deadline_seconds` from now) of one that has not ended. One transaction,
    audited with the reason and the generations (or deadlines) before and after; 409 INVALID_STATE
    or TASK_IN_FLIGHT when refused. `result` is the operator's value for complete_step
    (`weave.rules.signals.ABSENT` when not given)."""
    instance_id = instances.addressed(tx, principal, workflow_id)["id"]
    instance = instances.lock(tx, instance_id)
    if instances.decided_by_lost_commit(tx, instance, "workflow.review"):
        return instances.read_facts(tx, principal.namespace_id, workflow_id)
    step = next((s for s in of_instance(tx, instance) if s.key == step_key), None)
    if action in review_rules.STEP_ACTIONS and step is None:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"/step_key: the pinned definition has no step {step_key!r}",
            [{"pointer": "/step_key", "message": "no such step in the pinned definition"}],
        )
    latest_of = activations.latest(tx, instance_id)
    under_review = next((key for key, a in latest_of.items() if a["status"] == "NEEDS_REVIEW"), None)
    latest = latest_of.get(step_key) if action in review_rules.STEP_ACTIONS else None
    activation = wait = None
    running = False
    if latest is not None:  # in lock order: activation, wait, the generation's signals, tasks
        activation = activations.lock(tx, latest["id"])
        wait = waits.lock_of_activation(tx, activation["id"])
        signals.lock_pending_of_generation(tx, instance_id, step_key, activation["activation_sequence"])
        running = any(task["status"] == "RUNNING" for task in tasks.lock_open_of_activation(tx, activation["id"]))
    refused = review_rules.refusal(
        review_rules.ReviewFacts(
            action,
            instance["status"],
            step_key,
            activation["status"] if activation else None,
            running,
            gate.new_work(
                gate.GateFacts("RUNNING", gate.OPEN, instance["application_status"], instance["deadline_at"], tx.now())
            ),
            under_review,
            instance["review_reason"],
        )
    )
    if refused:
        raise WeaveError(Code[refused.code], refused.detail)
    actor = principal.actor
    data = {"action": action, "reason": reason}
    if action == review_rules.EXTEND_DEADLINE:
        _extend_deadline(tx, instance, deadline_seconds, under_review, actor, data)
    else:
        data["step"] = step_key
    if action == review_rules.COMPLETE_STEP:
        result_text = _operator_result(step, result)
        _close_generation(tx, instance, activation, wait, "STEP_SETTLED", wait_status="CANCELLED")
        settle.settle_step(tx, instance, activation, "SUCCEEDED", result_text, None, actor, from_status="NEEDS_REVIEW")
        data["activation_sequence"] = activation["activation_sequence"]
    elif action == review_rules.RETRY_STEP:
        _close_generation(tx, instance, activation, wait, "STALE_ACTIVATION", wait_status="SUPERSEDED")
        settle.settle_step(tx, instance, activation, "SUPERSEDED", None, None, actor, from_status="NEEDS_REVIEW")
        data.update(from_sequence=activation["activation_sequence"], to_sequence=activation["activation_sequence"] + 1)
    if action in review_rules.STEP_ACTIONS:
        # complete_step past the deadline: the gate stays closed and the next step goes to review (I4)
        instance = settle.move_instance(
            tx,
            instance,
            "RUNNING",
            gate.in_force("RUNNING", instance["deadline_at"], tx.now()),
            None,
            actor,
            {"review": data},
        )
        if action == review_rules.RETRY_STEP:
            moves.activate(tx, instance, step, activation["activation_sequence"] + 1, actor)
        else:
            moves.advance(tx, instance, actor)
    elif action in (review_rules.FAIL, review_rules.CANCEL):
        ended = "FAILED" if action == review_rules.FAIL else "CANCELLED"
        _end_steps(tx, instance, ended, actor)
        settle.move_instance(tx, instance, ended, gate.CLOSED, None, actor, {"review": data})
    audit.record(
        tx,
        principal.namespace_id,
        actor,
        "workflow.review",
        {"workflow_id": workflow_id, **data, "call_id": instances.call_id(tx)},
        instance_id=instance_id,
        credential_id=principal.credential_id,
    )
    return instances.read_facts(tx, principal.namespace_id, workflow_id)


def _extend_deadline(
    tx: Tx, instance: dict, deadline_seconds: int, under_review: str | None, actor: str, data: dict
) -> None:
    """R4: the locked instance's total deadline is `deadline_seconds` from now, with a
    DEADLINE_EXTENDED event and a ROOT checkpoint at the new deadline (I6); the gate reopens if
    nothing else holds it closed, and an instance that only time had stopped (I4) goes on at once.
    Step deadlines stay; signals keep their `expires_at` (S2.7). `data` gains both deadlines."""
    deadline_at = tx.now() + timedelta(seconds=deadline_seconds)
    data.update(previous_deadline_at=rfc3339(instance["deadline_at"]), deadline_at=rfc3339(deadline_at))
    instance = instances.set_deadline(tx, instance, deadline_at)
    events.append(tx, instance["id"], "DEADLINE_EXTENDED", data)
    checkpoints.schedule_root(tx, instance["id"], deadline_at)
    target = review_rules.after_extension(instance["status"], instance["review_reason"], under_review)
    if (target.status, target.gate) == (instance["status"], instance["gate"]):
        return
    resumed = target.status != instance["status"]
    instance = settle.move_instance(tx, instance, target.status, target.gate, None, actor, {"review": data})
    if resumed:
        moves.advance(tx, instance, actor)  # the step the deadline held back starts now


def _operator_result(step: Step, result: Any) -> str:
    """complete_step's result, validated like a real one: the signal contract's schema (SIGNAL), the
    final result's schema (POLL); its compact text (the resource has held it to 256 KiB)."""
    if result is signal_rules.ABSENT:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            "/result: complete_step needs the step's result",
            [{"pointer": "/result", "message": "required for complete_step"}],
        )
    if step.contract is not None:
        problems = signal_rules.schema_problems(step.contract["payload_schema"], result, "/result")
        if problems:
            errors = [{"pointer": p.pointer, "message": p.message} for p in problems]
            raise WeaveError(Code.VALIDATION_FAILED, f"{errors[0]['pointer']}: {errors[0]['message']}", errors)
    return jsontext.compact(result)


def _close_generation(
    tx: Tx, instance: dict, activation: dict, wait: dict | None, disposition: str, wait_status: str
) -> None:
    """What hangs off an activation an operator settles: its (locked) wait ends (`wait_status`), its
    PENDING signals are REJECTED with `disposition`, its queued tasks are cancelled (none runs: the
    caller checked, holding their locks)."""
    if wait is not None and wait["status"] != "SUPERSEDED":
        if wait_status == "SUPERSEDED":
            waits.supersede(tx, wait["id"])
        elif wait["status"] == "WAITING":
            waits.settle(tx, wait["id"], wait_status)
    signals.reject_pending_of_generation(
        tx, instance, activation["step_key"], activation["activation_sequence"], disposition
    )
    tasks.cancel_open_tasks(tx, activation["id"])
