"""Pulse decisions: what happens to a task after a failure or an expired lease (P4, P5)."""

from __future__ import annotations

from datetime import timedelta

RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 300.0
MAX_DOUBLINGS = 64  # far past any cap: 2**64 seconds is longer than the universe is old

REQUEUE = "REQUEUE"


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


def after_lease_expired(attempt: int, max_attempts: int, cancel_requested: bool) -> str:
    """Nobody reported within the lease: re-queue, or UNKNOWN when no attempt is left (its effect is unknown).

    A task whose cancellation was requested is not started again: its last attempt's effect is unknown.
    """
    if attempt < max_attempts and not cancel_requested:
        return REQUEUE
    return "UNKNOWN"
