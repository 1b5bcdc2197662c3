"""Retention decisions (L1, L3) without a database."""

from datetime import datetime, timedelta

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
