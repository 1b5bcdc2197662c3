"""Faults injected between Weave and its database under a mixed workload (issue 14, item 5;
docs/reliability.md).

A real `weave serve` and two `weave scan` processes reach the test database only through the
fault proxy (tests/support/faultproxy.py), while the workload of tests/support/load.py runs: starts, signals with
replays, claims, completions and the scanners' work. For as long as instances are being started
and signalled, CUT_RATE of the messages the processes send cut their connection (the message
lost, torn, or run with its answer lost: a COMMIT among them is the ambiguous commit), DELAY_RATE
are held up to MAX_DELAY seconds, and every connection stalls for STALL_SECONDS now and then.
Then the faults stop, and everything must drain. Afterwards: no answer was a 500 (nor any 5xx
but 503 with Retry-After), no acknowledged write is lost, nothing was decided twice, and every
candidate a scanner failed on shows each failure once in its attempts and error, backed off.
"""

from __future__ import annotations

import collections
import re
import threading
import time

import load
import pytest
from faultproxy import FaultProxy
from helpers import use_real_time, wait_until

from weave.dburl import DatabaseUrl
from weave.devdb import free_port
from weave.rules import pulse

pytestmark = pytest.mark.slow

INSTANCES = 30
CUT_RATE = 0.02
DELAY_RATE = 0.05
MAX_DELAY = 0.02
STALL_SECONDS = 1
STALL_EVERY_SECONDS = 6
# "scan inbox 12 failed: <error>; backed off until <time>" (weave/scanner.py)
FAILED_TRY = re.compile(r"scan (inbox|checkpoint|signal_expiry) (\d+) failed: .*; (backed off until|it was done after)")
# Source rows with failed tries: `since` is when the row became due, before any try.
ATTEMPTS = {
    "inbox": "SELECT id, attempts, last_error, available_at, completed_at AS since FROM inbox_events WHERE attempts > 0",
    "signal_expiry": "SELECT id, attempts, last_error, available_at, expires_at AS since FROM signals WHERE attempts > 0",
    "checkpoint": "SELECT id, attempts, last_error, available_at, due_at AS since FROM checkpoints WHERE attempts > 0",
}


def test_two_percent_of_connections_cut_under_a_mixed_workload(database, clock, migrated_url, tmp_path):
    use_real_time(database, clock)
    tokens = load.prepare(database)
    proxy = FaultProxy(migrated_url.port, seed=14, upstream_host=migrated_url.host).start()
    through_proxy = DatabaseUrl(
        "127.0.0.1", proxy.port, migrated_url.user, migrated_url.password, migrated_url.database
    ).yoyo_url()
    port = free_port()
    logs = [tmp_path / "serve.log", tmp_path / "scan-0.log", tmp_path / "scan-1.log"]
    processes = [
        load.serve_process(through_proxy, port, logs[0]),
        *(load.scan_process(through_proxy, log) for log in logs[1:]),
    ]
    stalls = threading.Event()
    try:
        load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(port, "acme", calls)
        workload = load.Workload(api, tokens, INSTANCES, start_pause=0.1)
        proxy.faults(cut_rate=CUT_RATE, delay_rate=DELAY_RATE, max_delay=MAX_DELAY)
        started = time.monotonic()
        workload.run()
        stalling = threading.Thread(target=stall_now_and_then, args=(proxy, stalls), daemon=True)
        stalling.start()
        wait_until(lambda: workload.signalled == INSTANCES, timeout=120, pause=0.2)
        stalls.set()
        stalling.join()
        proxy.faults()  # the faults stop: everything must drain
        faulty = time.monotonic() - started
        faults = dict(proxy.counts)
        workload.finish(database, timeout=120)
        drained = time.monotonic() - started - faulty
        assert [p.poll() for p in processes] == [None] * len(processes)
        figures = load.check_outcome(database, api, workload)
        # no task ran twice, and no worker was told its lease was lost: a claim or a completion
        # whose COMMIT lost its answer was answered as it had committed (docs/decisions.md)
        assert figures["task_attempts"] == figures["tasks"] and figures["lease_lost"] == 0, figures
    finally:
        stalls.set()
        load.stop_processes(processes)
        proxy.close()
    failures = check_backoffs(database, [log.read_text() for log in logs[1:]])
    assert faults["cuts"] >= 20, faults  # enough faults to mean something
    print(
        f"faults for {faulty:.1f} s: {faults}; {figures}; scanner failures by source {failures}; answers by "
        f"status {calls.summary()}, slowest {calls.slowest:.2f} s; drained {drained:.1f} s after the faults"
    )


def stall_now_and_then(proxy: FaultProxy, stop: threading.Event) -> None:
    while not stop.wait(STALL_EVERY_SECONDS):
        proxy.stall(STALL_SECONDS)


def check_backoffs(database, scanner_logs: list[str]) -> dict:
    """Every failed try a scanner logged is counted once on its row (K2), with its error; the
    counts by source."""
    logged = collections.Counter()
    done_after_all = collections.Counter()
    for text in scanner_logs:
        for match in FAILED_TRY.finditer(text):
            key = (match[1], int(match[2]))
            if match[3].startswith("backed off"):
                logged[key] += 1
            else:
                done_after_all[key] += 1
    for source, sql in ATTEMPTS.items():
        for row in database.read(lambda tx, sql=sql: tx.all(sql)):
            assert row["attempts"] == logged.pop((source, row["id"]), 0) and row["last_error"], (source, row)
            assert row["available_at"] >= row["since"] + pulse.retry_delay(row["attempts"]), (source, row)
    # What is left was backed off and then done: checkpoints are deleted once done.
    assert {source for source, _ in logged} <= {"checkpoint"}, logged
    by_source = collections.Counter(source for source, _ in logged.elements())
    return {"backed_off": dict(by_source), "done_after_all": sum(done_after_all.values())}
