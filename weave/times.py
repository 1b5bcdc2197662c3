"""Time values on the wire: RFC 3339 UTC with microseconds, e.g. 2026-11-30T07:01:23.123456Z."""

from __future__ import annotations

from datetime import datetime


def rfc3339(moment: datetime | None) -> str | None:
    """Database times are naive UTC `DATETIME(6)` values (`isoformat` is several times faster than
    `strftime`, and this runs a few times per request)."""
    return None if moment is None else moment.isoformat(timespec="microseconds") + "Z"
