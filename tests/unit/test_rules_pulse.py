"""Pulse decisions without a database (P4, P5): backoff, and what a failure or a lost lease leads to."""

from datetime import datetime, timedelta

import pytest

from weave.rules.pulse import REQUEUE, RETRY_CAP_SECONDS, LeaseFacts, after_failure, after_lease_expired, retry_delay


@pytest.mark.parametrize(
    "attempt, kwargs, seconds",
    [
        (1, {}, 1),
        (2, {}, 2),
        (3, {}, 4),
        (9, {}, 256),
        (10, {}, 300),
        (11, {}, 300),
        (100, {}, 300),
        (1024, {}, 300),
        (0, {}, 1),
        (3, {"base": 0.5, "cap": 10}, 2),
        (6, {"base": 0.5, "cap": 10}, 10),
    ],
    ids=[
        "p4_first_retry_waits_base",
        "p4_doubles",
        "p4_doubles_again",
        "p4_last_below_cap",
        "p4_capped",
        "p4_stays_capped",
        "p4_capped_at_the_largest_max_attempts",
        "p4_capped_at_1024_failures",
        "p4_attempt_0_waits_base",
        "p4_base_is_a_parameter",
        "p4_cap_is_a_parameter",
    ],
)
def test_p4_retry_delay(attempt, kwargs, seconds):
    assert retry_delay(attempt, **kwargs) == timedelta(seconds=seconds)


def test_p4_backoff_never_shrinks_and_never_passes_the_cap():
    delays = [retry_delay(attempt) for attempt in range(1, 200)]
    assert delays == sorted(delays)
    assert max(delays) == timedelta(seconds=RETRY_CAP_SECONDS)


# K2 backs scanner source rows off with retry_delay(attempts + 1), and their attempts have no upper
# bound: from attempt 1025, 2.0 ** (attempt - 1) used to overflow before the cap applied.
@pytest.mark.parametrize("attempt", [1025, 10**6], ids=["k2_1025_failures", "k2_a_million_failures"])
def test_k2_backoff_stays_at_the_cap_however_many_attempts_failed(attempt):
    assert retry_delay(attempt) == timedelta(seconds=RETRY_CAP_SECONDS)


@pytest.mark.parametrize(
    "retryable, attempt, max_attempts, cancel_requested, expected",
    [
        (True, 1, 3, False, REQUEUE),
        (True, 2, 3, False, REQUEUE),
        (True, 3, 3, False, "FAILED"),
        (True, 1, 1, False, "FAILED"),
        (True, 4, 3, False, "FAILED"),
        (False, 1, 3, False, "FAILED"),
        (True, 1, 3, True, "FAILED"),
        (False, 3, 3, True, "FAILED"),
    ],
    ids=[
        "p4_retryable_with_attempts_left_requeues",
        "p4_second_to_last_attempt_requeues",
        "p4_attempt_equal_to_max_attempts_fails",
        "p4_single_attempt_fails",
        "p4_attempt_past_max_attempts_fails",
        "p4_non_retryable_fails_with_attempts_left",
        "p5_cancel_requested_is_not_started_again",
        "p4_nothing_left_at_all_fails",
    ],
)
def test_p4_after_failure(retryable, attempt, max_attempts, cancel_requested, expected):
    assert after_failure(retryable, attempt, max_attempts, cancel_requested) == expected


LEASE_END = datetime(2026, 11, 30, 8, 0, 0)
BEFORE, AFTER = LEASE_END - timedelta(seconds=1), LEASE_END + timedelta(seconds=1)


@pytest.mark.parametrize(
    "attempt, max_attempts, cancel_at, deadline_at, expected",
    [
        (1, 3, None, None, REQUEUE),
        (2, 3, None, AFTER, REQUEUE),
        (3, 3, None, None, "UNKNOWN"),
        (1, 1, None, None, "UNKNOWN"),
        (4, 3, None, None, "UNKNOWN"),
        (1, 3, BEFORE, None, "UNKNOWN"),
        (1, 3, AFTER, None, "CANCELLED"),
        (1, 3, LEASE_END, None, "CANCELLED"),
        (3, 3, AFTER, None, "UNKNOWN"),
        (1, 3, None, BEFORE, "UNKNOWN"),
        (1, 3, AFTER, AFTER, "CANCELLED"),
        (1, 3, AFTER, BEFORE, "UNKNOWN"),
    ],
    ids=[
        "p4_lost_lease_with_attempts_left_requeues",
        "p4_second_to_last_lost_lease_before_the_deadline_requeues",
        "p4_last_attempt_lost_lease_is_unknown",
        "p4_single_attempt_lost_lease_is_unknown",
        "p4_attempt_past_max_attempts_is_unknown",
        "p5_cancel_requested_while_the_lease_held_is_unknown_not_requeued",
        "p5_cancel_requested_after_the_lease_ended_is_cancelled_as_a_queued_task",
        "p5_cancel_requested_at_the_lease_end_is_cancelled",
        "p5_cancel_after_the_lease_ended_on_the_last_attempt_is_unknown",
        "p7_step_deadline_while_the_lease_held_is_unknown_not_requeued",
        "p7_step_deadline_after_the_lease_ended_cancels_it",
        "p7_step_deadline_while_the_lease_held_wins_over_a_later_cancel",
    ],
)
def test_p4_after_lease_expired_by_the_facts_times(attempt, max_attempts, cancel_at, deadline_at, expected):
    """Issue 25, item 9: the outcome depends on the lease's end, the cancellation's and the
    deadline's times, never on which unit looked first."""
    facts = LeaseFacts(attempt, max_attempts, LEASE_END, deadline_at, cancel_at)
    assert after_lease_expired(facts) == expected
