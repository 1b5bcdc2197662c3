"""The `signals` section: signal acceptance over HTTP, many instances and one hot instance, at 1, 8
and 32 clients, beside the raw baseline and the floors (or with `--against REF`, REF's server)."""

from __future__ import annotations

import itertools
from functools import partial
from statistics import median

from benchmarks.baselines import floor_sender, floor_tables, raw_sender
from benchmarks.harness import Bench, Http, alternate, report_pairs, rss_kib, summary
from benchmarks.workload import HOT_INSTANCE_SIGNALS, SIGNAL_DEFINITION, http_sender, signal_run


def run(bench: Bench, per_run: int, repeat: int, instances: int = 200) -> list[dict]:
    """Each run: clients connect and send a few untimed signals to a separate instance, then the
    timed signals go round-robin over `instances` instances, or all to one (at most 960 there).

    Weave and its baseline run `repeat` times in alternation, each first in every other pair;
    rates are medians, the ratio is the median of the ratios of the pairs (each pair shares the
    machine's conditions of the moment). The baseline is the raw PyMySQL sender, or with
    `--against REF` the same HTTP load on REF's `weave serve` (`bench.reference`). Without
    `--against`, the lean floor and the spec floor (`floor_sender`) run in each pair too: the
    database CPU per signal of Weave is printed beside theirs, with the ratios (target 1 of issue
    17).
    """
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    reference = bench.reference
    contenders = (
        ("weave", bench, http_sender),
        ("baseline", bench, raw_sender),
        ("floor", bench, floor_sender),
        ("spec floor", bench, partial(floor_sender, spec=True)),
    )
    if reference is not None:
        contenders = (("weave", bench, http_sender), ("baseline", reference, http_sender))
    else:
        floor_tables(bench)
    results = []
    runs = map(str, itertools.count(1))  # each run's workflow ids are its own
    for shape in ("many instances", "one hot instance"):
        for clients in (1, 8, 32):
            signals = per_run if shape == "many instances" else min(per_run, HOT_INSTANCE_SIGNALS)
            per_client = max(1, signals // clients)
            targets = instances if shape == "many instances" else 1
            rates, latencies, cpu = alternate(
                {
                    name: partial(signal_run, target, sender, targets, clients, per_client)
                    for name, target, sender in contenders
                },
                repeat,
                runs,
            )
            ratios, tails, mean_cpu = summary(rates, latencies, cpu, "weave", "baseline")
            baseline_server = "-" if reference is None else f"{mean_cpu['baseline'][0]:.2f}"
            extra = (
                f"   p50/p99 ms weave {tails['weave'][0]:.1f}/{tails['weave'][1]:.1f}"
                f" baseline {tails['baseline'][0]:.1f}/{tails['baseline'][1]:.1f}"
                "   CPU ms/signal (server, load, db) weave %.2f, %.2f, %.2f baseline %s, %.2f, %.2f"
                % (*mean_cpu["weave"], baseline_server, mean_cpu["baseline"][1], mean_cpu["baseline"][2])
                + (f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}" if repeat > 1 else "")
            )
            if "floor" in cpu:
                weave_db, floor_db, spec_db = (mean_cpu[name][2] for name in ("weave", "floor", "spec floor"))
                db_over_floor, db_over_spec, spec_over_floor = (
                    a / b if b else float("nan")  # tiny runs: 0 ticks
                    for a, b in ((weave_db, floor_db), (weave_db, spec_db), (spec_db, floor_db))
                )
                extra += (
                    "   floor %.1f sig/s, db CPU %.2f ms/signal: weave/floor %.2f"
                    "   spec floor %.1f sig/s, db CPU %.2f ms/signal: weave/spec floor %.2f, spec floor/floor %.2f"
                    % (
                        median(rates["floor"]),
                        floor_db,
                        db_over_floor,
                        median(rates["spec floor"]),
                        spec_db,
                        db_over_spec,
                        spec_over_floor,
                    )
                )
            label = f"signals accepted, {shape}, {clients} client(s)"
            row = report_pairs(
                label, rates, ratios, "baseline", extra, "baseline" if reference is None else reference.label
            )
            if reference is not None:
                row["against"] = reference.label
            row["run_ratios"] = [round(r, 3) for r in ratios]
            row["p50_ms"], row["p99_ms"] = round(tails["weave"][0], 1), round(tails["weave"][1], 1)
            row["cpu_ms_per_signal"] = {name: [round(v, 2) for v in split] for name, split in mean_cpu.items()}
            if "floor" in cpu:
                row["floor"] = round(median(rates["floor"]), 1)
                row["db_cpu_weave_over_floor"] = round(db_over_floor, 3)
                row["spec_floor"] = round(median(rates["spec floor"]), 1)
                row["db_cpu_weave_over_spec_floor"] = round(db_over_spec, 3)
                row["db_cpu_spec_floor_over_floor"] = round(spec_over_floor, 3)
            results.append(row)
    rss = rss_kib(bench.server_pid)
    print(f"server RSS after the signal runs: {rss / 1024:.1f} MiB", flush=True)
    results.append({"label": "server RSS after signal load", "rss_mib": round(rss / 1024, 1)})
    return results
