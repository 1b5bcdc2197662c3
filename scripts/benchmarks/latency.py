"""The `latency` section: a signal's acceptance to its consumption, one `weave scan` running; with
`--latency-hanging`, the same run again while that scanner's delivery threads are all held by an
endpoint that never answers (N2: a slow endpoint never slows signal consumption), and the ratio of
the two p99s."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager

from benchmarks.harness import Bench, Http, cpu_seconds, percentile, scanners
from benchmarks.workload import pending, signal_body, waiting_workflows
from weave.rules import notify
from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key

# Sends that wake an idle scanner, before the measured ones: at 37 ms apart, the scanner's longest
# sleep (0.25 s) takes up to 7 of them.
LATENCY_WARM_UP = 10
# Notifications to the hanging endpoint, due when the run starts: many times the scanner's delivery
# threads (16 by default), so that they stay full for the whole run, each attempt held to the timeout.
HANGING_NOTIFICATIONS = 400


def run(bench: Bench, signals: int, idle_window: float = 5.0, prefix: str = "lat", label: str = "") -> list[dict]:
    """Acceptance to consumption with one `weave scan` running and active waits (database times)."""
    (scanner,) = scanners(bench, 1)
    try:
        ids = waiting_workflows(bench, prefix, signals + LATENCY_WARM_UP)
        time.sleep(1)
        cpu_before = cpu_seconds(scanner.pid)
        time.sleep(idle_window)
        idle_cpu = (cpu_seconds(scanner.pid) - cpu_before) / idle_window
        client = Http(bench, bench.client_token)
        for i, workflow_id in enumerate(ids):
            client.headers["Idempotency-Key"] = f"{prefix}-{i}"
            client.post(f"/workflows/{workflow_id}/signals", signal_body(f"o-{i}"))
            time.sleep(0.037)  # spread the sends over the scanner's sleep cycle
        while pending(bench, prefix):
            time.sleep(0.1)
        rows = bench.database.run(
            lambda tx: tx.all(
                "SELECT TIMESTAMPDIFF(MICROSECOND, accepted_at, consumed_at) AS us"
                " FROM signals WHERE idempotency_key LIKE %s ORDER BY id",
                (f"{prefix}-%",),
            )
        )
    finally:
        scanner.terminate()
        scanner.wait(10)
    # The first sends find the scanner in its idle sleep (up to IDLE_SECONDS): they wait for it to
    # wake, by design. The steady-state figures are those of the sends after them.
    first = rows[0]["us"] / 1000
    millis = [row["us"] / 1000 for row in rows[LATENCY_WARM_UP:]]
    p50, p99 = percentile(millis, 50), percentile(millis, 99)
    print(
        f"signal accepted -> consumed{label} ({len(millis)} signals, one scanner, after {LATENCY_WARM_UP} sent first)   "
        f"p50 {p50:.1f} ms   p99 {p99:.1f} ms   max {max(millis):.1f} ms   the first after idling {first:.1f} ms   "
        f"idle scanner CPU {idle_cpu * 100:.1f}% of a core",
        flush=True,
    )
    return [
        {
            "label": f"signal accepted -> consumed{label}",
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
            "max_ms": round(max(millis), 1),
            "first_after_idle_ms": round(first, 1),
            "idle_scanner_cpu_percent": round(idle_cpu * 100, 2),
        }
    ]


def run_beside_hanging(
    bench: Bench, signals: int, idle_window: float = 5.0, notifications: int = HANGING_NOTIFICATIONS
) -> list[dict]:
    """`run`, then the same run with a subscription to an endpoint on loopback that accepts
    connections and never answers, `notifications` of it due; the p99 ratio of the two (issue 32:
    at most 1.1)."""
    plain = run(bench, signals, idle_window)
    with hanging_endpoint() as url, secret_key() as keyring:
        held = subscribe_hanging(bench, url, keyring, notifications)
        hung = run(bench, signals, idle_window, prefix="hang", label=" beside a hanging endpoint")
        tried = bench.database.run(
            lambda tx: tx.one(
                "SELECT COUNT(*) AS n FROM notification_attempts a JOIN notifications n"
                " ON n.id = a.notification_id WHERE n.subscription_id = %s",
                (held,),
            )
        )["n"]
    ratio = hung[0]["p99_ms"] / plain[0]["p99_ms"] if plain[0]["p99_ms"] else float("inf")
    print(
        f"accept -> consume p99 beside a hanging endpoint / without: {ratio:.2f}   (target <= 1.10; "
        f"{tried} attempts timed out meanwhile)",
        flush=True,
    )
    return [*plain, *hung, {"label": "accept -> consume p99, hanging endpoint / none", "p99_ratio": round(ratio, 2)}]


@contextmanager
def hanging_endpoint():
    """An HTTP endpoint on loopback that accepts every connection and never answers; its URL."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)  # read nothing, answer nothing: the attempt waits for its timeout

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        stop.set()
        listener.close()
        for connection in held:
            connection.close()


@contextmanager
def secret_key():
    """WEAVE_SECRET_KEY for the scanners started meanwhile (they decrypt the subscription's secret)."""
    before = os.environ.get(SECRET_KEY_VARIABLE)
    key = new_key()
    os.environ[SECRET_KEY_VARIABLE] = key
    try:
        yield Keyring([key])
    finally:
        if before is None:
            del os.environ[SECRET_KEY_VARIABLE]
        else:
            os.environ[SECRET_KEY_VARIABLE] = before


def subscribe_hanging(bench: Bench, url: str, keyring: Keyring, notifications: int) -> int:
    """A subscription of the bench's namespace to `url` and `notifications` of it, due now, as the
    store writes them (plain SQL: the bench measures delivery, not the subscription's commands)."""

    def insert(tx):
        now = tx.now()
        subscription = tx.insert(
            "INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at,"
            " updated_at) VALUES (%s, 'hanging', %s, 1, 'ENABLED', %s, %s, %s)",
            (bench.namespace_id, url, keyring.encrypt(notify.new_secret()), now, now),
        )
        tx.executemany(
            "INSERT INTO notifications (subscription_id, namespace_id, event_type, webhook_id, occurred_at, body,"
            " status, due_at) VALUES (%s, %s, 'workflow.needs_review', %s, %s, '{}', 'PENDING', %s)",
            [(subscription, bench.namespace_id, f"msg_{uuid.uuid4().hex}", now, now) for _ in range(notifications)],
        )
        return subscription

    return bench.database.run(insert)
