"""How often the review console lets a client sign in (issue 26, item 10): in-process token buckets.

Each sign-in costs a credential lookup, and a session row and an audit record when it succeeds (an
audit record when it names a credential and fails): 300 sign-ins took 1.7 s and left 300 of each.
So every sign-in attempt takes a token from its client address's bucket (`SIGN_INS_PER_ADDRESS`
a minute, as a burst or spread out), before the form is even read; one whose token names a current
credential takes one from that credential's bucket too (`SIGN_INS_PER_CREDENTIAL` a minute, from
any address). An empty bucket answers how long until it holds a token again: the console answers
429 with `Retry-After`, and a refused attempt takes nothing, so waiting that long is enough.

The buckets live in the API process, as the long-poll cap does: a deployment of N processes lets
N times as many through, which is still a rate, not a flood. The address is the TCP peer's (never a
header a client could choose); behind a proxy every client shares the proxy's bucket. A table holds
at most `KEYS_KEPT` buckets, the least recently used going first: forgetting a bucket only forgets
how many tokens it lacked.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Hashable

SIGN_INS_PER_ADDRESS = 20  # attempts a minute from one client address
SIGN_INS_PER_CREDENTIAL = 10  # sign-ins a minute of one credential, from any address
WINDOW_SECONDS = 60
KEYS_KEPT = 10_000  # buckets per table


class Limiter:
    """`per_window` tokens per key, refilled evenly over `window` seconds, at most `per_window` held."""

    def __init__(
        self,
        per_window: int,
        window: float = WINDOW_SECONDS,
        keys: int = KEYS_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.capacity = float(per_window)
        self.rate = per_window / window  # tokens a second
        self.keys = keys
        self.clock = clock
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self._lock = threading.Lock()  # the server's threads share the table

    def take(self, key: Hashable) -> float:
        """Take a token of `key`'s bucket: 0 when there was one, else the seconds until there is."""
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.pop(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.rate)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / self.rate
            self._buckets[key] = (tokens - 1 if wait == 0 else tokens, now)  # now the most recently used
            if len(self._buckets) > self.keys:
                self._buckets.popitem(last=False)
            return wait


class SignInLimits:
    """The two tables of one API process: by client address, and by credential."""

    def __init__(
        self,
        per_address: int = SIGN_INS_PER_ADDRESS,
        per_credential: int = SIGN_INS_PER_CREDENTIAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.address = Limiter(per_address, clock=clock)
        self.credential = Limiter(per_credential, clock=clock)
