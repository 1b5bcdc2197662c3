"""D3 without a database: steps run in list order; where an instance stands on its list of steps."""

import pytest

from weave.rules.progress import ACTIVATE, BUSY, FINISHED, STUCK, TASK_REVIEW_REASONS, Frontier, frontier

KEYS = ["reserve", "payment", "ship"]

CASES = [
    # (id, latest activation status per step key, frontier)
    ("d3_nothing_started_activates_the_first_step", {}, Frontier(ACTIVATE, 0)),
    ("d3_active_first_step_is_busy", {"reserve": "ACTIVE"}, Frontier(BUSY, 0)),
    ("d3_succeeded_step_activates_its_successor", {"reserve": "SUCCEEDED"}, Frontier(ACTIVATE, 1)),
    ("d3_active_second_step_is_busy", {"reserve": "SUCCEEDED", "payment": "ACTIVE"}, Frontier(BUSY, 1)),
    (
        "d3_last_step_activates_after_the_others",
        {"reserve": "SUCCEEDED", "payment": "SUCCEEDED"},
        Frontier(ACTIVATE, 2),
    ),
    ("d3_step_in_review_is_stuck", {"reserve": "SUCCEEDED", "payment": "NEEDS_REVIEW"}, Frontier(STUCK, 1)),
    ("d3_failed_step_is_stuck", {"reserve": "FAILED"}, Frontier(STUCK, 0)),
    (
        "d3_cancelled_step_is_stuck",
        {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "CANCELLED"},
        Frontier(STUCK, 2),
    ),
    (
        "d3_after_the_last_step_succeeds_the_instance_is_finished",
        {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "SUCCEEDED"},
        Frontier(FINISHED),
    ),
    (
        "d3_list_order_wins_over_later_steps",
        {"reserve": "NEEDS_REVIEW", "payment": "SUCCEEDED", "ship": "ACTIVE"},
        Frontier(STUCK, 0),
    ),
    ("d3_first_gap_in_list_order_is_activated", {"reserve": "SUCCEEDED", "ship": "SUCCEEDED"}, Frontier(ACTIVATE, 1)),
    (
        "d3_statuses_of_other_keys_are_ignored",
        {"reserve": "SUCCEEDED", "payment": "SUCCEEDED", "ship": "SUCCEEDED", "gone": "ACTIVE"},
        Frontier(FINISHED),
    ),
]


@pytest.mark.parametrize("latest, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_d3_frontier(latest, expected):
    assert frontier(KEYS, latest) == expected


def test_p7_every_unsuccessful_final_task_outcome_has_its_own_review_reason():
    assert TASK_REVIEW_REASONS == {
        "FAILED": "TASK_FAILED",
        "UNKNOWN": "TASK_OUTCOME_UNKNOWN",
        "CANCELLED": "TASK_CANCELLED",
    }
