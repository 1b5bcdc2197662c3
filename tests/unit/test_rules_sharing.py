"""How scanner processes split the due candidates (K1, issue 31 item 3): `weave.rules.sharing`."""

from collections import Counter
from datetime import datetime, timedelta

from weave.rules.sharing import (
    ALONE,
    GRACE,
    MAX_LISTED_SHARES,
    STALLED,
    Membership,
    backup,
    heartbeat_due,
    listing_limit,
    membership,
    owner,
    share,
)

NOW = datetime(2026, 12, 2, 6, 0, 0)


def listed(count: int, first: int = 1) -> list[tuple[tuple[str, int], int]]:
    """`count` checkpoints of as many instances, oldest first: (identity, partition key)."""
    return [(("checkpoint", n), 1000 + n) for n in range(first, first + count)]


def test_K1_owner_spreads_consecutive_keys_evenly_over_the_members():
    for members in (1, 2, 3, 5, 8):
        counts = Counter(owner(key, members) for key in range(1, 3001))
        assert set(counts) == set(range(members))
        assert max(counts.values()) - min(counts.values()) <= 3000 * 0.02, (members, counts)


def test_K1_owner_is_a_pure_function_of_the_key_and_the_member_count():
    assert [owner(key, 3) for key in (1, 2, 3, 2**63 + 5)] == [owner(key, 3) for key in (1, 2, 3, 2**63 + 5)]
    assert {owner(key, 1) for key in range(1, 500)} == {0}


def test_K1_the_rank_is_the_place_of_the_members_id_among_the_live_ones_counting_itself():
    assert membership(7, {3: NOW, 7: NOW, 12: NOW}, NOW) == Membership(1, 3)
    assert membership(12, {12: NOW, 3: NOW, 7: NOW}, NOW) == Membership(2, 3)
    # Its own row not read (deleted while it was silent): it counts itself until it joins again.
    assert membership(5, {3: NOW, 7: NOW}, NOW) == Membership(1, 3)
    assert membership(5, {}, NOW) == ALONE


def test_K1_a_member_whose_heartbeat_is_older_than_stalled_is_stalled_but_still_counted():
    old, recent = NOW - STALLED, NOW - STALLED + timedelta(milliseconds=1)
    assert membership(7, {3: old, 7: old, 12: recent}, NOW) == Membership(1, 3, frozenset({0}))
    assert membership(3, {3: old, 12: old}, NOW) == Membership(0, 2, frozenset({1}))  # never itself


def test_K1_the_listing_is_a_batch_per_member_bounded():
    assert listing_limit(100, 1) == 100
    assert listing_limit(100, 3) == 300
    assert listing_limit(100, 50) == 100 * MAX_LISTED_SHARES


def test_K1_a_heartbeat_goes_with_a_listing_at_most_once_a_second():
    assert heartbeat_due(None, NOW)
    assert not heartbeat_due(NOW, NOW + timedelta(milliseconds=999))
    assert heartbeat_due(NOW, NOW + timedelta(seconds=1))


def test_K1_alone_a_scanner_takes_the_oldest_batch_as_before():
    candidates = listed(250)
    mine = share(candidates, ALONE, {}, NOW, 100)
    assert mine.taken == [identity for identity, _ in candidates[:100]]
    assert (mine.waiting, mine.taken_over) == ({}, 0)


def test_K1_three_members_take_disjoint_shares_that_cover_the_listing():
    candidates = listed(300)
    shares = [share(candidates, Membership(rank, 3), {}, NOW, 150) for rank in range(3)]
    taken = [set(s.taken) for s in shares]
    assert taken[0].isdisjoint(taken[1]) and taken[1].isdisjoint(taken[2]) and taken[0].isdisjoint(taken[2])
    assert set().union(*taken) == {identity for identity, _ in candidates}
    assert all(80 <= len(t) <= 120 for t in taken), [len(t) for t in taken]
    # What each leaves to the others it remembers from now, and takes nothing over yet.
    assert all(set(s.waiting) == {identity for identity, _ in candidates} - set(s.taken) for s in shares)
    assert all(set(s.waiting.values()) == {NOW} and s.taken_over == 0 for s in shares)


def test_K1_one_instances_candidates_stay_with_one_member():
    candidates = [(("inbox", 1), 42), (("checkpoint", 9), 42), (("signal_expiry", 5), 42)]
    takers = [rank for rank in range(3) if share(candidates, Membership(rank, 3), {}, NOW, 100).taken]
    assert len(takers) == 1
    assert share(candidates, Membership(takers[0], 3), {}, NOW, 100).taken == [c for c, _ in candidates]


def test_K1_the_backup_is_another_member_spread_evenly():
    assert backup(7, 1) is None
    for members in (2, 3, 5):
        pairs = Counter((owner(key, members), backup(key, members)) for key in range(1, 6001))
        assert all(first != second for first, second in pairs)
        # Each owner's share is split evenly between the others.
        for first in range(members):
            counts = [n for (o, _), n in pairs.items() if o == first]
            assert len(counts) == members - 1 and max(counts) - min(counts) <= 0.1 * max(counts), pairs


def test_K1_a_stalled_members_candidates_are_taken_at_once_by_their_backup():
    """A member died or hangs (its heartbeat stopped): the survivors split its share, each the
    candidates it is the backup of, without colliding on them."""
    candidates = listed(300)
    stalled_rank = 2
    theirs = [(identity, key) for identity, key in candidates if owner(key, 3) == stalled_rank]
    shares = [share(candidates, Membership(rank, 3, frozenset({stalled_rank})), {}, NOW, 300) for rank in (0, 1)]
    taken = [set(s.taken) for s in shares]
    assert taken[0].isdisjoint(taken[1]) and taken[0] | taken[1] == {identity for identity, _ in candidates}
    assert sum(s.taken_over for s in shares) == len(theirs)
    assert all(s.taken_over > 0 for s in shares)  # each took a part of it
    assert all(set(s.waiting) == {identity for identity, _ in candidates} - set(s.taken) for s in shares)


def test_K1_a_candidate_listed_past_the_grace_is_taken_whoevers_it_is():
    """The owner and the backup both stalled, or the members disagree for a moment: whoever keeps
    listing a candidate takes it after the grace."""
    candidates = listed(90)
    member = Membership(0, 3)
    first = share(candidates, member, {}, NOW, 100)
    others = [identity for identity, _ in candidates if identity not in first.taken]
    before = share(candidates, member, first.waiting, NOW + GRACE - timedelta(milliseconds=1), 100)
    assert before.taken == first.taken and before.taken_over == 0
    assert before.waiting == first.waiting  # the first sighting is kept, not renewed
    after = share(candidates, member, before.waiting, NOW + GRACE, 100)
    assert after.taken == [identity for identity, _ in candidates]
    assert after.taken_over == len(others) and after.waiting == {}


def test_K1_a_candidate_no_longer_listed_is_forgotten_and_a_new_one_waits_from_its_first_sighting():
    first = share(listed(30), Membership(1, 2), {}, NOW, 100)
    later = NOW + timedelta(seconds=1)
    # The first 30 were processed by their owners; 30 new ones are listed.
    second = share(listed(30, first=31), Membership(1, 2), first.waiting, later, 100)
    assert all(identity[1] > 30 for identity in second.waiting) and set(second.waiting.values()) == {later}


def test_K1_the_batch_size_cuts_the_share_and_what_is_cut_keeps_its_first_sighting():
    candidates = listed(300)
    first = share(candidates, Membership(2, 3), {}, NOW, 100)
    late = share(candidates, Membership(2, 3), first.waiting, NOW + GRACE, 10)
    assert len(late.taken) == 10 and late.taken == [identity for identity, _ in candidates[:10]]
    overdue_not_taken = [identity for identity, _ in candidates[10:] if identity in first.waiting]
    assert all(late.waiting[identity] == NOW for identity in overdue_not_taken)
