"""Signal decisions without I/O: the contract check (S1.9), the request digest (S1.11) and the
disposition a signal gets at acceptance (S1.10, S2.1, S2.3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from weave import jsontext
from weave.rules import gate
from weave.rules.definitions import CONTRACT_FIELDS
from weave.rules.problems import Problem
from weave.schemas.payload import payload_errors

ABSENT = object()  # a signal without a `payload` member (different from an explicit null)


def _trivial(schema: Any) -> bool:
    return schema is True or schema == {}


def contract_problems(steps: list[dict], fields: dict, payload: Any) -> list[Problem]:
    """Why a signal does not fit the pinned definition's contract for its target step (empty when it fits)."""
    step = next((s for s in steps if s["key"] == fields["target_step_key"]), None)
    if step is None:
        return [Problem("/target_step_key", f"the pinned definition has no step {fields['target_step_key']!r}")]
    contract = step.get(CONTRACT_FIELDS.get(step["type"], ""))
    if contract is None:
        return [Problem("/target_step_key", f"step {step['key']!r} is a {step['type']} step without a signal contract")]
    found = []
    if fields["name"] != contract["name"]:
        found.append(Problem("/name", f"step {step['key']!r} expects signal {contract['name']!r}"))
    if fields["payload_version"] != contract["payload_version"]:
        found.append(
            Problem("/payload_version", f"step {step['key']!r} expects payload version {contract['payload_version']!r}")
        )
    if found:
        return found
    if step["type"] == "POLL":
        return _final_envelope_problems(contract, payload)
    if payload is ABSENT:
        if _trivial(contract["payload_schema"]):
            return []
        return [Problem("/payload", "this contract's payload schema requires a payload")]
    return schema_problems(contract["payload_schema"], payload, "/payload")


def _final_envelope_problems(contract: dict, payload: Any) -> list[Problem]:
    """A POLL final signal carries {"state": "FINAL", "result": …}; PENDING is only an observation (C1)."""
    if payload is ABSENT or not isinstance(payload, dict):
        return [Problem("/payload", 'a final signal payload is {"state": "FINAL", "result": …}')]
    if payload.get("state") == "PENDING":
        return [Problem("/payload/state", "a final signal cannot be PENDING; only FINAL results are signals")]
    if payload.get("state") != "FINAL" or set(payload) != {"state", "result"}:
        return [Problem("/payload", 'a final signal payload is exactly {"state": "FINAL", "result": …}')]
    return schema_problems(contract["payload_schema"], payload["result"], "/payload/result")


def schema_problems(schema: Any, value: Any, prefix: str) -> list[Problem]:
    """Where `value` breaks `schema` (a contract's payload schema), as problems under `prefix`."""
    return [Problem(e["pointer"], e["message"]) for e in payload_errors(schema, value, prefix)]


def request_digest(fields: dict, payload: Any) -> str:
    """SHA-256 over the canonical form of every signal field (S1.11); absent payload ≠ null payload."""
    return _digest(fields, ("target_step_key", "target_activation_sequence"), payload)


def route_digest(fields: dict, payload: Any) -> str:
    """The same for a fact sent by its business key (B1): its fields name no target, and its
    `park_seconds` (the default written in) is part of what was asked."""
    return _digest(fields, ("park_seconds",), payload)


def _digest(fields: dict, addressed_by: tuple[str, ...], payload: Any) -> str:
    document = {key: fields[key] for key in ("name", "payload_version", *addressed_by, "correlation_key", "reason")}
    if fields.get("evidence_ref") is not None:
        document["evidence_ref"] = fields["evidence_ref"]
    if payload is not ABSENT:
        document["payload"] = payload
    return jsontext.digest(document)


# ---- disposition at acceptance ------------------------------------------------------------------------

PENDING = "PENDING"
REJECTED = "REJECTED"
ACTIVATION_NOT_FOUND = "ACTIVATION_NOT_FOUND"


@dataclass(frozen=True)
class TargetFacts:
    """What the instance transaction knows about the target when the signal arrives."""

    instance_status: str
    target_sequence: int
    current_sequence: int | None  # latest activation of the target step; None before the first
    activation_status: str | None
    wait_status: str | None  # the wait of the latest activation, if it has one
    wait_deadline: datetime | None
    wait_correlation: bytes | None
    wait_won_by_query: bool
    correlation: bytes
    accepted_at: datetime


@dataclass(frozen=True)
class Acceptance:
    status: str  # PENDING or REJECTED, or ACTIVATION_NOT_FOUND (refused, nothing stored)
    disposition: str | None = None
    wakes_wait: bool = False  # a WAIT checkpoint is due now: the target wait is active


def accept(facts: TargetFacts) -> Acceptance:
    newest_possible = max(facts.current_sequence or 0, 1)
    if facts.target_sequence > newest_possible:
        return Acceptance(ACTIVATION_NOT_FOUND)
    if facts.instance_status in gate.TERMINAL:
        return Acceptance(REJECTED, "INSTANCE_SETTLED")
    if facts.current_sequence is None:
        return Acceptance(PENDING)  # early (S2.1): the step has not started yet
    if facts.target_sequence < facts.current_sequence:
        return Acceptance(REJECTED, "STALE_ACTIVATION")
    # S2.2: the frozen key is compared whatever the wait's state; WAIT_SETTLED, QUERY_SETTLED,
    # STEP_SETTLED and LATE are only for signals that match it.
    if facts.wait_status is not None and facts.correlation != facts.wait_correlation:
        return Acceptance(REJECTED, "CORRELATION_MISMATCH")
    if facts.wait_status == "WAITING":
        if facts.accepted_at >= facts.wait_deadline:
            return Acceptance(REJECTED, "LATE")  # S2.3: equal to the deadline is late
        return Acceptance(PENDING, wakes_wait=True)
    if facts.wait_status == "EXPIRED":
        return Acceptance(REJECTED, "LATE")
    if facts.activation_status != "ACTIVE":
        return Acceptance(REJECTED, "STEP_SETTLED")
    if facts.wait_status == "SATISFIED":  # C3: a POLL step stays ACTIVE until its query ends
        return Acceptance(REJECTED, "QUERY_SETTLED" if facts.wait_won_by_query else "WAIT_SETTLED")
    return Acceptance(REJECTED, "STEP_SETTLED")
