"""What the client returns: plain dataclasses whose attributes are the field names of the API (docs/rules.md#api).

Times are timezone-aware `datetime`s (UTC), identifiers strings, JSON values (inputs, results,
payloads, event data) exact as `weave.sdk.jsonio.loads` reads them. Every object also keeps the
representation it was read from in `raw` (a dict, exact), so that fields the server adds later
are reachable and `--json` output is what the server said. A member the server left out keeps
the field's default; a signal whose payload was absent has `payload is ABSENT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from weave.sdk.jsonio import ABSENT

T = TypeVar("T")

TIME = {"kind": "time"}


def _nested(cls: type) -> dict:
    return {"kind": "object", "of": cls}


def _listed(cls: type) -> dict:
    return {"kind": "list", "of": cls}


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 UTC time of the API (`2026-11-30T07:01:23.123456Z`) as an aware datetime."""
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value)


def from_json(cls: type[T], data: Any) -> T:
    """An instance of the dataclass `cls` from its JSON representation (a dict)."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    values: dict[str, Any] = {"raw": data}
    for f in fields(cls):
        if f.name == "raw" or not f.init or f.name not in data:
            continue
        value = data[f.name]
        kind = f.metadata.get("kind")
        if kind == "time":
            value = parse_time(value)
        elif kind == "object" and value is not None:
            value = from_json(f.metadata["of"], value)
        elif kind == "list" and value is not None:
            value = [from_json(f.metadata["of"], item) for item in value]
        values[f.name] = value
    return cls(**values)


@dataclass
class Definition:
    name: str | None = None
    version: int | None = None
    digest: str | None = None
    created_at: datetime | None = field(default=None, metadata=TIME)
    document: Any = None  # only when read (`get_definition`), not in the publish answer or a list
    created: bool = False  # publish only: a new version (201), not the identical latest one (200)
    raw: dict = _raw()


@dataclass
class Wait:
    status: str | None = None
    deadline_at: datetime | None = field(default=None, metadata=TIME)
    correlation_key: str | None = None
    winner_signal_id: str | None = None
    raw: dict = _raw()


@dataclass
class StepTask:
    """The task of a step's latest activation (the current round's for POLL)."""

    task_id: str | None = None
    status: str | None = None
    attempt: int | None = None
    raw: dict = _raw()


@dataclass
class Step:
    """A step of the pinned definition with its latest activation (`NOT_STARTED` before any)."""

    key: str | None = None
    type: str | None = None
    activation_sequence: int | None = None
    status: str | None = None
    result: Any = None
    wait: Wait | None = field(default=None, metadata=_nested(Wait))
    task: StepTask | None = field(default=None, metadata=_nested(StepTask))
    review_reason: str | None = None
    activated_at: datetime | None = field(default=None, metadata=TIME)
    deadline_at: datetime | None = field(default=None, metadata=TIME)
    raw: dict = _raw()


@dataclass
class Workflow:
    workflow_id: str | None = None
    namespace: str | None = None
    definition: str | None = None
    version: int | None = None
    status: str | None = None
    gate: str | None = None
    review_reason: str | None = None
    input: Any = None
    deadline_at: datetime | None = field(default=None, metadata=TIME)
    created_at: datetime | None = field(default=None, metadata=TIME)
    updated_at: datetime | None = field(default=None, metadata=TIME)
    steps: list[Step] = field(default_factory=list, metadata=_listed(Step))
    raw: dict = _raw()

    def step(self, key: str) -> Step:
        """The step with this key (KeyError when the definition has none)."""
        for step in self.steps:
            if step.key == key:
                return step
        raise KeyError(key)


@dataclass
class Event:
    seq: int | None = None
    type: str | None = None
    at: datetime | None = field(default=None, metadata=TIME)
    data: Any = None
    raw: dict = _raw()


@dataclass
class Receipt:
    """The frozen answer to a signal's first acceptance; `replayed` when it answered a retry."""

    signal_id: str | None = None
    workflow_id: str | None = None
    status: str | None = None
    disposition: str | None = None
    accepted_at: datetime | None = field(default=None, metadata=TIME)
    expires_at: datetime | None = field(default=None, metadata=TIME)
    idempotency_key: str | None = None
    request_digest: str | None = None
    replayed: bool = False  # the Idempotent-Replayed header, not a member of the receipt
    raw: dict = _raw()


@dataclass
class Signal(Receipt):
    """A signal's current state: the receipt's fields (current values) and what was sent."""

    name: str | None = None
    payload_version: str | None = None
    target_step_key: str | None = None
    target_activation_sequence: int | None = None
    correlation_key: str | None = None
    payload: Any = ABSENT  # ABSENT when the signal was sent without one; None is JSON null
    reason: str | None = None
    evidence_ref: str | None = None
    actor: str | None = None
    consumed_at: datetime | None = field(default=None, metadata=TIME)


@dataclass
class Task:
    """A claimed task: `kind` is TASK (a TASK step's work) or QUERY (one round of a POLL step)."""

    task_id: str | None = None
    queue: str | None = None
    workflow_id: str | None = None
    step_key: str | None = None
    activation_sequence: int | None = None
    kind: str | None = None
    input: Any = None  # the instance context: {"workflow_id", "input", "steps": {key: {"result"}}}
    attempt: int | None = None
    max_attempts: int | None = None
    lease_token: str | None = field(default=None, repr=False)  # a secret of the lease holder
    lease_expires_at: datetime | None = field(default=None, metadata=TIME)
    deadline_at: datetime | None = field(default=None, metadata=TIME)
    raw: dict = _raw()


@dataclass
class Heartbeat:
    cancel_requested: bool = False
    lease_expires_at: datetime | None = field(default=None, metadata=TIME)
    raw: dict = _raw()


@dataclass
class Completion:
    """The task after a report: `status` QUEUED when a retryable failure put it back in the queue."""

    task_id: str | None = None
    status: str | None = None
    attempt: int | None = None
    raw: dict = _raw()
