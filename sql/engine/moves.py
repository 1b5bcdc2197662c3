"""Advancing an instance: the one place that decides what an instance does next (D3, I3, I4),
activates a step with its kind's work, looks at a due wait, and applies what a step kind decided.

A step kind is a module with four functions, entered in `KINDS` by the step's `type`:
- `activate(tx, instance, activation, step, announce)`: the step's work (a task, a wait, a round);
  calls `announce(data)` once, for the STEP_ACTIVATED event; returns an `Outcome` or None;
- `look(tx, instance, latest, step, actor)`: a ROOT look at the ACTIVE step (its deadline, a
  resume); returns (the locked activation, an `Outcome`) or None when there is nothing to decide;
- `look_at_wait(tx, instance, activation, wait, pending, step, actor)`: its wait's checkpoint is due;
- `on_report(tx, instance, activation, step, event, actor)`: a task's final outcome (inbox event).
An `Outcome` that succeeds settles the step and the instance advances again, in a loop here:
no step kind settles a step or advances the instance itself.
"""

from __future__ import annotations

from datetime import timedelta

from weave.rules import gate, progress
from weave.sql import activations, audit, events, signals, waits
from weave.sql.engine import poll, settle, signal, task
from weave.sql.engine.steps import SCANNER, Outcome, Step
from weave.sql.engine.steps import named as step_named
from weave.sql.engine.steps import of_instance as steps_of_instance
from weave.times import rfc3339
from weave.tx import Tx

KINDS = {"TASK": task, "SIGNAL": signal, "POLL": poll}


def advance(tx: Tx, instance: dict, actor: str = SCANNER) -> str:
    """Decide and do the instance's next move, and the next one for as long as a move settles a
    step (a POLL look at a resume may settle its step; its successor is then activated); returns
    the first move, for logs and tests."""
    first = None
    while True:
        move, activation, outcome = _next_move(tx, instance, actor)
        first = first or move
        if outcome is None or not _settle(tx, instance, activation, outcome, actor):
            return first


def apply(tx: Tx, instance: dict, activation: dict, outcome: Outcome, actor: str) -> str:
    """Apply what a step kind decided about the locked `activation`: a step that succeeded is
    settled and the instance advances; one that needs review goes to review. Returns the label."""
    if _settle(tx, instance, activation, outcome, actor):
        advance(tx, instance, actor)
    return outcome.label


def _settle(tx: Tx, instance: dict, activation: dict, outcome: Outcome, actor: str) -> bool:
    """Settle the step as `outcome` says; whether it succeeded (the instance then moves on)."""
    if outcome.review is not None:
        settle.review_step(tx, instance, activation, outcome.review, actor)
        return False
    if outcome.result is not None:
        settle.settle_step(tx, instance, activation, "SUCCEEDED", outcome.result, None, actor)
        return True
    return False


def _next_move(tx: Tx, instance: dict, actor: str) -> tuple[str, dict | None, Outcome | None]:
    """(the move, and for a look that decided about an ACTIVE step: its locked activation and outcome)."""
    steps = steps_of_instance(tx, instance)
    latest = activations.latest(tx, instance["id"])
    where = progress.frontier([step.key for step in steps], {key: a["status"] for key, a in latest.items()})
    if where.move == progress.FINISHED:
        if instance["status"] not in gate.TERMINAL:
            settle.move_instance(tx, instance, "SUCCEEDED", gate.CLOSED, None, actor)
        return where.move, None, None
    if where.move == progress.BUSY:
        step = steps[where.index]
        looked = KINDS[step.type].look(tx, instance, latest[step.key], step, actor)
        if looked is None:
            return where.move, None, None
        activation, outcome = looked
        return outcome.label, activation, outcome
    if where.move == progress.STUCK:
        return where.move, None, None
    verdict = settle.new_work(tx, instance, actor)
    if verdict == gate.GO:
        activate(tx, instance, steps[where.index], 1, actor)
        return "ACTIVATED", None, None
    return verdict, None, None


def activate(tx: Tx, instance: dict, step: Step, sequence: int, actor: str) -> int:
    """Create activation `sequence` of `step` with its kind's work (a task, a wait, a round);
    returns the activation id. A step whose work cannot start (its correlation key does not
    resolve) goes to review at once."""
    now = tx.now()
    deadline_at = now + timedelta(seconds=step.timeout_seconds)
    activation = activations.insert(tx, instance["id"], step.key, step.index, sequence, deadline_at)
    announced = {"step": step.key, "activation_sequence": sequence, "deadline_at": rfc3339(deadline_at)}

    def announce(data: dict) -> None:
        announced.update(data)
        events.append(tx, instance["id"], "STEP_ACTIVATED", announced)
        audit.record(tx, instance["namespace_id"], actor, "step.activate", announced, instance_id=instance["id"])

    outcome = KINDS[step.type].activate(tx, instance, activation, step, announce)
    if outcome is not None:
        _settle(tx, instance, activation, outcome, actor)
    return activation["id"]


def consume_wait(tx: Tx, instance: dict, wait_id: int, actor: str) -> str:
    """A WAIT checkpoint: the wait's step kind takes the winner, rejects what cannot win, or expires
    it at the deadline (S2.2-S2.8).

    The caller holds the instance lock; the activation, the wait and the generation's signals are
    locked here, in that order. Everything below commits together or not at all (S2.8).
    """
    # One round trip, in lock order: the activation, the wait, the generation's PENDING signals.
    activation_rows, wait_rows, pending = tx.all_together(
        activations.locking_of_wait(wait_id), waits.locking(wait_id), signals.locking_pending_of_wait(wait_id)
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
            signal.expire(tx, instance, wait)
            return "EXPIRED"
        return "SETTLED"
    step = step_named(tx, instance, activation["step_key"])
    outcome = KINDS[step.type].look_at_wait(tx, instance, activation, wait, pending, step, actor)
    return apply(tx, instance, activation, outcome, actor)
