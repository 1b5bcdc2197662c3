"""`weave serve`: waitress on one listening socket, in one process or in several forked ones.

A Python process runs Python on one core at a time (the GIL), and an API request spends most of
its CPU in Python (HTTP parsing, JSON, the PyMySQL protocol). API processes share nothing but the
database, so `--processes N` opens N listening sockets on the same port (SO_REUSEPORT) and forks
one worker per socket: the kernel spreads new connections over the sockets by address hash. (One
shared socket would not spread keep-alive connections: the first worker to wake accepts them all.)
The parent only supervises: a worker that dies is replaced on the same socket; SIGTERM or SIGINT
stops them all. Run about one process per core the API may use.

Connections (issue 10, item 1). With waitress's defaults, 100 connections that send nothing shut
a process for minutes: it stops accepting at 100 open connections (`connection_limit`) and closes
an idle one after 120 s (`channel_timeout`, looked for every 30 s). Here each process accepts up
to CONNECTION_LIMIT connections, watches them with poll() (select() refuses descriptor numbers
above 1023), closes a connection without a request in progress once it has sent nothing for the
idle timeout (looked for every second), and raises its soft file-descriptor limit so that the
connections and the database pool fit. Memory per connection is bounded by MAX_HEADER_BYTES plus
waitress's in-memory part of a buffered body (`inbuf_overflow`); larger bodies go to a temporary
file. A response without a body (204) keeps its connection open (`BodilessKeepAlive`): waitress
alone closes it.

Slow clients (issue 26, item 5). A connection that trickles its request never goes idle, so the
idle timeout alone let 2,100 connections sending a header line every 2 s hold every slot, and 200
holding 2 MB bodies fill 382 MB of temporary files. `WeaveServer` therefore also closes, every
second, a connection whose request line and headers have not all arrived `header_timeout_seconds`
after the request's first byte, and one whose body falls below `min_body_rate` over a window of
BODY_RATE_WINDOW_SECONDS; at the connection limit, with a connection waiting to be accepted, it
closes those that have waited longest for their request (EVICT_BATCH; never one being served).
The bodies a process holds at once, in memory and temporary files together, are bounded by
`body_buffer_bytes` (`BodyBuffer`); a body beyond it is answered 503 with Retry-After. Each
connection closed so is counted (weave_http_connections_closed_total{reason}). A proxy in front
is still the deployment for the internet (docs/operations.md).

Metrics. With several processes, each keeps its metric values in files of one directory that
`weave serve` creates empty at start and removes when it stops (prometheus_client's multiprocess
mode), so that /metrics, whichever process answers, sums them all; the files of a worker that
ended stop counting in its gauges, not in its counters. One process keeps them in memory. With
`--metrics-port`, /metrics is served on that port alone (issue 26, item 9): every worker gets a
listening socket of it beside the API's, and serves it from a WeaveServer loop of its own in a
thread (`_serve_metrics`).

Errors (item 9). waitress answers some requests itself, before the application runs; `create_server`
makes those answers problem+json too (see ProblemErrorTask).
"""

from __future__ import annotations

import dataclasses
import errno
import heapq
import logging
import math
import os
import re
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

import falcon
import waitress.utilities
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask

from weave import errors, metrics
from weave.config import Config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.errors import Code
from weave.processes import die_with_parent

log = logging.getLogger(__name__)

BACKLOG = 1024
RESTART_PAUSE_SECONDS = 1.0  # a worker that fails at start must not turn the parent into a fork loop
# Open connections per process; beyond it, new connections wait in the listen backlog until idle
# ones are closed. Twice the 1,000 idle connections a process must shrug off (issue 10).
CONNECTION_LIMIT = 2048
# How often waitress looks for idle connections (`cleanup_interval`), and WeaveServer for slow requests.
IDLE_CHECK_SECONDS = 1
# A body's pace is measured over windows of this many seconds from the end of its headers; the
# first window is its grace (a slow start, a client computing what it sends).
BODY_RATE_WINDOW_SECONDS = 5
# At the connection limit, with a connection waiting in the backlog, the connections that have
# waited longest for their request are closed, this many at a time: those in the middle of their
# headers first (a slowloris holds its slot that way), then idle ones, then those in the middle of
# a body; never one whose request is being served. Only connections that have waited at least
# EVICT_AFTER_SECONDS, so that a new connection gets the time to send its request.
EVICT_BATCH = 32
EVICT_AFTER_SECONDS = 1.0
EVICT_RETRY_SECONDS = 0.1  # after a search that found none to close (each search reads every connection)
LIMIT_WARNING_SECONDS = 60  # at most one log line a minute says the process is at its connection limit
# The request line and headers. Weave's requests carry a token and an idempotency key; nginx's
# default buffers refuse more than 32 KiB anyway. waitress's default (256 KiB) times the
# connection limit would let idle-looking connections hold 512 MiB.
MAX_HEADER_BYTES = 64 * 1024
# waitress holds a body whole before the application runs, so its limit bounds what one request
# makes a process store. It is set above the application's cap (see `weave.http.BodyCap`) so that
# a body just over the cap gets the application's answer after it was read, on a connection that
# stays usable; a body that declares more than this many times the cap is refused by waitress
# from its Content-Length before a byte of it is read (the same problem+json, then the connection
# is closed).
WAITRESS_BODY_LIMIT_FACTOR = 2
# Descriptors: one per connection plus one more while a large body is buffered in a temporary
# file; the pool's connections; and a reserve (listener, wake-up pipe, standard streams, logs).
FILES_PER_CONNECTION = 2
FILES_RESERVED = 64
# `weave serve --metrics-port`: Prometheus scrapes one process at a time, a few scrapers at most.
METRICS_THREADS = 2
METRICS_CONNECTION_LIMIT = 64
DETAIL_CHARS = 200  # waitress's own messages are short; the answer and the log need no more of one


def serve(
    config: Config,
    host: str,
    port: int,
    processes: int = 1,
    metrics_address: tuple[str, int] | None = None,
    api: list[socket.socket] | None = None,
) -> None:
    """Serve the API on `host:port` in `processes` processes (or on `api`, sockets from `listen`
    already listening); with `metrics_address`, /metrics on that address instead of the API's port."""
    api = api or listen(host, port, processes)
    scrapes = listen(*metrics_address, processes) if metrics_address else [None] * processes
    if processes == 1:
        _run_worker(api[0], scrapes[0], config)
        return
    # A directory of this run's own: files of an earlier run (even one that was killed) never count.
    directory = tempfile.mkdtemp(prefix="weave-metrics-")
    try:
        metrics.use_multiprocess(directory)
        _supervise(config, list(zip(api, scrapes)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def listen(host: str, port: int, count: int = 1) -> list[socket.socket]:
    """`count` listening sockets on `host:port`: one, or one per worker sharing the port (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners = []
    try:
        for _ in range(count):
            listeners.append(socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=count > 1))
            port = listeners[0].getsockname()[1]  # port 0 picked a free port: the others join it
    except OSError as exc:
        for listener in listeners:
            listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(
                f"weave: cannot listen on {host}:{port}: another program is using that port; stop it, "
                "or choose another with --port"
            ) from None
        raise SystemExit(f"weave: cannot listen on {host}:{port}: {exc}") from None
    return listeners


Sockets = tuple[socket.socket, socket.socket | None]  # a worker's: the API's listener, the metrics port's


def _supervise(config: Config, sockets: list[Sockets]) -> None:
    """Fork a worker per pair of listening sockets and replace those that end, until SIGTERM or SIGINT."""
    workers: dict[int, Sockets] = {}
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        for pid in list(workers):
            _kill_quietly(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for pair in sockets:
        workers[_fork_worker(pair, config)] = pair
    while workers:
        pid, status = os.wait()
        metrics.process_ended(pid)
        pair = workers.pop(pid, None)
        if pair is not None and not stopping:
            log.error("API worker %d ended (wait status %d); starting another", pid, status)
            time.sleep(RESTART_PAUSE_SECONDS)
            if not stopping:  # SIGTERM may have come during the pause
                workers[_fork_worker(pair, config)] = pair


def create_server(app, listener: socket.socket, config: Config, connection_limit: int = CONNECTION_LIMIT):
    """A waitress server of `app` on `listener` with Weave's limits; `run()` serves until stopped."""
    dispatcher = HotThreadsFirst()
    dispatcher.set_thread_count(config.threads)
    adjustments = Adjustments(
        sockets=[listener],
        ident="weave",
        backlog=BACKLOG,
        connection_limit=connection_limit,
        channel_timeout=config.idle_timeout_seconds,
        cleanup_interval=IDLE_CHECK_SECONDS,
        asyncore_use_poll=True,
        max_request_header_size=MAX_HEADER_BYTES,
        # waitress refuses a body *equal to* its limit, hence the + 1
        max_request_body_size=WAITRESS_BODY_LIMIT_FACTOR * config.max_body_bytes + 1,
    )
    # What `waitress.create_server` does for one listening socket, with Weave's server class; its
    # threads are `config.threads` (waitress's own `threads` is unused with a dispatcher of ours).
    return WeaveServer(app, listener, adjustments, dispatcher, config)


class ProblemErrorTask(ErrorTask):
    """waitress's answer to a request it refuses before the application runs, as problem+json.

    waitress answers itself a malformed request line or header and bad chunked framing (400),
    a request line and headers over MAX_HEADER_BYTES (431), a body over its own limit (413), a
    Transfer-Encoding it does not implement (501), and an exception that escapes the WSGI
    application (500; Falcon's catch-all handler in weave.errors answers the application's own
    exceptions, so only a failure outside them gets here); Weave's parser adds a body the process
    has no room for (503, `BodyBufferFull`). Its ErrorTask writes those as text/plain; this
    writes the same status with the body every other error has. The connection is closed
    afterwards, as waitress does: after a framing error the rest of the stream cannot be trusted.
    """

    def execute(self) -> None:
        error = self.request.error
        code = _WAITRESS_ERRORS.get(error.code) or (Code.BAD_REQUEST if error.code < 500 else Code.INTERNAL)
        message = unquoted(error.body)
        log.info("refused before the application: %d %s: %r", code.status, code.name, message[:DETAIL_CHARS])
        body = errors.problem_text(code, self._detail(code, message)).encode("utf-8")
        self.status = falcon.code_to_http_status(code.status)
        self.response_headers.append(("Content-Type", errors.PROBLEM_JSON))
        if code is Code.UNAVAILABLE:
            self.response_headers.append(("Retry-After", "1"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)

    def _detail(self, code: Code, message: str) -> str:
        server = self.channel.server
        if code is Code.PAYLOAD_TOO_LARGE:
            length = self.request.content_length  # 0 for a chunked body: its length is not declared
            if length:
                return f"the body has {length} bytes; the limit is {server.max_body_bytes}"
            return f"the body is over the limit of {server.max_body_bytes} bytes"
        if code is Code.HEADERS_TOO_LARGE:
            return f"the request line and headers are over the limit of {server.adj.max_request_header_size} bytes"
        if code is Code.INTERNAL:
            return "an internal error occurred; it has been logged"
        if code is Code.UNAVAILABLE:
            return f"{message}; retry shortly"
        if len(message) > DETAIL_CHARS:
            message = message[:DETAIL_CHARS] + "…"
        if code is Code.NOT_IMPLEMENTED:
            return message  # "Transfer-Encoding requested is not supported."
        return f"malformed HTTP request: {message}"


# waitress quotes what it refuses in some messages: a header line ('Bare CR or LF found in header
# line "…"', 'Malformed header line "…"') or the method. A header line may be `Authorization: Bearer
# <token>`, so neither the log nor the answer repeats it: a header line keeps only its name.
_QUOTED = re.compile(r'"(.*)"', re.DOTALL)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token


def unquoted(message: str) -> str:
    """waitress's `message` without the request text it quotes (a header line keeps its name)."""

    def name_only(quoted: re.Match) -> str:
        name, colon, _ = quoted.group(1).strip(" \t").partition(":")
        return f'"{name}: …"' if colon and _HEADER_NAME.fullmatch(name) else '"…"'

    return _QUOTED.sub(name_only, message)


_WAITRESS_ERRORS = {
    code.status: code
    for code in (
        Code.BAD_REQUEST,
        Code.PAYLOAD_TOO_LARGE,
        Code.HEADERS_TOO_LARGE,
        Code.NOT_IMPLEMENTED,
        Code.INTERNAL,
        Code.UNAVAILABLE,  # BodyBufferFull
    )
}


_CLOSED = metrics.Children(metrics.CONNECTIONS_CLOSED)


class BodyBuffer:
    """The bytes of request bodies that one process holds at once, in memory or in temporary files,
    and their limit. waitress buffers a body whole before the application runs (in memory up to its
    `inbuf_overflow`, then in a temporary file): each request's parser takes what it stores from here
    and gives it back when the request is done (`RequestParser`)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()  # the loop takes, the threads that served a request give back

    def take(self, count: int) -> bool:
        with self._lock:
            if self.held + count > self.limit:
                return False
            self.held += count
            return True

    def give(self, count: int) -> None:
        with self._lock:
            self.held -= count

    @property
    def free(self) -> int:
        return self.limit - self.held


class BodyBufferFull(waitress.utilities.Error):
    """A body that the process has no room to hold now: answered 503 UNAVAILABLE with Retry-After."""

    code = 503
    reason = "Service Unavailable"


class RequestParser(HTTPRequestParser):
    """waitress's parser of one request, which also knows when the request began and how its body
    keeps pace (the deadlines `WeaveServer.maintenance` enforces), and holds its body in the process's
    `BodyBuffer`: a body that does not fit is refused with BodyBufferFull, from its Content-Length
    when its headers end, else (a chunked body) when a part of it would not fit."""

    body_mark: tuple[float, int] | None = None  # (when, body bytes by then): where the current rate window began
    held = 0  # body bytes taken from the buffer

    def __init__(self, adj, buffer: BodyBuffer, started: float):
        super().__init__(adj)
        self.buffer = buffer
        self.started = started  # time.monotonic() of the request's first byte

    def received(self, data: bytes) -> int:
        if self.body_rcv is None or self.completed:  # the request line and headers
            consumed = super().received(data)
            if self.body_rcv is not None and not self.completed:  # the headers have just ended; a body follows
                self.body_mark = (time.monotonic(), 0)
                if self.content_length > self.buffer.free:
                    self._refuse()
            return consumed
        # waitress hands a body over in pieces of at most `recv_bytes`; a piece may run on into the
        # next (pipelined) request, which a body of declared length does not take.
        wanted = len(data) if self.chunked else min(len(data), self.body_rcv.remain)
        if not self.buffer.take(wanted):
            self._refuse()
            return len(data)
        before = self.body_bytes_received
        consumed = super().received(data)
        stored = self.body_bytes_received - before
        self.buffer.give(wanted - stored)
        self.held += stored
        return consumed

    def _refuse(self) -> None:
        self.error = BodyBufferFull(f"the server holds as many request bodies as it may ({self.buffer.limit} bytes)")
        self.completed = True
        self.expect_continue = False  # no "100 Continue" for a body that is refused (waitress would send one)
        _CLOSED("body_buffer_full").inc()

    def close(self) -> None:
        """The request is done (served, refused, or its connection closed): its body goes."""
        super().close()
        held, self.held = self.held, 0
        self.buffer.give(held)


class BodilessKeepAlive(WSGITask):
    """waitress's task of one request, which keeps the connection open after a response without a
    body (204) as after any other.

    waitress 3 closes the connection after every HTTP/1.1 response without Content-Length (its
    end would be framed by the close), and a 204 must not have one (RFC 9110 section 8.6): it has
    no body to frame, so waitress closed the connection of every empty claim, every turned-away
    claim and every other 204. Workers long-polling an idle queue paid a new connection (TCP
    handshake, waitress channel) per claim, and a client that reuses its connection without
    reading `Connection: close` (the bench's) met a reset. The response still closes when the
    request asked for it, on HTTP/1.0, and for every other reason waitress has (`set_close_on_finish`
    outside `build_response_header`)."""

    _bodiless_framing = False  # building the header of a response that needs no framing

    def build_response_header(self) -> bytes:
        asked_to_close = self.version != "1.1" or self.request.headers.get("CONNECTION", "").lower() == "close"
        self._bodiless_framing = not self.has_body and not asked_to_close
        try:
            return super().build_response_header()
        finally:
            self._bodiless_framing = False

    def set_close_on_finish(self) -> None:
        if not self._bodiless_framing:  # in build_response_header: only for the missing Content-Length
            super().set_close_on_finish()


class Channel(HTTPChannel):
    """waitress's connection, with Weave's request parser and problem+json refusals, kept open
    after a response without a body (`BodilessKeepAlive`)."""

    task_class = BodilessKeepAlive
    error_task_class = ProblemErrorTask
    parser = None  # the last request parser this connection made

    def parser_class(self, adj) -> RequestParser:
        """waitress makes each request's parser with `channel.parser_class(adj)`."""
        previous = self.parser
        # Blank lines before a request belong to it (RFC 9112 section 2.2): the "empty request" a pair
        # of them makes must not restart the header deadline, or CRLFs sent one by one would hold a
        # connection forever.
        started = previous.started if previous is not None and previous.empty else time.monotonic()
        self.parser = RequestParser(adj, self.server.body_buffer, started)
        return self.parser

    def handle_close(self) -> None:
        if self.request is not None:  # a request half received: no task will close it
            self.request.close()
        super().handle_close()


class WeaveServer(TcpWSGIServer):
    """waitress's server of one listening socket, with Weave's deadlines for requests and its
    connection limit enforced by closing the connections that have waited longest (module
    docstring). Every method here runs on the loop's thread."""

    channel_class = Channel

    def __init__(self, app, listener: socket.socket, adjustments: Adjustments, dispatcher, config: Config):
        super().__init__(
            app,
            _sock=listener,
            dispatcher=dispatcher,
            adj=adjustments,
            bind_socket=False,
            sockinfo=(listener.family, listener.type, listener.proto, listener.getsockname()),
        )
        self.max_body_bytes = config.max_body_bytes  # the cap ProblemErrorTask names, not waitress's
        self.header_timeout = config.header_timeout_seconds
        self.min_body_rate = config.min_body_rate
        self.body_buffer = BodyBuffer(config.body_buffer_bytes)
        self._backlog = select.poll()  # whether a connection waits to be accepted, without accepting it
        self._backlog.register(listener.fileno(), select.POLLIN)
        self._closing: list[Channel] = []  # closed to make room, not yet gone
        self._next_room_search = -math.inf
        self._warned_at = -math.inf

    def readable(self) -> bool:
        """Whether to accept connections now (waitress's `readable`, which also runs `maintenance`
        every `cleanup_interval`): below the connection limit, yes; at it, no, and when a connection
        waits, make room for it."""
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        if len(self._map) < self.adj.connection_limit:
            return True
        if self._backlog.poll(0):
            self._make_room()
        return False

    def maintenance(self, now: float) -> None:
        """waitress closes the idle connections; this, the requests that are too slow."""
        super().maintenance(now)
        clock = time.monotonic()
        for channel in self.active_channels.values():
            request = channel.request
            if request is None or channel.requests or channel.will_close:
                continue  # between requests (the idle timeout's business), or a request being served
            if not request.headers_finished:
                if clock - request.started > self.header_timeout:
                    self._close(channel, "header_timeout")
            elif not request.completed and request.body_mark is not None:
                since, mark = request.body_mark
                if clock - since >= BODY_RATE_WINDOW_SECONDS:
                    if request.body_bytes_received - mark < self.min_body_rate * (clock - since):
                        self._close(channel, "slow_body")
                    else:
                        request.body_mark = (clock, request.body_bytes_received)

    def _make_room(self) -> None:
        self._closing = [channel for channel in self._closing if channel.socket is not None]
        now, clock = time.time(), time.monotonic()
        if self._closing or clock < self._next_room_search:
            return  # those chosen last time go in this turn of the loop; or none could go a moment ago
        candidates = []
        for channel in self.active_channels.values():
            if channel.requests or channel.will_close or channel.close_when_flushed:
                continue
            request = channel.request
            if request is None:
                rank, waited = 1, now - channel.last_activity
            else:
                rank, waited = (0 if not request.headers_finished else 2), clock - request.started
            if waited >= EVICT_AFTER_SECONDS:
                candidates.append((rank, -waited, channel))
        chosen = heapq.nsmallest(EVICT_BATCH, candidates, key=lambda candidate: candidate[:2])
        for _, _, channel in chosen:
            self._close(channel, "evicted")
        self._closing = [channel for _, _, channel in chosen]
        if not chosen:  # every connection is being served or is new: look again in a while, not every turn
            self._next_room_search = clock + EVICT_RETRY_SECONDS
        elif clock - self._warned_at >= LIMIT_WARNING_SECONDS:
            self._warned_at = clock
            log.warning(
                "at the limit of %d connections with more waiting: closing those that waited longest for their "
                "request (%d now; weave_http_connections_closed_total counts them)",
                self.adj.connection_limit,
                len(chosen),
            )

    def _close(self, channel: Channel, reason: str) -> None:
        """Close `channel` in the loop's next turn, as waitress closes an idle one."""
        channel.will_close = True
        _CLOSED(reason).inc()


class LastInFirstOut(threading.Condition):
    """A condition whose `notify` wakes the thread that began waiting last, not first.

    It reaches into `threading.Condition`'s private `_waiters` and `_is_owned`: the LIFO tests of
    tests/test_server.py fail if a Python release changes them (docs/performance.md has its gain)."""

    def notify(self, n: int = 1) -> None:
        # threading.Condition.notify, taking waiters from the other end of the same queue.
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        waiters = self._waiters
        while waiters and n > 0:
            waiter = waiters[-1]
            try:
                waiter.release()
            except RuntimeError:  # released by an earlier notify that was interrupted (gh-92530)
                pass
            else:
                n -= 1
            try:
                waiters.remove(waiter)
            except ValueError:
                pass


class HotThreadsFirst(ThreadedTaskDispatcher):
    """waitress's thread pool, handing each request to the thread that went idle last.

    waitress wakes its idle threads in turn (a `threading.Condition` wakes the longest waiter), so
    a process of 16 threads serving 4 requests at a time cycles through all 16. Waking the thread
    that has just finished keeps the same few threads busy: at 8 clients on two processes of 16
    threads, API CPU per accepted signal fell from 1.48 to 1.27 ms in an A/B run (docs/performance.md).
    The threads themselves are waitress's; only the order in which idle ones are woken differs."""

    def __init__(self):
        super().__init__()
        self.queue_cv = LastInFirstOut(self.lock)


def _fit_file_limit(connections: int, others: int) -> int:
    """Raise the soft RLIMIT_NOFILE (never above the hard one) so that `connections` fit beside
    `others` descriptors (the database pool, the metrics port's connections); the number of
    connections that fit."""
    needed = connections * FILES_PER_CONNECTION + others + FILES_RESERVED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return connections
    if soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    fitting = (soft - others - FILES_RESERVED) // FILES_PER_CONNECTION
    if fitting < connections:
        log.warning(
            "the file descriptor limit (%d, hard %d) fits %d connections, not %d: raise the hard limit",
            soft,
            hard,
            fitting,
            connections,
        )
        return max(fitting, 1)
    return connections


def _run_worker(listener: socket.socket, metrics_listener: socket.socket | None, config: Config) -> None:
    """Serve the API on `listener` in this process, with its own connection pool, and /metrics on
    `metrics_listener` when there is one (else on the API's port)."""
    from weave.app import create_app

    pool = config.api_pool_size
    scrapers = METRICS_CONNECTION_LIMIT * FILES_PER_CONNECTION if metrics_listener else 0
    connections = _fit_file_limit(CONNECTION_LIMIT, pool + scrapers)
    database = Database(DatabaseUrl.parse(config.database_url), pool_size=pool)
    app = create_app(config, database, metrics_route=metrics_listener is None)
    server = create_server(app, listener, config, connections)
    if metrics_listener is not None:
        _serve_metrics(metrics_listener, database, config)
    host, port = listener.getsockname()[:2]
    log.info("serving on http://%s:%s (process %d, up to %d connections)", host, port, os.getpid(), connections)
    server.run()


def _serve_metrics(listener: socket.socket, database: Database, config: Config) -> None:
    """/metrics on `listener` from a loop of its own in a thread, with threads and connections of
    its own: scrapes take none of the API's threads or connection slots."""
    from weave.app import create_metrics_app

    limits = dataclasses.replace(config, threads=METRICS_THREADS, max_waiting_claims=0)
    server = create_server(create_metrics_app(database), listener, limits, METRICS_CONNECTION_LIMIT)
    threading.Thread(target=server.run, name="metrics", daemon=True).start()
    host, port = listener.getsockname()[:2]
    log.info("metrics on http://%s:%s/metrics", host, port)


def _fork_worker(sockets: Sockets, config: Config) -> int:
    pid = os.fork()
    if pid:
        return pid
    # The worker: default signal handling, and it ends with its parent even if the parent is killed.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()
    code = 0
    try:
        _run_worker(*sockets, config)
    except BaseException:
        log.exception("API worker failed")
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _kill_quietly(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
