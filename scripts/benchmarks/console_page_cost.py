"""What one workflow page of the review console costs for the worst stored value (issue 26, item 1).

A private MariaDB in a temporary folder, Weave's app in this process, one workflow holding one
signal whose payload is 500 nested arrays around 130,000 zeros (261 KB, stored REJECTED for a wrong
correlation key, sent by a signal-only credential); then the page is rendered `--renders` times
through the Falcon test client. Prints the page's size, the CPU time of one render and the
process's RSS before and after the renders and its peak (VmRSS, VmHWM: /proc/self/status). The
workflow, its payload and the browser are those of tests/integration/test_console_bounds.py, which bounds the
same page.

    .venv/bin/python scripts/benchmarks/console_page_cost.py [--renders 100]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import falcon.testing

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path[:0] = [str(TESTS / "support"), str(TESTS / "integration")]  # the helpers, and the page's test
from clock import ControlledClock  # noqa: E402
from helpers import Flow, make_tenant  # noqa: E402
from test_console import QUEUES, Console  # noqa: E402
from test_console_bounds import order_waiting, signal_body, worst_payload  # noqa: E402

from weave import migrate  # noqa: E402
from weave.app import create_app  # noqa: E402
from weave.config import Config  # noqa: E402
from weave.db import Database  # noqa: E402
from weave.dburl import DatabaseUrl  # noqa: E402
from weave.devdb import PrivateServer  # noqa: E402


def status_kib(field: str) -> int:
    """VmRSS (resident now) or VmHWM (the peak so far) of this process, in KiB."""
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = PrivateServer(Path(folder), fast_and_unsafe=True).start()
        try:
            url = DatabaseUrl.parse(server.url("weave_cost"))
            migrate.ensure_database(url)
            migrate.apply(url)
            database = Database(url, clock=ControlledClock())
            client = falcon.testing.TestClient(create_app(Config(database_url=url.yoyo_url()), database))
            tenant = make_tenant(database, "acme", {"inventory": 4, "carrier": 2})
            flow = order_waiting(Flow(client, tenant, database))
            signaller = tenant.headers("workflows:signal", queues=QUEUES)
            sent = flow.send("order-1", "worst", signal_body(worst_payload()), headers=signaller)
            assert sent.status_code == 201 and sent.json["disposition"] == "CORRELATION_MISMATCH", sent.text
            (stored,) = flow.rows("SELECT OCTET_LENGTH(payload) AS n FROM signals")
            console = Console(client)
            console.sign_in(tenant.token("workflows:read", queues=QUEUES))

            before = status_kib("VmRSS")
            times = []
            size = 0
            for _ in range(args.renders):
                started = time.process_time()
                page = console.get("/console/ns/acme/workflows/order-1")
                times.append(time.process_time() - started)
                assert page.status_code == 200, page.status_code
                size = len(page.content)
                del page
            after, peak = status_kib("VmRSS"), status_kib("VmHWM")
            print(f"payload stored: {stored['n']:,} bytes")
            print(f"page: {size:,} bytes")
            print(
                f"CPU per render: first {times[0] * 1000:.1f} ms, median {sorted(times)[len(times) // 2] * 1000:.1f} ms"
            )
            print(f"RSS: {before:,} KiB before {args.renders} renders, {after:,} KiB after ({after - before:+,} KiB)")
            print(f"peak RSS: {peak:,} KiB")
            database.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
