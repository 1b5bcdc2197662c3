"""Retention decisions (L1, L3) without a database."""

from datetime import datetime, timedelta

import pytest

from weave.rules import retention

NOW = datetime(2026, 12, 1, 12, 0, 0)


def test_L1_L3_audit_retention_is_never_shorter_than_the_instances_retention():
    assert retention.audit_days(30, 7) == 30
    assert retention.audit_days(7, 30) == 30
    assert retention.audit_days(0, 0) == 0


def test_L1_forever_on_either_side_keeps_audit_records_forever():
    assert retention.audit_days(None, 7) is None
    assert retention.audit_days(7, None) is None
    assert retention.audit_days(None, None) is None


def test_L1_an_instance_is_past_retention_only_once_its_days_have_gone_by():
    ended = NOW - timedelta(days=3)
    assert retention.past_retention(ended, 3, NOW)
    assert not retention.past_retention(ended + timedelta(microseconds=1), 3, NOW)
    assert retention.past_retention(NOW, 0, NOW)  # 0: at the next pass
    assert not retention.past_retention(ended - timedelta(days=3650), None, NOW)  # forever


def test_L1_a_pass_takes_the_leading_rows_past_the_limit_and_stops_at_the_first_it_keeps():
    limit = NOW
    old, young = NOW - timedelta(seconds=1), NOW + timedelta(seconds=1)
    assert retention.leading_past([old, old, young, old], limit) == 2
    assert retention.leading_past([young, old], limit) == 0
    assert retention.leading_past([old, NOW], limit) == 2
    assert retention.leading_past([], limit) == 0


def test_L1_a_group_purge_takes_the_leading_instances_that_fit_one_chunk_of_each_table():
    small = {"events": 4, "signals": 1}
    assert retention.fitting([small] * 5, 20) == 5
    assert retention.fitting([small] * 5, 8) == 2  # 3 would hold 12 events
    assert retention.fitting([{"events": 30}, small], 20) == 0  # the first is too big: it goes alone
    assert retention.fitting([small, {"events": 17}, small], 20) == 1  # in order: the big one stops the group
    assert retention.fitting([], 20) == 0


def test_L1_a_paced_purge_rests_so_that_it_works_at_most_its_share_of_the_time():
    assert retention.rest_after(0.01, 0.05) == pytest.approx(0.19)  # 10 ms of work in 200 ms
    assert retention.rest_after(0.02, 0.05) == pytest.approx(0.38)  # slowed down: rests longer
    assert retention.rest_after(0.01, 0.5) == pytest.approx(0.01)
    for share in (0.01, 0.1, 0.3):
        work = 0.004
        assert work / (work + retention.rest_after(work, share)) == pytest.approx(share)


def test_L1_a_share_of_one_is_an_unpaced_purge():
    assert retention.rest_after(0.5, 1.0) == 0.0


def test_L1_N2_a_purge_waits_for_a_live_task_and_for_an_unsent_notification_for_a_day_at_most():
    now = datetime(2026, 12, 2, 12, 0)
    assert retention.waits(1, None, now)
    assert not retention.waits(0, None, now)
    assert retention.waits(0, now - timedelta(hours=23, minutes=59), now)
    assert not retention.waits(0, now - retention.NOTIFICATION_GRACE, now)
