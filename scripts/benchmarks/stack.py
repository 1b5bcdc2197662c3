"""The `stack` section: single signals on Weave beside the HTTP stack floor (issue 31, target 3:
Weave's API CPU per signal <= 2x the floor's).

The floor (`stack_floor.py`) is Falcon on waitress with the threads and processes of the run's
`weave serve`, doing for each request what any implementation of the route must: read the body,
parse and validate it against the same request schema, check the bearer token's hash, answer a
receipt-sized 201. Weave's single-signal run (`workload.http_sender` over fresh instances of
`pay`) and the same run against the floor alternate `--repeat` times from 8 clients; the API CPU
of each is its server's processes' CPU from /proc over the timed run, per signal.
`--stack-clients 1,8` repeats the pair at each count: from one client neither server's threads
contend for the cores or the GIL, so the two counts' API CPU tell the code's own cost from what
concurrency on two cores adds to it.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

from benchmarks.harness import Bench, Http, alternate, pair_row, report, wait_http
from benchmarks.workload import SIGNAL_DEFINITION, http_sender, signal_run
from weave import auth
from weave.devdb import free_port
from weave.processes import die_with_parent

FLOOR = Path(__file__).with_name("stack_floor.py")


@contextmanager
def stack_floor(bench: Bench, threads: int, processes: int):
    """The floor's server, as a `Bench` whose base and server pid are its (the database is Weave's, unused)."""
    port = free_port()
    command = [
        sys.executable,
        str(FLOOR),
        str(port),
        str(threads),
        str(processes),
        auth.token_hash(bench.client_token).hex(),
    ]
    floor = subprocess.Popen(command, preexec_fn=die_with_parent)
    try:
        wait_http(port)
        yield replace(bench, base=f"http://127.0.0.1:{port}", server_pid=floor.pid, label="stack floor")
    finally:
        floor.terminate()
        floor.wait(10)


def run(
    bench: Bench, per_run: int, repeat: int, threads: int, processes: int, client_counts: tuple[int, ...] = (8,)
) -> list[dict]:
    """`run_with` at each of `client_counts`, in order."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)  # 201 once published
    runs = (f"stack{n}" for n in itertools.count())  # each run's fresh instances
    return [
        row for clients in client_counts for row in run_with(bench, per_run, repeat, threads, processes, clients, runs)
    ]


def run_with(
    bench: Bench, per_run: int, repeat: int, threads: int, processes: int, clients: int, runs: Iterator[str]
) -> list[dict]:
    """Weave's single signals and the floor's, `per_run` each from `clients` clients over 200
    instances, in `repeat` alternating pairs: the rate row, and the API CPU row (target <= 2)."""
    per_client = max(1, per_run // clients)
    with stack_floor(bench, threads, processes) as floor:
        measured = alternate(
            {
                "weave": partial(signal_run, bench, http_sender, 200, clients, per_client),
                "floor": partial(signal_run, floor, http_sender, 200, clients, per_client),
            },
            repeat,
            runs,
        )
    shown = {"weave": "weave", "floor": "stack floor"}
    parts = {"weave": "server, load, db", "floor": "server, load, db"}
    row, mean_cpu = pair_row(
        f"single signals vs the HTTP stack floor, {clients} clients", measured, "floor", shown, parts
    )
    weave_api, floor_api = mean_cpu["weave"][0] * 1000, mean_cpu["floor"][0] * 1000
    cpu_row = report(
        f"API CPU per signal, weave vs stack floor, {clients} clients",
        weave_api,
        floor_api,
        "us/sig",
        "   (target <= 2)",
        baseline_name="floor",
    )
    return [row, cpu_row]
