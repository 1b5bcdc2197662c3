"""Times on the wire: RFC 3339, UTC, always six fractional digits and a four-digit year."""

from datetime import datetime

from weave.times import rfc3339


def test_rfc3339_has_microseconds_z_and_four_digit_years():
    assert rfc3339(datetime(2026, 11, 30, 7, 1, 23, 123456)) == "2026-11-30T07:01:23.123456Z"
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000000Z"
    assert rfc3339(datetime(1, 1, 1)) == "0001-01-01T00:00:00.000000Z"
    assert rfc3339(None) is None
