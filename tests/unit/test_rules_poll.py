"""The POLL adjudication rule (SPEC §7): every C2 row, the tie, C1 rounds and the deadline, by id."""

from datetime import datetime, timedelta

import pytest

from weave.rules import poll
from weave.rules.poll import Decision, PollFacts, Round, Signal

T0 = datetime(2026, 11, 30, 7, 0, 0)
SECOND = timedelta(seconds=1)
DEADLINE = T0 + timedelta(minutes=10)
INTERVAL = timedelta(seconds=60)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def queued(number=1):
    return Round(task_id=10 + number, number=number, status=poll.QUEUED)


def running(number=1):
    return Round(task_id=10 + number, number=number, status=poll.RUNNING)


def reported(seconds, report, result=None, number=1):
    return Round(10 + number, number, poll.SUCCEEDED, at(seconds), report, result)


def ended(seconds, outcome, number=1):
    return Round(10 + number, number, outcome, at(seconds))


def signal(seconds, result="delivered", signal_id=7):
    return Signal(signal_id, at(seconds), result)


def decide(the_round, now=30, candidate=None, taken=None, same_result=None):
    result_of = (candidate or taken).result if (candidate or taken) else None
    same = same_result if same_result is not None else the_round.result == result_of
    return poll.decide(PollFacts(the_round, DEADLINE, at(now), INTERVAL, taken, candidate, same))


# ---- C2.1: a FINAL query result before the signal, within the deadline, wins -------------------------


@pytest.mark.parametrize(
    "query_at, signal_at",
    [(5, 10), (10, 10), (5, None)],
    ids=["c2_1_query_first", "c2_1_equal_times_the_query_wins", "c2_1_no_signal"],
)
def test_c2_1_a_final_report_before_the_signal_wins(query_at, signal_at):
    candidate = signal(signal_at) if signal_at is not None else None
    decision = decide(reported(query_at, poll.FINAL, "in transit"), candidate=candidate)
    assert decision == Decision(poll.QUERY_WINS, "C2.1")


def test_c2_1_a_final_report_at_the_deadline_does_not_count():
    late = Round(11, 1, poll.SUCCEEDED, DEADLINE, poll.FINAL, "x")
    assert decide(late, now=700) == Decision(poll.REVIEW, "C2.7", reason=poll.QUERY_DEADLINE_EXCEEDED)


def test_c2_1_a_final_report_just_before_the_deadline_counts_even_when_looked_at_late():
    in_time = Round(11, 1, poll.SUCCEEDED, DEADLINE - timedelta(microseconds=1), poll.FINAL, "x")
    assert decide(in_time, now=900).kind == poll.QUERY_WINS


# ---- C2.2: a final signal and no query in flight -------------------------------------------------------


def test_c2_2_a_signal_after_a_pending_report_settles_the_step_without_a_new_round():
    assert decide(reported(5, poll.PENDING), candidate=signal(10)) == Decision(poll.SIGNAL_WINS, "C2.2", signal_id=7)


# ---- C2.3 / C2.4: the signal first, the round not started / running -----------------------------------


def test_c2_3_signal_first_and_the_round_not_started_the_signal_wins_and_the_round_is_cancelled():
    decision = decide(queued(2), candidate=signal(10))
    assert decision == Decision(poll.SIGNAL_WINS, "C2.3", signal_id=7, cancel_round=True)


def test_c2_4_signal_first_and_the_round_running_the_winner_is_saved_and_the_round_asked_to_stop():
    decision = decide(running(), candidate=signal(10))
    assert decision == Decision(poll.TAKE_SIGNAL, "C2.4", signal_id=7, cancel_round=True)


def test_c2_4_a_taken_signal_waits_for_the_running_round_even_past_the_deadline():
    taken = signal(10)
    for now in (30, 700):
        assert decide(running(), now=now, taken=taken) == Decision(poll.WAIT, "C2.4", signal_id=7)


# ---- C2.5 / C2.6: what the running round reports after the signal was taken ----------------------------


@pytest.mark.parametrize(
    "the_round",
    [
        reported(20, poll.PENDING),
        reported(20, poll.FINAL, "delivered"),
        ended(20, poll.FAILED),
        ended(20, poll.CANCELLED),
    ],
    ids=["c2_5_pending", "c2_5_the_same_final", "c2_5_a_known_failure", "c2_5_cancelled"],
)
def test_c2_5_the_running_round_ends_harmlessly_and_the_signal_settles_the_step(the_round):
    for path in ("taken", "candidate"):  # the checkpoint looked first (C2.4), or the report comes first
        decision = decide(the_round, **{path: signal(10)})
        assert decision == Decision(poll.SIGNAL_WINS, "C2.5", signal_id=7), path


@pytest.mark.parametrize(
    "the_round, reason",
    [
        (ended(20, poll.UNKNOWN), poll.QUERY_OUTCOME_UNKNOWN),
        (reported(20, poll.INVALID), poll.QUERY_RESULT_INVALID),
        (reported(20, poll.FINAL, "lost"), poll.QUERY_RESULT_CONFLICT),
    ],
    ids=["c2_6_unknown_effect", "c2_6_invalid_result", "c2_6_a_different_final"],
)
def test_c2_6_the_running_round_leaves_a_fact_the_signal_cannot_overwrite(the_round, reason):
    for path in ("taken", "candidate"):
        decision = decide(the_round, **{path: signal(10)})
        assert decision == Decision(poll.REVIEW, "C2.6", reason=reason, signal_id=7), path


def test_c2_6_the_same_final_is_decided_by_json_equality_given_by_the_engine():
    assert decide(reported(20, poll.FINAL, "x"), taken=signal(10, result="y"), same_result=True).kind == (
        poll.SIGNAL_WINS
    )


# ---- C2.7: the deadline --------------------------------------------------------------------------------


def test_c2_7_the_deadline_passes_with_a_query_in_flight_review_and_ask_the_kept_task_to_stop():
    decision = decide(running(), now=600)
    assert decision == Decision(poll.REVIEW, "C2.7", reason=poll.QUERY_DEADLINE_EXCEEDED, cancel_round=True)


def test_c2_7_the_deadline_passes_with_the_next_round_not_started_review_and_cancel_it():
    decision = decide(queued(3), now=600)
    assert decision == Decision(poll.REVIEW, "C2.7", reason=poll.QUERY_DEADLINE_EXCEEDED, cancel_round=True)


def test_c2_7_a_pending_report_looked_at_after_the_deadline_opens_no_round():
    assert decide(reported(599, poll.PENDING), now=600).kind == poll.REVIEW


def test_c2_7_a_result_after_the_deadline_does_not_clear_the_review():
    assert decide(reported(601, poll.FINAL, "in transit"), now=601).kind == poll.REVIEW


def test_c2_7_before_the_deadline_a_running_round_is_waited_for():
    assert decide(running(), now=599) == Decision(poll.WAIT, "C1")


# ---- C1: rounds -------------------------------------------------------------------------------------------


def test_c1_pending_opens_the_next_round_an_interval_after_it_was_reported():
    decision = decide(reported(5, poll.PENDING, number=2))
    assert decision == Decision(poll.NEXT_ROUND, "C1", available_at=at(65))


def test_c1_pending_opens_no_round_that_could_not_start_before_the_deadline():
    assert decide(reported(540, poll.PENDING), now=545) == Decision(poll.WAIT, "C1")
    assert decide(reported(539, poll.PENDING), now=545).kind == poll.NEXT_ROUND


@pytest.mark.parametrize(
    "outcome, reason",
    [
        (poll.FAILED, poll.QUERY_FAILED),
        (poll.UNKNOWN, poll.QUERY_OUTCOME_UNKNOWN),
        (poll.CANCELLED, poll.QUERY_CANCELLED),
    ],
)
def test_c1_a_round_that_ends_without_an_answer_and_without_a_signal_needs_review(outcome, reason):
    assert decide(ended(5, outcome)) == Decision(poll.REVIEW, "C1", reason=reason)


def test_c1_a_failure_before_the_signal_came_is_decided_as_it_stood_then():
    # The attempts ran out at 5 s, the signal came at 10 s: at 5 s nothing had answered.
    assert decide(ended(5, poll.FAILED), candidate=signal(10)) == Decision(poll.REVIEW, "C1", reason=poll.QUERY_FAILED)


def test_c2_6_an_invalid_report_with_no_signal_needs_review():
    assert decide(reported(5, poll.INVALID)) == Decision(poll.REVIEW, "C2.6", reason=poll.QUERY_RESULT_INVALID)


# ---- the same facts give the same decision, whoever looks first ------------------------------------------


def test_c2_the_decision_depends_on_the_facts_times_only():
    the_round, candidate = reported(12, poll.FINAL, "delivered"), signal(10)
    first = decide(the_round, now=13, candidate=candidate)
    later = decide(the_round, now=500, candidate=candidate)
    assert first == later == Decision(poll.SIGNAL_WINS, "C2.5", signal_id=7)


@pytest.mark.parametrize(
    "text, expected",
    [
        ({"state": "PENDING"}, (poll.PENDING, None)),
        ({"state": "FINAL", "result": {"at": "depot"}}, (poll.FINAL, {"at": "depot"})),
        ({"state": "FINAL", "result": None}, (poll.FINAL, None)),
        ({"state": "FINAL"}, (poll.INVALID, None)),
        ({"state": "PENDING", "result": 1}, (poll.INVALID, None)),
        ({"state": "DONE", "result": 1}, (poll.INVALID, None)),
        ([], (poll.INVALID, None)),
        (None, (poll.INVALID, None)),
    ],
)
def test_c1_a_report_is_pending_or_final_and_anything_else_is_invalid(text, expected):
    assert poll.parse_report(text) == expected
