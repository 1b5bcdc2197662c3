"""Slow clients and scrapers against a real `weave serve` (issue 26, items 5 and 9; the figures
of docs/operations.md).

    .venv/bin/python scripts/benchmarks/slow_clients.py trickle [--connections 2100] [--seconds 40] [--no-reconnect]
    .venv/bin/python scripts/benchmarks/slow_clients.py bodies [--connections 200] [--body-bytes 2000000] [--seconds 20]
    .venv/bin/python scripts/benchmarks/slow_clients.py scrape [--scrapers 6] [--seconds 15] [--pause S] [--metrics-port]

Any further arguments go to `weave serve`. A private MariaDB in $TMPDIR/weave-bench-slow-clients
(kept between runs), a fresh database per run, one `weave serve` process of this interpreter's
Weave. Every connection goes to 127.0.0.1; the clients share the machine with the server.
- trickle: connections that each send a request line, then a header line every 2 s, never ending
  their headers (each reopened at once when the server closes it, unless --no-reconnect), in a
  process of their own; meanwhile GET /healthz every 0.5 s, each on a new connection.
- bodies: connections that each send a body's headers and all but 1,000 of its bytes at once,
  then one byte every 2 s; the server's temporary files (deleted files it holds open) and RSS.
- scrape: database statements per scrape of /metrics (the server's global counters), then the
  latency of another tenant's GET of a workflow, alone and beside the scrapers.
"""

from __future__ import annotations

import argparse
import heapq
import http.client
import json
import os
import random
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from weave import auth, migrate
from weave.db import Database, DatabaseUrl, connect
from weave.devdb import PrivateServer, free_port
from weave.processes import die_with_parent
from weave.sql import tenancy

HERE = Path(tempfile.gettempdir()) / "weave-bench-slow-clients"


def raise_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def start_database(name: str):
    HERE.mkdir(exist_ok=True)
    server = PrivateServer(HERE / "db", fast_and_unsafe=True).start()
    url = DatabaseUrl.parse(server.url(name))
    conn = connect(url, database=False)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()
    migrate.ensure_database(url)
    migrate.apply(url)
    return server, url


@contextmanager
def served(name: str, flags: list[str]):
    """A fresh database `measure_{name}` on the kept server and one `weave serve` of it (its log in
    HERE/serve-{name}.log): (its URL, the port, the process); all stopped when the section ends."""
    server, url = start_database(f"measure_{name}")
    port = free_port()
    with open(HERE / f"serve-{name}.log", "w") as log:
        process = serve(url, port, flags, log)
        try:
            yield url, port, process
        finally:
            process.terminate()
            process.wait(10)
            server.stop()


def serve(url, port, flags, log):
    env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
    process = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "serve", "--port", str(port), *flags],
        env=env,
        stderr=log,
        preexec_fn=die_with_parent,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if get(port, "/readyz", timeout=2)[0] == 200:
                return process
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("weave serve did not become ready")


def get(port, path, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, body
    finally:
        conn.close()


class Prober(threading.Thread):
    """GET `path` one after another (new connection each), `pause` between; (started, seconds or None)."""

    def __init__(self, port, path="/healthz", pause=0.5, timeout=60, headers=None):
        super().__init__(daemon=True)
        self.port, self.path, self.pause, self.timeout, self.headers = port, path, pause, timeout, headers
        self.results = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                status, _ = get(self.port, self.path, self.headers, timeout=self.timeout)
                seconds = time.monotonic() - started if status == 200 else None
            except OSError:
                seconds = None
            self.results.append((started, seconds))
            self.stop.wait(self.pause)


def summary(results):
    done = [s for _, s in results if s is not None]
    failed = sum(1 for _, s in results if s is None)
    if not done:
        return f"{len(results)} probes, all failed"
    done.sort()
    p = lambda q: done[min(len(done) - 1, int(q * len(done)))]  # noqa: E731
    return (
        f"{len(results)} probes: {failed} failed; latency median {statistics.median(done) * 1000:.1f} ms, "
        f"p90 {p(0.9) * 1000:.1f} ms, max {done[-1] * 1000:.1f} ms"
    )


# ---- the trickle ----------------------------------------------------------------------------------


def attacker(port: int, count: int, seconds: float, interval: float, reconnect: bool) -> None:
    """`count` connections, each sending one header line every `interval` s and never ending its headers."""
    raise_files()
    selector = selectors.DefaultSelector()
    timers = []  # (when, serial, sock)
    opened = cut = 0
    lifetimes = []
    born = {}
    serial = 0

    def open_one():
        nonlocal opened, serial
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_READ)
        born[sock] = time.monotonic()
        serial += 1
        heapq.heappush(timers, (time.monotonic() + random.uniform(0, 0.05), serial, sock, True))
        opened += 1

    def closed(sock):
        nonlocal cut
        try:
            selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        lifetimes.append(time.monotonic() - born.pop(sock))
        sock.close()
        cut += 1
        if reconnect and time.monotonic() < end:
            open_one()

    end = time.monotonic() + seconds
    for _ in range(count):
        open_one()
    last_report = time.monotonic()
    while time.monotonic() < end:
        timeout = max(0.0, min(0.2, timers[0][0] - time.monotonic())) if timers else 0.2
        for key, _ in selector.select(timeout):
            try:
                data = key.fileobj.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                closed(key.fileobj)
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            _, _, sock, first = heapq.heappop(timers)
            if sock not in born:
                continue
            line = b"GET /healthz HTTP/1.1\r\n" if first else b"X-Trickle: %d\r\n" % random.randrange(10**6)
            try:
                sock.send(line)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed(sock)
                continue
            serial += 1
            heapq.heappush(timers, (now + interval, serial, sock, False))
        if now - last_report >= 5:
            last_report = now
            print(f"attacker: {len(born)} open, {opened} opened, {cut} cut", flush=True)
    lives = sorted(lifetimes)
    if lives:
        print(
            f"attacker done: {opened} opened, {cut} cut by the server; lifetimes of cut connections "
            f"median {statistics.median(lives):.1f} s, max {lives[-1]:.1f} s",
            flush=True,
        )
    else:
        print(f"attacker done: {opened} opened, none cut", flush=True)


def trickle(args, flags):
    with served("trickle", flags) as (_, port, _):
        print(f"baseline /healthz: {get(port, '/healthz')[0]}")
        attack = subprocess.Popen(
            [sys.executable, __file__, "attacker", str(port), str(args.connections), str(args.seconds + 5)]
            + (["--no-reconnect"] if args.no_reconnect else []),
            preexec_fn=die_with_parent,
        )
        time.sleep(3)  # every connection is open and trickling
        prober = Prober(port, timeout=args.seconds)
        prober.start()
        time.sleep(args.seconds)
        prober.stop.set()
        prober.join(args.seconds + 5)
        print(
            f"/healthz under {args.connections} trickling connections for {args.seconds} s: {summary(prober.results)}"
        )
        attack.wait(60)


# ---- bodies ---------------------------------------------------------------------------------------


def temp_bytes(pid: int) -> tuple[int, int]:
    """Bytes of the deleted files (temporary files) `pid` holds open, and how many."""
    total = files = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
            if target.endswith("(deleted)") and not target.startswith(("socket:", "pipe:", "anon_inode:")):
                total += os.stat(fd).st_size
                files += 1
        except OSError:
            pass
    return total, files


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


def body_holder(port, body_bytes, stats, stop):
    """Send headers and all but 1,000 bytes of the body at once, then one byte every 2 s."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        head = (
            f"POST /v1/namespaces/acme/workflows HTTP/1.1\r\nHost: weave\r\nContent-Type: application/json\r\n"
            f"Content-Length: {body_bytes}\r\n\r\n"
        ).encode()
        sock.sendall(head + b" " * (body_bytes - 1000))
        stats["sent"] += 1
        while not stop.is_set():
            stop.wait(2)
            sock.send(b" ")
    except OSError as exc:
        stats.setdefault("errors", []).append(type(exc).__name__)
    else:
        sock.close()
        return
    stats["cut"] += 1


def bodies(args, flags):
    with served("bodies", flags) as (_, port, process):
        base_rss = rss(process.pid)
        stats = {"sent": 0, "cut": 0}
        stop = threading.Event()
        threads = [
            threading.Thread(target=body_holder, args=(port, args.body_bytes, stats, stop), daemon=True)
            for _ in range(args.connections)
        ]
        for thread in threads:
            thread.start()
        peak = (0, 0)
        peak_rss = 0
        prober = Prober(port)
        prober.start()
        started = time.monotonic()
        samples = []
        while time.monotonic() - started < args.seconds:
            held = temp_bytes(process.pid)
            peak = max(peak, held)
            peak_rss = max(peak_rss, rss(process.pid))
            samples.append((round(time.monotonic() - started, 1), held[0] // 2**20))
            time.sleep(0.25)
        stop.set()
        prober.stop.set()
        print(
            f"{args.connections} x {args.body_bytes} B bodies for {args.seconds} s: peak temp files "
            f"{peak[0] / 2**20:.1f} MiB in {peak[1]} files; peak RSS {peak_rss / 2**20:.1f} MiB "
            f"(at start {base_rss / 2**20:.1f} MiB); bodies sent {stats['sent']}, connections cut {stats['cut']}"
        )
        print("temp MiB over time:", samples[:: max(1, len(samples) // 20)])
        print(f"/healthz meanwhile: {summary(prober.results)}")
        for thread in threads:
            thread.join(5)


# ---- scrapes --------------------------------------------------------------------------------------


def questions(url) -> tuple[int, int]:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_select')")
            rows = {row["Variable_name"]: int(row["Value"]) for row in cur.fetchall()}
        return rows["Questions"], rows["Com_select"]
    finally:
        conn.close()


def scraper(port, stop, counts, path="/metrics", pause=0.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        counts.append(len(body))
        if pause:
            stop.wait(pause)


def scrape(args, flags):
    metrics_port = free_port() if args.metrics_port else None
    if metrics_port:
        flags = [*flags, "--metrics-port", str(metrics_port)]
    with served("scrape", flags) as (url, port, _):
        _scrape(args, url, port, metrics_port)


def _scrape(args, url, port, metrics_port):
    database = Database(url)
    tenancy.create_namespace(database, "acme")
    tenancy.create_application(database, "acme", "app", None)
    tenancy.create_queue(database, "acme", "inventory", 4)
    token = auth.new_token()
    tenancy.create_credential(
        database, "acme", "app", "tester", sorted(auth.SCOPES), ["inventory"], auth.token_hash(token), None
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    document = {
        "name": "flow",
        "steps": [{"key": "a", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}],
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"definition": "flow", "version": 1, "input": {}, "deadline_seconds": 3600, "workflow_id": "w-1"}
    for path, sent in (("/v1/namespaces/acme/definitions", document), ("/v1/namespaces/acme/workflows", body)):
        conn.request("POST", path, json.dumps(sent), headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 201, (path, response.status)
    conn.close()
    # Traffic over the routes, so that the scrape has its usual families.
    paths = [
        "/healthz",
        "/readyz",
        "/nope",
        "/v1/openapi.json",
        "/v1/namespaces/acme/definitions",
        "/v1/namespaces/acme/definitions/flow/versions/1",
        "/v1/namespaces/acme/workflows",
        "/v1/namespaces/acme/workflows/w-1",
        "/v1/namespaces/acme/workflows/w-1/events",
        "/v1/namespaces/acme/workflows/w-1/pause",
        "/v1/namespaces/acme/workflows/w-1/resume",
        "/v1/namespaces/acme/workflows/w-1/cancel",
        "/v1/namespaces/acme/workflows/w-1/review",
        "/v1/namespaces/acme/workflows/w-1/signals",
        "/v1/namespaces/acme/workflows/w-1/signals/1",
        "/v1/namespaces/acme/queues/inventory/claim",
        "/v1/namespaces/acme/tasks/1/heartbeat",
        "/v1/namespaces/acme/tasks/1/complete",
    ]
    for path in paths:
        for method in ("GET", "POST"):
            for auth_headers in (headers, {}):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request(method, path, body=b"{}" if method in ("POST", "PUT") else None, headers=auth_headers)
                c.getresponse().read()
                c.close()
    where = metrics_port or port
    # queries per scrape, nothing else running
    before = questions(url)
    scrapes = 50
    size = 0
    for _ in range(scrapes):
        size = len(get(where, "/metrics")[1])
    after = questions(url)
    print(
        f"sequential scrapes: {scrapes}; per scrape {(after[0] - before[0] - 1) / scrapes:.2f} statements "
        f"({(after[1] - before[1] - 1) / scrapes:.2f} SELECTs), {size / 1000:.0f} KB"
    )
    # the other tenant's GET: alone, then beside the scrapers
    workflow = "/v1/namespaces/acme/workflows/w-1"
    for scrapers in (0, args.scrapers):
        stop = threading.Event()
        counts: list[int] = []
        threads = [
            threading.Thread(target=scraper, args=(where, stop, counts, "/metrics", args.pause), daemon=True)
            for _ in range(scrapers)
        ]
        for thread in threads:
            thread.start()
        q0 = questions(url)
        prober = Prober(port, workflow, pause=0.05, headers=headers)
        prober.start()
        time.sleep(args.seconds)
        prober.stop.set()
        prober.join(10)
        stop.set()
        for thread in threads:
            thread.join(30)
        q1 = questions(url)
        scrape_rate = len(counts) / args.seconds
        print(
            f"GET {workflow} beside {scrapers} scrapers ({scrape_rate:.0f} scrapes/s, "
            f"{q1[1] - q0[1]} SELECTs in {args.seconds} s): {summary(prober.results)}"
        )
    if metrics_port:
        print(f"/metrics on the API port: {get(port, '/metrics')[0]}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("trickle")
    p.add_argument("--connections", type=int, default=2100)
    p.add_argument("--seconds", type=int, default=40)
    p.add_argument("--no-reconnect", action="store_true")
    p = sub.add_parser("attacker")  # the trickle's clients: run by `trickle` in a process of their own
    p.add_argument("port", type=int)
    p.add_argument("connections", type=int)
    p.add_argument("seconds", type=float)
    p.add_argument("--no-reconnect", action="store_true")
    p = sub.add_parser("bodies")
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--body-bytes", type=int, default=2_000_000)
    p.add_argument("--seconds", type=int, default=20)
    p = sub.add_parser("scrape")
    p.add_argument("--scrapers", type=int, default=6)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--metrics-port", action="store_true")
    p.add_argument("--pause", type=float, default=0.0, help="seconds each scraper waits between scrapes")
    args, flags = parser.parse_known_args()
    raise_files()
    if args.command == "attacker":
        attacker(args.port, args.connections, args.seconds, 2.0, not args.no_reconnect)
    else:
        {"trickle": trickle, "bodies": bodies, "scrape": scrape}[args.command](args, flags)


if __name__ == "__main__":
    main()
