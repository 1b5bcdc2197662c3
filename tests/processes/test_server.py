"""`weave serve`: N workers on one port, replaced when they die, stopped together (`--processes N`);
idle connections neither shut it nor stay open (issue 10, item 1); slow clients are cut and the
bodies a process holds are bounded (issue 26, item 5)."""

import contextlib
import http.client
import json
import os
import resource
import selectors
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers import read_answer, ready, serving, weave_serve

from weave.app import create_app
from weave.config import Config
from weave.server import BODY_RATE_WINDOW_SECONDS, IDLE_CHECK_SECONDS, HotThreadsFirst, LastInFirstOut, create_server

pytestmark = pytest.mark.slow


def workers_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def established_connections(pid: int, port: int) -> int:
    """How many established TCP connections to `port` process `pid` holds (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def wait_for(check, timeout=20):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def serve_two(migrated_url):
    with weave_serve(migrated_url, "--processes", "2", "--threads", "4") as (parent, port):
        wait_for(lambda: len(workers_of(parent.pid)) == 2)
        yield parent, port


def test_workers_share_the_port_and_each_serves_connections(serve_two):
    parent, port = serve_two
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(16)]
    for conn in connections:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        assert response.status == 200
        response.read()
    # The kernel spreads connections by address hash: 16 all on one worker has odds of 2 in 65,536.
    held = [established_connections(worker, port) for worker in workers_of(parent.pid)]
    assert sum(held) == 16 and min(held) > 0, held
    for conn in connections:
        conn.close()


def test_a_killed_worker_is_replaced_and_sigterm_stops_all(serve_two):
    parent, port = serve_two
    first, second = workers_of(parent.pid)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: len(workers := workers_of(parent.pid)) == 2 and first not in workers)
    replacement = (set(workers_of(parent.pid)) - {second}).pop()
    assert all(ready(port) == 200 for _ in range(10))
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(10) == 0
    for pid in (second, replacement):
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])


# ---- idle connections (issue 10, item 1) ---------------------------------------------------------

IDLE_CONNECTIONS = 1000


@pytest.fixture
def many_files():
    """This test process may hold the idle connections (the soft descriptor limit, raised if needed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * IDLE_CONNECTIONS + 256  # in-process tests hold both ends
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard descriptor limit ({hard}) is below the {wanted} this test holds")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def idle_connections(port: int, count: int):
    """`count` connections to the server that never send a byte; (socket, connected at) pairs."""
    held: list[tuple[socket.socket, float]] = []
    try:
        for _ in range(count):
            held.append((socket.create_connection(("127.0.0.1", port), timeout=5), time.monotonic()))
        yield held
    finally:
        for sock, _ in held:
            sock.close()


def seconds_until_closed(held: list[tuple[socket.socket, float]], timeout: float) -> list[float]:
    """For each socket, seconds from its start time until the server closed it (EOF or reset);
    waits at most `timeout` seconds in all. A socket that receives data fails the test."""
    selector = selectors.DefaultSelector()
    for sock, started in held:
        selector.register(sock, selectors.EVENT_READ, started)
    closed = []
    deadline = time.monotonic() + timeout
    try:
        while len(closed) < len(held) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(1)
                except ConnectionResetError:
                    data = b""
                assert data == b"", "an idle connection received data"
                closed.append(time.monotonic() - key.data)
                selector.unregister(key.fileobj)
    finally:
        selector.close()
    return sorted(closed)


def soft_file_limit_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files limit in /proc")


def timed_get(port: int, path: str) -> tuple[int, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        conn.close()


def test_issue_10_1_a_thousand_idle_connections_leave_the_server_answering(migrated_url, many_files):
    # Started with a soft descriptor limit too low for the connections (256, macOS's default; Linux's
    # 1,024 is too low as well once the database pool is counted): `weave serve` raises it.
    with weave_serve(migrated_url, "--idle-timeout", "60", soft_file_limit=256) as (process, port):
        assert soft_file_limit_of(process.pid) > 2 * IDLE_CONNECTIONS
        with idle_connections(port, IDLE_CONNECTIONS):
            wait_for(lambda: established_connections(process.pid, port) >= IDLE_CONNECTIONS)
            status, seconds = timed_get(port, "/healthz")
            print(f"GET /healthz with {IDLE_CONNECTIONS} idle connections held: {seconds * 1000:.1f} ms")
            assert status == 200 and seconds < 1.0
            assert ready(port) == 200  # a database connection fits beside them
            # None was dropped to make room: all of them are still open.
            assert established_connections(process.pid, port) >= IDLE_CONNECTIONS


def test_issue_10_1_idle_connections_are_closed_after_the_idle_timeout(migrated_url):
    with weave_serve(migrated_url, "--idle-timeout", "1") as (process, port):
        with idle_connections(port, 20) as silent:
            used = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            used.request("GET", "/healthz")
            assert used.getresponse().read()  # the keep-alive connection now idles too
            closed = seconds_until_closed(silent + [(used.sock, time.monotonic())], timeout=10)
            used.close()
        assert len(closed) == 21, f"{21 - len(closed)} idle connections still open after 10 s"
        print(f"idle connections closed after {closed[0]:.2f}..{closed[-1]:.2f} s (idle timeout 1 s)")
        # Never before the timeout; after it, within the check interval and one turn of the loop
        # (1 s each), plus slack for a loaded machine.
        assert 0.9 <= closed[0] and closed[-1] < 1 + IDLE_CHECK_SECONDS + 1 + 2


def test_issue_10_1_a_request_in_progress_outlives_the_idle_timeout(many_files):
    """A long-poll claim is a request in progress: the idle timeout never cuts it, while 1,000 idle
    connections opened meanwhile are closed. In process, so the server's descriptors go past 1,023
    (select() fails there; waitress must poll)."""

    def slow_app(environ, start_response):
        time.sleep(1 + IDLE_CHECK_SECONDS + 1.5)  # past the idle timeout, a check and a turn of the loop
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"done"]

    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(slow_app, listener, Config("unused", threads=2, idle_timeout_seconds=1))
    port = listener.getsockname()[1]
    answers = []

    def slow_request():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/slow")
            response = conn.getresponse()
            answers.append((response.status, response.read()))
        finally:
            conn.close()

    with serving(server):
        slow = threading.Thread(target=slow_request)
        slow.start()
        with idle_connections(port, IDLE_CONNECTIONS) as held:
            closed = seconds_until_closed(held, timeout=10)
        slow.join(10)
    assert answers == [(200, b"done")]
    assert len(closed) == IDLE_CONNECTIONS, f"{IDLE_CONNECTIONS - len(closed)} idle connections still open after 10 s"
    print(f"{IDLE_CONNECTIONS} idle connections closed after {closed[0]:.2f}..{closed[-1]:.2f} s (idle timeout 1 s)")
    assert closed[0] >= 0.9


def test_the_thread_that_began_waiting_last_is_woken_first():
    condition = LastInFirstOut()
    woken = []

    def wait(name):
        with condition:
            waiting.append(name)
            condition.wait(10)
            woken.append(name)

    waiting = []
    threads = []
    for name in ("first", "second", "third"):
        threads.append(threading.Thread(target=wait, args=(name,)))
        threads[-1].start()
        while name not in waiting:  # each waits before the next starts: their order is known
            time.sleep(0.001)
    with condition:
        condition.notify()
    threads[2].join(5)
    assert woken == ["third"]
    with condition:
        condition.notify_all()
    for thread in threads:
        thread.join(5)
    assert sorted(woken) == ["first", "second", "third"]


def test_requests_go_to_the_threads_that_went_idle_last():
    """Sequential requests to a server of 8 threads are served by the thread that served the one
    before (waitress alone cycles through all 8; two more are allowed, should a request arrive
    before that thread is back waiting); concurrent ones still spread out."""
    served_by = []

    def app(environ, start_response):
        served_by.append(threading.get_ident())
        time.sleep(0.2 if environ["PATH_INFO"] == "/slow" else 0)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(app, listener, Config("unused", threads=8))
    assert isinstance(server.task_dispatcher, HotThreadsFirst)
    port = listener.getsockname()[1]

    def get(path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            return conn.getresponse().read()
        finally:
            conn.close()

    with serving(server):
        assert [get("/") for _ in range(8)] == [b"ok"] * 8
        sequential = set(served_by)
        served_by.clear()
        slow = [threading.Thread(target=get, args=("/slow",)) for _ in range(4)]
        for thread in slow:
            thread.start()
        for thread in slow:
            thread.join(10)
    # Waitress alone cycles through all 8. A request may arrive before the thread that served the
    # one before is back waiting (its response is sent before it returns): on a loaded machine that
    # happened twice in 8 (CI run of 2026-12-02), so up to 3 threads is still "hot first".
    assert len(sequential) <= 3
    assert len(set(served_by)) == 4


# ---- slow clients (issue 26, item 5) --------------------------------------------------------------


def echo_length(environ, start_response):
    """A WSGI app that reads the whole body and answers its length."""
    length = str(len(environ["wsgi.input"].read())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(length)))])
    return [length]


@contextlib.contextmanager
def echo_server(config: Config, **limits):
    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(echo_length, listener, config, **limits)
    with serving(server):
        yield server, listener.getsockname()[1]


def post_head(length: int | None, *headers: str) -> bytes:
    """A POST's request line and headers: a body of `length` bytes, or chunked when None."""
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return "\r\n".join(["POST / HTTP/1.1", "Host: weave", framing, *headers, "", ""]).encode()


def readable_within(sock: socket.socket, seconds: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(seconds))


def is_closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (EOF or reset), without waiting; fails if it answered."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)
    assert data == b"", f"the server answered: {data[:200]!r}"
    return True


class Trickling(threading.Thread):
    """`count` connections that each send `first` at once, then `line` every `every` seconds, and
    never end their headers (slowloris). `closed_after[i]`: the age of connection i when the server
    closed it (EOF or reset); `answered`: connections the server sent anything to."""

    def __init__(self, port: int, count: int, first: bytes, line: bytes, every: float = 0.5):
        super().__init__(daemon=True)
        self.sockets = []
        self.opened = []
        for _ in range(count):
            self.sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            self.opened.append(time.monotonic())
            self.sockets[-1].sendall(first)
        self.line, self.every = line, every
        self.closed_after: dict[int, float] = {}
        self.answered: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        for index, sock in enumerate(self.sockets):
            selector.register(sock, selectors.EVENT_READ, index)
        next_line = time.monotonic() + self.every
        while not self.stopping.is_set():
            for key, _ in selector.select(timeout=0.05):
                try:
                    data = key.fileobj.recv(65536)
                except ConnectionResetError:
                    data = b""
                if data:
                    self.answered.add(key.data)
                self._closed(selector, key.data)
            if time.monotonic() >= next_line:
                next_line += self.every
                for index, sock in enumerate(self.sockets):
                    if index not in self.closed_after:
                        try:
                            sock.send(self.line)
                        except OSError:  # reset, or a broken pipe once the server closed it
                            self._closed(selector, index)
        selector.close()

    def _closed(self, selector, index: int) -> None:
        if index not in self.closed_after:
            self.closed_after[index] = time.monotonic() - self.opened[index]
            selector.unregister(self.sockets[index])

    def __enter__(self) -> "Trickling":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.join(10)
        for sock in self.sockets:
            sock.close()


def test_issue_26_5_headers_that_trickle_in_are_cut_at_the_header_deadline():
    """A header line every half second keeps a connection busy, never idle: it is closed once its
    headers are 2 s late, counted from the request's first byte. Blank lines sent one by one before
    a request belong to it (each pair ends an empty request, which must not restart the clock). A
    keep-alive connection whose requests each arrive whole lives on past the deadline."""
    config = Config("unused", threads=2, header_timeout_seconds=2, idle_timeout_seconds=30)
    with echo_server(config) as (_, port):
        keep_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        answered = []
        with (
            Trickling(port, 1, b"GET / HTTP/1.1\r\n", b"X-Trickle: 1\r\n") as headers,
            Trickling(port, 1, b"\r\n", b"\r\n") as blank,
        ):
            for _ in range(4):  # one request every 1.5 s on one connection: 6 s in all
                keep_alive.request("GET", "/")
                answered.append(keep_alive.getresponse().read())
                time.sleep(1.5)
        keep_alive.close()
    assert answered == [b"0"] * 4
    cut = [headers.closed_after.get(0), blank.closed_after.get(0)]
    print(f"trickling headers cut after {cut} s (header deadline 2 s)")
    assert None not in cut, "a connection trickling its headers is still open after 6 s"
    # Never before the deadline; after it, within the check interval and one turn of the loop.
    assert all(2 <= seconds < 2 + IDLE_CHECK_SECONDS + 1 + 1 for seconds in cut), cut
    assert not headers.answered and not blank.answered


def test_issue_26_5_a_body_slower_than_the_minimum_rate_is_cut():
    """After the headers, a body must keep up `min_body_rate` over each window of
    BODY_RATE_WINDOW_SECONDS: one trickling 4 KB/s against a minimum of 20 KB/s is closed after the
    first window; one sending 50 KB/s for 8 s (checked on the way) is read whole and answered."""
    config = Config("unused", threads=2, min_body_rate=20_000, idle_timeout_seconds=30)
    steady_length = 400_000
    with echo_server(config) as (_, port):
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as slow,
            socket.create_connection(("127.0.0.1", port), timeout=10) as steady,
        ):
            slow.sendall(post_head(100_000))
            steady.sendall(post_head(steady_length))
            started = time.monotonic()
            slow_cut = None
            sent = 0
            while sent < steady_length:
                steady.sendall(b"x" * 25_000)
                sent += 25_000
                if slow_cut is None:
                    try:
                        slow.sendall(b"x" * 2_000)
                    except OSError:
                        slow_cut = time.monotonic() - started
                    else:
                        if is_closed(slow):
                            slow_cut = time.monotonic() - started
                time.sleep(0.5)
            answer = read_answer(steady)
    print(f"slow body cut after {slow_cut} s (window {BODY_RATE_WINDOW_SECONDS} s)")
    assert (answer.status, answer.body) == (200, str(steady_length).encode())
    assert slow_cut is not None, "a body at 4 KB/s is still being read after 8 s"
    assert BODY_RATE_WINDOW_SECONDS <= slow_cut < BODY_RATE_WINDOW_SECONDS + IDLE_CHECK_SECONDS + 1 + 1


TRICKLING = 300  # 2,100 against 2,048 slots in the issue; scaled down, the limit with it
TRICKLING_LIMIT = 250


def test_issue_26_5_healthz_answers_while_trickling_connections_hold_every_slot(config, database, many_files):
    """300 connections trickle their headers into a process that takes 250: every slot is held
    by a connection that is never idle, the rest wait in the listen backlog, and /healthz with them.
    At the limit, with a connection waiting, the process closes those that have waited longest for
    their headers to make room; /healthz is answered at once, long before any header deadline."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(
        create_app(config, database), listener, Config(config.database_url, threads=4), connection_limit=TRICKLING_LIMIT
    )
    port = listener.getsockname()[1]
    with (
        serving(server),
        Trickling(port, TRICKLING, b"GET /healthz HTTP/1.1\r\n", b"X-Trickle: 1\r\n", every=2) as held,
    ):
        wait_for(lambda: len(server.active_channels) >= TRICKLING_LIMIT - 2)  # the listener and the wake-up pipe
        time.sleep(1.5)  # every one of them has waited for its headers for a while
        status, seconds = timed_get(port, "/healthz")
        print(
            f"GET /healthz with {TRICKLING} connections trickling into {TRICKLING_LIMIT} slots: {seconds * 1000:.1f} ms"
        )
        closed = len(held.closed_after)
    assert status == 200 and seconds < 2.0
    assert closed > 0 and not held.answered


def test_issue_26_5_making_room_at_the_limit_never_closes_a_request_being_served():
    """A slow request (a long-poll) holds one of 20 slots while 30 trickling connections want the
    rest: room is made for a new request from the trickling ones, never from the one being served."""

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/slow":
            time.sleep(3)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    listener = socket.create_server(("127.0.0.1", 0))
    server = create_server(app, listener, Config("unused", threads=2), connection_limit=20)
    port = listener.getsockname()[1]
    answers = []

    def slow_request():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/slow")
        answers.append(conn.getresponse().read())
        conn.close()

    with serving(server):
        slow = threading.Thread(target=slow_request)
        slow.start()
        with Trickling(port, 30, b"GET / HTTP/1.1\r\n", b"X-Trickle: 1\r\n", every=0.5) as held:
            time.sleep(1.5)
            status, seconds = timed_get(port, "/")
            slow.join(10)
    assert answers == [b"ok"]
    assert status == 200 and seconds < 2.0
    assert held.closed_after and not held.answered


def deleted_file_bytes() -> int:
    """Bytes of the deleted files this process holds open: waitress's temporary files of bodies."""
    total = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            if os.readlink(fd).endswith(" (deleted)"):
                total += os.stat(fd).st_size
        except OSError:  # closed meanwhile
            pass
    return total


def test_issue_26_5_bodies_held_at_once_stay_within_the_body_buffer(many_files):
    """12 clients each send 900 KB of a 1 MB body (beyond waitress's 512 KiB in memory: a temporary
    file each) and hold it; the process holds at most 4 MB of bodies. Those that do not fit are
    answered 503 UNAVAILABLE (problem+json, Retry-After), from their declared length before their
    body is read, or, for a chunked body of no declared length, on the way (or the connection is
    closed). Once the holders go, a whole body is read again."""
    limit = 4_000_000
    config = Config("unused", threads=2, max_body_bytes=1_000_000, body_buffer_bytes=limit, idle_timeout_seconds=30)
    baseline = deleted_file_bytes()
    holders, refused = [], []
    with echo_server(config) as (server, port):
        for index in range(12):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            # one asks whether to send its body: the answer is the refusal, not "100 Continue"
            sock.sendall(post_head(1_000_000, *(["Expect: 100-continue"] if index == 6 else [])))
            if readable_within(sock, 0.3):
                refused.append(read_answer(sock))
                sock.close()
            else:
                sock.sendall(b"x" * 900_000)
                holders.append(sock)
                # read before the next one comes: what it holds is known when the next one asks
                wait_for(lambda: deleted_file_bytes() - baseline >= 900_000 * len(holders), timeout=10)
        chunked = socket.create_connection(("127.0.0.1", port), timeout=10)
        chunked.sendall(post_head(None))
        chunked_answer = None
        try:
            for _ in range(20):  # 2 MB in chunks of 100 KB: more than the buffer has left
                chunked.sendall(b"%x\r\n" % 100_000 + b"x" * 100_000 + b"\r\n")
                if readable_within(chunked, 0.05):
                    break
            chunked_answer = read_answer(chunked)
        except (OSError, AssertionError):  # reset, or closed before the answer could be read
            pass
        assert not any(is_closed(sock) for sock in holders)
        held = deleted_file_bytes() - baseline
        print(f"{len(holders)} bodies held, {len(refused)} refused; temporary files: {held} bytes (limit {limit})")
        assert held <= limit
        assert server.body_buffer.held <= limit
        for sock in holders:
            sock.close()
        chunked.close()
        wait_for(lambda: server.body_buffer.held == 0, timeout=5)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as whole:
            whole.sendall(post_head(1_000_000) + b"x" * 1_000_000)
            assert read_answer(whole).body == b"1000000"
    assert len(holders) == 4 and len(refused) == 8
    for answer in refused + ([chunked_answer] if chunked_answer else []):
        assert answer.status == 503 and answer.headers["retry-after"] == "1"
        problem = json.loads(answer.body)
        assert problem["code"] == "UNAVAILABLE"
