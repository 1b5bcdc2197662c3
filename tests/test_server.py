"""`weave serve --processes N`: N workers on one port, replaced when they die, stopped together."""

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from weave.devdb import free_port

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


def ready(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


@pytest.fixture
def serve_two(migrated_url):
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": migrated_url.yoyo_url()}
    parent = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "serve", "--port", str(port), "--processes", "2", "--threads", "4"],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: ready(port) == 200 and len(workers_of(parent.pid)) == 2)
        yield parent, port
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


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
