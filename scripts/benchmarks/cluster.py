"""Signal acceptance on a 3-node MariaDB Galera cluster on this machine (docs/scaling.md).

Three `weave serve` processes and 8 HTTP clients (spread over the three processes) accept signals
(the signals section of scripts/bench: over 200 instances, then into one hot instance), in
two topologies, alternating:
- single writer: every API process uses node 0 (what a proxy in front of a cluster that sends all
  writes to one node gives);
- multi-primary: API process i uses node i.
Each run reports the rate, the certification refusals the nodes counted (each one is a unit of
work re-run) and the 503s clients got. The machine's two cores run the three nodes, the three API
processes and the clients: the figures compare the topologies, not what a cluster of real
machines would do.

    scripts/bench-cluster [--signals 2000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import median

if __name__ == "__main__":  # run by path: scripts/ in place of this folder, to import `benchmarks.*`
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
from benchmarks import harness, workload  # noqa: E402
from weave.dburl import DatabaseUrl  # noqa: E402
from weave.devdb import GaleraCluster  # noqa: E402

CLIENTS = 8
API_PROCESSES = 3
SERVER_THREADS = 16


def accept(benches: list[harness.Bench], targets: list[str], signals: int, run: str) -> tuple[float, int]:
    """`signals` sends by CLIENTS clients, client i on API process i mod 3: (signals/s, 503s)."""
    per_client = max(1, signals // CLIENTS)
    clients: dict[int, harness.Http] = {}
    unavailable = [0]

    def prepare_client(i: int) -> None:
        clients[i] = harness.Http(benches[i % len(benches)], benches[0].client_token)

    def send(i: int) -> None:
        for n in range(per_client):
            client = clients[i]
            client.headers["Idempotency-Key"] = f"{run}-c{i}-{n}"
            while True:
                status, _ = client.post(
                    f"/workflows/{targets[(i * per_client + n) % len(targets)]}/signals", workload.signal_body("o")
                )
                if status != 503:
                    break
                unavailable[0] += 1
                time.sleep(0.05)
            assert status == 201, status

    seconds = harness.run_threads(CLIENTS, send, prepare_client)
    return per_client * CLIENTS / seconds, unavailable[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=2000, help="signals per run (one hot instance: at most 960)")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs per topology and shape")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="weave-bench-cluster-") as folder, ExitStack() as stack:
        cluster = GaleraCluster(Path(folder), 3).start()
        stack.callback(cluster.stop)
        url = DatabaseUrl.parse(cluster.url("weave_bench"))
        database, token, _, namespace_id = harness.prepared(url)
        stack.callback(database.close)
        topologies = {
            "single writer (all API processes on node 0)": [url.on_host(0)] * API_PROCESSES,
            "multi-primary (API process i on node i)": [url.on_host(i) for i in range(API_PROCESSES)],
        }
        benches = {}
        for name, urls in topologies.items():
            benches[name] = []
            for node_url in urls:
                env = {**os.environ, "WEAVE_DATABASE_URL": node_url.url()}
                base, pid = stack.enter_context(harness.serving(env, SERVER_THREADS, 1))
                benches[name].append(harness.Bench(url, database, base, token, "", namespace_id, pid, 0))
        first = next(iter(benches.values()))[0]
        harness.Http(first, token).post("/definitions", workload.SIGNAL_DEFINITION)
        print(
            f"# weave bench-cluster — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, 3 Galera "
            f"nodes, {API_PROCESSES} API processes, {CLIENTS} clients, load {harness.load_averages()}",
            flush=True,
        )
        run = 0
        for shape, instances in (("200 instances", 200), ("one hot instance", 1)):
            signals = args.signals if instances > 1 else min(args.signals, workload.HOT_INSTANCE_SIGNALS)
            figures = {name: {"rates": [], "refusals": [], "unavailable": []} for name in topologies}
            for _ in range(args.repeat):
                for name in topologies:
                    run += 1
                    targets = workload.start_signal_targets(first, f"r{run}", instances)
                    before = cluster.certification_refusals()
                    rate, unavailable = accept(benches[name], targets, signals, f"r{run}")
                    figures[name]["rates"].append(rate)
                    figures[name]["refusals"].append(cluster.certification_refusals() - before)
                    figures[name]["unavailable"].append(unavailable)
            for name, found in figures.items():
                row = {
                    "label": f"signals accepted on Galera, {shape}, {name}",
                    "signals_per_run": signals,
                    "rate": round(median(found["rates"]), 1),
                    "rates": [round(r, 1) for r in found["rates"]],
                    "certification_refusals": found["refusals"],
                    "refusals_per_1000_signals": round(1000 * sum(found["refusals"]) / (signals * args.repeat), 1),
                    "answers_503": found["unavailable"],
                }
                print(
                    f"  {row['label']:<95} {row['rate']:8.1f} sig/s  (runs {row['rates']})  certification "
                    f"refusals {row['certification_refusals']} ({row['refusals_per_1000_signals']} per 1,000 "
                    f"signals)  503s {row['answers_503']}",
                    flush=True,
                )
                results.append(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
