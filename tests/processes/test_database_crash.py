"""SIGKILL of the database server under load (issue 14, item 4; docs/reliability.md).

A private MariaDB/MySQL server of this test's own (killing the session's would break the other
tests) serves a real `weave serve` and two `weave scan` processes while the workload of
`tests/support/load.py` runs: starts, signals with replays, claims and completions. The server is
SIGKILLed KILLS times and started again on the same data folder and port each time. While it is
down, the API answers 503 with Retry-After, quickly. Afterwards, without restarting any Weave
process: everything drains, every acknowledged write is there (a signal's replay answers the same
bytes), every wait has exactly one winner, and nothing was decided twice.
"""

from __future__ import annotations

import time

import load
import pytest
from helpers import wait_until

from weave import migrate
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.devdb import PrivateServer, free_port

pytestmark = pytest.mark.slow

INSTANCES = 60
KILLS = 2
DOWN_SECONDS = 2
DOWN_ANSWER_SECONDS = 10  # what a 503 may take while the server is down: refused at once, but the machine is busy


@pytest.fixture
def crashable_server(tmp_path):
    """A private server with the default durability (every commit flushed to its log): a killed
    server loses nothing that it acknowledged."""
    server = PrivateServer(tmp_path / "crashable").start()
    yield server
    server.stop()


def kill(server: PrivateServer) -> None:
    server.process.kill()
    server.process.wait()
    # Its pid file names a dead process, whose number the system may give to another one.
    (server.datadir / "server.pid").unlink(missing_ok=True)


def test_sigkill_of_the_database_under_load_loses_nothing_and_everything_recovers(crashable_server, tmp_path):
    url = DatabaseUrl.parse(crashable_server.url("weave_crash"))
    migrate.ensure_database(url)
    migrate.apply(url)
    database = Database(url)
    tokens = load.prepare(database)
    port = free_port()
    processes = [
        load.serve_process(url.yoyo_url(), port, tmp_path / "serve.log"),
        *(load.scan_process(url.yoyo_url(), tmp_path / f"scan-{i}.log") for i in range(2)),
    ]
    try:
        load.wait_for_api(port)
        calls = load.Calls()
        api = load.Api(port, "acme", calls)
        workload = load.Workload(api, tokens, INSTANCES, start_pause=0.1)
        started = time.monotonic()
        workload.run()
        down_answers = []
        for kill_number in range(1, KILLS + 1):
            wait_until(lambda: len(workload.started) >= kill_number * INSTANCES // (KILLS + 1), timeout=60)
            kill(crashable_server)
            time.sleep(0.2)
            for route, method, path, token, body in (
                ("down-read", "GET", "/workflows/o-0", tokens["starter"], None),
                ("down-claim", "POST", "/queues/carrier/claim", tokens["worker"], {"worker_id": "p"}),
            ):
                answer = api.call(route, method, path, token, body=body)
                assert answer is not None and answer.status == 503, answer
                assert answer.headers.get("retry-after") and answer.seconds < DOWN_ANSWER_SECONDS, answer
                down_answers.append(answer.seconds)
            time.sleep(DOWN_SECONDS)
            crashable_server.start()
            # the API recovers at once: its pool's dead connections are not tried one by one
            answer = api.call("after-restart", "GET", "/workflows/o-0", tokens["starter"])
            assert answer is not None and answer.status == 200, answer
        workload.finish(database, timeout=120)
        drained = time.monotonic() - started
        # API and scanners recovered by themselves: the very processes started above
        assert [p.poll() for p in processes] == [None] * len(processes)
        figures = load.check_outcome(database, api, workload)
        assert calls.count(503) > len(down_answers)  # the workload met the outage too
    finally:
        load.stop_processes(processes)
        database.close()
    print(
        f"database SIGKILLed {KILLS} times, down {DOWN_SECONDS} s each; answers while down in "
        f"{max(down_answers):.3f} s at most; {figures}; answers by status {calls.summary()}, slowest "
        f"{calls.slowest:.2f} s; drained in {drained:.1f} s"
    )
