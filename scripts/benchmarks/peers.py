"""The `peer` section: Weave's signal acceptance beside DBOS Transact's `send` (issue 17, target 3),
on a private PostgreSQL; the DBOS side runs scripts/benchmarks/dbos_driver.py in a venv of its own."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks.harness import (
    ROOT,
    Bench,
    Http,
    alternate,
    cpu_seconds,
    pair_row,
    stat_fields,
    with_workers,
)
from benchmarks.workload import SIGNAL_DEFINITION, http_sender, signal_run
from weave.devdb import free_port
from weave.processes import die_with_parent

DBOS_VERSION = "3.4.0"  # pinned so that runs compare; the peer's own venv, never Weave's
DBOS_VENV = ROOT / ".bench" / "dbos-venv"
DBOS_DRIVER = Path(__file__).with_name("dbos_driver.py")
POSTGRES_SEARCH_PATH = "/usr/lib/postgresql/*/bin"
POSTGRES_HINT = (
    "PostgreSQL server binaries (initdb, postgres) were not found on PATH or in "
    f"{POSTGRES_SEARCH_PATH}; install them, e.g. on Debian/Ubuntu: `sudo apt-get install postgresql`"
)
POSTGRES_ACCOUNTS = ("postgres", "nobody")  # PostgreSQL refuses to run as root
POSTGRES_START_SECONDS = 60


class PeerUnavailable(RuntimeError):
    """The peer cannot run on this machine: the message says what to install."""


def postgres_binaries() -> Path:
    """The folder holding `initdb` and `postgres`: PATH first, then the newest Debian version."""
    versions = sorted(Path("/").glob(POSTGRES_SEARCH_PATH.lstrip("/")), key=_version, reverse=True)
    search_path = os.pathsep.join([os.environ.get("PATH", ""), *map(str, versions)])
    found = shutil.which("initdb", path=search_path)
    if found is None:
        raise PeerUnavailable(POSTGRES_HINT)
    folder = Path(found).resolve().parent  # /usr/local/bin/initdb may link into the version's folder
    if not (folder / "postgres").exists():
        raise PeerUnavailable(POSTGRES_HINT)
    return folder


def _version(binaries: Path) -> list[int]:
    return [int(part) for part in binaries.parent.name.split(".") if part.isdigit()]


def dbos_python() -> Path:
    """The python of the peer's venv, with `dbos==DBOS_VERSION`: made on first use, then reused."""
    python, stamp = DBOS_VENV / "bin" / "python", DBOS_VENV / f".dbos-{DBOS_VERSION}"
    if not stamp.exists():
        print(f"making {DBOS_VENV.relative_to(ROOT)} with dbos=={DBOS_VERSION} (once)", flush=True)
        for command in (
            [sys.executable, "-m", "venv", str(DBOS_VENV)],
            [str(python), "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}"],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise PeerUnavailable(f"`{' '.join(command)}` failed ({last}); needs python3-venv and PyPI")
        stamp.touch()
    return python


@dataclass
class Postgres:
    url: str  # postgresql://postgres@127.0.0.1:port/…, the peer's system database
    pid: int  # the postmaster


@contextmanager
def private_postgres(folder: Path, binaries: Path):
    """A PostgreSQL of our own in `folder` (its socket there too) on 127.0.0.1 and a free port, with
    durable commits (fsync, synchronous_commit: the defaults, said aloud), and trust for local
    clients. As root it runs as `postgres` (or `nobody`), which then owns `folder`."""
    account = None
    if os.geteuid() == 0:
        account = next((name for name in POSTGRES_ACCOUNTS if _has_account(name)), None)
        if account is None:
            raise PeerUnavailable("PostgreSQL cannot run as root and no 'postgres' or 'nobody' account exists")
        owner = pwd.getpwnam(account)
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data, log = folder / "data", folder / "postgres.log"
    # --no-sync: initdb's own final flush only; the server below commits durably.
    initdb = [binaries / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
    done = subprocess.run(initdb, cwd=folder, user=account, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
    port = free_port()
    settings = {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(folder),
        "fsync": "on",
        "synchronous_commit": "on",
        "shared_buffers": "256MB",  # the private MariaDB's buffer pool
        "logging_collector": "off",
    }
    with log.open("w") as log_file:
        server = subprocess.Popen(
            [binaries / "postgres", "-D", data, "-p", str(port), *(f"-c{k}={v}" for k, v in settings.items())],
            cwd=folder,
            user=account,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        _wait_postgres_ready(server, data, log)
        yield Postgres(f"postgresql://postgres@127.0.0.1:{port}/weave_bench_dbos", server.pid)
    finally:
        server.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM would wait for clients to leave
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _has_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _wait_postgres_ready(server: subprocess.Popen, data: Path, log: Path) -> None:
    """postmaster.pid's last line reads `ready` once the server accepts connections."""
    deadline = time.monotonic() + POSTGRES_START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with {server.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if (data / "postmaster.pid").read_text().split("\n")[7].strip() == "ready":
                return
        except (FileNotFoundError, IndexError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"PostgreSQL did not start within {POSTGRES_START_SECONDS}s:\n{log.read_text(errors='replace')}")


def _postgres_cpu_seconds(postmaster: int) -> float:
    """CPU seconds of PostgreSQL so far: the postmaster with the children it has reaped (its cutime
    and cstime), plus its live children (backends, background workers)."""
    fields = stat_fields(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    for child in with_workers(postmaster)[1:]:
        try:
            total += cpu_seconds(child)
        except FileNotFoundError:  # ended between the listing and the reading
            pass
    return total


def dbos_run(postgres: Postgres, python: Path, threads: int, per_thread: int, destinations: int, run: str) -> tuple:
    """One timed run of the DBOS driver (dbos_driver.py): (sends per second, latencies in
    seconds, [CPU ms per send of the driver, PostgreSQL])."""
    command = [python, DBOS_DRIVER, "--url", postgres.url, "--run", run, "--threads", str(threads)]
    command += ["--sends", str(threads * per_thread), "--destinations", str(destinations)]
    driver = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if driver.stdout.readline().strip() != "ready":
            raise RuntimeError("the DBOS driver stopped before its timed sends (its errors are above)")
        before = _postgres_cpu_seconds(postgres.pid)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        line = driver.stdout.readline()
        after = _postgres_cpu_seconds(postgres.pid)
        if not line:
            raise RuntimeError("the DBOS driver stopped during its timed sends (its errors are above)")
    finally:
        driver.stdin.close()  # the driver exits when its stdin closes
        driver.wait(60)
    timed = json.loads(line)
    sends = len(timed["latencies"])
    cpu = [timed["cpu_seconds"] * 1000 / sends, (after - before) * 1000 / sends]
    return sends / timed["seconds"], timed["latencies"], cpu


def run(bench: Bench, per_run: int, repeat: int, clients: int = 8, instances: int = 200) -> list[dict]:
    """Weave's signal acceptance beside DBOS Transact's `send`: `clients` HTTP clients sending signals
    over `instances` instances (as in the signals section), alternating `repeat` times with the DBOS driver
    sending as many messages from as many threads over as many destination workflows, on a private
    PostgreSQL. DBOS's `send` is a library call: no HTTP, no authentication, no validation. Skipped
    with one line saying what to install where PostgreSQL or the peer's venv is missing."""
    try:
        binaries = postgres_binaries()
        python = dbos_python()
    except PeerUnavailable as missing:
        print(f"DBOS peer skipped: {missing}", flush=True)
        return []
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)  # 200 once published
    per_client = max(1, per_run // clients)
    runs = (f"peer{n}" for n in itertools.count())
    with (
        tempfile.TemporaryDirectory(prefix="weave-bench-pg-") as folder,
        private_postgres(Path(folder), binaries) as postgres,
    ):
        measured = alternate(
            {
                "weave": partial(signal_run, bench, http_sender, instances, clients, per_client),
                "dbos": partial(dbos_run, postgres, python, clients, per_client, instances),
            },
            repeat,
            runs,
        )
    row, _ = pair_row(
        f"signals vs DBOS send, {instances} instances, {clients} clients",
        measured,
        "dbos",
        {"weave": "weave", "dbos": "dbos"},
        {"weave": "server, load, db", "dbos": "driver, postgres"},
    )
    row["peer"] = f"dbos=={DBOS_VERSION}"
    return [row]
