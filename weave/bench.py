"""Benchmarks: Weave over HTTP beside a raw PyMySQL baseline doing the same statements, same run.

    scripts/bench [--tasks N] [--workflows N] [--only pulse|e2e]

Everything runs on this machine: a private database server, `weave serve` and `weave scan` as
separate processes, and load generator threads here. Each figure is printed beside its baseline
and the ratio, because absolute numbers mean little across machines; ratios measured in one run do.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


from sql import instances as instance_sql
from sql import tasks as task_sql
from sql import tenancy
from weave import auth, migrate
from weave.db import Database, DatabaseUrl, connect
from weave.devdb import PrivateServer, free_port

NS = "bench"
QUEUE = "work"
PERMITS = 64


# ---- the system under test --------------------------------------------------------------------------

@dataclass
class Bench:
    url: DatabaseUrl
    database: Database
    base: str  # http://127.0.0.1:port
    client_token: str
    worker_token: str
    namespace_id: int


@contextmanager
def running_weave(threads: int = 16):
    with tempfile.TemporaryDirectory(prefix="weave-bench-") as folder, PrivateServer(Path(folder)) as server:
        url = DatabaseUrl.parse(server.url("weave_bench"))
        migrate.ensure_database(url)
        migrate.apply(url)
        database = Database(url)
        tenancy.create_namespace(database, NS)
        tenancy.create_queue(database, NS, QUEUE, PERMITS)
        tenancy.create_application(database, NS, "app", None)
        client_token, worker_token = auth.new_token(), auth.new_token()
        tenancy.create_credential(database, NS, "app", "bench-client", sorted(auth.SCOPES - {"tasks:work"}),
                                  [QUEUE], auth.token_hash(client_token), None)
        tenancy.create_credential(database, NS, "app", "bench-worker", ["tasks:work"], [QUEUE],
                                  auth.token_hash(worker_token), None)
        namespace_id = tenancy.authenticate(database, auth.token_hash(client_token)).namespace_id
        port = free_port()
        env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
        serve = subprocess.Popen([sys.executable, "-m", "weave.cli", "serve", "--port", str(port),
                                  "--threads", str(threads)], env=env, stderr=subprocess.DEVNULL)
        try:
            _wait_http(port)
            yield Bench(url, database, f"http://127.0.0.1:{port}", client_token, worker_token, namespace_id)
        finally:
            serve.terminate()
            serve.wait(10)
            database.close()


def _wait_http(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("weave serve did not answer")


class Http:
    """One keep-alive connection, like a real client or worker."""

    def __init__(self, bench: Bench, token: str):
        self.conn = http.client.HTTPConnection(bench.base.split("//")[1].split(":")[0],
                                               int(bench.base.rsplit(":", 1)[1]), timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict) -> tuple[int, dict | None]:
        self.conn.request("POST", f"/v1/namespaces/{NS}{path}", body=json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None)

    def get(self, path: str) -> dict:
        self.conn.request("GET", f"/v1/namespaces/{NS}{path}", headers=self.headers)
        return json.loads(self.conn.getresponse().read())


# ---- measuring --------------------------------------------------------------------------------------

def run_threads(count: int, target) -> float:
    """Run `target(i)` in `count` threads; seconds from the common start to the last finish."""
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def body(i):
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def report(label: str, weave_rate: float, baseline_rate: float, unit: str, extra: str = "") -> dict:
    ratio = weave_rate / baseline_rate if baseline_rate else float("nan")
    print(f"{label:<44} weave {weave_rate:8.1f} {unit}   baseline {baseline_rate:8.1f} {unit}   "
          f"ratio {ratio:4.2f}{extra}", flush=True)
    return {"label": label, "weave": round(weave_rate, 1), "baseline": round(baseline_rate, 1),
            "ratio": round(ratio, 3), "unit": unit}


# ---- Pulse: claim + complete -----------------------------------------------------------------------

def seed_tasks(bench: Bench, count: int) -> None:
    """Insert QUEUED tasks (and the activations they belong to) straight into the tables."""
    app_id = bench.database.run(lambda tx: tx.one("SELECT id FROM applications LIMIT 1"))["id"]
    definition = {"name": "one", "steps": [{"key": "s", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600}]}
    from sql import definitions

    definitions.publish_definition(bench.database, bench.namespace_id, definition, 1, "bench")

    def insert(tx, start):
        queue_id = tx.one("SELECT id FROM queues WHERE name = %s", (QUEUE,))["id"]
        definition_id = tx.one("SELECT id FROM definitions WHERE name = 'one'")["id"]
        now = tx.now()
        for i in range(start, min(count, start + 500)):
            instance_id = tx.insert(instance_sql.INSERT_INSTANCE, (bench.namespace_id, f"t-{time.time_ns()}-{i}",
                                                                   definition_id, app_id, "{}", "0" * 64,
                                                                   now.replace(year=now.year + 1), now, now))
            activation_id = tx.insert("INSERT INTO step_activations (instance_id, step_key, step_index, "
                                      "activation_sequence, status, activated_at) VALUES (%s, 's', 0, 1, 'ACTIVE', %s)",
                                      (instance_id, now))
            tx.execute(task_sql.INSERT_TASK, (bench.namespace_id, queue_id, instance_id, activation_id, "TASK", 3,
                                              now, now.replace(year=now.year + 1), now))

    for start in range(0, count, 500):
        bench.database.run(insert, start)


def http_pulse_worker(bench: Bench, done: list):
    def work(i):
        client = Http(bench, bench.worker_token)
        while True:
            status, task = client.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "lease_seconds": 60})
            if status == 204:
                return
            status, _ = client.post(f"/tasks/{task['task_id']}/complete",
                                    {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"i": i}})
            assert status == 200, status
            done.append(1)
    return work


def raw_pulse_worker(bench: Bench, done: list):
    """The same statements as claim_task and complete_task, on a bare PyMySQL connection."""
    def work(i):
        conn = connect(bench.url)
        cur = conn.cursor()
        while True:
            conn.begin()
            cur.execute(task_sql.LOCK_QUEUE_BY_NAME, (bench.namespace_id, QUEUE))
            queue = cur.fetchone()
            cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
            now = cur.fetchone()["now"]
            cur.execute(task_sql.CLAIM_NEXT_TASK, (queue["id"], now))
            task = cur.fetchone()
            if task is None:
                conn.rollback()
                break
            token = os.urandom(16).hex()
            cur.execute(task_sql.START_TASK, (token, now, f"w{i}", task["id"]))
            cur.execute(task_sql.TAKE_PERMIT, (queue["id"],))
            cur.execute(task_sql.SELECT_TASK_CONTEXT, (task["activation_id"],))
            cur.execute(task_sql.SELECT_STEP_RESULTS, (task["instance_id"],))
            cur.execute("INSERT INTO audit_records (namespace_id, instance_id, actor, action, at, details) "
                        "VALUES (%s, %s, 'w', 'task.claim', %s, '{}')", (bench.namespace_id, task["instance_id"], now))
            conn.commit()
            conn.begin()
            cur.execute(task_sql.SELECT_TASK_QUEUE, (task["id"], bench.namespace_id))
            cur.execute(task_sql.LOCK_QUEUE, (queue["id"],))
            cur.execute(task_sql.LOCK_TASK, (task["id"],))
            cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
            cur.execute(task_sql.SETTLE_TASK, ("SUCCEEDED", '{"i":1}', None, now, task["id"]))
            cur.execute(task_sql.RELEASE_PERMIT, (queue["id"],))
            cur.execute(task_sql.INSERT_INBOX, (task["id"], task["instance_id"], "SUCCEEDED", '{"i":1}', now, now))
            cur.execute("INSERT INTO audit_records (namespace_id, instance_id, actor, action, at, details) "
                        "VALUES (%s, %s, 'w', 'task.complete', %s, '{}')", (bench.namespace_id, task["instance_id"], now))
            conn.commit()
            done.append(1)
        conn.close()
    return work


def bench_pulse(bench: Bench, tasks: int) -> list[dict]:
    results = []
    for workers in (1, 8):
        rates = {}
        for name, make in (("weave", http_pulse_worker), ("baseline", raw_pulse_worker)):
            seed_tasks(bench, tasks)
            done: list = []
            seconds = run_threads(workers, make(bench, done))
            assert len(done) == tasks, (name, len(done))
            rates[name] = tasks / seconds
        results.append(report(f"tasks claimed+completed, {workers} worker(s)", rates["weave"], rates["baseline"],
                              "tasks/s"))
    return results


# ---- end to end: TASK-step workflows ------------------------------------------------------------------

E2E_DEFINITION = {"name": "e2e", "steps": [
    {"key": "a", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
    {"key": "b", "type": "TASK", "queue": QUEUE, "timeout_seconds": 3600},
]}


def bench_e2e(bench: Bench, workflows: int, workers: int = 8) -> list[dict]:
    client = Http(bench, bench.client_token)
    client.post("/definitions", E2E_DEFINITION)
    env = {**os.environ, "WEAVE_DATABASE_URL": bench.url.yoyo_url()}
    scanner = subprocess.Popen([sys.executable, "-m", "weave.cli", "scan", "--idle-seconds", "0.02"], env=env,
                               stderr=subprocess.DEVNULL)
    run_id = time.time_ns()
    finished = threading.Event()
    try:
        def start_all(_):
            c = Http(bench, bench.client_token)
            for i in range(workflows):
                c.post("/workflows", {"definition": "e2e", "version": 1, "input": {"i": i},
                                      "deadline_seconds": 3600, "workflow_id": f"e2e-{run_id}-{i}"})

        def work(i):
            if i == 0:
                return start_all(i)
            c = Http(bench, bench.worker_token)
            while not finished.is_set():
                status, task = c.post(f"/queues/{QUEUE}/claim", {"worker_id": f"w{i}", "wait_seconds": 1})
                if status == 200:
                    c.post(f"/tasks/{task['task_id']}/complete",
                           {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {"ok": True}})

        def watch():
            while bench.database.run(lambda tx: tx.one(
                    "SELECT COUNT(*) AS n FROM instances WHERE workflow_id LIKE %s AND status = 'SUCCEEDED'",
                    (f"e2e-{run_id}-%",)))["n"] < workflows:
                time.sleep(0.05)
            finished.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        seconds = run_threads(workers + 1, work)
        watcher.join()
    finally:
        scanner.terminate()
        scanner.wait(10)
    weave_rate = workflows / seconds
    baseline_rate = workflows / _in_process_e2e(bench, workflows)
    return [report(f"2-step TASK workflows end to end, {workers} workers", weave_rate, baseline_rate, "wf/s",
                   "  (baseline: the same units in-process, no HTTP, no scanner process)")]


def _in_process_e2e(bench: Bench, workflows: int) -> float:
    from sql import checkpoints, inbox

    db = bench.database
    app_id = db.run(lambda tx: tx.one("SELECT id FROM applications LIMIT 1"))["id"]
    run_id = time.time_ns()
    started = time.perf_counter()
    for i in range(workflows):
        instance_sql.start_workflow(db, bench.namespace_id, app_id, 1, "b", instance_sql.StartRequest(
            f"raw-{run_id}-{i}", "e2e", 1, '{"i":%d}' % i, 3600, f"{i:064d}"))
    while True:
        did = 0
        for row in db.run(checkpoints.due_candidates, 100):
            did += checkpoints.process_checkpoint(db, row["id"]) is not None
        while (claimed := task_sql.claim_task(db, bench.namespace_id, QUEUE, "w", 60, 1, "w")) is not None:
            task_sql.complete_task(db, bench.namespace_id, claimed.task_id, claimed.lease_token,
                                   task_sql.Completion("SUCCEEDED", '{"ok":true}'), frozenset({QUEUE}), 1, "w")
            did += 1
        for row in db.run(inbox.due_candidates, 100):
            did += inbox.consume_inbox_event(db, row["id"]) is not None
        if not did:
            break
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--only", choices=("pulse", "e2e"))
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = []
    with running_weave() as bench:
        print(f"# weave bench — {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
        if args.only in (None, "pulse"):
            results += bench_pulse(bench, args.tasks)
        if args.only in (None, "e2e"):
            results += bench_e2e(bench, args.workflows)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
