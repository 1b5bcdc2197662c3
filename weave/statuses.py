"""The statuses of Weave's rows, spelt exactly as docs/rules.md#statuses spells them (the API and
the database use these words). Each is a `StrEnum`: a member is its own text, so it compares equal
to what a row holds. Migration 0015 makes the database refuse any other value (`CHECKS`; migration
0017 adds the words of routing, docs/rules.md#routing); tests/integration/test_statuses.py compares
these enums with the constraints, tests/unit/test_docs_rules.py with docs/rules.md."""

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
    PARKED = "PARKED"  # docs/rules.md#routing (B2): a fact sent by its business key that no wait has taken yet


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
    # docs/rules.md#routing (round 3): a fact sent by its business key
    AMBIGUOUS_CORRELATION = "AMBIGUOUS_CORRELATION"  # B2: more than one wait could take it
    EXPIRED_UNROUTED = "EXPIRED_UNROUTED"  # B5: parked until parked_until, taken by no wait
    SIGNAL_LIMIT_REACHED = "SIGNAL_LIMIT_REACHED"  # routed into an instance holding 1,024 signals (S1.6)


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


class DeliveryOutcome(StrEnum):
    """What became of a delivery to an inbound source (docs/rules.md#webhooks, W4, W5)."""

    ROUTED = "ROUTED"
    PARKED = "PARKED"
    AMBIGUOUS = "AMBIGUOUS"
    IGNORED = "IGNORED"  # the mapping names no rule for its event type
    UNMAPPABLE = "UNMAPPABLE"  # the mapping cannot make a valid fact of it (422)


class NotifyEvent(StrEnum):
    """The event types a subscription may receive (docs/rules.md#notifications, N1). The order is
    stored: bit i of `notify_subscriptions.event_mask` is the i-th type (append, never reorder)."""

    NEEDS_REVIEW = "workflow.needs_review"
    SUCCEEDED = "workflow.succeeded"
    FAILED = "workflow.failed"
    CANCELLED = "workflow.cancelled"
    SIGNAL_SETTLED = "signal.settled"
    DEADLINE_NEAR = "wait.deadline_near"

    @property
    def bit(self) -> int:
        return 1 << list(NotifyEvent).index(self)


class SubscriptionStatus(StrEnum):
    """Whether a subscription sends (N1, N3): a disabled one sends nothing more."""

    ENABLED = "ENABLED"
    DISABLED = "DISABLED"


class NotificationStatus(StrEnum):
    """Where a notification of the outbox stands (N2, N3)."""

    PENDING = "PENDING"  # to be (re)tried at its due_at
    DELIVERED = "DELIVERED"  # an attempt was answered 2xx
    DROPPED = "DROPPED"  # its subscription was disabled or deleted before it was delivered


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
    "ck_inbound_deliveries_outcome": ("inbound_deliveries", "outcome", DeliveryOutcome),  # migration 0019
    "ck_notify_subscriptions_status": ("notify_subscriptions", "status", SubscriptionStatus),  # migration 0021
    "ck_notifications_status": ("notifications", "status", NotificationStatus),  # migration 0021
}
