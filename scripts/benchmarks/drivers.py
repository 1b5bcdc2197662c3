"""What the MySQL driver alone costs a signal: PyMySQL against mysqlclient (issue 31, target 3).

The single send's API CPU is about five times the HTTP stack floor's, and most of it is PyMySQL
(docs/performance.md). This measures how much of that a C driver would give back, without
touching Weave: the `signals` section's raw baseline (`baselines.raw_sender`: the statements of
`send_signal`, in its round trips, writing the same rows, with no HTTP and no Weave code) runs on
Weave's PyMySQL connections and on mysqlclient's (`MySQLdb`, the C client library), in
alternation, from 1 and 8 client threads. The figure is this process's CPU per signal (the
"load" column of `harness.cpu_split`), beside the database's.

mysqlclient is not a dependency of Weave, which keeps PyMySQL (issue 31); it needs Debian's
`libmariadb-dev` and `pkg-config` to build:

    .venv/bin/pip install mysqlclient
    .venv/bin/python scripts/benchmarks/drivers.py [--signals 3000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from functools import partial
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks`, run as a script

from benchmarks.baselines import raw_sender  # noqa: E402
from benchmarks.harness import Http, alternate, running_weave, summary  # noqa: E402
from benchmarks.workload import SIGNAL_DEFINITION, signal_run  # noqa: E402
from weave.db import SESSION_SETTINGS  # noqa: E402
from weave.dburl import DatabaseUrl  # noqa: E402


def mysqlclient_connection(url: DatabaseUrl):
    """A mysqlclient connection in the session settings of `weave.db.connect`."""
    import MySQLdb
    import MySQLdb.cursors
    from MySQLdb.constants import CLIENT

    host, port = url.hosts[0]
    conn = MySQLdb.connect(
        host=host,
        port=port,
        user=url.user,
        password=url.password or "",
        database=url.database,
        charset="utf8mb4",
        autocommit=False,
        client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
        cursorclass=MySQLdb.cursors.DictCursor,
    )
    cursor = conn.cursor()
    for statement, params in SESSION_SETTINGS:
        cursor.execute(statement, params or None)
    cursor.close()
    conn.commit()
    return conn


def run(bench, signals: int, repeat: int) -> list[dict]:
    """The raw send on each driver, in alternation, from 1 and 8 clients: one row per client count."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    runs = map(str, itertools.count(1))
    contenders = {"pymysql": raw_sender, "mysqlclient": partial(raw_sender, open_connection=mysqlclient_connection)}
    rows = []
    for clients in (1, 8):
        per_client = max(1, signals // clients)
        rates, latencies, cpu = alternate(
            {name: partial(signal_run, bench, sender, 200, clients, per_client) for name, sender in contenders.items()},
            repeat,
            runs,
        )
        ratios, _, mean_cpu = summary(rates, latencies, cpu, "mysqlclient", "pymysql")
        client = {name: mean_cpu[name][1] * 1000 for name in contenders}
        database = {name: mean_cpu[name][2] * 1000 for name in contenders}
        row = {
            "clients": clients,
            "client_us_per_signal": client,
            "database_us_per_signal": database,
            "sig_per_s": {name: median(rates[name]) for name in contenders},
            "run_ratios": ratios,
        }
        print(
            f"the raw send, {clients} client(s): client CPU per signal pymysql {client['pymysql']:.0f} us,"
            f" mysqlclient {client['mysqlclient']:.0f} us"
            f" (ratio {client['mysqlclient'] / client['pymysql'] if client['pymysql'] else float('nan'):.2f});"
            f" database CPU {database['pymysql']:.0f} and {database['mysqlclient']:.0f} us;"
            f" rate pymysql {row['sig_per_s']['pymysql']:.0f} sig/s, mysqlclient {row['sig_per_s']['mysqlclient']:.0f}"
            f" sig/s (run ratios {' '.join(f'{r:.2f}' for r in ratios)})",
            flush=True,
        )
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=3000, help="signals per run")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each driver")
    args = parser.parse_args()
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        sys.exit("drivers: mysqlclient is not installed (.venv/bin/pip install mysqlclient)")
    with running_weave(threads=16) as bench:
        run(bench, args.signals, args.repeat)


if __name__ == "__main__":
    main()
