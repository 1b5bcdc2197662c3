"""The `scale` section (issue 17, target 4): the same figures with a million stored signals as with
10,000, and one hot instance near its cap; the stored signals are written server-side as Weave
writes them."""

from __future__ import annotations

import os
import re
import signal
import time
from contextlib import contextmanager
from statistics import median

from benchmarks.harness import (
    QUEUE,
    Bench,
    Http,
    count_of,
    cpu_seconds,
    prepared,
    report,
    scanners,
    serving,
)
from benchmarks.workload import SIGNAL_DEFINITION, http_sender, signal_each, signal_run, timed_sends, waiting_workflows
from weave.db import connect

SCALE_BASE = 10_000  # stored signals of the reference figures
SCALE_SIGNALS_PER_INSTANCE = 100  # how the stored signals are spread: 10,000 instances hold a million
SCALE_RUNNING_EVERY = 10  # every 10th stored instance still runs; its signals are early (PENDING)
SCALE_CHUNK = 100_000  # signals loaded per transaction
SCALE_CONSUMED = 500  # signals consumed by the scanner per size
HOT_SENDS = 24  # timed signals per hot instance (1 and 8 clients: 24 and 3 each)
HOT_INSTANCES = 40  # hot instances per run: 960 timed signals
SCALE_TARGET = 1.2  # target 4: every figure at the large size within 1.2x of the one at 10,000

# Stored signals are written as Weave writes them (sql/signals.py `_accept`, sql/events.py, sql/audit.py),
# server-side from MariaDB's sequence engine, one chunk of instances at a time. Every statement names
# its columns, so a column added later with a default loads with its default (`signals_stored`, the
# count acceptance keeps, is set to the signals loaded). A settled instance
# (SUCCEEDED) holds its consumed winner, rejected and expired signals, both steps settled, its task done
# and its inbox event consumed; a running one is in its first (TASK) step, leased far ahead, and its
# signals wait for the SIGNAL step as early signals (PENDING, expiring at the instance's deadline,
# 30 days ahead). Instances are `{prefix}.{chunk}-{n}`; chunk by chunk they are found by that prefix.
LOAD_INSTANCES = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest, signals_stored,
                       status, gate, deadline_at, created_at, updated_at)
SELECT %(namespace)s, CONCAT(%(chunk)s, '-', s.seq), %(definition)s, %(application)s, '{{"order_id":"o"}}',
       SHA2(CONCAT(%(chunk)s, '-', s.seq), 256), %(per_instance)s,
       IF(s.seq MOD %(running_every)s = 0, 'RUNNING', 'SUCCEEDED'), IF(s.seq MOD %(running_every)s = 0, 'OPEN', 'CLOSED'),
       IF(s.seq MOD %(running_every)s = 0, %(now)s + INTERVAL 30 DAY, %(now)s - INTERVAL 19 DAY),
       %(now)s - INTERVAL 20 DAY + INTERVAL s.seq SECOND, %(now)s - INTERVAL 20 DAY + INTERVAL s.seq SECOND
FROM seq_0_to_{last_instance} s
"""
CHUNK_INSTANCES = (
    "FROM instances i WHERE i.namespace_id = %(namespace)s AND i.workflow_id LIKE CONCAT(%(chunk)s, '-%%')"
)
LOAD_ACTIVATIONS = (
    """
INSERT INTO step_activations (instance_id, step_key, step_index, activation_sequence, status, result, activated_at,
                              deadline_at, settled_at)
SELECT i.id, 'reserve', 0, 1, IF(i.status = 'RUNNING', 'ACTIVE', 'SUCCEEDED'), IF(i.status = 'RUNNING', NULL, '{{"ok":true}}'),
       i.created_at, i.deadline_at, IF(i.status = 'RUNNING', NULL, i.created_at + INTERVAL 1 SECOND)
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.id, 'payment', 1, 1, 'SUCCEEDED', '{{"amount":12.5}}', i.created_at, i.deadline_at, i.created_at + INTERVAL 1 HOUR
"""
    + CHUNK_INSTANCES
    + " AND i.status = 'SUCCEEDED'"
)
LOAD_TASKS = """
INSERT INTO tasks (namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
                   available_at, lease_token, lease_expires_at, worker_id, deadline_at, result, created_at, completed_at)
SELECT i.namespace_id, %(queue)s, i.id, a.id, 'TASK', IF(i.status = 'RUNNING', 'RUNNING', 'SUCCEEDED'), 1, 3,
       i.created_at, IF(i.status = 'RUNNING', LEFT(SHA2(i.id, 256), 32), NULL),
       IF(i.status = 'RUNNING', i.deadline_at, NULL), 'loader', i.deadline_at,
       IF(i.status = 'RUNNING', NULL, '{{"ok":true}}'), i.created_at, IF(i.status = 'RUNNING', NULL, i.created_at)
""" + CHUNK_INSTANCES.replace(
    "WHERE", "JOIN step_activations a ON a.instance_id = i.id AND a.step_key = 'reserve' WHERE"
)
LOAD_INBOX = (
    """
INSERT INTO inbox_events (task_id, instance_id, outcome, result, completed_at, status, available_at, attempts,
                          consumed_at)
SELECT t.id, i.id, 'SUCCEEDED', t.result, t.completed_at, 'CONSUMED', t.completed_at, 0, t.completed_at
"""
    + CHUNK_INSTANCES.replace("WHERE", "JOIN tasks t ON t.instance_id = i.id WHERE")
    + " AND i.status = 'SUCCEEDED'"
)
# A running instance looks again at its task's deadline (engine.activate).
LOAD_CHECKPOINTS = (
    """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
SELECT i.id, 'ROOT', NULL, i.deadline_at, i.deadline_at, 0, i.created_at
"""
    + CHUNK_INSTANCES
    + " AND i.status = 'RUNNING'"
)
# Signal n of an instance: the first is its wait's winner, every 10th expired unmatched, the rest
# turned down when the step settled; all of a running instance's are early, PENDING.
LOAD_SIGNALS = (
    (
        """
INSERT INTO signals (instance_id, name, payload_version, target_step_key, target_activation_sequence, correlation,
                     payload, payload_sha256, payload_present, reason, evidence_ref, actor, credential_id,
                     idempotency_key, request_digest, status, disposition, accepted_at, expires_at, available_at,
                     settled_at, created_at, receipt, consumed_at)
SELECT i.id, 'payment.settled', 'v1', 'payment', 1, 'o', '{{"amount":12.5}}', SHA2('{{"amount":12.5}}', 256), 1,
       'benchmark', NULL, 'bench-client', %(credential)s, CONCAT('load-', n.seq), SHA2(CONCAT(i.id, '-', n.seq), 256),
       {status}, {disposition}, i.created_at + INTERVAL n.seq SECOND, i.deadline_at, i.deadline_at,
       IF(i.status = 'RUNNING', NULL, i.created_at + INTERVAL 1 HOUR), i.created_at + INTERVAL n.seq SECOND,
       CONCAT('"workflow_id":"', CONVERT(i.workflow_id USING utf8mb4), '","status":"', {status}, '","disposition":',
              IFNULL(CONCAT('"', {disposition}, '"'), 'null'), ',"accepted_at":"',
              DATE_FORMAT(i.created_at + INTERVAL n.seq SECOND, %(rfc3339)s), '","expires_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '","idempotency_key":"load-', n.seq,
              '","request_digest":"', SHA2(CONCAT(i.id, '-', n.seq), 256), '"}}'),
       IF(i.status <> 'RUNNING' AND n.seq = 0, i.created_at + INTERVAL 1 HOUR, NULL)
"""
        + CHUNK_INSTANCES.replace("WHERE", "JOIN seq_0_to_{last_signal} n WHERE")
    )
    .replace(
        "{status}",
        "IF(i.status = 'RUNNING', 'PENDING', IF(n.seq = 0, 'CONSUMED', IF(n.seq MOD 10 = 9, 'EXPIRED', 'REJECTED')))",
    )
    .replace(
        "{disposition}",
        "IF(i.status = 'RUNNING' OR n.seq = 0, NULL, IF(n.seq MOD 10 = 9, 'EXPIRED_UNMATCHED', 'WAIT_SETTLED'))",
    )
)
LOADED_SIGNALS = CHUNK_INSTANCES.replace("WHERE", "JOIN signals s ON s.instance_id = i.id WHERE")
LOAD_WAITS = (
    """
INSERT INTO waits (instance_id, step_key, kind, name, payload_version, correlation, activation_id,
                   activation_sequence, status, deadline_at, created_at, winner_signal_id, settled_at)
SELECT i.id, 'payment', 'SIGNAL', 'payment.settled', 'v1', 'o', a.id, 1, 'SATISFIED', i.deadline_at, i.created_at,
       s.id, s.consumed_at
"""
    + LOADED_SIGNALS.replace(
        "WHERE", "JOIN step_activations a ON a.instance_id = i.id AND a.step_key = 'payment' WHERE"
    )
    + " AND s.status = 'CONSUMED'"
)
SIGNAL_EVENT_DATA = """CONCAT('{{"signal_id":"', s.id, '","name":"payment.settled","target_step_key":"payment",',
       '"target_activation_sequence":1,"status":"PENDING","disposition":null,"actor":"bench-client"')"""
LOAD_EVENTS = (
    """
INSERT INTO events (instance_id, seq, type, at, data)
SELECT i.id, 1, 'WORKFLOW_STARTED', i.created_at,
       CONCAT('{{"definition":"pay","version":1,"actor":"bench-client","deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.id, 2 + CAST(SUBSTRING(s.idempotency_key, 6) AS UNSIGNED), 'SIGNAL_ACCEPTED', s.accepted_at,
       CONCAT({data}, '}}')
"""
    + LOADED_SIGNALS
).replace("{data}", SIGNAL_EVENT_DATA)
LOAD_AUDIT = (
    """
INSERT INTO audit_records (namespace_id, instance_id, signal_id, credential_id, actor, action, request_digest, at,
                           details)
SELECT i.namespace_id, i.id, NULL, %(credential)s, 'bench-client', 'workflow.start', i.request_digest, i.created_at,
       CONCAT('{{"workflow_id":"', CONVERT(i.workflow_id USING utf8mb4), '","definition":"pay","version":1,"deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + CHUNK_INSTANCES
    + """
UNION ALL
SELECT i.namespace_id, i.id, s.id, %(credential)s, 'bench-client', 'signal.send', s.request_digest, s.accepted_at,
       CONCAT({data}, ',"idempotency_key":"', CONVERT(s.idempotency_key USING utf8mb4), '","accepted_at":"',
              DATE_FORMAT(s.accepted_at, %(rfc3339)s), '","instance_deadline_at":"',
              DATE_FORMAT(i.deadline_at, %(rfc3339)s), '"}}')
"""
    + LOADED_SIGNALS
).replace("{data}", SIGNAL_EVENT_DATA)
# Each statement of a chunk, in the order of their references.
LOAD_CHUNK = (
    LOAD_ACTIVATIONS,
    LOAD_TASKS,
    LOAD_INBOX,
    LOAD_CHECKPOINTS,
    LOAD_SIGNALS,
    LOAD_WAITS,
    LOAD_EVENTS,
    LOAD_AUDIT,
)


def load_stored_signals(bench: Bench, prefix: str, instances: int, per_instance: int, running_every: int) -> list[str]:
    """`instances` instances of `pay` holding `per_instance` signals each, with their events and
    audit records, written server-side; every `running_every`-th instance still runs. Returns their
    workflow ids. The loading connection skips unique checks: the rows are unique by construction."""
    ids = bench.database.read(
        lambda tx: tx.one(
            "SELECT d.id AS definition, c.application_id AS application, c.id AS credential,"
            " (SELECT id FROM queues WHERE namespace_id = %s AND name = %s) AS queue"
            " FROM definitions d JOIN credentials c ON c.namespace_id = d.namespace_id"
            " WHERE d.namespace_id = %s AND d.name = 'pay' AND c.actor = 'bench-client'",
            (bench.namespace_id, QUEUE, bench.namespace_id),
        )
    )
    per_chunk = max(1, SCALE_CHUNK // per_instance)
    conn = connect(bench.url)
    workflow_ids = []
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION unique_checks = 0")
        cur.execute("SELECT UTC_TIMESTAMP(6) AS now")
        now = cur.fetchone()["now"]
        for first in range(0, instances, per_chunk):
            count = min(per_chunk, instances - first)
            chunk = f"{prefix}.{first // per_chunk}"
            params = {
                **ids,
                "namespace": bench.namespace_id,
                "chunk": chunk,
                "running_every": running_every,
                "per_instance": per_instance,
                "now": now,
                "rfc3339": "%Y-%m-%dT%H:%i:%s.%fZ",
            }
            cur.execute(LOAD_INSTANCES.format(last_instance=count - 1), params)
            for statement in LOAD_CHUNK:
                cur.execute(statement.format(last_signal=per_instance - 1), params)
            conn.commit()
            workflow_ids += [f"{chunk}-{n}" for n in range(count)]
    finally:
        conn.close()
    return workflow_ids


PURGE_SETTLED = 1000  # undo records of committed transactions left for InnoDB's purge threads


def _purge_backlog(cur) -> int:
    """InnoDB's history list length: what its purge threads still have to clean up."""
    cur.execute("SHOW ENGINE INNODB STATUS")
    status = cur.fetchone()["Status"]
    found = re.search(r"History list length (\d+)", status)
    return int(found.group(1)) if found else 0


def _settled(bench: Bench, most_seconds: float = 120.0) -> float:
    """After a load: fresh optimizer statistics, the loaded pages written out and the load's undo
    purged, so that neither InnoDB's flushing, its checkpoint pressure nor its purge threads compete
    with what is measured next. MariaDB's page cleaner leaves dirty pages alone until the redo log
    presses, so the bench's own server is told to flush everything now
    (`innodb_max_dirty_pages_pct = 0`), then set back. Returns the seconds it took."""
    started = time.monotonic()
    conn = connect(bench.url, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("ANALYZE TABLE instances, signals, events, audit_records, step_activations, tasks, waits")
        cur.fetchall()
        cur.execute("SELECT @@innodb_max_dirty_pages_pct AS pct, @@innodb_io_capacity AS io")
        was = cur.fetchone()
        cur.execute(
            "SET GLOBAL innodb_max_dirty_pages_pct = 0, innodb_io_capacity = GREATEST(@@innodb_io_capacity, 2000)"
        )
        try:
            while time.monotonic() - started < most_seconds:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                dirty = int(cur.fetchone()["Value"])
                if dirty <= 100 and _purge_backlog(cur) <= PURGE_SETTLED:
                    break
                time.sleep(0.5)
        finally:
            cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = %s, innodb_io_capacity = %s", (was["pct"], was["io"]))
    finally:
        conn.close()
    return time.monotonic() - started


def _consumption_cost(bench: Bench, prefix: str, count: int, clients: int = 8) -> dict:
    """The scanner's cost per candidate: `count` workflows wait on their SIGNAL step; with the one
    `weave scan` stopped (SIGSTOP once nothing is due, so it holds no lock), `clients` clients send
    their signals; then it goes on and consumes them. Per consumed signal: the wall time (first to
    last consumption, database times), the scanner's and the database's CPU."""
    (scanner,) = scanners(bench, 1)
    waiting = (
        "SELECT COUNT(*) AS n FROM instances i JOIN waits w ON w.instance_id = i.id "
        "WHERE i.namespace_id = %s AND i.workflow_id LIKE %s AND w.status = 'WAITING'"
    )
    try:
        ids = waiting_workflows(bench, prefix, count)
        # Every wait's first look (a WAIT checkpoint due at its activation) done and committed: its
        # batches now find nothing, so it is stopped holding no lock.
        deadline = time.monotonic() + 120
        while count_of(bench, "SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= UTC_TIMESTAMP(6)"):
            assert time.monotonic() < deadline, "the scanner did not catch up"
            time.sleep(0.1)
        os.kill(scanner.pid, signal.SIGSTOP)
        try:
            signal_each(bench, ids, prefix, clients)
        finally:
            before = cpu_seconds(scanner.pid), cpu_seconds(bench.database_pid), _pool_reads(bench)
            os.kill(scanner.pid, signal.SIGCONT)
        deadline = time.monotonic() + 300
        while count_of(bench, waiting, bench.namespace_id, f"{prefix}-%"):
            assert time.monotonic() < deadline, "signals were not consumed"
            time.sleep(0.1)
        scanner_cpu, database_cpu, pool_reads = (
            cpu_seconds(scanner.pid) - before[0],
            cpu_seconds(bench.database_pid) - before[1],
            _pool_reads(bench) - before[2],
        )
    finally:
        scanner.terminate()
        scanner.wait(10)
    span = bench.database.read(
        lambda tx: tx.one(
            "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(s.consumed_at), MAX(s.consumed_at)) AS us, COUNT(*) AS n "
            "FROM instances i JOIN signals s ON s.instance_id = i.id "
            "WHERE i.namespace_id = %s AND i.workflow_id LIKE %s AND s.status = 'CONSUMED'",
            (bench.namespace_id, f"{prefix}-%"),
        )
    )
    assert span["n"] == count, span
    return {
        "ms_per_candidate": span["us"] / 1000 / max(1, count - 1),
        "scanner_cpu_ms": scanner_cpu * 1000 / count,
        "database_cpu_ms": database_cpu * 1000 / count,
        "pool_reads": pool_reads / count,
    }


def _pool_reads(bench: Bench) -> int:
    """Pages InnoDB has read from disk so far (buffer pool misses), on the whole server."""
    return int(bench.database.read(lambda tx: tx.one("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'"))["Value"])


def _within(ratio: float, slower_when_above: bool) -> str:
    """Target 4 on one ratio (large / reference): met, or by how much it is missed."""
    worse = ratio if slower_when_above else 1 / ratio if ratio else float("inf")
    return "  meets 1.2x" if worse <= SCALE_TARGET else f"  MISSES 1.2x ({worse:.2f}x slower)"


@contextmanager
def _beside(bench: Bench, database: str, threads: int, processes: int):
    """A second database on `bench`'s server, with the bench's tenant and a `weave serve` of its
    own: a Bench whose runs can alternate with `bench`'s under the same conditions."""
    url = bench.url.with_database(database)
    prepared_database, client_token, worker_token, namespace_id = prepared(url)
    try:
        env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
        with serving(env, threads, processes) as (base, pid):
            yield Bench(url, prepared_database, base, client_token, worker_token, namespace_id, pid, bench.database_pid)
    finally:
        prepared_database.close()


def _load_sized(bench: Bench, size: int) -> None:
    """`size` stored signals into `bench`'s database, 100 per instance, then settled; timed."""
    Http(bench, bench.client_token).post("/definitions", SIGNAL_DEFINITION)
    started = time.monotonic()
    instances = size // SCALE_SIGNALS_PER_INSTANCE
    load_stored_signals(bench, "load", instances, SCALE_SIGNALS_PER_INSTANCE, SCALE_RUNNING_EVERY)
    loaded = time.monotonic() - started
    waited = _settled(bench)
    print(
        f"scale: {size:,} stored signals in {instances:,} instances, with their events and audit records: "
        f"loaded in {loaded:.1f} s, written out in {waited:.1f} s",
        flush=True,
    )


def run(
    bench: Bench,
    large: int,
    base: int = SCALE_BASE,
    per_run: int = 2000,
    repeat: int = 3,
    consumed: int = SCALE_CONSUMED,
    hot_instances: int = HOT_INSTANCES,
    threads: int = 16,
    processes: int = 2,
) -> list[dict]:
    """Target 4: the same figures with `large` stored signals (in `bench`'s database) and with `base`
    (in a second database on the same server, served by a second `weave serve`), runs alternating
    between the two, each first in every other pair (the machine's conditions of the moment are
    shared by a pair, as in the signals section): acceptance at 8 clients over 200 fresh instances, and
    the scanner's cost per consumed signal (`_consumption_cost`). Each large figure is printed
    beside the reference with the median of the pairs' ratios. Then one hot instance near its cap
    against one holding 10 signals, at 1 and 8 clients, in the large database."""
    from weave.sql.signals import SIGNALS_PER_INSTANCE

    with _beside(bench, f"{bench.url.database}_base", threads, processes) as small:
        _load_sized(small, base)
        _load_sized(bench, large)
        sides = {"large": bench, "base": small}
        rates: dict[str, list[float]] = {"large": [], "base": []}
        cpu: dict[str, list[list[float]]] = {"large": [], "base": []}
        costs: dict[str, list[dict]] = {"large": [], "base": []}
        for pair in range(repeat):
            for side in ("large", "base")[:: 1 if pair % 2 == 0 else -1]:
                reads = _pool_reads(bench)
                rate, times, split = signal_run(sides[side], http_sender, 200, 8, max(1, per_run // 8), f"scale{pair}")
                rates[side].append(rate)
                cpu[side].append([*split, (_pool_reads(bench) - reads) / len(times)])
        for pair in range(repeat):
            for side in ("large", "base")[:: 1 if pair % 2 == 0 else -1]:
                costs[side].append(_consumption_cost(sides[side], f"scan{pair}", consumed))
    at_base = f"{base:,} stored"
    results = [sized_rate_row(f"scale: signals accepted, 8 clients, {large:,} stored", rates, cpu, at_base)]
    for key, label in (
        ("ms_per_candidate", "scanner: wall ms per consumed signal"),
        ("scanner_cpu_ms", "scanner: its CPU ms per consumed signal"),
        ("database_cpu_ms", "scanner: database CPU ms per consumed signal"),
    ):
        values = {side: [cost[key] for cost in runs] for side, runs in costs.items()}
        ratios = [big / small if small else float("nan") for big, small in zip(values["large"], values["base"])]
        row = report(
            f"scale: {label}, {large:,} stored",
            median(values["large"]),
            median(values["base"]),
            "ms",
            _within(median(ratios), slower_when_above=True)
            + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}"
            + (
                "   pages read from disk per signal %.2f vs %.2f"
                % tuple(median(cost["pool_reads"] for cost in costs[side]) for side in ("large", "base"))
                if key == "database_cpu_ms"
                else ""
            ),
            median(ratios),
            at_base,
        )
        row["run_ratios"] = [round(r, 3) for r in ratios]
        results.append(row)
    for row in results:
        row["stored"], row["baseline_stored"] = large, base
    return results + _hot_instance(bench, SIGNALS_PER_INSTANCE - HOT_SENDS, repeat, hot_instances)


def sized_rate_row(label: str, rates: dict, cpu: dict, at_base: str) -> dict:
    """The printed row of an acceptance rate at the large size ("large") beside the reference
    ("base") from alternating pairs: median rates, the median of the pairs' ratios against the
    1.2x target, the mean CPU split and pool reads from disk per signal of each side (`cpu`'s
    splits: server, load, db, pool reads)."""
    mean_cpu = {side: [sum(column) / len(column) for column in zip(*splits)] for side, splits in cpu.items()}
    ratios = [big / small for big, small in zip(rates["large"], rates["base"])]
    row = report(
        label,
        median(rates["large"]),
        median(rates["base"]),
        "sig/s",
        "   CPU ms/signal (server, load, db) %.2f, %.2f, %.2f vs %.2f, %.2f, %.2f"
        "   pages read from disk per signal %.2f vs %.2f"
        % (*mean_cpu["large"][:3], *mean_cpu["base"][:3], mean_cpu["large"][3], mean_cpu["base"][3])
        + _within(median(ratios), slower_when_above=False)
        + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}",
        ratio=median(ratios),
        baseline_name=at_base,
    )
    row["run_ratios"] = [round(r, 3) for r in ratios]
    row["cpu_ms_per_signal"] = {side: [round(v, 2) for v in split[:3]] for side, split in mean_cpu.items()}
    row["pool_reads_per_signal"] = {side: round(split[3], 2) for side, split in mean_cpu.items()}
    return row


def _hot_instance(bench: Bench, near: int, repeat: int, instances: int, far: int = 10) -> list[dict]:
    """Per-signal cost into one instance that holds `near` signals (its last HOT_SENDS before the
    cap) against one holding `far`: every client sends its share to the same instance, then all go
    on to the next of `instances` loaded ones. Runs alternate, each first in every other pair."""
    results = []
    run = 0
    for clients in (1, 8):
        per_instance = HOT_SENDS // clients
        rates: dict[int, list[float]] = {near: [], far: []}
        cpu: dict[int, list[list[float]]] = {near: [], far: []}
        for pair in range(repeat):
            for held in (near, far)[:: 1 if pair % 2 == 0 else -1]:
                run += 1
                hot = load_stored_signals(bench, f"hot{run}", instances, held, running_every=1)
                _settled(bench)
                targets = [hot[n // per_instance] for _ in range(clients) for n in range(per_instance * instances)]
                rate, _, split = timed_sends(
                    bench, http_sender, targets, clients, per_instance * instances, f"hot{run}"
                )
                rates[held].append(rate)
                cpu[held].append(split)
        mean_cpu = {held: [sum(column) / len(column) for column in zip(*splits)] for held, splits in cpu.items()}
        ratios = [n / f for n, f in zip(rates[near], rates[far])]  # each pair shares the moment's conditions
        ratio = median(ratios)
        row = report(
            f"scale: one hot instance, {clients} client(s), {near:,} -> {near + HOT_SENDS:,} stored",
            median(rates[near]),
            median(rates[far]),
            "sig/s",
            "   CPU ms/signal (server, load, db) %.2f, %.2f, %.2f vs %.2f, %.2f, %.2f"
            % (*mean_cpu[near], *mean_cpu[far])
            + ("  no slower" if ratio >= 1 else f"  {1 / ratio:.2f}x slower per signal")
            + f"   run ratios {' '.join(f'{r:.2f}' for r in ratios)}",
            ratio=ratio,
            baseline_name=f"{far} stored",
        )
        row["run_ratios"] = [round(r, 3) for r in ratios]
        row["cpu_ms_per_signal"] = {
            "near": [round(v, 2) for v in mean_cpu[near]],
            "far": [round(v, 2) for v in mean_cpu[far]],
        }
        results.append(row)
    return results
