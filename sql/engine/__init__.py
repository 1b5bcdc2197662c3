"""The engine: everything that advances a workflow, on top of the table modules.

The table modules (`instances`, `activations`, `waits`, `signals`, `tasks`, `inbox`,
`checkpoints`, `events`, `audit`, …) read, lock, insert and change their own rows; none of them
imports the engine. Here those pieces are put together into what a workflow does:

    units    the transaction entry points: `process_checkpoint` and `consume_inbox_event` (the
             scanner's), `control` and `review` (the API's)
    moves    advancing an instance, activating a step, a wait's look, applying an outcome; the
             table of step kinds (`KINDS`)
    task     TASK steps: a task, its report, its deadline (P7)
    signal   SIGNAL steps: the wait, its winner, its expiry (S2.x); the wait's pieces for POLL
    poll     POLL steps: query rounds racing a final signal (C1-C5)
    settle   settling a step and moving the instance, with events and audit; the gate (I3, I4)
    steps    a definition's steps (`Step`) and what a step kind decides (`Outcome`)

A step kind never settles a step or advances the instance itself: it returns an `Outcome`, and
`moves` applies it and advances again in a plain loop. Every function runs inside a unit that
holds the instance lock, and takes further locks in the global order: instance -> activation ->
wait -> signals -> tasks.
"""

from weave.sql.engine.moves import KINDS, activate, advance, consume_wait
from weave.sql.engine.steps import SCANNER
from weave.sql.engine.units import consume_inbox_event, control, process_checkpoint, review

__all__ = [
    "KINDS",
    "SCANNER",
    "activate",
    "advance",
    "consume_inbox_event",
    "consume_wait",
    "control",
    "process_checkpoint",
    "review",
]
