"""The execution gate (I3, I4) without a database: may an instance start new work now?"""

from datetime import datetime, timedelta

import pytest

from weave.rules.gate import DEADLINE_EXCEEDED, GO, HOLD, SETTLED, GateFacts, in_force, new_work, passes_deadline

DEADLINE = datetime(2026, 11, 30, 8, 0, 0)
BEFORE = DEADLINE - timedelta(microseconds=1)
AFTER = DEADLINE + timedelta(microseconds=1)

CASES = [
    # (id, instance status, gate, application status, now, decision)
    ("i3_running_open_active_before_deadline_goes", "RUNNING", "OPEN", "ACTIVE", BEFORE, GO),
    ("i4_deadline_reached_is_exceeded", "RUNNING", "OPEN", "ACTIVE", DEADLINE, DEADLINE_EXCEEDED),
    ("i4_deadline_passed_is_exceeded", "RUNNING", "OPEN", "ACTIVE", AFTER, DEADLINE_EXCEEDED),
    ("i3_pause_holds", "PAUSED", "CLOSED", "ACTIVE", BEFORE, HOLD),
    ("i3_review_holds", "NEEDS_REVIEW", "CLOSED", "ACTIVE", BEFORE, HOLD),
    ("i3_closed_gate_holds_a_running_instance", "RUNNING", "CLOSED", "ACTIVE", BEFORE, HOLD),
    (
        "i6_gate_closed_by_the_deadline_sends_new_work_to_review",
        "RUNNING",
        "CLOSED",
        "ACTIVE",
        DEADLINE,
        DEADLINE_EXCEEDED,
    ),
    ("i3_disabled_application_holds", "RUNNING", "OPEN", "DISABLED", BEFORE, HOLD),
    ("i3_paused_past_deadline_holds_until_resumed", "PAUSED", "CLOSED", "ACTIVE", AFTER, HOLD),
    ("i3_review_past_deadline_holds", "NEEDS_REVIEW", "CLOSED", "ACTIVE", AFTER, HOLD),
    ("i3_disabled_application_past_deadline_holds", "RUNNING", "OPEN", "DISABLED", AFTER, HOLD),
    ("i3_succeeded_is_settled", "SUCCEEDED", "CLOSED", "ACTIVE", BEFORE, SETTLED),
    ("i3_failed_is_settled", "FAILED", "CLOSED", "ACTIVE", BEFORE, SETTLED),
    ("i3_cancelled_is_settled", "CANCELLED", "CLOSED", "ACTIVE", BEFORE, SETTLED),
    ("i3_terminal_is_settled_past_deadline", "CANCELLED", "CLOSED", "ACTIVE", AFTER, SETTLED),
    ("i3_terminal_is_settled_whatever_the_gate_and_application", "SUCCEEDED", "OPEN", "DISABLED", AFTER, SETTLED),
]


@pytest.mark.parametrize(
    "status, gate, application, now, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_i3_new_work(status, gate, application, now, expected):
    assert new_work(GateFacts(status, gate, application, DEADLINE, now)) == expected


IN_FORCE = [
    # (instance status, now, the gate in force)
    ("RUNNING", BEFORE, "OPEN"),
    ("RUNNING", DEADLINE, "CLOSED"),  # equal to the deadline is past it (I4)
    ("RUNNING", AFTER, "CLOSED"),
    ("PAUSED", BEFORE, "CLOSED"),
    ("NEEDS_REVIEW", BEFORE, "CLOSED"),
    ("SUCCEEDED", BEFORE, "CLOSED"),
    ("CANCELLED", AFTER, "CLOSED"),
]


@pytest.mark.parametrize("status, now, expected", IN_FORCE)
def test_I6_the_gate_in_force_is_open_only_while_running_before_the_deadline(status, now, expected):
    assert in_force(status, DEADLINE, now) == expected


PASSES = [
    # (instance status, gate, now, whether the look closes the gate and records DEADLINE_PASSED)
    ("RUNNING", "OPEN", BEFORE, False),
    ("RUNNING", "OPEN", DEADLINE, True),
    ("RUNNING", "OPEN", AFTER, True),
    ("RUNNING", "CLOSED", AFTER, False),  # closed already: recorded once
    ("PAUSED", "CLOSED", AFTER, False),  # the pause holds the gate; a resume finds the deadline
    ("NEEDS_REVIEW", "CLOSED", AFTER, False),
    ("SUCCEEDED", "CLOSED", AFTER, False),
]


@pytest.mark.parametrize("status, gate, now, expected", PASSES)
def test_I6_a_look_closes_an_open_gate_at_the_deadline_once(status, gate, now, expected):
    assert passes_deadline(GateFacts(status, gate, "ACTIVE", DEADLINE, now)) is expected
