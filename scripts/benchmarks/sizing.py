"""Sizing (issue 33, item 4; docs/operations.md, "Sizing"): the rows and bytes one accepted and
consumed signal adds to the database, measured.

In a scratch database of a private server: `count` instances of a definition whose one step is the
demo's payment SIGNAL step are started and activated (the baseline), then each is sent its one
payment signal, which the scanner consumes (the instance then ends SUCCEEDED). Through the API's
own code (the Falcon app in process) and the scanner's units, so that every row a real signal
writes is written: the signal with its receipt, the history events, the audit records, the wait's
checkpoint. Per table: the rows (exact counts) and the bytes (`data_length + index_length` of
information_schema after `ANALYZE TABLE`, so InnoDB pages, as the disk holds them), before and
after the signals; the difference divided by `count` is the cost of one signal.

    .venv/bin/python scripts/benchmarks/sizing.py [--signals 10000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import falcon.testing

from weave import auth, migrate
from weave.app import create_app
from weave.cli.demo import PAYMENT_STEP, payment_signal
from weave.config import Config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.devdb import PrivateServer
from weave.scanner import Scanner
from weave.sql import tenancy

NS = "sizing"
DEFINITION = {"name": "sized", "steps": [PAYMENT_STEP]}
TABLES_OF_INSTANCES = (
    "instances",
    "step_activations",
    "waits",
    "signals",
    "tasks",
    "inbox_events",
    "checkpoints",
    "events",
    "audit_records",
    "notifications",
)
COUNT_ROWS = "SELECT COUNT(*) AS n FROM `{}`"  # names from TABLES_OF_INSTANCES, never input
TABLE_BYTES = """
SELECT table_name AS name, data_length AS data, index_length AS idx FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name IN %s
"""


def measure(database: Database) -> dict[str, dict[str, int]]:
    """Per table: exact rows, and data and index bytes after ANALYZE TABLE."""

    def read(tx):
        tx.all("ANALYZE TABLE " + ", ".join(f"`{t}`" for t in TABLES_OF_INSTANCES))
        sizes = {row["name"]: row for row in tx.all(TABLE_BYTES, (TABLES_OF_INSTANCES,))}
        return {
            table: {
                "rows": tx.one(COUNT_ROWS.format(table))["n"],
                "data_bytes": int(sizes[table]["data"]),
                "index_bytes": int(sizes[table]["idx"]),
            }
            for table in TABLES_OF_INSTANCES
        }

    return database.run(read)


def scan_until_idle(scanner: Scanner) -> None:
    while True:
        report = scanner.run_once()
        if not report.candidates and not report.leases:
            return


def run(count: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        server = PrivateServer(Path(folder), fast_and_unsafe=True).start()
        try:
            url = DatabaseUrl.parse(server.url("weave_sizing"))
            migrate.ensure_database(url)
            migrate.apply(url)
            database = Database(url)
            tenancy.create_namespace(database, NS)
            tenancy.create_application(database, NS, "app", None)
            token = auth.new_token()
            scopes = sorted(auth.SCOPES - {"tasks:work"})
            tenancy.create_credential(database, NS, "app", "sizing", scopes, [], auth.token_hash(token), None)
            client = falcon.testing.TestClient(create_app(Config(str(url)), database))
            headers = {"Authorization": f"Bearer {token}"}
            base = f"/v1/namespaces/{NS}"
            assert client.simulate_post(f"{base}/definitions", json=DEFINITION, headers=headers).status_code == 201
            scanner = Scanner(database)
            started = time.monotonic()
            for i in range(count):
                body = {
                    "definition": "sized",
                    "version": 1,
                    "input": {"order_id": f"o-{i}"},
                    "deadline_seconds": 86400,
                    "workflow_id": f"w-{i}",
                }
                assert client.simulate_post(f"{base}/workflows", json=body, headers=headers).status_code == 201
                if i % 500 == 499:
                    scan_until_idle(scanner)
            scan_until_idle(scanner)
            before = measure(database)
            for i in range(count):
                sent = client.simulate_post(
                    f"{base}/workflows/w-{i}/signals",
                    json=payment_signal(f"o-{i}", reason="sizing"),
                    headers={**headers, "Idempotency-Key": f"k-{i}"},
                )
                assert sent.status_code == 201, sent.text
                if i % 500 == 499:
                    scan_until_idle(scanner)
            scan_until_idle(scanner)
            after = measure(database)
            consumed = database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM signals WHERE status = 'CONSUMED'"))
            assert consumed["n"] == count, consumed
            elapsed = time.monotonic() - started
            database.close()
        finally:
            server.stop()
    return {"signals": count, "seconds": round(elapsed, 1), "before": before, "after": after}


def per_signal(result: dict) -> dict[str, dict[str, float]]:
    count = result["signals"]
    return {
        table: {
            key: round((result["after"][table][key] - result["before"][table][key]) / count, 2)
            for key in ("rows", "data_bytes", "index_bytes")
        }
        for table in TABLES_OF_INSTANCES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    args = parser.parse_args(argv)
    result = run(args.signals)
    costs = per_signal(result)
    print(f"{args.signals} signals accepted and consumed in {result['seconds']} s; per signal:")
    print(f"{'table':<18}{'rows':>8}{'data B':>10}{'index B':>10}   (the baseline: per started instance)")
    for table, cost in costs.items():
        base = {k: result["before"][table][k] / args.signals for k in ("rows", "data_bytes", "index_bytes")}
        print(
            f"{table:<18}{cost['rows']:>8}{cost['data_bytes']:>10.0f}{cost['index_bytes']:>10.0f}"
            f"   ({base['rows']:.2f} rows, {base['data_bytes']:.0f} + {base['index_bytes']:.0f} B)"
        )
    total = {k: sum(c[k] for c in costs.values()) for k in ("rows", "data_bytes", "index_bytes")}
    print(f"{'total':<18}{total['rows']:>8.2f}{total['data_bytes']:>10.0f}{total['index_bytes']:>10.0f}")
    if args.json:
        args.json.write_text(json.dumps({**result, "per_signal": costs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
