"""The `flat` section (issue 31, target 6): batch acceptance with a million stored signals within
1.2x of the same with 10,000.

The two sizes are loaded as the `scale` section loads them (`scale._load_sized`: server-side
`INSERT … SELECT` from the sequence engine, as Weave writes signals, events and audit records, then
settled), into two databases of one server, each with its own `weave serve`. Then batches of 100
(`batches.batch_sender`, 8 clients over 800 fresh instances, `--batch-signals` per run) alternate
between the two `--repeat` times, each side first in every other pair; the ratio is the median of
the pairs' (large over the reference: < 1 is slower at the large size).
"""

from __future__ import annotations

import math
import time

from benchmarks import scale
from benchmarks.batches import BATCH_SIZE, batch_sender
from benchmarks.harness import Bench
from benchmarks.workload import signal_run

FLAT_BASE = scale.SCALE_BASE


def run(
    bench: Bench,
    large: int,
    per_run: int,
    base: int = FLAT_BASE,
    repeat: int = 3,
    clients: int = 8,
    size: int = BATCH_SIZE,
    threads: int = 16,
    processes: int = 2,
) -> list[dict]:
    """Batches of `size` from `clients` clients, about `per_run` signals a run, with `large` stored
    signals (in `bench`'s database) and with `base` (in a second database on the same server)."""
    started = time.monotonic()
    batches = max(1, per_run // clients // size)
    while math.gcd(batches, clients) != 1:  # as the batches section: no two batches in flight share an instance
        batches -= 1
    with scale._beside(bench, f"{bench.url.database}_base", threads, processes) as small:
        scale._load_sized(small, base)
        scale._load_sized(bench, large)
        sides = {"large": bench, "base": small}
        rates: dict[str, list[float]] = {"large": [], "base": []}
        cpu: dict[str, list[list[float]]] = {"large": [], "base": []}
        for pair in range(repeat):
            for side in ("large", "base")[:: 1 if pair % 2 == 0 else -1]:
                reads = scale._pool_reads(bench)
                rate, times, split = signal_run(
                    sides[side], batch_sender(size), clients * size, clients, batches * size, f"flat{pair}"
                )
                rates[side].append(rate)
                cpu[side].append([*split, (scale._pool_reads(bench) - reads) / len(times)])
    row = scale.sized_rate_row(
        f"flat: batches of {size}, {clients} clients, {large:,} stored", rates, cpu, f"{base:,} stored"
    )
    row["stored"], row["baseline_stored"] = large, base
    print(f"flat section: {time.monotonic() - started:.0f} s of wall time", flush=True)
    return [row]
