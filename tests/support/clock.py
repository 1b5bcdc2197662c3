"""The test clock: time that moves only when a test says so (the database clock's stand-in)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta


class ControlledClock:
    """Test time: starts at a fixed instant and moves only when told to."""

    def __init__(self, start: datetime = datetime(2026, 11, 30, 7, 0, 0)):
        self._now = start
        self._lock = threading.Lock()

    def now(self, tx=None) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when

    def advance(self, seconds: float = 0, **kwargs) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds, **kwargs)
            return self._now
