"""`weave serve`: waitress on one listening socket, in one process or in several forked ones.

A Python process runs Python on one core at a time (the GIL), and an API request spends most of
its CPU in Python (HTTP parsing, JSON, the PyMySQL protocol). API processes share nothing but the
database, so `--processes N` opens N listening sockets on the same port (SO_REUSEPORT) and forks
one worker per socket: the kernel spreads new connections over the sockets by address hash. (One
shared socket would not spread keep-alive connections: the first worker to wake accepts them all.)
The parent only supervises: a worker that dies is replaced on the same socket; SIGTERM or SIGINT
stops them all. Run about one process per core the API may use.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time

from weave.config import Config
from weave.db import Database, DatabaseUrl
from weave.processes import die_with_parent

log = logging.getLogger(__name__)

BACKLOG = 1024
RESTART_PAUSE_SECONDS = 1.0  # a worker that fails at start must not turn the parent into a fork loop


def serve(url: DatabaseUrl, host: str, port: int, threads: int, max_body_bytes: int, processes: int = 1) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if processes == 1:
        _run_worker(socket.create_server((host, port), family=family, backlog=BACKLOG), url, threads, max_body_bytes)
        return
    listeners = []
    for _ in range(processes):
        listeners.append(socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=True))
        port = listeners[0].getsockname()[1]  # port 0 picked a free port: the others join it
    workers: dict[int, socket.socket] = {}
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        for pid in list(workers):
            _kill_quietly(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for listener in listeners:
        workers[_fork_worker(listener, url, threads, max_body_bytes)] = listener
    while workers:
        pid, status = os.wait()
        listener = workers.pop(pid, None)
        if listener is not None and not stopping:
            log.error("API worker %d ended (wait status %d); starting another", pid, status)
            time.sleep(RESTART_PAUSE_SECONDS)
            if not stopping:  # SIGTERM may have come during the pause
                workers[_fork_worker(listener, url, threads, max_body_bytes)] = listener


def _run_worker(listener: socket.socket, url: DatabaseUrl, threads: int, max_body_bytes: int) -> None:
    """Serve the API on `listener` in this process, with its own connection pool."""
    import waitress

    from weave.app import create_app, waitress_options

    config = Config(database_url=url.yoyo_url(), max_body_bytes=max_body_bytes)
    app = create_app(config, Database(url, pool_size=threads + 4))
    waitress.serve(app, sockets=[listener], threads=threads, **waitress_options(max_body_bytes))


def _fork_worker(listener: socket.socket, url: DatabaseUrl, threads: int, max_body_bytes: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    # The worker: default signal handling, and it ends with its parent even if the parent is killed.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()
    code = 0
    try:
        _run_worker(listener, url, threads, max_body_bytes)
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
