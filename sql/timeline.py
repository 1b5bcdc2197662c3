"""One workflow's whole record, as the review console shows it: every generation of every step,
their waits and tasks (query rounds included), every signal, and the history.

Read only, without locks, after the same grant check as every read of an instance
(`instances.require_grants`). Nothing imports this module but the console.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave.auth import Principal
from weave.db import Tx, read_only
from weave.sql import events, instances, signals
from weave.sql.instances import WorkflowFacts

HISTORY_LIMIT = 1000  # events shown on the page; the API pages through the rest

# Every generation, oldest first per step (the API's view keeps only the latest of each).
SELECT_ACTIVATIONS = instances.SELECT_LATEST_ACTIVATIONS
SELECT_WAITS = """
SELECT id, activation_id, step_key, activation_sequence, status, deadline_at, correlation, winner_signal_id,
       created_at, settled_at
FROM waits WHERE instance_id = %s ORDER BY id
"""
SELECT_TASKS = """
SELECT id, activation_id, kind, status, attempt, max_attempts, available_at, created_at, completed_at, result, error
FROM tasks WHERE activation_id IN %s ORDER BY id
"""


@dataclass(frozen=True)
class WorkflowRecord:
    facts: WorkflowFacts  # what the API's workflow representation shows
    activations: list[dict]  # every generation, by step then sequence
    waits: list[dict]
    tasks: list[dict]  # TASK work and query rounds, oldest first
    signals: list[dict]  # every signal, oldest first
    history: list[dict]  # the first HISTORY_LIMIT events
    more_history: bool
    now: datetime


@read_only
def read_record(tx: Tx, principal: Principal, workflow_id: str) -> WorkflowRecord:
    facts = instances.read_facts(tx, principal.namespace_id, workflow_id)
    instances.require_grants(tx, principal, workflow_id, facts.instance if facts else None)
    instance_id = facts.instance["id"]
    activations = tx.all(SELECT_ACTIVATIONS, (instance_id,))
    tasks = tx.all(SELECT_TASKS, (tuple(a["id"] for a in activations),)) if activations else []
    history = events.page(tx, instance_id, 0, HISTORY_LIMIT + 1)
    return WorkflowRecord(
        facts=facts,
        activations=activations,
        waits=tx.all(SELECT_WAITS, (instance_id,)),
        tasks=tasks,
        signals=tx.all(signals.SELECT_SIGNAL_PAGE, (instance_id, 0, signals.SIGNALS_PER_INSTANCE)),
        history=history[:HISTORY_LIMIT],
        more_history=len(history) > HISTORY_LIMIT,
        now=tx.now(),
    )
