"""`scripts/bench` stays runnable: every section on tiny sizes, Weave and each baseline included.

The benchmark reuses the SQL constants of the units it mirrors; this catches a baseline that no
longer matches them. Figures are not asserted: speed is measured by `scripts/bench`, not by tests.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from weave.devdb import ServerNotFound, find_server_binary

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# scripts/ is not a package (the bench is development tooling, not installed): its benchmarks are
# imported with scripts/ on the path, as scripts/bench runs them.
sys.path.insert(0, str(SCRIPTS))
from benchmarks import (  # noqa: E402
    batches,
    consumption,
    drivers,
    e2e,
    flat,
    harness,
    hostile,
    latency,
    peers,
    pulse,
    purge,
    routing,
    scale,
    sdk,
    signals,
    stack,
    validation,
)


def _server_binary() -> str | None:
    try:
        return find_server_binary()
    except ServerNotFound:
        return None


def test_the_bench_command_starts_and_describes_its_flags():
    shown = subprocess.run([SCRIPTS / "bench", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "usage: scripts/bench" in shown.stdout
    flags = (
        "--tasks",
        "--workflows",
        "--only",
        "--json",
        "--server-processes",
        "--validation-bytes",
        "--hostile-repeat",
        "--latency-hanging",
        "--flat-signals",
        "--e2e-scanners",
        "--e2e-signal",
        "--consumption-scanners",
    )
    assert all(flag in shown.stdout for flag in flags)


# The bench measures its own database server's CPU, so it always starts a private one.
@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_N2_the_latency_section_runs_beside_a_hanging_endpoint_on_tiny_sizes():
    with harness.running_weave(threads=4) as running:
        plain, hung, ratio = latency.run_beside_hanging(running, 3, idle_window=0.2, notifications=40)
    assert hung["label"] == "signal accepted -> consumed beside a hanging endpoint"
    assert plain["p99_ms"] >= 0 and hung["p99_ms"] >= 0 and ratio["p99_ratio"] >= 0


def test_every_bench_section_runs_on_tiny_sizes():
    with harness.running_weave(threads=4) as running:
        rows = (
            pulse.run(running, 10)
            + e2e.run(running, 3, workers=2)
            + signals.run(running, 16, repeat=1, instances=4)
            + latency.run(running, 3, idle_window=0.2)
            + consumption.run(running, 4, scanner_counts=(1, 2), clients=2)
        )
    rates = [row for row in rows if "ratio" in row]
    assert len(rates) == 2 + 1 + 6
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rates)
    signal_rows = [row for row in rates if row["label"].startswith("signals accepted")]
    assert all(row["floor"] > 0 and row["spec_floor"] > 0 for row in signal_rows)
    waited, *consumed = rows[-3:]
    assert waited["label"] == "signal accepted -> consumed" and waited["max_ms"] >= waited["p50_ms"] >= 0
    assert [row["signals"] for row in consumed] == [4, 4]
    assert all(row["consumed_per_second"] > 0 and row["max_backlog"] <= 4 for row in consumed)
    assert all(0 <= row["wasted_claims"] <= 1 for row in consumed)  # read from the scanners' batch lines


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_the_stack_floor_and_the_e2e_signal_shape_run_on_tiny_sizes():
    """Issue 31 targets 3 and 5: single signals beside the HTTP stack floor (rate and API CPU rows
    at each client count; the floor stores nothing), and TASK -> SIGNAL -> TASK workflows end to end with 2 API processes
    and 3 scanners, every workflow SUCCEEDED with its signal consumed, wasted claims read."""
    with harness.running_weave(threads=4, processes=2) as running:
        rows = stack.run(running, 8, repeat=1, threads=4, processes=2, client_counts=(1, 2))
        rows += e2e.run(running, 4, workers=2, scanner_count=3, signal=True)
        stored = running.database.read(
            lambda tx: tx.one(
                "SELECT COUNT(*) AS n, SUM(i.status = 'SUCCEEDED') AS done,"
                " (SELECT COUNT(*) FROM signals s JOIN instances w ON w.id = s.instance_id"
                "  WHERE w.workflow_id LIKE 'e2e-%%' AND s.status = 'CONSUMED') AS consumed"
                " FROM instances i WHERE i.workflow_id LIKE 'e2e-%%'"
            )
        )
    assert [row["label"] for row in rows] == [
        "single signals vs the HTTP stack floor, 1 clients",
        "API CPU per signal, weave vs stack floor, 1 clients",
        "single signals vs the HTTP stack floor, 2 clients",
        "API CPU per signal, weave vs stack floor, 2 clients",
        "TASK -> SIGNAL -> TASK workflows end to end, 2 workers, 3 scanner(s)",
    ]
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rows if row["unit"] != "us/sig")
    assert 0 <= rows[-1]["wasted_claims"] <= 1
    assert (stored["n"], stored["done"], stored["consumed"]) == (4, 4, 4)


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_the_flat_section_runs_on_tiny_sizes():
    """Issue 31 target 6's section: batches at 2,000 stored signals (loaded server-side) beside 200
    in a second database; every batched signal stored PENDING on its instance."""
    with harness.running_weave(threads=4, processes=1) as running:
        rows = flat.run(running, 2000, 20, base=200, repeat=1, clients=2, size=5, threads=4, processes=1)
        stored = running.database.read(
            lambda tx: tx.one(
                "SELECT COUNT(*) AS n FROM signals s JOIN instances i ON i.id = s.instance_id"
                " WHERE i.workflow_id LIKE 'sflat%%' AND s.status = 'PENDING'"
            )
        )
    (row,) = rows
    assert row["label"] == "flat: batches of 5, 2 clients, 2,000 stored"
    assert row["weave"] > 0 and row["baseline"] > 0 and row["stored"] == 2000 and row["baseline_stored"] == 200
    # 2 clients x 1 batch of 5 over 10 instances in the large database (the base one is another).
    assert stored["n"] == 10


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_B1_the_routing_section_runs_on_tiny_sizes():
    """Issue 29's bench row: facts routed by key to open waits (each ROUTED, checked inside) beside
    the same facts addressed by workflow id, in alternating pairs; both kinds stored as signals of
    the waiting workflows, none refused (the next run's scanner consumes the previous run's)."""
    with harness.running_weave(threads=4, processes=1) as running:
        rows = routing.run(running, 4, repeat=2, client_counts=(1, 2))
        stored = running.database.read(
            lambda tx: tx.all(
                "SELECT LEFT(i.workflow_id, 1) AS kind, COUNT(*) AS n FROM signals s JOIN instances i"
                " ON i.id = s.instance_id WHERE s.status IN ('PENDING', 'CONSUMED') GROUP BY kind ORDER BY kind"
            )
        )
    assert [row["label"] for row in rows] == [
        "signals routed by key, 1 client(s)",
        "signals routed by key, 2 client(s)",
    ]
    assert all(row["weave"] > 0 and row["baseline"] > 0 and row["ratio"] > 0 for row in rows)
    assert all(len(row["run_ratios"]) == 2 for row in rows)
    # 2 pairs x (4 facts at 1 client + 4 at 2 clients) of each kind, every one in its workflow.
    assert [(row["kind"], row["n"]) for row in stored] == [("a", 16), ("r", 16)]


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_B8_the_batches_and_sdk_sections_run_on_tiny_sizes():
    """Issue 31's rows: batches beside single signals (rate, database and API CPU per signal) and
    beside DBOS `send` where PostgreSQL is found; the SDK kept alive beside a connection per call.
    Every signal sent is stored once, PENDING on its instance."""
    with harness.running_weave(threads=4, processes=1) as running:
        rows = batches.run(running, 30, repeat=1, clients=2, size=5)
        rows += sdk.run(running, 6, repeat=1, instances=2)
        stored = running.database.read(
            lambda tx: tx.all(
                "SELECT LEFT(i.workflow_id, 2) AS run, COUNT(*) AS n FROM signals s JOIN instances i"
                " ON i.id = s.instance_id WHERE s.status = 'PENDING' GROUP BY run ORDER BY run"
            )
        )
    labels = [row["label"] for row in rows]
    with_dbos = ["batches of 5 vs DBOS send, 2 clients"] if _postgres_binaries() is not None else []
    assert labels == [
        "batches of 5 vs single signals, 2 clients",
        "database CPU per signal, batches vs singles",
        "API CPU per signal, batches vs singles",
        *with_dbos,
        "SDK send_signal kept alive vs a connection per call, 1 thread",
    ]
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rows if row["unit"] == "sig/s")
    # Per run: 2 clients x 3 batches of 5 over 10 instances, plus 2 x 10 warm-up signals to one
    # more; the SDK's: 6 over 2, plus 10 warm-up; instances `s{run}-i` and `warm{run}-0`.
    assert [(row["run"], row["n"]) for row in stored] == [("sb", 60), ("ss", 12), ("wa", 60)]


def test_the_validation_section_runs_on_tiny_sizes():
    """Every hostile schema is publishable (checked inside); each row checks the largest payload of
    the size, and the largest one its check finishes within the work budget."""
    rows = validation.run(size=2048, runs=1, stock_pattern_chars=10, stock_unique_objects=20, chain_depth=5)
    weave, stock = rows[:-2], rows[-2:]
    assert len(weave) == len(validation.validation_cases(5)) == 16
    assert all(0 < row["largest_checked_bytes"] <= row["bytes"] <= 2048 and row["weave_ms"] >= 0 for row in weave)
    assert all(row["largest_checked_outcome"] != "refused: budget" for row in weave)
    assert weave[0]["outcome"] == "1 error(s)" and weave[2]["outcome"].endswith(" error(s)")  # really refused
    assert all(row["stock_ms"] > 0 and row["label"].startswith("stock jsonschema") for row in stock)


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_the_hostile_section_runs_on_tiny_sizes():
    """Issue 26's worst inputs over HTTP, twice each: refused at publish where the limits say so,
    and every figure read (CPU per request, RSS before, after the first and after the last)."""
    with harness.running_weave(threads=4, processes=1) as running:
        baseline, *rows = hostile.run(running, 2)
    assert baseline["status"] == 200 and baseline["cpu_ms_per_request"] >= 0
    answers = {row["label"].split(": ", 1)[1]: (row["status"], row["code"]) for row in rows}
    assert list(answers.values()) == [
        (422, "VALIDATION_FAILED"),  # item 2: $defs 90 deep
        (422, "CONTRACT_MISMATCH"),  # item 2: the payload, against the schema stored before the limits
        (422, "VALIDATION_FAILED"),  # item 3: 55,000 subschemas
        (422, "VALIDATION_FAILED"),  # item 3: 300 large patterns
        (201, None),  # item 3: the costliest definition within the budget
        (201, None),  # item 3: a 1 MB definition
        (201, None),  # item 3: its workflow started
        (200, None),  # item 3: and read
        (422, "VALIDATION_FAILED"),  # item 4: 150 nested not
        (200, None),  # item 1: the console page
    ]
    assert all(row["rss_before_kib"] > 0 and row["rss_after_all_kib"] > 0 and row["repeat"] == 2 for row in rows)


def _postgres_binaries():
    try:
        return peers.postgres_binaries()
    except peers.PeerUnavailable:
        return None


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
@pytest.mark.skipif(_postgres_binaries() is None, reason="the DBOS peer needs PostgreSQL's initdb and postgres")
def test_the_dbos_peer_runs_on_tiny_sizes():
    """The first run on a clean checkout also makes the peer's venv (.bench/dbos-venv, from PyPI)."""
    with harness.running_weave(threads=4) as running:
        (row,) = peers.run(running, 20, repeat=1, clients=2, instances=4)
    assert row["weave"] > 0 and row["baseline"] > 0 and row["peer"] == f"dbos=={peers.DBOS_VERSION}"
    assert all(value >= 0 for split in row["cpu_ms_per_signal"].values() for value in split)


def test_the_dbos_peer_is_skipped_with_a_message_without_postgres(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(peers, "POSTGRES_SEARCH_PATH", "/nonexistent/postgresql/*/bin")
    assert peers.run(None, 20, repeat=1) == []
    assert "DBOS peer skipped: PostgreSQL server binaries" in capsys.readouterr().out


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_the_scale_section_runs_on_tiny_sizes():
    """Target 4's section: 2,000 stored signals (as Weave writes them) against 200 in a second
    database on the same server, then the hot instance."""
    with harness.running_weave(threads=4, processes=1) as running:
        # 24 consumptions: CPU is read in 10 ms clock ticks, and 4 (about 8 ms of the database's) could read 0.
        rows = scale.run(
            running, 2000, base=200, per_run=16, repeat=1, consumed=24, hot_instances=1, threads=4, processes=1
        )
        stored = running.database.read(
            lambda tx: tx.one(
                "SELECT COUNT(*) AS n, SUM(s.status = 'PENDING') AS pending,"
                " (SELECT COUNT(*) FROM events e WHERE e.type = 'SIGNAL_ACCEPTED') AS events,"
                " (SELECT COUNT(*) FROM audit_records a WHERE a.action = 'signal.send' AND a.signal_id IS NOT NULL)"
                " AS audit FROM signals s JOIN instances i ON i.id = s.instance_id WHERE i.workflow_id LIKE 'load.%%'"
            )
        )
        texts = running.database.read(
            lambda tx: tx.one(
                "SELECT s.receipt, e.data, a.details FROM signals s"
                " JOIN events e ON e.instance_id = s.instance_id AND e.type = 'SIGNAL_ACCEPTED'"
                " JOIN audit_records a ON a.signal_id = s.id WHERE s.idempotency_key = 'load-7' LIMIT 1"
            )
        )
        # Loaded signals read back over HTTP like accepted ones: a settled instance's are settled.
        loaded = harness.Http(running, running.client_token).get("/workflows/load.0-1/signals?limit=100")
    assert stored["n"] == 2000 and stored["pending"] == 200  # every 10th instance runs: its signals are early
    assert stored["events"] >= 2000 and stored["audit"] >= 2000
    stored_rows, hot = rows[:4], rows[4:]
    assert [row["stored"] for row in stored_rows] == [2000] * 4
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rows)
    assert [row["label"] for row in hot] == [
        "scale: one hot instance, 1 client(s), 1,000 -> 1,024 stored",
        "scale: one hot instance, 8 client(s), 1,000 -> 1,024 stored",
    ]
    assert json.loads('{"signal_id":"1",' + texts["receipt"])["idempotency_key"] == "load-7"
    assert json.loads(texts["data"])["name"] == json.loads(texts["details"])["name"] == "payment.settled"
    assert {row["status"] for row in loaded["signals"]} == {"CONSUMED", "REJECTED", "EXPIRED"}


def test_against_serves_the_revision_s_code_not_this_checkout_s(monkeypatch):
    """`--against REF` compares two servers: the reference must import REF's weave, even when the
    bench runs from the checkout's folder (where `python -m` would find the checkout first)."""
    monkeypatch.chdir(SCRIPTS.parent)
    with harness.revision_tree("HEAD") as tree:
        harness.require_imported_from(tree, {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
        with pytest.raises(RuntimeError, match="the reference would run"):
            harness.require_imported_from(tree, {"PATH": "/usr/bin:/bin"})


@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")
def test_L1_the_purge_section_runs_on_tiny_sizes():
    with harness.running_weave(threads=4) as running:
        rows = purge.run(running, 6, 16, clients=2, instances=4)
    throughput, p99 = rows
    # every row of the 6 workflows went (12 each); acceptance wrote rows; the purge's rate in the
    # window may be 0 at this size (the window can end before the scanner's next look)
    assert throughput["rows"] >= 6 * 5 and throughput["baseline"] > 0 and throughput["weave"] >= 0
    assert p99["weave"] > 0 and p99["baseline"] > 0


def test_the_drivers_bench_runs_on_tiny_sizes():
    """scripts/benchmarks/drivers.py: the raw send on PyMySQL and on mysqlclient writes the same rows."""
    pytest.importorskip("MySQLdb", reason="the drivers bench compares with mysqlclient, not a dependency")
    with harness.running_weave(threads=4) as running:
        rows = drivers.run(running, 16, repeat=1)
        stored = running.database.read(lambda tx: tx.one("SELECT COUNT(*) AS n FROM signals WHERE actor = 'raw'"))
    assert [row["clients"] for row in rows] == [1, 8]
    assert all(rate > 0 for row in rows for rate in row["sig_per_s"].values())
    assert stored["n"] >= 2 * (16 + 16)  # both drivers' timed sends, at 1 and 8 clients
