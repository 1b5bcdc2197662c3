"""Step activations: moving an instance along its steps (D3, I3, I4, P7).

Every function here runs inside a unit that already holds the instance lock (`instances.lock`);
activations are locked next, tasks last. `advance` is the one place that decides what the
instance does next; the ROOT checkpoint and every settled step call it.
"""

from __future__ import annotations

from datetime import timedelta

from weave.sql import audit, checkpoints, definitions, events, instances, tasks, waits
from weave import jsontext
from weave.db import Tx
from weave.rules import correlation, gate, progress
from weave.times import rfc3339

SCANNER = "system:scanner"
# A disabled application blocks new work; nothing announces its re-enabling, so look again later.
DISABLED_APPLICATION_RECHECK = timedelta(seconds=60)

SELECT_ACTIVATIONS = """
SELECT id, step_key, step_index, activation_sequence, status, result, deadline_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
LOCK_ACTIVATION = """
SELECT id, instance_id, step_key, step_index, activation_sequence, status, deadline_at
FROM step_activations WHERE id = %s FOR UPDATE
"""
INSERT_ACTIVATION = """
INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status, activated_at,
                              deadline_at)
VALUES (%s, %s, %s, %s, 'ACTIVE', %s, %s)
"""
SETTLE_ACTIVATION = """
UPDATE step_activations SET status = %s, result = %s, review_reason = %s, settled_at = %s
WHERE id = %s AND status = 'ACTIVE'
"""
SELECT_NEWEST_TASK = """
SELECT id, status, completed_at FROM tasks WHERE activation_id = %s ORDER BY id DESC LIMIT 1
"""


def latest_activations(tx: Tx, instance_id: int) -> dict[str, dict]:
    return {row["step_key"]: row for row in tx.all(SELECT_ACTIVATIONS, (instance_id,))}


def lock_activation(tx: Tx, activation_id: int) -> dict:
    return tx.one(LOCK_ACTIVATION, (activation_id,))


def advance(tx: Tx, instance: dict, actor: str = SCANNER) -> str:
    """Decide and do the instance's next move; returns the move for logs and tests."""
    steps = definitions.document(tx, instance["definition_id"], instance["definition_digest"])["steps"]
    latest = latest_activations(tx, instance["id"])
    where = progress.frontier([s["key"] for s in steps], {k: a["status"] for k, a in latest.items()})
    if where.move == progress.FINISHED:
        if instance["status"] not in gate.TERMINAL:
            instances.set_state(tx, instance, "SUCCEEDED", "CLOSED", None, actor)
        return where.move
    if where.move == progress.BUSY:
        if steps[where.index]["type"] == "TASK":  # a wait's deadline is its own WAIT checkpoint's
            _check_step_deadline(tx, instance, latest[steps[where.index]["key"]], actor)
        return where.move
    if where.move == progress.STUCK:
        return where.move
    verdict = gate.new_work(gate.GateFacts(instance["status"], instance["gate"], instance["application_status"],
                                           instance["deadline_at"], tx.now()))
    if verdict == gate.GO:
        activate(tx, instance, steps[where.index], where.index, 1, actor)
        return "ACTIVATED"
    if verdict == gate.DEADLINE_EXCEEDED:
        instances.set_state(tx, instance, "NEEDS_REVIEW", gate.CLOSED, "DEADLINE_EXCEEDED", actor)
    elif verdict == gate.HOLD and instance["application_status"] != "ACTIVE" and instance["status"] == "RUNNING":
        checkpoints.schedule_root(tx, instance["id"], tx.now() + DISABLED_APPLICATION_RECHECK)
    return verdict


def activate(tx: Tx, instance: dict, step: dict, index: int, sequence: int, actor: str) -> int:
    """Create activation `sequence` of `step` with its work: a task for TASK steps."""
    now = tx.now()
    deadline_at = now + timedelta(seconds=step["timeout_seconds"])
    activation_id = tx.insert(INSERT_ACTIVATION, (instance["id"], step["key"], index, sequence, now, deadline_at))
    data = {"step": step["key"], "activation_sequence": sequence, "deadline_at": rfc3339(deadline_at)}
    if step["type"] == "TASK":
        task_id = tasks.create(tx, instance["namespace_id"], step["queue"], instance["id"], activation_id, "TASK",
                               step.get("max_attempts", 3), deadline_at)
        data["task_id"] = str(task_id)
        # Look again at the step deadline: a step whose task has not finished by then goes to review.
        checkpoints.schedule_root(tx, instance["id"], deadline_at)
    activation = {"id": activation_id, "step_key": step["key"], "activation_sequence": sequence}
    review_reason = None
    if step["type"] == "SIGNAL":
        try:
            context = instances.context(tx, instance["id"], instance["workflow_id"], instance["input"],
                                        jsontext.loads)
            key = correlation.correlation_key(context, step["correlation"])
        except correlation.Unresolved as exc:
            review_reason, data["problem"] = "CORRELATION_UNRESOLVED", str(exc)
        else:
            wait_id = waits.create(tx, instance["id"], activation, step, step["signal"], key, deadline_at)
            data["wait_id"] = str(wait_id)
    elif step["type"] != "TASK":
        # POLL steps (query rounds racing a final signal) are not built yet: hand the step to an
        # operator rather than pretend to poll.
        review_reason = "STEP_TYPE_NOT_AVAILABLE"
    events.append(tx, instance["id"], "STEP_ACTIVATED", data)
    audit.record(tx, instance["namespace_id"], actor, "step.activate", data, instance_id=instance["id"])
    if review_reason:
        settle(tx, instance, activation, "NEEDS_REVIEW", None, review_reason, actor)
    return activation_id


def settle(tx: Tx, instance: dict, activation: dict, status: str, result_text: str | None,
           review_reason: str | None, actor: str) -> None:
    """Settle an ACTIVE activation (locked by the caller). A step needing review takes the instance with it."""
    tx.execute(SETTLE_ACTIVATION, (status, result_text, review_reason, tx.now(), activation["id"]))
    data = {"step": activation["step_key"], "activation_sequence": activation["activation_sequence"]}
    if review_reason:
        data["review_reason"] = review_reason
    events.append(tx, instance["id"], f"STEP_{status}", data)
    audit.record(tx, instance["namespace_id"], actor, "step.settle", {**data, "status": status},
                 instance_id=instance["id"])
    if status == "NEEDS_REVIEW" and instance["status"] not in gate.TERMINAL:
        instances.set_state(tx, instance, "NEEDS_REVIEW", gate.CLOSED, review_reason, actor,
                            {"step": activation["step_key"]})


def _check_step_deadline(tx: Tx, instance: dict, latest: dict, actor: str) -> None:
    """P7: a TASK step whose deadline passed without a final task outcome goes to review.

    A task that finished before the deadline still counts: its inbox event decides, even when it
    is consumed late (the scanner may have been down).
    """
    if latest["deadline_at"] is None or tx.now() < latest["deadline_at"]:
        return
    task = tx.one(SELECT_NEWEST_TASK, (latest["id"],))
    if task is not None and task["completed_at"] is not None and task["completed_at"] < latest["deadline_at"]:
        return
    activation = lock_activation(tx, latest["id"])
    if activation["status"] != "ACTIVE":
        return
    settle(tx, instance, activation, "NEEDS_REVIEW", None, progress.STEP_DEADLINE_EXCEEDED, actor)
    tasks.cancel_open_tasks(tx, activation["id"])
