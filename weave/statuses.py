"""The statuses of Weave's rows, spelt exactly as docs/rules.md#statuses spells them (the API and
the database use these words). Each is a `StrEnum`: a member is its own text, so it compares equal
to what a row holds. Migration 0015 makes the database refuse any other value (`CHECKS`);
tests/integration/test_statuses.py compares these enums with the constraints,
tests/unit/test_docs_rules.py with docs/rules.md."""

from __future__ import annotations

from enum import StrEnum


class InstanceStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Gate(StrEnum):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class ActivationStatus(StrEnum):
    ACTIVE = "ACTIVE"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"


class WaitStatus(StrEnum):
    WAITING = "WAITING"
    SATISFIED = "SATISFIED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"


class SignalStatus(StrEnum):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


class Disposition(StrEnum):
    """Why a signal is not, or no longer, PENDING."""

    CORRELATION_MISMATCH = "CORRELATION_MISMATCH"
    STALE_ACTIVATION = "STALE_ACTIVATION"
    STEP_SETTLED = "STEP_SETTLED"
    INSTANCE_SETTLED = "INSTANCE_SETTLED"
    LATE = "LATE"
    WAIT_SETTLED = "WAIT_SETTLED"
    QUERY_SETTLED = "QUERY_SETTLED"
    EXPIRED_UNMATCHED = "EXPIRED_UNMATCHED"
    LEGACY_UNVERIFIED = "LEGACY_UNVERIFIED"


class TaskStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"  # the last attempt's lease expired: its effect is unknown


class InboxStatus(StrEnum):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"


class TaskOutcome(StrEnum):
    """A task's final outcome, as its inbox event reports it (P6)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"


# constraint name -> (table, column, the enum its values must be one of); a NULL passes a CHECK.
CHECKS: dict[str, tuple[str, str, type[StrEnum]]] = {
    "ck_instances_status": ("instances", "status", InstanceStatus),
    "ck_instances_gate": ("instances", "gate", Gate),
    "ck_step_activations_status": ("step_activations", "status", ActivationStatus),
    "ck_waits_status": ("waits", "status", WaitStatus),
    "ck_signals_status": ("signals", "status", SignalStatus),
    "ck_signals_disposition": ("signals", "disposition", Disposition),
    "ck_tasks_status": ("tasks", "status", TaskStatus),
    "ck_inbox_events_status": ("inbox_events", "status", InboxStatus),
    "ck_inbox_events_outcome": ("inbox_events", "outcome", TaskOutcome),
}
