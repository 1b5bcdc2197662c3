"""`scripts/bench` stays runnable: every section on tiny sizes, Weave and each baseline included.

The benchmark reuses the SQL constants of the units it mirrors; this catches a baseline that no
longer matches them. Figures are not asserted: speed is measured by `scripts/bench`, not by tests.
"""

import pytest

from weave import bench
from weave.devdb import ServerNotFound, find_server_binary

pytestmark = pytest.mark.slow


def _server_binary() -> str | None:
    try:
        return find_server_binary()
    except ServerNotFound:
        return None


# The bench measures its own database server's CPU, so it always starts a private one.
@pytest.mark.skipif(_server_binary() is None, reason="scripts/bench needs mariadbd or mysqld on this machine")

def test_every_bench_section_runs_on_tiny_sizes():
    with bench.running_weave(threads=4) as running:
        rows = (bench.bench_pulse(running, 10) + bench.bench_e2e(running, 3, workers=2)
                + bench.bench_signals(running, 16, repeat=1, instances=4)
                + bench.bench_latency(running, 3, idle_window=0.2))
    rates = [row for row in rows if "ratio" in row]
    assert len(rates) == 2 + 1 + 6
    assert all(row["weave"] > 0 and row["baseline"] > 0 for row in rates)
    latency = rows[-1]
    assert latency["label"] == "signal accepted -> consumed" and latency["max_ms"] >= latency["p50_ms"] >= 0
