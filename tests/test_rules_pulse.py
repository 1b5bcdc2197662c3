"""Pulse decisions without a database (P4, P5): backoff, and what a failure or a lost lease leads to."""

from datetime import timedelta

import pytest

from weave.rules.pulse import REQUEUE, RETRY_CAP_SECONDS, after_failure, after_lease_expired, retry_delay


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


@pytest.mark.parametrize(
    "attempt, max_attempts, cancel_requested, expected",
    [
        (1, 3, False, REQUEUE),
        (2, 3, False, REQUEUE),
        (3, 3, False, "UNKNOWN"),
        (1, 1, False, "UNKNOWN"),
        (4, 3, False, "UNKNOWN"),
        (1, 3, True, "UNKNOWN"),
    ],
    ids=[
        "p4_lost_lease_with_attempts_left_requeues",
        "p4_second_to_last_lost_lease_requeues",
        "p4_last_attempt_lost_lease_is_unknown",
        "p4_single_attempt_lost_lease_is_unknown",
        "p4_attempt_past_max_attempts_is_unknown",
        "p5_cancel_requested_lost_lease_is_unknown_not_requeued",
    ],
)
def test_p4_after_lease_expired(attempt, max_attempts, cancel_requested, expected):
    assert after_lease_expired(attempt, max_attempts, cancel_requested) == expected
