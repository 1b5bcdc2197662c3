"""`scripts/bench` stays runnable: every section on tiny sizes, Weave and each baseline included.

The benchmark reuses the SQL constants of the units it mirrors; this catches a baseline that no
longer matches them. Figures are not asserted: speed is measured by `scripts/bench`, not by tests.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from weave.devdb import ServerNotFound, find_server_binary

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load_bench():
    """scripts/ is not a package (the bench is development tooling, not installed): load it by path."""
    spec = importlib.util.spec_from_file_location("weave_bench_script", SCRIPTS / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def _server_binary() -> str | None:
    try:
        return find_server_binary()
    except ServerNotFound:
        return None


def test_the_bench_command_starts_and_describes_its_flags():
    shown = subprocess.run([SCRIPTS / "bench", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "usage: scripts/bench" in shown.stdout
    flags = ("--tasks", "--workflows", "--only", "--json", "--server-processes", "--validation-bytes")
    assert all(flag in shown.stdout for flag in flags)


# The bench measures its own database server's CPU, so it always starts a private one.
@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_every_bench_section_runs_on_tiny_sizes():
    with bench.running_weave(threads=4) as running:
        rows = (
            bench.bench_pulse(running, 10)
            + bench.bench_e2e(running, 3, workers=2)
            + bench.bench_signals(running, 16, repeat=1, instances=4)
            + bench.bench_latency(running, 3, idle_window=0.2)
            + bench.bench_consumption(running, 4, scanner_counts=(1, 2), clients=2)
        )
    rates = [row for row in rows if "ratio" in row]
    assert len(rates) == 2 + 1 + 6
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rates)
    assert all(row["floor"] > 0 for row in rates if row["label"].startswith("signals accepted"))
    latency, *consumption = rows[-3:]
    assert latency["label"] == "signal accepted -> consumed" and latency["max_ms"] >= latency["p50_ms"] >= 0
    assert [row["signals"] for row in consumption] == [4, 4]
    assert all(row["consumed_per_second"] > 0 and row["max_backlog"] <= 4 for row in consumption)


def test_the_validation_section_runs_on_tiny_sizes():
    """Every hostile schema is publishable (checked inside); each row checks the largest payload of
    the size, and the largest one its check finishes within the work budget."""
    rows = bench.bench_validation(size=2048, runs=1, stock_pattern_chars=10, stock_unique_objects=20, chain_depth=5)
    weave, stock = rows[:-2], rows[-2:]
    assert len(weave) == len(bench.validation_cases(5)) == 16
    assert all(0 < row["largest_checked_bytes"] <= row["bytes"] <= 2048 and row["weave_ms"] >= 0 for row in weave)
    assert all(row["largest_checked_outcome"] != "refused: budget" for row in weave)
    assert weave[0]["outcome"] == "1 error(s)" and weave[2]["outcome"].endswith(" error(s)")  # really refused
    assert all(row["stock_ms"] > 0 and row["label"].startswith("stock jsonschema") for row in stock)


def _postgres_binaries():
    try:
        return bench.postgres_binaries()
    except bench.PeerUnavailable:
        return None


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
@pytest.mark.skipif(_postgres_binaries() is None, reason="the DBOS peer needs PostgreSQL's initdb and postgres")
def test_the_dbos_peer_runs_on_tiny_sizes():
    """The first run on a clean checkout also makes the peer's venv (.bench/dbos-venv, from PyPI)."""
    with bench.running_weave(threads=4) as running:
        (row,) = bench.bench_peer(running, 20, repeat=1, clients=2, instances=4)
    assert row["weave"] > 0 and row["baseline"] > 0 and row["peer"] == f"dbos=={bench.DBOS_VERSION}"
    assert all(value >= 0 for split in row["cpu_ms_per_signal"].values() for value in split)


def test_the_dbos_peer_is_skipped_with_a_message_without_postgres(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(bench, "POSTGRES_SEARCH_PATH", "/nonexistent/postgresql/*/bin")
    assert bench.bench_peer(None, 20, repeat=1) == []
    assert "DBOS peer skipped: PostgreSQL server binaries" in capsys.readouterr().out
