"""TASK steps (P7): activation creates the step's task; its final outcome settles the step, and a
deadline that passes without one sends it to review."""

from __future__ import annotations

from typing import Callable

from weave.rules import progress
from weave.sql import activations, checkpoints, events, tasks
from weave.sql.engine.steps import Outcome, Step, needs_review, succeeded, waiting
from weave.tx import Tx


def activate(tx: Tx, instance: dict, activation: dict, step: Step, announce: Callable[[dict], None]) -> None:
    """The step's task, due now; a ROOT look at the step's deadline (`look`)."""
    task_id = tasks.create(
        tx,
        instance["namespace_id"],
        step.queue,
        instance["id"],
        activation["id"],
        "TASK",
        step.max_attempts,
        activation["deadline_at"],
    )
    checkpoints.schedule_root(tx, instance["id"], activation["deadline_at"])
    announce({"task_id": str(task_id)})


def look(tx: Tx, instance: dict, latest: dict, step: Step, actor: str) -> tuple[dict, Outcome] | None:
    """P7: a step whose deadline passed without a final task outcome goes to review.

    A task that finished before the deadline still counts: its inbox event decides, even when it
    is consumed late (the scanner may have been down). The activation, then the task, are locked
    before the task is read (global lock order): a report stamped before the deadline whose
    COMMIT is under way is waited for, never read as it stood before it. A running task is asked
    to stop as of the deadline (its fact time, `tasks.cancel_open_tasks`)."""
    if latest["deadline_at"] is None or tx.now() < latest["deadline_at"]:
        return None
    activation = activations.lock(tx, latest["id"])
    if activation["status"] != "ACTIVE":
        return None
    task = tasks.lock_newest_of_activation(tx, activation["id"])
    if task is not None and task["completed_at"] is not None and task["completed_at"] < activation["deadline_at"]:
        return None
    tasks.cancel_open_tasks(tx, activation["id"], requested_at=activation["deadline_at"])
    return activation, needs_review(progress.BUSY, progress.STEP_DEADLINE_EXCEEDED)


def on_report(tx: Tx, instance: dict, activation: dict, step: Step, event: dict, actor: str) -> Outcome:
    """The task's final outcome (its inbox event): SUCCEEDED settles the step with the result;
    anything else, or any outcome completed at or after the deadline, sends it to review."""
    if activation["status"] != "ACTIVE":
        # The step moved on without this task (deadline review, cancellation, recovery): keep the fact.
        events.append(
            tx,
            instance["id"],
            "TASK_OUTCOME_RECORDED",
            {
                "task_id": str(event["task_id"]),
                "outcome": event["outcome"],
                "step": activation["step_key"],
                "activation_status": activation["status"],
            },
        )
        return waiting("RECORDED")
    # The deadline first, whatever the outcome says: an outcome reported at or after it came too
    # late, which is what the deadline's own look decides when it is looked at first.
    if activation["deadline_at"] is not None and event["completed_at"] >= activation["deadline_at"]:
        return needs_review("LATE", progress.STEP_DEADLINE_EXCEEDED)
    if event["outcome"] != "SUCCEEDED":
        return needs_review(event["outcome"], progress.TASK_REVIEW_REASONS[event["outcome"]])
    return succeeded("SUCCEEDED", event["result"])
