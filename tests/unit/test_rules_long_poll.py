"""Who may long-poll (issue 26, item 7) without a server: the waiting slots of a process shared
between applications, max-min fair, a free slot anyone's."""

import itertools

import pytest

from weave.rules.long_poll import TURN_AWAY, WAIT, Admission, admit

CASES = [
    # (id, claims waiting per application, asking application, capacity, admission)
    ("a_free_slot_is_anyones", {1: 7}, 1, 8, Admission(WAIT)),
    ("one_application_alone_may_fill_the_cap", {}, 1, 8, Admission(WAIT)),
    ("a_cap_of_0_lets_nobody_wait", {}, 1, 0, Admission(TURN_AWAY)),
    ("full_the_one_with_the_most_gives_one_up", {1: 8}, 2, 8, Admission(WAIT, ends=1)),
    ("full_it_gives_up_while_two_more", {1: 5, 2: 3}, 2, 8, Admission(WAIT, ends=1)),
    ("full_one_more_is_fair_already", {1: 4, 2: 4}, 2, 8, Admission(TURN_AWAY)),
    ("full_the_asker_with_the_most_is_turned_away", {1: 6, 2: 2}, 1, 8, Admission(TURN_AWAY)),
    ("full_a_newcomer_takes_from_the_one_with_the_most", {1: 3, 2: 5}, 3, 8, Admission(WAIT, ends=2)),
    ("full_of_ties_the_smallest_id_gives_up", {5: 4, 2: 4}, 9, 8, Admission(WAIT, ends=2)),
    ("a_cap_of_one_is_not_split", {1: 1}, 2, 1, Admission(TURN_AWAY)),
    ("over_the_cap_while_ended_claims_leave", {1: 6, 2: 3}, 3, 8, Admission(WAIT, ends=1)),
]


@pytest.mark.parametrize("waiting, application, capacity, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_admission(waiting, application, capacity, expected):
    assert admit(waiting, application, capacity) == expected


def settle(capacity: int, applications: int, order) -> dict[int, int]:
    """Applications ask for slots in `order` (repeated) until no ask changes anything."""
    waiting: dict[int, int] = {}
    while True:
        changed = False
        for application in order:
            admission = admit(waiting, application, capacity)
            if admission.decision == WAIT:
                if admission.ends is not None:
                    waiting[admission.ends] -= 1
                waiting[application] = waiting.get(application, 0) + 1
                changed = True
        if not changed:
            return waiting


@pytest.mark.parametrize("capacity", range(1, 10))
@pytest.mark.parametrize("applications", range(1, 5))
def test_asking_without_end_leaves_every_slot_used_and_the_shares_max_min_fair(capacity, applications):
    """Whoever asks first and however often, the slots end all used, and no two applications'
    shares differ by more than one (an application that cannot have one: the cap is below their number)."""
    for first in range(applications):
        order = [(first + i) % applications for i in range(applications)]
        for greedy in itertools.product((1, 3), repeat=applications):  # some ask more often per round
            waiting = settle(capacity, applications, [a for a in order for _ in range(greedy[a])])
            shares = [waiting.get(a, 0) for a in range(applications)]
            assert sum(shares) == capacity, shares
            assert max(shares) - min(shares) <= 1, shares
