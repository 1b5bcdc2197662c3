"""Benchmarks: Weave over HTTP beside a raw PyMySQL baseline doing the same statements, same run.

    scripts/bench [--only pulse|e2e|signals|routing|latency|consumption|peer|batches|sdk|purge|scale|validation|hostile] [--json FILE]   (--help lists every option)
    scripts/bench --only purge --purge-workflows 6000   (purge rows/s beside rows/s written, acceptance p99 while purging; --repeat pairs)
    scripts/bench --only scale --scale-signals 1000000   (flat cost: the figures at a million stored signals)
    scripts/bench --only signals --against main      (signal acceptance: this checkout against a revision)
    scripts/bench --only peer                        (signal acceptance beside DBOS Transact's `send`)
    scripts/bench --only batches                     (batches of 100 beside single signals and DBOS `send`)
    scripts/bench --only sdk                         (the SDK's kept-alive connection beside one per call)
    scripts/bench --only stack                       (single signals beside the HTTP stack floor: API CPU)
    scripts/bench --only flat                        (batches of 100 at a million stored signals beside 10,000)
    scripts/bench --only hostile --hostile-repeat 100  (issue 26's worst inputs over HTTP: CPU per request, RSS)

Everything runs on this machine: a private database server, `weave serve` and `weave scan` as
separate processes, and load generator threads here. Each figure is printed beside its baseline
and the ratio, because absolute numbers mean little across machines; ratios measured in one run do.
Development tooling: it lives in scripts/benchmarks/, outside the installed package, and imports the
checkout's Weave from .venv (tests/processes/test_bench.py imports the sections with scripts/ on its
path).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks import (
    batches,
    consumption,
    e2e,
    flat,
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
from benchmarks.harness import load_averages, running_weave
from benchmarks.workload import HOT_INSTANCE_SIGNALS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument(
        "--signals",
        type=int,
        default=3000,
        help=f"signals per acceptance run (one hot instance: at most {HOT_INSTANCE_SIGNALS}); DBOS sends per peer run",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating weave/baseline (or weave/DBOS) runs per signal figure"
    )
    parser.add_argument(
        "--routing-signals", type=int, default=1000, help="routing: facts per run, routed by key or addressed by id"
    )
    parser.add_argument("--latency-signals", type=int, default=200)
    parser.add_argument(
        "--latency-hanging",
        action="store_true",
        help="latency: run it again beside a notification subscription to an endpoint that never answers (N2)",
    )
    parser.add_argument(
        "--only",
        choices=(
            "pulse",
            "e2e",
            "signals",
            "routing",
            "latency",
            "consumption",
            "peer",
            "batches",
            "sdk",
            "purge",
            "stack",
            "scale",
            "flat",
            "validation",
            "hostile",
        ),
    )
    parser.add_argument(
        "--batch-signals",
        type=int,
        default=8000,
        help=f"batches: signals per run, sent in batches of {batches.BATCH_SIZE} by 8 clients (and one by one, and by DBOS)",
    )
    parser.add_argument("--sdk-signals", type=int, default=1000, help="sdk: signals per run from one thread")
    parser.add_argument("--consumption-signals", type=int, default=2000, help="signals per consumption run")
    parser.add_argument(
        "--purge-workflows",
        type=int,
        default=6000,
        help="purge: ended workflows waiting for their purge (72,000 rows: a backlog that lasts --repeat 3 windows)",
    )
    parser.add_argument(
        "--consumption-scanners",
        type=lambda text: tuple(int(count) for count in text.split(",")),
        default=(1, 3),
        help="consumption: `weave scan` processes of each run, comma-separated (default 1,3)",
    )
    parser.add_argument(
        "--stack-clients",
        type=lambda text: tuple(int(count) for count in text.split(",")),
        default=(8,),
        help="stack: clients of each pair of runs, comma-separated (e.g. 1,8: without and with contention)",
    )
    parser.add_argument("--e2e-scanners", type=int, default=1, help="e2e: `weave scan` processes")
    parser.add_argument(
        "--e2e-signal",
        action="store_true",
        help="e2e: TASK -> SIGNAL -> TASK workflows, each sent its signal over HTTP as it starts (issue 31, target 5)",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="signal acceptance: alternate this checkout's `weave serve` with git revision REF's "
        "(e.g. main: the cost of a change, such as metrics and request logs) instead of the raw baseline",
    )
    parser.add_argument(
        "--scale-signals",
        type=int,
        default=1_000_000,
        help=f"stored signals of the scale section's large figures (its reference: {scale.SCALE_BASE:,})",
    )
    parser.add_argument(
        "--flat-signals",
        type=int,
        default=1_000_000,
        help=f"flat: stored signals of the large side (the reference: {flat.FLAT_BASE:,}); "
        "batches of 100 by 8 clients, --batch-signals per run",
    )
    parser.add_argument(
        "--validation-bytes", type=int, default=validation.VALIDATION_BYTES, help="size of each hostile payload"
    )
    parser.add_argument(
        "--validation-runs", type=int, default=validation.VALIDATION_RUNS, help="timed runs per validation figure"
    )
    parser.add_argument(
        "--hostile-repeat",
        type=int,
        default=hostile.HOSTILE_REPEAT,
        help="requests per worst case of the hostile section (RSS is read after the first and the last)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--server-threads",
        type=int,
        default=16,
        help="waitress threads per `weave serve` process (long-polling workers each hold one)",
    )
    parser.add_argument(
        "--server-processes", type=int, default=os.cpu_count(), help="`weave serve --processes` (default: one per core)"
    )
    args = parser.parse_args(argv)
    results = []
    if args.only in (None, "validation"):  # in this process, no server needed
        print(
            f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, load {load_averages()}",
            flush=True,
        )
        results += validation.run(args.validation_bytes, args.validation_runs)
        if args.only == "validation":
            return write_json(args.json, results)
    header = (
        f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, weave serve "
        f"--processes {args.server_processes} --threads {args.server_threads}"
    )
    if args.only not in ("scale", "flat", "hostile"):
        with running_weave(args.server_threads, args.server_processes, args.against) as bench:
            print(header + (f", signal acceptance against {args.against}" if args.against else ""), flush=True)
            sections = {
                "pulse": lambda: pulse.run(bench, args.tasks),
                "e2e": lambda: e2e.run(bench, args.workflows, scanner_count=args.e2e_scanners, signal=args.e2e_signal),
                "signals": lambda: signals.run(bench, args.signals, args.repeat),
                "routing": lambda: routing.run(bench, args.routing_signals, args.repeat),
                "latency": lambda: (latency.run_beside_hanging if args.latency_hanging else latency.run)(
                    bench, args.latency_signals
                ),
                "consumption": lambda: consumption.run(bench, args.consumption_signals, args.consumption_scanners),
                "peer": lambda: peers.run(bench, args.signals, args.repeat),
                "batches": lambda: batches.run(bench, args.batch_signals, args.repeat),
                "sdk": lambda: sdk.run(bench, args.sdk_signals, args.repeat),
                "purge": lambda: purge.run(bench, args.purge_workflows, args.signals, pairs=args.repeat),
                "stack": lambda: stack.run(
                    bench, args.signals, args.repeat, args.server_threads, args.server_processes, args.stack_clients
                ),
            }
            for name, run in sections.items():  # in this order, on one server
                if args.only in (None, name):
                    results += run()
    if args.only in (None, "scale"):  # a server of its own: "10,000 stored" means that many
        with running_weave(args.server_threads, args.server_processes) as bench:
            print(f"{header}, load {load_averages()}", flush=True)
            started = time.monotonic()
            results += scale.run(
                bench,
                args.scale_signals,
                per_run=args.signals,
                repeat=args.repeat,
                threads=args.server_threads,
                processes=args.server_processes,
            )
            print(f"scale section: {time.monotonic() - started:.0f} s of wall time", flush=True)
    if args.only in (None, "flat"):  # as scale: a server of its own
        with running_weave(args.server_threads, args.server_processes) as bench:
            print(f"{header}, load {load_averages()}", flush=True)
            results += flat.run(
                bench,
                args.flat_signals,
                args.batch_signals,
                repeat=args.repeat,
                threads=args.server_threads,
                processes=args.server_processes,
            )
    if args.only in (None, "hostile"):  # one process: its CPU and RSS are the figures
        with running_weave(args.server_threads, processes=1) as bench:
            print(
                f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, weave serve --processes 1 "
                f"--threads {args.server_threads}, load {load_averages()}",
                flush=True,
            )
            results += hostile.run(bench, args.hostile_repeat)
    return write_json(args.json, results)


def write_json(path: Path | None, results: list[dict]) -> int:
    if path:
        path.write_text(json.dumps(results, indent=2))
    return 0
