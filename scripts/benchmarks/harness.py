"""What every section shares: the system under test (a private database server with the bench's
tenant, `weave serve` of this checkout and of a revision to compare with), a lean HTTP client, timed
threads, the CPU and RSS read from /proc, and the printed line of a figure beside its baseline."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from weave import auth, migrate
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.devdb import PrivateServer, free_port
from weave.processes import die_with_parent
from weave.sql import tenancy

NS = "bench"
QUEUE = "work"
PERMITS = 64


# ---- the system under test --------------------------------------------------------------------------


@dataclass
class Bench:
    url: DatabaseUrl
    database: Database
    base: str  # http://127.0.0.1:port
    client_token: str
    worker_token: str
    namespace_id: int
    server_pid: int
    database_pid: int
    label: str = "weave"  # what the figures of this server are printed as
    reference: "Bench | None" = None  # `--against REF`: REF's `weave serve`, on the same database


ROOT = Path(__file__).resolve().parents[2]  # the checkout


@contextmanager
def running_weave(threads: int, processes: int = 1, against: str | None = None):
    """A private database server with the bench's tenant, this checkout's `weave serve`, and with
    `against` a second `weave serve` of that git revision on the same database (`Bench.reference`)."""
    with (
        tempfile.TemporaryDirectory(prefix="weave-bench-") as folder,
        PrivateServer(Path(folder)) as server,
        ExitStack() as stack,
    ):
        url = DatabaseUrl.parse(server.url("weave_bench"))
        database, client_token, worker_token, namespace_id = prepared(url)
        stack.callback(database.close)
        env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
        base, pid = stack.enter_context(serving(env, threads, processes))
        bench = Bench(url, database, base, client_token, worker_token, namespace_id, pid, server.process.pid)
        if against:
            tree = stack.enter_context(revision_tree(against))
            reference_env = {**env, "PYTHONPATH": str(tree)}
            require_imported_from(tree, reference_env)
            base, pid = stack.enter_context(serving(reference_env, threads, processes))
            bench.reference = replace(bench, base=base, server_pid=pid, label=against)
        yield bench


def prepared(url: DatabaseUrl) -> tuple[Database, str, str, int]:
    """The bench's database at `url`, migrated, with its tenant: (the database, the client's token,
    the worker's token, the namespace's id)."""
    migrate.ensure_database(url)
    migrate.apply(url)
    database = Database(url)
    tenancy.create_namespace(database, NS)
    tenancy.create_queue(database, NS, QUEUE, PERMITS)
    tenancy.create_application(database, NS, "app", None)
    client_token, worker_token = auth.new_token(), auth.new_token()
    client_scopes = sorted(auth.SCOPES - {"tasks:work"})
    tenancy.create_credential(
        database, NS, "app", "bench-client", client_scopes, [QUEUE], auth.token_hash(client_token), None
    )
    tenancy.create_credential(
        database, NS, "app", "bench-worker", ["tasks:work"], [QUEUE], auth.token_hash(worker_token), None
    )
    namespace_id = tenancy.authenticate(database, auth.token_hash(client_token)).namespace_id
    return database, client_token, worker_token, namespace_id


# `-P`: without it, `-m` puts the working directory first on sys.path, ahead of PYTHONPATH, and a
# bench run from a checkout would serve that checkout's code as `--against`'s revision too.
WEAVE_CLI = (sys.executable, "-P", "-m", "weave.cli")


def weave_command(env: dict, *args: str, log=subprocess.DEVNULL) -> subprocess.Popen:
    """A `weave` command (`serve`, `scan`) of the Weave that `env` imports; its log goes to `log`
    (an open file; by default nowhere), and it ends with the bench."""
    return subprocess.Popen([*WEAVE_CLI, *args], env=env, stderr=log, preexec_fn=die_with_parent)


def require_imported_from(tree: Path, env: dict) -> None:
    """Refuse to compare unless a `weave serve` started with `env` runs the code in `tree`."""
    found = subprocess.run(
        [sys.executable, "-P", "-c", "import weave.cli, weave.sql; print(weave.cli.__file__, weave.sql.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not all(Path(path).is_relative_to(tree) for path in found):
        raise RuntimeError(f"the reference would run {found}, not the revision in {tree}")


@contextmanager
def serving(env: dict, threads: int, processes: int):
    """`weave serve` (the Weave that `env` imports) on a free port: (base URL, pid). Logs go nowhere."""
    port = free_port()
    serve = weave_command(env, "serve", "--port", str(port), "--threads", str(threads), "--processes", str(processes))
    try:
        wait_http(port)
        yield f"http://127.0.0.1:{port}", serve.pid
    finally:
        serve.terminate()
        serve.wait(10)


@contextmanager
def revision_tree(ref: str):
    """The Weave of git revision `ref`, laid out as installed (its top-level sql/ and migrations/ as
    weave/sql and weave/migrations), in a temporary folder to put first on PYTHONPATH. It runs on
    this run's database, migrated by this checkout: `ref` must need no migration this one lacks."""
    with tempfile.TemporaryDirectory(prefix="weave-ref-") as folder:
        archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        tree = Path(folder)
        for name in ("sql", "migrations"):
            (tree / name).rename(tree / "weave" / name)
        yield tree


def wait_http(port: int) -> None:
    """Until a server on `port` answers GET /healthz with 200 (30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("weave serve did not answer")


class Http:
    """One keep-alive HTTP/1.1 connection, like a real client or worker.

    Deliberately lean (a socket, a prebuilt header block, Content-Length framing): the load
    generator shares the machine's cores with the system under test, and `http.client` spends more
    CPU per request (its header parsing goes through `email.parser`) than the server's framework.
    """

    def __init__(self, bench: Bench, token: str):
        host, port = bench.base.split("//")[1].rsplit(":", 1)
        self.address = (host, int(port))
        self.sock = self._connect()
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._unread = b""
        self.reconnects = 0  # connections the server closed with `Connection: close`, opened again

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def post(self, path: str, body: dict) -> tuple[int, dict | None]:
        return self._request("POST", path, json.dumps(body).encode())

    def get(self, path: str) -> dict:
        return self._request("GET", path, b"")[1]

    def _request(self, method: str, path: str, body: bytes) -> tuple[int, dict | None]:
        if self.sock is None:  # the server closed it after the last answer, as a real client reconnects
            self.sock, self.reconnects = self._connect(), self.reconnects + 1
        head = "".join(f"{name}: {value}\r\n" for name, value in self.headers.items())
        self.sock.sendall(
            f"{method} /v1/namespaces/{NS}{path} HTTP/1.1\r\nHost: bench\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        while b"\r\n\r\n" not in self._unread:
            self._unread += self._receive()
        head_bytes, _, rest = self._unread.partition(b"\r\n\r\n")
        lines = head_bytes.split(b"\r\n")
        status, length, closing = int(lines[0].split()[1]), 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                closing = value.strip().lower() == b"close"
        while len(rest) < length:
            rest += self._receive()
        data, self._unread = rest[:length], rest[length:]
        if closing:
            self.sock.close()
            self.sock, self._unread = None, b""
        return status, (json.loads(data) if data else None)

    def _receive(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk


# ---- measuring --------------------------------------------------------------------------------------


def run_threads(count: int, target, prepare=None, at_start=None) -> float:
    """Run `target(i)` in `count` threads; seconds from the common start to the last finish.

    `prepare(i)` (connecting, warming up) runs in each thread before the common start, untimed;
    `at_start()` runs once at the common start (to read counters).
    """
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def body(i):
        try:
            if prepare is not None:
                prepare(i)
        except BaseException as exc:  # reported after the run; this thread sits the run out
            errors.append(exc)
            barrier.wait()
            return
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    if at_start is not None:
        at_start()
    started = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def report(
    label: str,
    weave_rate: float,
    baseline_rate: float,
    unit: str,
    extra: str = "",
    ratio: float | None = None,
    baseline_name: str = "baseline",
) -> dict:
    if ratio is None:
        ratio = weave_rate / baseline_rate if baseline_rate else float("nan")
    print(
        f"{label:<44} weave {weave_rate:8.1f} {unit}   {baseline_name} {baseline_rate:8.1f} {unit}   "
        f"ratio {ratio:4.2f}{extra}",
        flush=True,
    )
    return {
        "label": label,
        "weave": round(weave_rate, 1),
        "baseline": round(baseline_rate, 1),
        "ratio": round(ratio, 3),
        "unit": unit,
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def alternate(contenders: dict[str, Callable[[str], tuple]], repeat: int, runs: Iterator[str]) -> tuple:
    """Run each contender `repeat` times, in alternation, each first in every other pair (a pair
    shares the machine's conditions of the moment); each call gets the next label of `runs` and
    answers (rate, latencies, CPU split). Per contender: (its rates, all its latencies, its splits)."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    latencies: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[list[float]]] = {name: [] for name in contenders}
    names = list(contenders)
    for pair in range(repeat):
        for name in names[:: 1 if pair % 2 == 0 else -1]:
            rate, times, split = contenders[name](next(runs))
            rates[name].append(rate)
            latencies[name] += times
            cpu[name].append(split)
    return rates, latencies, cpu


def summary(rates: dict, latencies: dict, cpu: dict, first: str, second: str) -> tuple:
    """(the ratios first/second of each pair, p50 and p99 in ms and the mean CPU split per contender)."""
    ratios = [a / b for a, b in zip(rates[first], rates[second])]
    tails = {name: (percentile(times, 50) * 1000, percentile(times, 99) * 1000) for name, times in latencies.items()}
    mean_cpu = {name: [sum(column) / len(column) for column in zip(*splits)] for name, splits in cpu.items()}
    return ratios, tails, mean_cpu


def tails_text(tails: dict, shown: dict[str, str]) -> str:
    """The printed p50/p99 of `summary`'s tails: each contender under the name it is shown as."""
    return "   p50/p99 ms " + " ".join(
        f"{label} {tails[name][0]:.1f}/{tails[name][1]:.1f}" for name, label in shown.items()
    )


def report_pairs(label: str, rates: dict, ratios: list[float], second: str, extra: str, baseline_name: str) -> dict:
    """`report` of signals accepted by "weave" and by `second` in alternating pairs (`alternate`):
    the median rates, and the median of the pairs' ratios."""
    return report(
        label,
        median(rates["weave"]),
        median(rates[second]),
        "sig/s",
        extra,
        ratio=median(ratios),
        baseline_name=baseline_name,
    )


def with_workers(pid: int) -> list[int]:
    """`pid` and its child processes (the workers of `weave serve --processes N`)."""
    return [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]


def pair_row(label: str, measured: tuple, second: str, shown: dict[str, str], parts: dict[str, str], note: str = ""):
    """`report_pairs` of "weave" beside `second` from `alternate`'s (rates, latencies, CPU splits),
    printed with each contender's p50/p99 and mean CPU split under the name `shown` gives it (the
    parts of its split named by `parts`), the run ratios and `note`. (The row, with `run_ratios`,
    Weave's `p50_ms` and `p99_ms`, the second's `{second}_p50_ms` and `{second}_p99_ms`, and
    `cpu_ms_per_signal`; the mean CPU splits by contender.)"""
    rates, latencies, cpu = measured
    ratios, tails, mean_cpu = summary(rates, latencies, cpu, "weave", second)
    extra = (
        tails_text(tails, shown)
        + "   CPU ms/signal "
        + " ".join(
            f"{shown[name]} ({parts[name]}) {', '.join(f'{value:.2f}' for value in mean_cpu[name])}" for name in shown
        )
        + (f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}" if len(ratios) > 1 else "")
        + note
    )
    row = report_pairs(label, rates, ratios, second, extra, shown[second])
    row["run_ratios"] = [round(r, 3) for r in ratios]
    for name, prefix in (("weave", ""), (second, f"{second}_")):
        row[f"{prefix}p50_ms"], row[f"{prefix}p99_ms"] = round(tails[name][0], 1), round(tails[name][1], 1)
    row["cpu_ms_per_signal"] = {name: [round(v, 2) for v in split] for name, split in mean_cpu.items()}
    return row, mean_cpu


def rss_kib(pid: int) -> int:
    total = 0
    for each in with_workers(pid):
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def cpu_split(bench: Bench) -> tuple[float, float, float]:
    """CPU seconds used so far by the API server (all its processes), this load generator and the
    database server."""
    usage = os.times()
    server = sum(cpu_seconds(pid) for pid in with_workers(bench.server_pid))
    return server, usage.user + usage.system, cpu_seconds(bench.database_pid)


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (field 3 on): [11], [12] user and system CPU ticks,
    [13], [14] those of its children it has waited for."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def scanners(bench: Bench, count: int, logs: list | None = None) -> list[subprocess.Popen]:
    """`count` `weave scan` processes; with `logs` (open files, one per process), their logs."""
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.url()}
    return [weave_command(env, "scan", log=logs[i] if logs else subprocess.DEVNULL) for i in range(count)]


def stop_scanners(running: list[subprocess.Popen], logs: list) -> tuple[int, int]:
    """Stop the `scanners` started with `logs`, then close their logs: (skipped, all) claims of
    theirs (`wasted_claims`)."""
    for scanner in running:
        scanner.terminate()
    for scanner in running:
        scanner.wait(10)
    claims = wasted_claims(logs)
    for log in logs:
        log.close()
    return claims


def wasted_claims(logs: list) -> tuple[int, int]:
    """(skipped, all) claims of the scanner batches logged in `logs` (files written by `scanners`):
    a skipped claim found its candidate held by another scanner, or already done."""
    skipped = claimed = 0
    for log in logs:
        log.seek(0)
        for line in log.read().decode().splitlines():
            if '"scan_batch"' in line:
                batch = json.loads(line[line.index("{") :])
                skipped += batch["skipped"]
                claimed += batch["done"] + batch["skipped"] + batch["failed"] + sum(batch["leases"].values())
    return skipped, claimed


def count_of(bench: Bench, sql: str, *params) -> int:
    return bench.database.read(lambda tx: tx.one(sql, params))["n"]


def load_averages() -> str:
    """The load averages (1, 5, 15 minutes): validation figures are single-threaded CPU time."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
