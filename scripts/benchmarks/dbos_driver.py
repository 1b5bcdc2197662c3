"""DBOS Transact's `send` under load: the peer of `scripts/bench --only peer` (issue 17, target 3).

Run by the python of the bench's own DBOS venv (DBOS is not installed beside Weave), against the
private PostgreSQL the bench started. Untimed: launch DBOS (it creates and migrates its system
database), create the destination workflows (`send` refuses a destination that does not exist),
and from every thread send a few messages to a separate workflow, as the bench's HTTP clients do.
Timed: each thread sends its share, round-robin over the destinations, each with its own
idempotency key. It speaks with the bench over stdin/stdout so that the bench reads PostgreSQL's
CPU right around the timed part: it prints `ready`, waits for a line, sends, prints one line of
JSON (seconds, every latency in seconds, CPU seconds of this process) and exits when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from dbos import DBOS, SetWorkflowID

WARM_UP_SENDS = 10  # per thread, as the bench's WARM_UP_SIGNALS per HTTP client
MESSAGE = {"amount": 12.5}  # the payload of the bench's signals
TOPIC = "payment.settled"


@DBOS.workflow()
def destination() -> None:
    """Nothing to do: a message needs its destination's workflow row, not a running workflow
    (the bench's instances, too, are not yet waiting for the signals they are sent)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the system database, postgresql://…")
    parser.add_argument("--run", required=True, help="prefix of this run's workflow ids and idempotency keys")
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--destinations", type=int, default=200)
    args = parser.parse_args()

    DBOS(config={"name": "weave-bench-peer", "system_database_url": args.url, "log_level": "WARNING"})
    DBOS.launch()
    try:
        targets = [f"{args.run}-dest-{i}" for i in range(args.destinations)]
        warm_up = f"{args.run}-warm"
        for workflow_id in [*targets, warm_up]:
            with SetWorkflowID(workflow_id):
                destination()
        per_thread = max(1, args.sends // args.threads)
        latencies: list[float] = []
        seconds, cpu = _timed_sends(args.run, targets, warm_up, args.threads, per_thread, latencies)
        print(json.dumps({"seconds": seconds, "latencies": latencies, "cpu_seconds": cpu}), flush=True)
        sys.stdin.read()  # the bench reads PostgreSQL's CPU before our connections close
    finally:
        DBOS.destroy()
    return 0


def _timed_sends(
    run: str, targets: list[str], warm_up: str, count: int, per_thread: int, latencies: list
) -> tuple[float, float]:
    """Warm up in `count` threads, say `ready`, wait for the bench's line, then send from all of
    them: (seconds from the common start to the last finish, CPU seconds of this process)."""
    warmed, start = threading.Barrier(count + 1), threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def send(i: int) -> None:
        try:
            for n in range(WARM_UP_SENDS):
                DBOS.send(warm_up, MESSAGE, TOPIC, idempotency_key=f"{run}-warm-t{i}-{n}")
        except BaseException as exc:  # reported after the run; this thread sits the run out
            errors.append(exc)
        warmed.wait()
        start.wait()
        try:
            for n in range(per_thread if not errors else 0):
                started = time.perf_counter()
                DBOS.send(
                    targets[(i * per_thread + n) % len(targets)], MESSAGE, TOPIC, idempotency_key=f"{run}-t{i}-{n}"
                )
                latencies.append(time.perf_counter() - started)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    warmed.wait()
    print("ready", flush=True)
    sys.stdin.readline()
    start.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if errors:
        raise errors[0]
    return seconds, cpu


if __name__ == "__main__":
    sys.exit(main())
