"""R1 control transitions without a database: which action is allowed from which status, and where it leads."""

import pytest

from weave.rules.control import Transition, transition

PAUSED = Transition("PAUSED", "CLOSED")
RUNNING = Transition("RUNNING", "OPEN")
CANCELLED = Transition("CANCELLED", "CLOSED")

CASES = [
    # (action, from status, where it leads or None: 409 INVALID_STATE)
    ("pause", "RUNNING", PAUSED),
    ("pause", "PAUSED", None),
    ("pause", "NEEDS_REVIEW", None),
    ("pause", "SUCCEEDED", None),
    ("pause", "FAILED", None),
    ("pause", "CANCELLED", None),
    ("resume", "PAUSED", RUNNING),
    ("resume", "RUNNING", None),
    ("resume", "NEEDS_REVIEW", None),  # review (R2) is the way out of NEEDS_REVIEW
    ("resume", "SUCCEEDED", None),
    ("resume", "FAILED", None),
    ("resume", "CANCELLED", None),
    ("cancel", "RUNNING", CANCELLED),
    ("cancel", "PAUSED", CANCELLED),
    ("cancel", "NEEDS_REVIEW", CANCELLED),
    ("cancel", "SUCCEEDED", None),
    ("cancel", "FAILED", None),
    ("cancel", "CANCELLED", None),
]


@pytest.mark.parametrize(
    "action, status, expected", CASES, ids=[f"r1_{action}_from_{status.lower()}" for action, status, _ in CASES]
)
def test_r1_transition(action, status, expected):
    assert transition(action, status) == expected


@pytest.mark.parametrize(
    "action, status, expected",
    [
        ("resume", "PAUSED", Transition("RUNNING", "CLOSED")),  # the deadline still holds the gate (I3, I6)
        ("pause", "RUNNING", PAUSED),
        ("cancel", "PAUSED", CANCELLED),
        ("resume", "NEEDS_REVIEW", None),
    ],
)
def test_I6_r1_a_transition_past_the_total_deadline_never_opens_the_gate(action, status, expected):
    assert transition(action, status, deadline_passed=True) == expected
