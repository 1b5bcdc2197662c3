"""Workflow instances: start (idempotent on workflow_id) and read with their steps.

Lock order: the instance row first, then what hangs off it (activations, waits, signals, tasks).
Starting writes the instance (RUNNING, gate OPEN), a ROOT checkpoint due now, the first event and
an audit record in one transaction (I2); the checkpoint scanner activates the first step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from datetime import timedelta

from weave.sql import audit, checkpoints, definitions, events, steps, tasks
from weave.db import Tx, read_only, unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import control as control_rules
from weave.times import rfc3339


@dataclass(frozen=True)
class StartRequest:
    workflow_id: str
    definition: str
    version: int
    input_text: str  # compact JSON of the input
    deadline_seconds: int
    request_digest: str


@dataclass(frozen=True)
class WorkflowFacts:
    """Everything the workflow representation shows, read in one transaction."""

    instance: dict
    document: dict
    activations: dict[str, dict]  # step_key -> latest activation
    tasks: dict[int, dict]  # activation_id -> its newest task
    waits: dict[int, dict]  # activation_id -> its wait


SELECT_INSTANCE = """
SELECT i.id, i.namespace_id, n.name AS namespace, i.workflow_id, i.definition_id, d.name AS definition,
       d.version, d.digest AS definition_digest, i.application_id, i.input, i.request_digest, i.status,
       i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM instances i
JOIN definitions d ON d.id = i.definition_id
JOIN namespaces n ON n.id = i.namespace_id
WHERE i.namespace_id = %s AND i.workflow_id = %s
"""
SELECT_LATEST_ACTIVATIONS = """
SELECT id, step_key, step_index, activation_sequence, status, result, review_reason, activated_at,
       deadline_at, settled_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
SELECT_ACTIVATION_TASKS = """
SELECT id, activation_id, status, attempt FROM tasks WHERE activation_id IN %s ORDER BY id
"""
SELECT_ACTIVATION_WAITS = """
SELECT activation_id, status, deadline_at, correlation, winner_signal_id FROM waits WHERE activation_id IN %s
"""
INSERT_INSTANCE = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest,
                       status, gate, deadline_at, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, 'RUNNING', 'OPEN', %s, %s, %s)
"""


def read_facts(tx: Tx, namespace_id: int, workflow_id: str) -> WorkflowFacts | None:
    instance = tx.one(SELECT_INSTANCE, (namespace_id, workflow_id))
    if instance is None:
        return None
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    activations = {row["step_key"]: row for row in tx.all(SELECT_LATEST_ACTIVATIONS, (instance["id"],))}
    tasks: dict[int, dict] = {}
    waits: dict[int, dict] = {}
    if activations:
        ids = tuple(row["id"] for row in activations.values())
        for task in tx.all(SELECT_ACTIVATION_TASKS, (ids,)):
            tasks[task["activation_id"]] = task
        waits = {wait["activation_id"]: wait for wait in tx.all(SELECT_ACTIVATION_WAITS, (ids,))}
    return WorkflowFacts(instance, document, activations, tasks, waits)


@read_only
def read_workflow(tx: Tx, namespace_id: int, workflow_id: str) -> WorkflowFacts | None:
    return read_facts(tx, namespace_id, workflow_id)


@unit_of_work
def start_workflow(tx: Tx, namespace_id: int, application_id: int, credential_id: int, actor: str,
                   request: StartRequest) -> tuple[WorkflowFacts, bool]:
    """Start an instance (I1, I2); returns (facts, created).

    The same workflow_id with the same request digest answers the existing instance; with another
    digest it is `WORKFLOW_EXISTS`. Two concurrent starts of one id meet at `uq_instances_workflow`:
    the loser's unit is re-run and takes the first branch.
    """
    existing = read_facts(tx, namespace_id, request.workflow_id)
    if existing is not None:
        if existing.instance["request_digest"] != request.request_digest:
            raise WeaveError(Code.WORKFLOW_EXISTS,
                             f"workflow {request.workflow_id!r} exists and was started with another request")
        return existing, False
    definition = definitions.pinned(tx, namespace_id, request.definition, request.version)
    if definition is None:
        raise WeaveError(Code.DEFINITION_NOT_FOUND,
                         f"definition {request.definition!r} version {request.version} does not exist")
    now = tx.now()
    deadline_at = now + timedelta(seconds=request.deadline_seconds)
    instance_id = tx.insert(INSERT_INSTANCE, (namespace_id, request.workflow_id, definition.id, application_id,
                                              request.input_text, request.request_digest, deadline_at, now, now))
    checkpoints.schedule_root(tx, instance_id, now)
    events.append(tx, instance_id, "WORKFLOW_STARTED",
                  {"definition": definition.name, "version": definition.version, "actor": actor,
                   "deadline_at": rfc3339(deadline_at)})
    audit.record(tx, namespace_id, actor, "workflow.start",
                 {"workflow_id": request.workflow_id, "definition": definition.name,
                  "version": definition.version, "deadline_at": rfc3339(deadline_at)},
                 instance_id=instance_id, credential_id=credential_id, request_digest=request.request_digest)
    return read_facts(tx, namespace_id, request.workflow_id), True


SELECT_STEP_RESULTS = """
SELECT step_key, result FROM step_activations WHERE instance_id = %s AND status = 'SUCCEEDED'
ORDER BY step_index, activation_sequence
"""


def context(tx: Tx, instance_id: int, workflow_id: str, input_text: str, value: Callable[[str], Any]) -> dict:
    """The instance context of D2: `{"workflow_id", "input", "steps": {key: {"result"}}}`.

    `value` turns stored JSON text into what the caller needs: parsed values to resolve a pointer,
    or `jsontext.Raw` to hand the text to a worker unchanged.
    """
    steps = {row["step_key"]: {"result": value(row["result"])} for row in tx.all(SELECT_STEP_RESULTS, (instance_id,))}
    return {"workflow_id": workflow_id, "input": value(input_text), "steps": steps}


# ---- the instance lock and instance transitions (used by the scanner and the control API) ----------

# Subqueries in the select list are read, not locked (MySQL and MariaDB alike): only the instance
# row is locked, never the definition or application rows that many instances share.
LOCK_INSTANCE = """
SELECT i.id, i.namespace_id, i.workflow_id, i.definition_id, i.application_id, i.input, i.status, i.gate,
       i.review_reason, i.deadline_at,
       (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest,
       (SELECT a.status FROM applications a WHERE a.id = i.application_id) AS application_status
FROM instances i
WHERE i.id = %s
FOR UPDATE
"""
UPDATE_INSTANCE_STATE = """
UPDATE instances SET status = %s, gate = %s, review_reason = %s, updated_at = %s WHERE id = %s
"""


def lock(tx: Tx, instance_id: int) -> dict:
    """Lock the instance row; the result also carries its definition digest and application status."""
    return tx.one(LOCK_INSTANCE, (instance_id,))


def set_state(tx: Tx, instance: dict, status: str, gate: str, review_reason: str | None, actor: str,
              event_data: dict | None = None) -> None:
    """Move the locked instance to (status, gate, review_reason) with its event and audit record."""
    tx.execute(UPDATE_INSTANCE_STATE, (status, gate, review_reason, tx.now(), instance["id"]))
    before = {"status": instance["status"], "gate": instance["gate"]}
    instance.update(status=status, gate=gate, review_reason=review_reason)
    data = {"status": status, "gate": gate, "review_reason": review_reason, **(event_data or {})}
    events.append(tx, instance["id"], f"WORKFLOW_{status}", data)
    audit.record(tx, instance["namespace_id"], actor, "workflow.state", {"from": before, "to": data},
                 instance_id=instance["id"])


SELECT_INSTANCE_ID_FOR_CONTROL = "SELECT id FROM instances WHERE namespace_id = %s AND workflow_id = %s"
SELECT_OPEN_ACTIVATIONS = "SELECT id, step_key, activation_sequence FROM step_activations WHERE instance_id = %s AND status = 'ACTIVE' ORDER BY id"
LOCK_OPEN_WAITS = "SELECT id FROM waits WHERE instance_id = %s AND status = 'WAITING' ORDER BY id FOR UPDATE"
CANCEL_WAIT = "UPDATE waits SET status = 'CANCELLED', settled_at = %s WHERE id = %s AND status = 'WAITING'"
REJECT_PENDING_SIGNALS = """
UPDATE signals SET status = 'REJECTED', disposition = 'INSTANCE_SETTLED', settled_at = %s
WHERE instance_id = %s AND status = 'PENDING'
"""


@unit_of_work
def control(tx: Tx, namespace_id: int, workflow_id: str, action: str, reason: str, credential_id: int,
            actor: str) -> WorkflowFacts:
    """R1: pause, resume or cancel, audited with the reason; 409 INVALID_STATE when not allowed."""
    row = tx.one(SELECT_INSTANCE_ID_FOR_CONTROL, (namespace_id, workflow_id))
    if row is None:
        raise WeaveError(Code.WORKFLOW_NOT_FOUND, f"workflow {workflow_id!r} does not exist")
    instance = lock(tx, row["id"])
    target = control_rules.transition(action, instance["status"])
    if target is None:
        raise WeaveError(Code.INVALID_STATE, f"cannot {action} a workflow that is {instance['status']}")
    now = tx.now()
    if action == "cancel":  # in lock order: activations, waits, signals, tasks
        activations = [steps.lock_activation(tx, row["id"]) for row in tx.all(SELECT_OPEN_ACTIVATIONS, (instance["id"],))]
        for activation in activations:
            steps.settle(tx, instance, activation, "CANCELLED", None, None, actor)
        for wait in tx.all(LOCK_OPEN_WAITS, (instance["id"],)):
            tx.execute(CANCEL_WAIT, (now, wait["id"]))
        tx.execute(REJECT_PENDING_SIGNALS, (now, instance["id"]))
        for activation in activations:
            tasks.cancel_open_tasks(tx, activation["id"])
    set_state(tx, instance, target.status, target.gate, None, actor, {"action": action, "reason": reason})
    audit.record(tx, namespace_id, actor, f"workflow.{action}", {"workflow_id": workflow_id, "reason": reason},
                 instance_id=instance["id"], credential_id=credential_id)
    if action == "resume":
        checkpoints.schedule_root(tx, instance["id"], now)
    return read_facts(tx, namespace_id, workflow_id)
