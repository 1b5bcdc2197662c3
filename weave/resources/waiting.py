"""The process's waiting requests (P2, B6): the slots of long-polls, shared by task claims and
signal reads, and the loop that looks again until an answer is there.

A waiting request holds a server thread and nothing else: no transaction and no connection
between its looks. At most `--max-waiting-claims` of them at once, so that long-polls never take
the threads every other request needs.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

from weave.rules import long_poll

T = TypeVar("T")

# Look again after these pauses (the last one repeats) until the wait has passed.
LONG_POLL_PAUSES = (0.05, 0.1, 0.2, 0.25)


class WaitingClaims:
    """The process's slots for waiting claims, shared between applications (issue 26, item 7), and
    between claims and signal reads with `wait_seconds` (B6: each counts as a waiting claim).

    Waiting claims hold server threads: at most `capacity` at once, so that long-polls never take
    the threads every other request needs, and shared by `weave.rules.long_poll`: a claim admitted
    by ending another application's waiting claim sets that claim's event, and the claim ends at
    once (its thread may first finish the look it is in: a few milliseconds over the cap)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._waiting: dict[int, deque[threading.Event]] = {}  # application -> its claims' events, oldest first

    @contextmanager
    def slot(self, application_id: int):
        """A slot for one waiting claim of the application, as an event that is set when the claim
        must end to make room; None when there is none (the claim answers at once)."""
        with self._lock:
            counts = {application: len(claims) for application, claims in self._waiting.items()}
            admission = long_poll.admit(counts, application_id, self.capacity)
            if admission.decision == long_poll.TURN_AWAY:
                event = None
            else:
                if admission.ends is not None:
                    # Its oldest claim: the nearest to the end of its own wait.
                    self._waiting[admission.ends].popleft().set()
                    if not self._waiting[admission.ends]:
                        del self._waiting[admission.ends]
                event = threading.Event()
                self._waiting.setdefault(application_id, deque()).append(event)
        try:
            yield event
        finally:
            if event is not None:
                with self._lock:  # an event is set under this lock, as its claim is taken off
                    if not event.is_set():
                        claims = self._waiting[application_id]
                        claims.remove(event)
                        if not claims:
                            del self._waiting[application_id]


def look_until(
    look: Callable[[], T], answered: Callable[[T], bool], deadline: float, ended: threading.Event
) -> T | None:
    """`look()` again after each pause until what it returns is `answered`, the deadline (a
    `time.monotonic()` value) has passed, or `ended` is set (the slot went to another
    application's request); the last look's result, None when none was made or none answered."""
    for pause in itertools.chain(LONG_POLL_PAUSES, itertools.repeat(LONG_POLL_PAUSES[-1])):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or ended.wait(min(pause, remaining)):
            return None
        seen = look()
        if answered(seen):
            return seen
