"""Signal acceptance on a 3-node MariaDB Galera cluster on this machine (docs/scaling.md).

Three `weave serve` processes and 8 HTTP clients (spread over the three processes) accept signals
(the acceptance section of scripts/bench.py: over 200 instances, then into one hot instance), in
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).parent))
import bench  # noqa: E402  (scripts/bench.py: the acceptance harness)

from weave import auth, migrate  # noqa: E402
from weave.db import Database, DatabaseUrl  # noqa: E402
from weave.devdb import GaleraCluster, free_port  # noqa: E402
from weave.sql import tenancy  # noqa: E402

CLIENTS = 8
API_PROCESSES = 3
SERVER_THREADS = 16


def certification_refusals(cluster: GaleraCluster) -> int:
    total = 0
    for node in cluster.nodes:
        rows = node.query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
        )
        total += sum(int(value) for _, value in rows)
    return total


def prepare(url: DatabaseUrl) -> tuple[Database, str, int]:
    migrate.ensure_database(url)
    migrate.apply(url)
    database = Database(url)
    tenancy.create_namespace(database, bench.NS)
    tenancy.create_queue(database, bench.NS, bench.QUEUE, bench.PERMITS)
    tenancy.create_application(database, bench.NS, "app", None)
    token = auth.new_token()
    scopes = sorted(auth.SCOPES - {"tasks:work"})
    tenancy.create_credential(
        database, bench.NS, "app", "bench-client", scopes, [bench.QUEUE], auth.token_hash(token), None
    )
    namespace_id = tenancy.authenticate(database, auth.token_hash(token)).namespace_id
    return database, token, namespace_id


def serve(url: DatabaseUrl, port: int) -> subprocess.Popen:
    env = {**os.environ, "WEAVE_DATABASE_URL": url.url()}
    command = [sys.executable, "-m", "weave.cli", "serve", "--port", str(port), "--threads", str(SERVER_THREADS)]
    return subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)


def accept(benches: list[bench.Bench], targets: list[str], signals: int, run: str) -> tuple[float, int]:
    """`signals` sends by CLIENTS clients, client i on API process i mod 3: (signals/s, 503s)."""
    per_client = max(1, signals // CLIENTS)
    clients: dict[int, bench.Http] = {}
    unavailable = [0]

    def prepare_client(i: int) -> None:
        clients[i] = bench.Http(benches[i % len(benches)], benches[0].client_token)

    def send(i: int) -> None:
        for n in range(per_client):
            client = clients[i]
            client.headers["Idempotency-Key"] = f"{run}-c{i}-{n}"
            while True:
                status, _ = client.post(
                    f"/workflows/{targets[(i * per_client + n) % len(targets)]}/signals", bench._signal_body("o")
                )
                if status != 503:
                    break
                unavailable[0] += 1
                time.sleep(0.05)
            assert status == 201, status

    seconds = bench.run_threads(CLIENTS, send, prepare_client)
    return per_client * CLIENTS / seconds, unavailable[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=2000, help="signals per run (one hot instance: at most 960)")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs per topology and shape")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="weave-bench-cluster-") as folder:
        cluster = GaleraCluster(Path(folder), 3).start()
        processes: list[subprocess.Popen] = []
        try:
            url = DatabaseUrl.parse(cluster.url("weave_bench"))
            database, token, namespace_id = prepare(url)
            topologies = {
                "single writer (all API processes on node 0)": [url.on_host(0)] * API_PROCESSES,
                "multi-primary (API process i on node i)": [url.on_host(i) for i in range(API_PROCESSES)],
            }
            ports = {name: [free_port() for _ in range(API_PROCESSES)] for name in topologies}
            for name, urls in topologies.items():
                processes += [serve(node_url, port) for node_url, port in zip(urls, ports[name])]
            for port_list in ports.values():
                for port in port_list:
                    bench._wait_http(port)
            benches = {
                name: [
                    bench.Bench(url, database, f"http://127.0.0.1:{port}", token, "", namespace_id, 0, 0)
                    for port in port_list
                ]
                for name, port_list in ports.items()
            }
            first = next(iter(benches.values()))[0]
            bench.Http(first, token).post("/definitions", bench.SIGNAL_DEFINITION)
            print(
                f"# weave bench-cluster — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, 3 Galera "
                f"nodes, {API_PROCESSES} API processes, {CLIENTS} clients, load {bench._load()}",
                flush=True,
            )
            run = 0
            for shape, instances in (("200 instances", 200), ("one hot instance", 1)):
                signals = args.signals if instances > 1 else min(args.signals, bench.HOT_INSTANCE_SIGNALS)
                figures = {name: {"rates": [], "refusals": [], "unavailable": []} for name in topologies}
                for _ in range(args.repeat):
                    for name in topologies:
                        run += 1
                        targets = bench._start_signal_targets(first, f"r{run}", instances)
                        before = certification_refusals(cluster)
                        rate, unavailable = accept(benches[name], targets, signals, f"r{run}")
                        figures[name]["rates"].append(rate)
                        figures[name]["refusals"].append(certification_refusals(cluster) - before)
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
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(30)
            cluster.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
