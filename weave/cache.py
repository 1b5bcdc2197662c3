"""Caches bounded by the memory they hold, not by how many entries (issue 26, item 3).

A process keeps what it can rebuild (a published definition's parsed document, a payload
schema's validator, a compiled pattern, a credential's identity) because every request would
otherwise rebuild it. Entries are chosen by clients, and their sizes differ by a factor of a
million: a limit of 1,024 entries held 1,024 documents of 1 MB each as readily as 1,024 of 2 KB,
and a server grew from 70 MB to 1.6 GB. So each cache has a limit in bytes, and every entry is
put with an estimate of the bytes it keeps alive (what it costs is for its caller to say: the
parsed form of a JSON text, a compiled program); the least recently used entries go first, and an
entry larger than the whole limit is not kept at all.

Waitress serves requests on several threads, so each cache takes its own lock, held only while
it updates its bookkeeping: values are built outside it (two threads may build the same value
once each; the second is kept).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Hashable


class BoundedCache:
    """Values by key, at most `limit_bytes` of them by their estimated sizes, least recently used first out."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Keep `value` (which holds about `size` bytes) under `key`, dropping the least recently
        used entries until the cache fits its limit again."""
        if size > self.limit_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.limit_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        """The estimated bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
