"""A TCP proxy between Weave and its database that injects faults (a small Toxiproxy, in threads).

Every connection a client opens to the proxy gets its own connection to the database and two
pump threads, one per direction. Faults are chosen per message the client sends (a statement, a
COMMIT, a step of the handshake), at the rates set on the proxy while it runs:

- `cut_rate`: the chance that the connection is cut (both sides reset) at this message, in one of
  three ways, picked at random: the message never reaches the server (`request_lost`), half of it
  does (`torn`), or all of it does and the connection is cut when the server's answer comes back,
  so the server has run it and the client never learns the outcome (`reply_lost`: for a COMMIT,
  the classic ambiguous commit);
- `delay_rate` / `max_delay`: the message waits a random time up to `max_delay` seconds first;
- `stall(seconds)`: nothing moves in either direction on any connection for that long (a frozen
  network or server), while connections stay open.

`counts` tells what happened: connections, messages, cuts by kind, delays, stalls. Addresses are
loopback only.
"""

from __future__ import annotations

import collections
import random
import socket
import struct
import threading
import time

CHUNK = 65536
CUT_KINDS = ("request_lost", "torn", "reply_lost")


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a network cut or a killed peer looks. The shutdown
    wakes the pump thread blocked in recv() on it: close() alone would wait for that call."""
    for step in (
        lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
        lambda: sock.shutdown(socket.SHUT_RDWR),
        sock.close,
    ):
        try:
            step()
        except OSError:
            pass


class _Link:
    """One client connection and its database connection."""

    def __init__(self, client: socket.socket, server: socket.socket):
        self.client = client
        self.server = server
        self.cut_on_reply = False
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def cut(self) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
        _reset(self.client)
        _reset(self.server)


class FaultProxy:
    def __init__(self, upstream_port: int, seed: int = 1, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.cut_rate = 0.0
        self.delay_rate = 0.0
        self.max_delay = 0.05
        self.counts: collections.Counter = collections.Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stalled_until = 0.0
        self._lose_reply_to: list[bytes] = []  # statements whose next reply is lost (armed by tests)
        self._links: set[_Link] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._running = True
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy-accept", daemon=True)

    def start(self) -> "FaultProxy":
        self._acceptor.start()
        return self

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def faults(self, cut_rate: float = 0.0, delay_rate: float = 0.0, max_delay: float = 0.05) -> None:
        """Set the rates; `faults()` turns them all off."""
        with self._lock:
            self.cut_rate, self.delay_rate, self.max_delay = cut_rate, delay_rate, max_delay

    def stall(self, seconds: float) -> None:
        """Freeze every connection, open and new, for `seconds` from now."""
        with self._lock:
            self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)
            self.counts["stalls"] += 1

    def lose_reply_to(self, statement: bytes) -> None:
        """Cut the connection that next sends a COM_QUERY whose last statement is `statement`, once
        the server has answered it: e.g. b"COMMIT" for a commit whose acknowledgement never arrives
        (Weave sends a unit's queued writes and its COMMIT as one multi-statement query)."""
        with self._lock:
            self._lose_reply_to.append(statement)

    def cut_all(self) -> int:
        """Cut every open connection at once (a network blip); how many there were."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.cut()
        return len(links)

    def close(self) -> None:
        self._running = False
        _reset(self._listener)
        self.cut_all()
        self._acceptor.join(5)

    # ---- the pumps ----------------------------------------------------------------------------------

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)  # the database is down: the client sees its connection refused or reset
                self.count("refused")
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, server)
            with self._lock:
                self._links.add(link)
            self.count("connections")
            threading.Thread(target=self._pump_requests, args=(link,), daemon=True).start()
            threading.Thread(target=self._pump_replies, args=(link,), daemon=True).start()

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _wait_out_stall(self, link: _Link) -> None:
        while not link.closed.is_set():
            with self._lock:
                left = self._stalled_until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def _decide(self, data: bytes) -> tuple[str | None, float]:
        with self._lock:
            self.counts["messages"] += 1
            cut = CUT_KINDS[self._rng.randrange(3)] if self._rng.random() < self.cut_rate else None
            # A COM_QUERY packet: 3 bytes of length, 1 of sequence, 0x03, the statements.
            if self._lose_reply_to and data[4:5] == b"\x03" and _last_statement(data[5:]) == self._lose_reply_to[0]:
                self._lose_reply_to.pop(0)
                cut = "reply_lost"
            delay = self._rng.uniform(0, self.max_delay) if self._rng.random() < self.delay_rate else 0.0
            if cut:
                self.counts[f"cut_{cut}"] += 1
                self.counts["cuts"] += 1
            if delay:
                self.counts["delays"] += 1
        return cut, delay

    def _pump_requests(self, link: _Link) -> None:
        try:
            while not link.closed.is_set():
                data = link.client.recv(CHUNK)
                self._wait_out_stall(link)
                if not data:
                    break
                cut, delay = self._decide(data)
                if delay:
                    time.sleep(delay)
                if cut == "request_lost":
                    break
                if cut == "torn":
                    link.server.sendall(data[: max(1, len(data) // 2)])
                    time.sleep(0.005)
                    break
                if cut == "reply_lost":
                    link.cut_on_reply = True
                link.server.sendall(data)
        except OSError:
            pass
        self._end(link)

    def _pump_replies(self, link: _Link) -> None:
        try:
            while not link.closed.is_set():
                data = link.server.recv(CHUNK)
                self._wait_out_stall(link)
                if not data or link.cut_on_reply:
                    break
                link.client.sendall(data)
        except OSError:
            pass
        self._end(link)

    def _end(self, link: _Link) -> None:
        link.cut()
        with self._lock:
            self._links.discard(link)


def _last_statement(query: bytes) -> bytes:
    """The last of the statements of a (multi-statement) query, as Weave joins them (`weave.tx.Tx`)."""
    return query.rsplit(b";\n", 1)[-1]
