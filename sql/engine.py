"""The engine: everything that advances a workflow, on top of the table modules.

The table modules (`instances`, `activations`, `waits`, `signals`, `tasks`, `inbox`,
`checkpoints`, `events`, `audit`, …) read, lock, insert and change their own rows; none of them
imports this module. Here those pieces are put together into what a workflow does:

- `process_checkpoint` (a unit): a ROOT checkpoint advances the instance, a WAIT checkpoint
  consumes a wait's signal or expires the wait;
- `consume_inbox_event` (a unit): a task's final outcome settles its step (P7);
- `control` (a unit): pause, resume, cancel (R1);
- `advance`: the one place that decides what an instance does next (D3, I3, I4);
- `activate`: a step's activation with its work (a task, or a wait);
- `consume_wait`: the winner among a wait's signals, or its expiry (S2.2-S2.8, S1.12);
- `succeed_step`, `review_step`: settling a step, and what that means for the instance.

Every function runs inside a unit that holds the instance lock, and takes further locks in the
global order: instance -> activation -> wait -> signals -> tasks.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from weave import jsontext
from weave.auth import Principal
from weave.db import Tx, unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import control as control_rules
from weave.rules import correlation, gate, poll, progress
from weave.rules import review as review_rules
from weave.rules import signals as signal_rules
from weave.rules import waits as wait_rules
from weave.schemas import linear
from weave.schemas.payload import payload_errors
from weave.sql import activations, audit, checkpoints, definitions, events, inbox, instances, signals, tasks, waits
from weave.sql.instances import WorkflowFacts
from weave.times import rfc3339

SCANNER = "system:scanner"
# A disabled application blocks new work; nothing announces its re-enabling, so look again later.
DISABLED_APPLICATION_RECHECK = timedelta(seconds=60)
# A POLL round's report held by another unit: it is applied by that unit, or backed off; look again.
INBOX_HELD_RECHECK = timedelta(seconds=1)


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
        return consume_wait(tx, instance, checkpoint["wait_id"], SCANNER)
    return advance(tx, instance)


@unit_of_work
def consume_inbox_event(tx: Tx, inbox_id: int) -> str | None:
    """Apply one task outcome to its step (P7); returns what happened, or None when there was
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
    if task["kind"] == "QUERY":
        step = _step(tx, instance, activation)
        _record_report(tx, instance, activation, step, event)
        if activation["status"] != "ACTIVE":
            return "RECORDED"  # later results do not reopen a settled or reviewed step (C2.7)
        return look_at_poll(tx, instance, activation, step, SCANNER, inbox_path=True)
    if activation["status"] != "ACTIVE":
        # The step moved on without this task (deadline review, cancellation, recovery): keep the fact.
        events.append(
            tx,
            instance["id"],
            "TASK_OUTCOME_RECORDED",
            {
                "task_id": str(task["id"]),
                "outcome": event["outcome"],
                "step": activation["step_key"],
                "activation_status": activation["status"],
            },
        )
        return "RECORDED"
    # The deadline first, whatever the outcome says: an outcome reported at or after it came too
    # late, which is what the deadline's own checkpoint decides when it is looked at first.
    if activation["deadline_at"] is not None and event["completed_at"] >= activation["deadline_at"]:
        review_step(tx, instance, activation, progress.STEP_DEADLINE_EXCEEDED, SCANNER)
        return "LATE"
    if event["outcome"] != "SUCCEEDED":
        review_step(tx, instance, activation, progress.TASK_REVIEW_REASONS[event["outcome"]], SCANNER)
        return event["outcome"]
    succeed_step(tx, instance, activation, event["result"], SCANNER)
    return "SUCCEEDED"


# ---- control (the API's unit) ---------------------------------------------------------------------


@unit_of_work
def control(tx: Tx, principal: Principal, workflow_id: str, action: str, reason: str) -> WorkflowFacts:
    """R1: pause, resume or cancel, audited with the reason; 409 INVALID_STATE when not allowed. A
    re-run after its own lost COMMIT answers the instance it left (`decided_by_lost_commit`)."""
    namespace_id, actor = principal.namespace_id, principal.actor
    instance_id = instances.addressed(tx, principal, workflow_id)["id"]
    instance = instances.lock(tx, instance_id)
    if instances.decided_by_lost_commit(tx, instance, f"workflow.{action}"):
        return instances.read_facts(tx, namespace_id, workflow_id)
    target = control_rules.transition(action, instance["status"])
    if target is None:
        raise WeaveError(Code.INVALID_STATE, f"cannot {action} a workflow that is {instance['status']}")
    if action == "cancel":
        _end_steps(tx, instance, "CANCELLED", actor)
    _move_instance(tx, instance, target.status, target.gate, None, actor, {"action": action, "reason": reason})
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
        _settle_step(tx, instance, activation, status, None, None, actor, from_status=activation["status"])
    for wait_id in waits.lock_waiting(tx, instance["id"]):
        waits.settle(tx, wait_id, "CANCELLED")
    signals.reject_all_pending(tx, instance["id"], "INSTANCE_SETTLED")
    for activation in unended:
        tasks.cancel_open_tasks(tx, activation["id"])


# ---- review (R2, R3) ----------------------------------------------------------------------------


@unit_of_work
def review(
    tx: Tx, principal: Principal, workflow_id: str, action: str, step_key: str | None, result: Any, reason: str
) -> WorkflowFacts:
    """R2: an operator repairs an instance in NEEDS_REVIEW: retry a step (a new generation),
    complete it with a result, fail the instance or cancel it. One transaction, audited with the
    reason and the generations before and after; 409 INVALID_STATE or TASK_IN_FLIGHT when refused.
    `result` is the operator's value for complete_step (review_rules.ABSENT when not given)."""
    instance_id = instances.addressed(tx, principal, workflow_id)["id"]
    instance = instances.lock(tx, instance_id)
    if instances.decided_by_lost_commit(tx, instance, "workflow.review"):
        return instances.read_facts(tx, principal.namespace_id, workflow_id)
    steps = definitions.document(tx, instance["definition_id"], instance["definition_digest"])["steps"]
    index, step = next(((i, s) for i, s in enumerate(steps) if s["key"] == step_key), (None, None))
    if action in review_rules.STEP_ACTIONS and step is None:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"/step_key: the pinned definition has no step {step_key!r}",
            [{"pointer": "/step_key", "message": "no such step in the pinned definition"}],
        )
    latest = activations.latest(tx, instance_id).get(step_key) if action in review_rules.STEP_ACTIONS else None
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
            activation["status"] if activation else None,
            running,
            gate.new_work(
                gate.GateFacts("RUNNING", gate.OPEN, instance["application_status"], instance["deadline_at"], tx.now())
            ),
        )
    )
    if refused:
        raise WeaveError(Code[refused.code], refused.detail)
    actor = principal.actor
    data = {"action": action, "reason": reason, "step": step_key}
    if action == review_rules.COMPLETE_STEP:
        result_text = _operator_result(step, result)
        _close_generation(tx, instance, activation, wait, "STEP_SETTLED", wait_status="CANCELLED")
        _settle_step(tx, instance, activation, "SUCCEEDED", result_text, None, actor, from_status="NEEDS_REVIEW")
        data["activation_sequence"] = activation["activation_sequence"]
    elif action == review_rules.RETRY_STEP:
        _close_generation(tx, instance, activation, wait, "STALE_ACTIVATION", wait_status="SUPERSEDED")
        _settle_step(tx, instance, activation, "SUPERSEDED", None, None, actor, from_status="NEEDS_REVIEW")
        data.update(from_sequence=activation["activation_sequence"], to_sequence=activation["activation_sequence"] + 1)
    if action in review_rules.STEP_ACTIONS:
        instance = _move_instance(tx, instance, "RUNNING", gate.OPEN, None, actor, {"review": data})
        if action == review_rules.RETRY_STEP:
            activate(tx, instance, step, index, activation["activation_sequence"] + 1, actor)
        else:
            advance(tx, instance, actor)
    else:
        ended = "FAILED" if action == review_rules.FAIL else "CANCELLED"
        _end_steps(tx, instance, ended, actor)
        _move_instance(tx, instance, ended, gate.CLOSED, None, actor, {"review": data})
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


def _operator_result(step: dict, result: Any) -> str:
    """complete_step's result, validated like a real one: the signal contract's schema (SIGNAL), the
    final result's schema (POLL); its compact text (the resource has held it to 256 KiB)."""
    if result is signal_rules.ABSENT:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            "/result: complete_step needs the step's result",
            [{"pointer": "/result", "message": "required for complete_step"}],
        )
    contract = step.get("signal") or step.get("final_signal")
    if contract is not None:
        problems = signal_rules.schema_problems(contract["payload_schema"], result, "/result")
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
        tx, instance["id"], activation["step_key"], activation["activation_sequence"], disposition
    )
    tasks.cancel_open_tasks(tx, activation["id"])


# ---- advancing an instance --------------------------------------------------------------------------


def advance(tx: Tx, instance: dict, actor: str = SCANNER) -> str:
    """Decide and do the instance's next move; returns the move for logs and tests."""
    steps = definitions.document(tx, instance["definition_id"], instance["definition_digest"])["steps"]
    latest = activations.latest(tx, instance["id"])
    where = progress.frontier([s["key"] for s in steps], {k: a["status"] for k, a in latest.items()})
    if where.move == progress.FINISHED:
        if instance["status"] not in gate.TERMINAL:
            _move_instance(tx, instance, "SUCCEEDED", gate.CLOSED, None, actor)
        return where.move
    if where.move == progress.BUSY:
        step = steps[where.index]
        if step["type"] == "TASK":  # a SIGNAL wait's deadline is its own WAIT checkpoint's
            _check_step_deadline(tx, instance, latest[step["key"]], actor)
        elif step["type"] == "POLL":  # e.g. a resume: a round that the gate held back may open now
            activation = activations.lock(tx, latest[step["key"]]["id"])
            return look_at_poll(tx, instance, activation, step, actor)
        return where.move
    if where.move == progress.STUCK:
        return where.move
    verdict = _gate(tx, instance, actor)
    if verdict == gate.GO:
        activate(tx, instance, steps[where.index], where.index, 1, actor)
        return "ACTIVATED"
    return verdict


def _gate(tx: Tx, instance: dict, actor: str) -> str:
    """May the instance start new work now (I3)? Past its total deadline it goes to review (I4);
    held back by a disabled application, it looks again later (nothing announces re-enabling)."""
    verdict = gate.new_work(
        gate.GateFacts(
            instance["status"], instance["gate"], instance["application_status"], instance["deadline_at"], tx.now()
        )
    )
    if verdict == gate.DEADLINE_EXCEEDED:
        _move_instance(tx, instance, "NEEDS_REVIEW", gate.CLOSED, "DEADLINE_EXCEEDED", actor)
    elif verdict == gate.HOLD and instance["application_status"] != "ACTIVE" and instance["status"] == "RUNNING":
        checkpoints.schedule_root(tx, instance["id"], tx.now() + DISABLED_APPLICATION_RECHECK)
    return verdict


def activate(tx: Tx, instance: dict, step: dict, index: int, sequence: int, actor: str) -> int:
    """Create activation `sequence` of `step` with its work: a task for TASK steps, a wait for
    SIGNAL steps (S2.1); returns the activation id."""
    now = tx.now()
    deadline_at = now + timedelta(seconds=step["timeout_seconds"])
    activation = activations.insert(tx, instance["id"], step["key"], index, sequence, deadline_at)
    data = {"step": step["key"], "activation_sequence": sequence, "deadline_at": rfc3339(deadline_at)}
    review_reason = None
    if step["type"] == "TASK":
        task_id = tasks.create(
            tx,
            instance["namespace_id"],
            step["queue"],
            instance["id"],
            activation["id"],
            "TASK",
            step.get("max_attempts", 3),
            deadline_at,
        )
        data["task_id"] = str(task_id)
        # Look again at the step deadline: a step whose task has not finished by then goes to review.
        checkpoints.schedule_root(tx, instance["id"], deadline_at)
    else:  # SIGNAL, or POLL: a wait for the (final) signal, when the step has a contract
        contract = step.get("signal") or step.get("final_signal")
        if contract is not None:
            try:
                context = instances.context(
                    tx, instance["id"], instance["workflow_id"], instance["input"], jsontext.loads
                )
                key = correlation.correlation_key(context, step["correlation"])
            except correlation.Unresolved as exc:
                review_reason, data["problem"] = "CORRELATION_UNRESOLVED", str(exc)
            else:
                wait_id = waits.insert(tx, instance["id"], activation, step, contract, key, deadline_at)
                # One look now scans the early signals (S2.1); one at the deadline expires the wait (S2.6).
                checkpoints.schedule_wait(tx, instance["id"], wait_id, now)
                checkpoints.schedule_wait(tx, instance["id"], wait_id, deadline_at)
                data["wait_id"] = str(wait_id)
        elif step["type"] == "POLL":
            checkpoints.schedule_root(tx, instance["id"], deadline_at)  # no wait: the deadline is a ROOT look
    events.append(tx, instance["id"], "STEP_ACTIVATED", data)
    audit.record(tx, instance["namespace_id"], actor, "step.activate", data, instance_id=instance["id"])
    if review_reason:
        review_step(tx, instance, activation, review_reason, actor)
    elif step["type"] == "POLL":
        _open_round(tx, instance, activation, step, 1, now)
    return activation["id"]


def _check_step_deadline(tx: Tx, instance: dict, latest: dict, actor: str) -> None:
    """P7: a TASK step whose deadline passed without a final task outcome goes to review.

    A task that finished before the deadline still counts: its inbox event decides, even when it
    is consumed late (the scanner may have been down). The activation, then the task, are locked
    before the task is read (global lock order): a report stamped before the deadline whose
    COMMIT is under way is waited for, never read as it stood before it. A running task is asked
    to stop as of the deadline (its fact time, `tasks.cancel_open_tasks`)."""
    if latest["deadline_at"] is None or tx.now() < latest["deadline_at"]:
        return
    activation = activations.lock(tx, latest["id"])
    if activation["status"] != "ACTIVE":
        return
    task = tasks.lock_newest_of_activation(tx, activation["id"])
    if task is not None and task["completed_at"] is not None and task["completed_at"] < activation["deadline_at"]:
        return
    review_step(tx, instance, activation, progress.STEP_DEADLINE_EXCEEDED, actor)
    tasks.cancel_open_tasks(tx, activation["id"], requested_at=activation["deadline_at"])


# ---- consuming a wait's signal -------------------------------------------------------------------------


def consume_wait(tx: Tx, instance: dict, wait_id: int, actor: str) -> str:
    """A WAIT checkpoint: take the winner, reject what cannot win, or expire at the deadline (S2.2-S2.8).

    The caller holds the instance lock; the activation, the wait and the generation's signals are
    locked here, in that order. Everything below commits together or not at all (S2.8).
    """
    # One round trip, in lock order: the activation, the wait, the generation's PENDING signals.
    activation_rows, wait_rows, pending = tx.all_together(
        activations.locking_of_wait(wait_id), waits.locking(wait_id), signals.pending_of_wait_locking(wait_id)
    )
    if not wait_rows:
        return "SETTLED"  # no such wait: nothing to decide
    (activation,), (wait,) = activation_rows, wait_rows
    if wait["status"] != "WAITING":
        return "SETTLED"  # decided
    if activation["status"] != "ACTIVE":
        # The step is with an operator (review): the wait takes no signal, but it ends at its
        # deadline all the same (S2.6), so that signals sent later are LATE and the ones it holds
        # expire at their time (S2.7) instead of waiting for a wait that takes none.
        if tx.now() >= wait["deadline_at"]:
            _expire(tx, instance, wait)
            return "EXPIRED"
        return "SETTLED"
    if wait["kind"] == "POLL":
        return look_at_poll(tx, instance, activation, _step(tx, instance, activation), actor, wait=wait)
    verdict = _adjudicate_signals(wait, pending, tx.now())
    _reject(tx, instance, verdict.rejected)
    if verdict.winner is not None:
        winner = signals.read_candidate(tx, verdict.winner)
        if not _proof_holds(tx, instance, winner):
            _refuse_tampered(tx, instance, activation, winner, actor)
            return "PROOF_MISMATCH"
        _consume(tx, instance, wait, winner, actor)
        result = winner["payload"] if winner["payload_present"] and winner["payload"] is not None else "null"
        succeed_step(tx, instance, activation, result, actor)
        return "CONSUMED"
    if verdict.expire:
        _expire(tx, instance, wait)
        review_step(tx, instance, activation, "WAIT_EXPIRED", actor)
        return "EXPIRED"
    return "WAITING"


def _adjudicate_signals(wait: dict, pending: list[dict], now: datetime) -> wait_rules.Verdict:
    return wait_rules.adjudicate(
        wait_rules.WaitFacts(wait["name"], wait["payload_version"], wait["correlation"], wait["deadline_at"]),
        [
            wait_rules.PendingSignal(s["id"], s["name"], s["payload_version"], s["correlation"], s["accepted_at"])
            for s in pending
        ],
        now,
    )


def _reject(tx: Tx, instance: dict, dispositions: dict[int, str]) -> None:
    for signal_id, disposition in dispositions.items():
        signals.reject(tx, signal_id, disposition)
        events.append(tx, instance["id"], "SIGNAL_REJECTED", {"signal_id": str(signal_id), "disposition": disposition})


def _consume(tx: Tx, instance: dict, wait: dict, winner: dict, actor: str) -> None:
    """The wait's one winner (S2.5): the signal CONSUMED, the wait SATISFIED, with event and audit."""
    signals.consume(tx, winner["id"], wait["id"])
    waits.satisfy(tx, wait["id"], winner["id"])
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


def _refuse_tampered(tx: Tx, instance: dict, activation: dict, signal: dict, actor: str) -> None:
    """S1.12: a signal whose stored form no longer gives its recorded digest is never used. The
    step goes to review, and a POLL step's round with it (P5: a queued round is cancelled, a
    running one asked to stop), as for every other review of a step with work in flight."""
    review_step(tx, instance, activation, "ACCEPTANCE_PROOF_MISMATCH", actor)
    events.append(tx, instance["id"], "SIGNAL_PROOF_MISMATCH", {"signal_id": str(signal["id"])})
    tasks.cancel_open_tasks(tx, activation["id"])


def _expire(tx: Tx, instance: dict, wait: dict) -> None:
    waits.settle(tx, wait["id"], "EXPIRED")
    events.append(tx, instance["id"], "WAIT_EXPIRED", {"wait_id": str(wait["id"]), "step": wait["step_key"]})


def _proof_holds(tx: Tx, instance: dict, signal: dict) -> bool:
    """S1.12: the stored signal still gives the digest recorded in its acceptance audit record."""
    fields = {
        "name": signal["name"],
        "payload_version": signal["payload_version"],
        "target_step_key": signal["target_step_key"],
        "target_activation_sequence": signal["target_activation_sequence"],
        "correlation_key": signal["correlation"].decode("utf-8", "surrogateescape"),
        "reason": signal["reason"],
        "evidence_ref": signal["evidence_ref"],
    }
    try:
        payload = jsontext.loads(signal["payload"]) if signal["payload_present"] else signal_rules.ABSENT
    except jsontext.JsonRejected:
        return False
    recorded = signal["recorded_digest"]
    if recorded is None or recorded != signal["request_digest"]:
        return False
    return signal_rules.request_digest(fields, payload) == recorded


# ---- POLL steps (SPEC §7) -----------------------------------------------------------------------------


def look_at_poll(
    tx: Tx,
    instance: dict,
    activation: dict,
    step: dict,
    actor: str,
    *,
    wait: dict | None = None,
    inbox_path: bool = False,
) -> str:
    """Decide an ACTIVE POLL activation from its facts (`weave.rules.poll`): the one place that a
    round's inbox event, the wait's checkpoint and the instance's ROOT checkpoint all come to.

    The caller holds the instance and activation locks; the wait, the generation's PENDING signals
    and the current round's task are locked here, in that order, so no report or signal can
    arrive while the facts are read. Returns what was decided, for logs and tests.
    """
    if wait is None and step.get("final_signal") is not None:
        wait = waits.lock_of_activation(tx, activation["id"])
    waiting = wait is not None and wait["status"] == "WAITING"
    pending = []
    if waiting:
        (pending,) = tx.all_together(signals.pending_of_wait_locking(wait["id"]))
    current = tasks.lock_current_round(tx, activation["id"])
    now = tx.now()
    if not inbox_path and current["status"] not in poll.OPEN:
        unconsumed = inbox.claim_of_task(tx, current["id"])
        if unconsumed is None and inbox.held_of_task(tx, current["id"]):
            # C5: another unit holds the round's report (one that applies it waits for this
            # instance lock; a failed try records its backoff): never decide without it.
            checkpoints.look_again(tx, instance["id"], now + INBOX_HELD_RECHECK)
            return "DEFERRED"
        if unconsumed is not None and unconsumed["attempts"] > 0 and unconsumed["available_at"] > now:
            # C5: the round's report failed to apply and waits for its retry: never decide without it.
            checkpoints.look_again(tx, instance["id"], unconsumed["available_at"])
            return "DEFERRED"
        if unconsumed is not None:
            # C5: decide with the stored report, and record it first, so the history shows every
            # fact before the decision it made.
            inbox.mark_consumed(tx, unconsumed["id"])
            _record_report(tx, instance, activation, step, unconsumed)
    the_round = _round(current, step)
    candidate_row = taken = candidate = None
    if waiting:
        verdict = _adjudicate_signals(wait, pending, now)
        # Mismatched and late signals are refused whoever wins; matching losers wait for the winner.
        _reject(tx, instance, {i: d for i, d in verdict.rejected.items() if d != "WAIT_SETTLED"})
        if verdict.winner is not None:
            candidate_row = signals.read_candidate(tx, verdict.winner)
            candidate = _final_signal(candidate_row)
    elif wait is not None and wait["winner_signal_id"] is not None:
        taken = _final_signal(signals.read_payload(tx, wait["winner_signal_id"]))
    signal = taken or candidate
    decision = poll.decide(
        poll.PollFacts(
            round=the_round,
            deadline_at=activation["deadline_at"],
            now=now,
            interval=timedelta(seconds=step["interval_seconds"]),
            taken=taken,
            candidate=candidate,
            same_result=signal is not None
            and the_round.report == poll.FINAL
            and linear.identity(the_round.result) == linear.identity(signal.result),
        )
    )
    if decision.kind == poll.WAIT:
        return "WAITING"
    if decision.kind == poll.NEXT_ROUND:
        allowed = _gate(tx, instance, actor)
        if allowed != gate.GO:
            return allowed  # a resume (ROOT checkpoint) or the re-enabled application looks again
        _open_round(tx, instance, activation, step, the_round.number + 1, decision.available_at)
        return "ROUND_OPENED"
    if candidate_row is not None and decision.signal_id == candidate_row["id"]:
        # The signal wins, or is taken while the round runs, or was first before a report the
        # signal cannot overwrite (C2.6): in every case it is the wait's winner, whichever path
        # looked first.
        if not _proof_holds(tx, instance, candidate_row):
            _refuse_tampered(tx, instance, activation, candidate_row, actor)
            return "PROOF_MISMATCH"
        _consume(tx, instance, wait, candidate_row, actor)
        _reject(tx, instance, {i: d for i, d in verdict.rejected.items() if d == "WAIT_SETTLED"})
    if decision.cancel_round:
        tasks.cancel_open_tasks(tx, activation["id"])
    events.append(tx, instance["id"], "POLL_DECIDED", _decision_data(activation, decision, the_round, signal))
    if decision.kind == poll.QUERY_WINS:
        if waiting:
            _reject(tx, instance, {i: "QUERY_SETTLED" for i, d in verdict.rejected.items() if d == "WAIT_SETTLED"})
            if candidate is not None:
                _reject(tx, instance, {candidate.signal_id: "QUERY_SETTLED"})
            waits.satisfy(tx, wait["id"], None)
        succeed_step(tx, instance, activation, jsontext.compact(the_round.result), actor)
        return "QUERY_WON"
    if decision.kind == poll.SIGNAL_WINS:
        succeed_step(tx, instance, activation, jsontext.compact(signal.result), actor)
        return "SIGNAL_WON"
    if decision.kind == poll.TAKE_SIGNAL:
        return "SIGNAL_TAKEN"  # C3: the wait is SATISFIED, the step stays ACTIVE until Pulse reports
    if waiting and decision.signal_id is None and now >= wait["deadline_at"]:
        _expire(tx, instance, wait)  # a wait that has just taken its signal (C2.6) is SATISFIED instead
    review_step(tx, instance, activation, decision.reason, actor)
    return "REVIEW"


def _report(result_text: str | None, step: dict) -> tuple[str, Any]:
    """(PENDING | FINAL | INVALID, the FINAL result) of a round that SUCCEEDED; a FINAL result must
    also fit the final signal's schema (C2.6)."""
    report, result = poll.parse_report(jsontext.loads(result_text) if result_text is not None else None)
    contract = step.get("final_signal")
    if report == poll.FINAL and contract is not None:
        if payload_errors(contract["payload_schema"], result):
            return poll.INVALID, None
    return report, result


def _round(task: dict, step: dict) -> poll.Round:
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


def _open_round(tx: Tx, instance: dict, activation: dict, step: dict, number: int, available_at: datetime) -> None:
    """Round `number`: a QUERY task on the step's queue, claimable at `available_at` (C1)."""
    task_id = tasks.create(
        tx,
        instance["namespace_id"],
        step["queue"],
        instance["id"],
        activation["id"],
        "QUERY",
        step.get("max_attempts", 3),
        activation["deadline_at"],
        available_at,
    )
    events.append(
        tx,
        instance["id"],
        "QUERY_ROUND_STARTED",
        {
            "step": step["key"],
            "activation_sequence": activation["activation_sequence"],
            "round": number,
            "task_id": str(task_id),
            "available_at": rfc3339(available_at),
        },
    )


def _decision_data(activation: dict, decision: poll.Decision, the_round: poll.Round, signal) -> dict:
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
    if signal is not None:
        data.update(signal_id=str(signal.signal_id), accepted_at=rfc3339(signal.accepted_at))
    if decision.reason:
        data["review_reason"] = decision.reason
    return data


def _record_report(tx: Tx, instance: dict, activation: dict, step: dict, event: dict) -> None:
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


def _step(tx: Tx, instance: dict, activation: dict) -> dict:
    """The definition's step of an activation."""
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    return next(step for step in document["steps"] if step["key"] == activation["step_key"])


# ---- settling a step, and the instance's state ---------------------------------------------------------


def succeed_step(tx: Tx, instance: dict, activation: dict, result_text: str, actor: str) -> str:
    """The step succeeded with `result_text`; the instance moves on (its successor, or SUCCEEDED)."""
    _settle_step(tx, instance, activation, "SUCCEEDED", result_text, None, actor)
    return advance(tx, instance, actor)


def review_step(tx: Tx, instance: dict, activation: dict, reason: str, actor: str) -> dict:
    """The step needs an operator: it goes NEEDS_REVIEW and takes the instance with it (gate
    CLOSED) unless the instance has already ended. Returns the instance as it is afterwards."""
    _settle_step(tx, instance, activation, "NEEDS_REVIEW", None, reason, actor)
    if instance["status"] in gate.TERMINAL:
        return instance
    return _move_instance(tx, instance, "NEEDS_REVIEW", gate.CLOSED, reason, actor, {"step": activation["step_key"]})


def _settle_step(
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


def _move_instance(
    tx: Tx,
    instance: dict,
    status: str,
    gate_state: str,
    review_reason: str | None,
    actor: str,
    event_data: dict | None = None,
) -> dict:
    """Move the locked instance to (status, gate, review_reason) with its event and audit record;
    returns the instance as it is afterwards."""
    moved = instances.move(tx, instance, status, gate_state, review_reason)
    data = {"status": status, "gate": gate_state, "review_reason": review_reason, **(event_data or {})}
    events.append(tx, instance["id"], f"WORKFLOW_{status}", data)
    audit.record(
        tx,
        instance["namespace_id"],
        actor,
        "workflow.state",
        {"from": {"status": instance["status"], "gate": instance["gate"]}, "to": data},
        instance_id=instance["id"],
    )
    return moved
