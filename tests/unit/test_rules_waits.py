"""Who wins a wait (S2.2, S2.3, S2.5, S2.6), decided from the facts' times without a database."""

from datetime import datetime, timedelta

import pytest

from weave.rules.waits import PendingSignal, Verdict, WaitFacts, adjudicate

T0 = datetime(2026, 11, 30, 7, 0, 0)
DEADLINE = T0 + timedelta(hours=1)
US = timedelta(microseconds=1)
SECOND = timedelta(seconds=1)

WAIT = WaitFacts("payment.settled", "v1", b"o-1", DEADLINE)
LEGACY_WAIT = WaitFacts(None, None, None, DEADLINE)  # older than signal identity (M3)


def sig(
    signal_id: int,
    accepted_at: datetime,
    correlation: bytes = b"o-1",
    name: str = "payment.settled",
    payload_version: str | None = "v1",
) -> PendingSignal:
    return PendingSignal(signal_id, name, payload_version, correlation, accepted_at)


CASES = [
    # S2.2: among matching PENDING signals the first by (accepted_at, signal_id) wins
    ("s2_2_single_on_time_match_wins", WAIT, [sig(1, T0)], T0, Verdict(1)),
    (
        "s2_2_earliest_accepted_wins_whatever_its_id",
        WAIT,
        [sig(1, T0 + 2 * SECOND), sig(2, T0 + SECOND)],
        T0,
        Verdict(2, {1: "WAIT_SETTLED"}),
    ),
    ("s2_2_earliest_by_one_microsecond_wins", WAIT, [sig(1, T0 + US), sig(2, T0)], T0, Verdict(2, {1: "WAIT_SETTLED"})),
    ("s2_2_equal_times_smaller_id_wins", WAIT, [sig(5, T0), sig(3, T0)], T0, Verdict(3, {5: "WAIT_SETTLED"})),
    ("s2_2_ids_compared_as_numbers", WAIT, [sig(10, T0), sig(9, T0)], T0, Verdict(9, {10: "WAIT_SETTLED"})),
    (
        "s2_5_one_winner_all_other_matches_wait_settled",
        WAIT,
        [sig(4, T0 + 3 * SECOND), sig(2, T0 + SECOND), sig(3, T0 + SECOND), sig(1, T0 + 2 * SECOND)],
        T0,
        Verdict(2, {3: "WAIT_SETTLED", 1: "WAIT_SETTLED", 4: "WAIT_SETTLED"}),
    ),
    # S2.2: signals that do not match are CORRELATION_MISMATCH, never the winner
    (
        "s2_2_earlier_mismatch_rejected_later_match_wins",
        WAIT,
        [sig(1, T0, b"o-2"), sig(2, T0 + SECOND)],
        T0,
        Verdict(2, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_mismatch_with_equal_time_and_smaller_id",
        WAIT,
        [sig(2, T0), sig(1, T0, b"o-2")],
        T0,
        Verdict(2, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_correlation_compared_as_bytes_trailing_space",
        WAIT,
        [sig(1, T0, b"o-1 ")],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_correlation_compared_as_bytes_case",
        WAIT,
        [sig(1, T0, b"O-1")],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_other_signal_name_does_not_match",
        WAIT,
        [sig(1, T0, name="payment.refunded")],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_other_payload_version_does_not_match",
        WAIT,
        [sig(1, T0, payload_version="v2")],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_2_signal_without_payload_version_does_not_match",
        WAIT,
        [sig(1, T0, payload_version=None)],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    # M3: a wait older than signal identity is not turned into a valid contract: it matches nothing
    ("m3_legacy_wait_matches_nothing", LEGACY_WAIT, [sig(1, T0)], T0, Verdict(None, {1: "CORRELATION_MISMATCH"})),
    (
        "m3_wait_without_payload_version_matches_nothing",
        WaitFacts("payment.settled", None, b"o-1", DEADLINE),
        [sig(1, T0, payload_version=None)],
        T0,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    # S2.3: accepted strictly before the deadline counts, even when the consumer looks late
    ("s2_3_one_microsecond_before_deadline_wins", WAIT, [sig(1, DEADLINE - US)], DEADLINE - US, Verdict(1)),
    ("s2_3_on_time_signal_used_when_consumer_runs_at_deadline", WAIT, [sig(1, DEADLINE - US)], DEADLINE, Verdict(1)),
    (
        "s2_3_on_time_signal_used_when_consumer_runs_after_deadline",
        WAIT,
        [sig(1, T0)],
        DEADLINE + timedelta(days=3),
        Verdict(1),
    ),
    ("s2_3_equal_to_deadline_is_late", WAIT, [sig(1, DEADLINE)], DEADLINE, Verdict(None, {1: "LATE"}, expire=True)),
    (
        "s2_3_after_deadline_is_late",
        WAIT,
        [sig(1, DEADLINE + US)],
        DEADLINE + US,
        Verdict(None, {1: "LATE"}, expire=True),
    ),
    (
        "s2_3_late_match_after_on_time_mismatch",
        WAIT,
        [sig(1, DEADLINE - US, b"o-2"), sig(2, DEADLINE)],
        DEADLINE,
        Verdict(None, {1: "CORRELATION_MISMATCH", 2: "LATE"}, expire=True),
    ),
    (
        "s2_5_late_match_after_the_winner_lost_to_it",
        WAIT,
        [sig(1, T0), sig(2, DEADLINE)],
        DEADLINE,
        Verdict(1, {2: "WAIT_SETTLED"}),
    ),
    # S2.6: without an on-time match the wait expires once the deadline is reached
    ("s2_6_nothing_pending_before_deadline_keeps_waiting", WAIT, [], DEADLINE - US, Verdict()),
    ("s2_6_nothing_pending_at_deadline_expires", WAIT, [], DEADLINE, Verdict(expire=True)),
    ("s2_6_nothing_pending_after_deadline_expires", WAIT, [], DEADLINE + timedelta(days=1), Verdict(expire=True)),
    (
        "s2_6_only_mismatches_before_deadline_keeps_waiting",
        WAIT,
        [sig(1, T0, b"o-2")],
        DEADLINE - US,
        Verdict(None, {1: "CORRELATION_MISMATCH"}),
    ),
    (
        "s2_6_only_mismatches_at_deadline_expires",
        WAIT,
        [sig(1, T0, b"o-2")],
        DEADLINE,
        Verdict(None, {1: "CORRELATION_MISMATCH"}, expire=True),
    ),
    ("s2_6_legacy_wait_expires_at_its_deadline", LEGACY_WAIT, [], DEADLINE, Verdict(expire=True)),
]


@pytest.mark.parametrize("wait, pending, now, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_s2_2_adjudicate(wait, pending, now, expected):
    assert adjudicate(wait, pending, now) == expected


def test_s2_2_verdict_does_not_depend_on_the_order_signals_are_given_in():
    pending = [sig(1, T0 + SECOND), sig(2, T0, b"o-2"), sig(3, T0 + SECOND), sig(4, T0 + 2 * SECOND)]
    expected = Verdict(1, {2: "CORRELATION_MISMATCH", 3: "WAIT_SETTLED", 4: "WAIT_SETTLED"})
    assert adjudicate(WAIT, pending, T0) == expected
    assert adjudicate(WAIT, pending[::-1], T0) == expected


@pytest.mark.parametrize(
    "mismatch",
    [
        sig(2, T0 + SECOND, b"o-2"),
        sig(2, T0, b"o-2"),  # equal time, larger id: after the winner in (accepted_at, signal_id) order
        sig(2, T0 + SECOND, name="payment.refunded"),
    ],
    ids=["s2_2_later_mismatch", "s2_2_equal_time_larger_id_mismatch", "s2_2_later_other_name"],
)
def test_s2_2_mismatch_after_the_winner_is_correlation_mismatch_not_wait_settled(mismatch):
    assert adjudicate(WAIT, [sig(1, T0), mismatch], T0) == Verdict(1, {2: "CORRELATION_MISMATCH"})
