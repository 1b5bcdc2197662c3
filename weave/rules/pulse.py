"""Pulse decisions: what happens to a task after a failure or an expired lease (P4, P5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 300.0
MAX_DOUBLINGS = 64  # far past any cap: 2**64 seconds is longer than the universe is old

REQUEUE = "REQUEUE"
UNKNOWN = "UNKNOWN"
CANCELLED = "CANCELLED"


def retry_delay(attempt: int, base: float = RETRY_BASE_SECONDS, cap: float = RETRY_CAP_SECONDS) -> timedelta:
    """Exponential backoff after attempt `attempt` (1-based) failed: base, 2·base, 4·base … ≤ cap.

    The exponent is bounded before it is used: scanner source rows count failures without limit,
    and 2.0 ** 1024 overflows a float."""
    doublings = min(max(0, attempt - 1), MAX_DOUBLINGS)
    return timedelta(seconds=min(cap, base * 2**doublings))


def after_failure(retryable: bool, attempt: int, max_attempts: int, cancel_requested: bool) -> str:
    """A worker reported FAILED: re-queue (same task, next attempt) or settle FAILED."""
    if retryable and attempt < max_attempts and not cancel_requested:
        return REQUEUE
    return "FAILED"


@dataclass(frozen=True)
class LeaseFacts:
    attempt: int
    max_attempts: int
    lease_expired_at: datetime
    deadline_at: datetime | None  # the step's deadline, which cancels the task
    cancel_requested_at: datetime | None  # when the task was asked to stop, if it was


def after_lease_expired(facts: LeaseFacts) -> str:
    """Nobody reported within the lease: re-queue, or UNKNOWN when no attempt is left (its effect
    is unknown), decided by the facts' times whichever unit looks first (issue 25, item 9).

    A cancellation or a step deadline that came while the lease held ends the task UNKNOWN: it was
    asked to stop while it ran, and is not started again. One that came at or after the lease's
    end found a task that the lease's expiry re-queued: CANCELLED, as a queued task is (P5), when
    an attempt was left; the deadline's own look cancels a re-queued task in the same way."""
    ended = facts.lease_expired_at
    stopped_while_running = any(t is not None and t < ended for t in (facts.cancel_requested_at, facts.deadline_at))
    if stopped_while_running or facts.attempt >= facts.max_attempts:
        return UNKNOWN
    if facts.cancel_requested_at is not None:
        return CANCELLED
    return REQUEUE
