"""Weave's benchmarks: development tooling, outside the installed package (docs/performance.md).

harness      the system under test (database, `weave serve`), the HTTP client, timing, /proc, the printed line
workload     the signal workload the signal sections share (the demo's payment step and signal)
baselines    what Weave is divided by: its statements on bare PyMySQL, its units in-process, the floors
pulse, e2e, signals, routing, latency, consumption, peers, scale, validation, hostile
             one module per section of `scripts/bench --only`, each with its `run`
main         `scripts/bench`'s options and the order of the sections (__main__ runs it)
cluster      `scripts/bench-cluster`: signal acceptance on a private Galera cluster
slow_clients, console_page_cost
             run by path: slow clients and scrapers, one console page (docs/operations.md)
dbos_driver  the DBOS peer's side, run in a venv of its own (it imports nothing of Weave)
"""
