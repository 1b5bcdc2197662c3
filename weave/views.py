"""Representations: plain facts read by `sql/` shaped into the pinned JSON of docs/rules.md#api."""

from __future__ import annotations

from weave import jsontext
from weave.jsontext import Raw
from weave.sql.definitions import Definition
from weave.sql.instances import WorkflowFacts
from weave.sql.tasks import ClaimedTask
from weave.times import rfc3339


def definition_summary_view(row: dict) -> dict:
    """A definition as published and listed: `{"name", "version", "digest", "created_at"}`."""
    return {
        "name": row["name"],
        "version": row["version"],
        "digest": row["digest"],
        "created_at": rfc3339(row["created_at"]),
    }


def definition_view(definition: Definition, with_document: bool = False) -> dict:
    view = definition_summary_view(vars(definition))
    if with_document:
        view["document"] = Raw(definition.document_text)
    return view


def _step_view(step: dict, facts: WorkflowFacts) -> dict:
    activation = facts.activations.get(step["key"])
    if activation is None:  # every field of an activated step, so that clients see one shape
        return {
            "key": step["key"],
            "type": step["type"],
            "activation_sequence": None,
            "status": "NOT_STARTED",
            "result": None,
            "review_reason": None,
            "activated_at": None,
            "deadline_at": None,
            "wait": None,
            "task": None,
        }
    task = facts.tasks.get(activation["id"])
    wait = facts.waits.get(activation["id"])
    return {
        "key": step["key"],
        "type": step["type"],
        "activation_sequence": activation["activation_sequence"],
        "status": activation["status"],
        "result": Raw(activation["result"]) if activation["result"] is not None else None,
        "review_reason": activation["review_reason"],
        "activated_at": rfc3339(activation["activated_at"]),
        "deadline_at": rfc3339(activation["deadline_at"]),
        "wait": None
        if wait is None
        else {
            "status": wait["status"],
            "deadline_at": rfc3339(wait["deadline_at"]),
            "correlation_key": wait["correlation"].decode("utf-8", "replace")
            if wait["correlation"] is not None
            else None,
            "winner_signal_id": str(wait["winner_signal_id"]) if wait["winner_signal_id"] is not None else None,
        },
        "task": None
        if task is None
        else {
            "task_id": str(task["id"]),
            "status": task["status"],
            "attempt": task["attempt"],
        },
    }


def workflow_view(facts: WorkflowFacts) -> dict:
    instance = facts.instance
    return {
        "workflow_id": instance["workflow_id"],
        "namespace": instance["namespace"],
        "definition": instance["definition"],
        "version": instance["version"],
        "status": instance["status"],
        "gate": instance["gate"],
        "review_reason": instance["review_reason"],
        "input": Raw(instance["input"]),
        "deadline_at": rfc3339(instance["deadline_at"]),
        "created_at": rfc3339(instance["created_at"]),
        "updated_at": rfc3339(instance["updated_at"]),
        "steps": [_step_view(step, facts) for step in facts.document["steps"]],
    }


def workflow_summary_view(row: dict) -> dict:
    """A workflow in a list: what finding work needs, without input and steps."""
    return {
        "workflow_id": row["workflow_id"],
        "definition": row["definition"],
        "version": row["version"],
        "status": row["status"],
        "gate": row["gate"],
        "review_reason": row["review_reason"],
        "deadline_at": rfc3339(row["deadline_at"]),
        "created_at": rfc3339(row["created_at"]),
        "updated_at": rfc3339(row["updated_at"]),
    }


def event_view(row: dict) -> dict:
    return {"seq": row["seq"], "type": row["type"], "at": rfc3339(row["at"]), "data": Raw(row["data"])}


def claimed_task_view(task: ClaimedTask) -> dict:
    return {
        "task_id": str(task.task_id),
        "queue": task.queue,
        "workflow_id": task.workflow_id,
        "step_key": task.step_key,
        "activation_sequence": task.activation_sequence,
        "kind": task.kind,
        "input": task.input,
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "lease_token": task.lease_token,
        "lease_expires_at": rfc3339(task.lease_expires_at),
        "deadline_at": rfc3339(task.deadline_at),
    }


def _payload(row: dict):
    if row["request_digest"] is None and row["payload"] is not None:
        # Signals older than identity kept their text as sent: show it parsed when it is JSON.
        try:
            return jsontext.loads(row["payload"])
        except jsontext.JsonRejected:
            return row["payload"]
    return Raw(row["payload"]) if row["payload"] is not None else None


def signal_view(row: dict, workflow_id: str) -> dict:
    """Current state of a signal: the receipt fields with current values, plus what was sent."""
    view = {
        "signal_id": str(row["id"]),
        "workflow_id": workflow_id,
        "status": row["status"],
        "disposition": row["disposition"],
        "accepted_at": rfc3339(row["accepted_at"]),
        "expires_at": rfc3339(row["expires_at"]),
        "idempotency_key": row["idempotency_key"],
        "request_digest": row["request_digest"],
        "name": row["name"],
        "payload_version": row["payload_version"],
        "target_step_key": row["target_step_key"],
        "target_activation_sequence": row["target_activation_sequence"],
        "correlation_key": row["correlation"].decode("utf-8", "replace"),
        "reason": row["reason"],
        "evidence_ref": row["evidence_ref"],
        "actor": row["actor"],
        "consumed_at": rfc3339(row["consumed_at"]),
    }
    if row["payload_present"]:
        view["payload"] = _payload(row)
    return view
