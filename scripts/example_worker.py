#!/usr/bin/env python3
"""The README's worker: a `weave.sdk.Worker` for the demo definitions of `weave dev`.

    .venv/bin/python scripts/example_worker.py [--tasks N] [--pending-rounds N] [--query-seconds S]
        [--url URL] [--namespace NS] [--token TOKEN] [--queue default]

The URL, namespace and token come from WEAVE_URL, WEAVE_NAMESPACE and WEAVE_WORKER_TOKEN (the
`export` line `weave dev` prints) unless given as flags. It needs only the standard library and
`weave.sdk`, so the checkout's .venv/bin/python runs it.

One handler per step key:

- `reserve` and `ship`, the TASK steps of `order`: reserve answers a reservation id, ship a
  tracking number and the payment it was given;
- `track`, the POLL step of `shipment`: each query round (a task of kind QUERY) asks a pretend
  carrier where the parcel is. The carrier says "in transit" (`pending()`) for the first
  --pending-rounds rounds of each workflow, then "delivered" (`final(...)`). With
  --query-seconds S the carrier takes S seconds to answer; meanwhile the worker heartbeats every
  second, and when Weave asks it to stop (the carrier's webhook signal won), it gives up and
  reports CANCELLED.

It prints one line per task it has done (`WORKFLOW STEP -> what it reports`), stops after --tasks
tasks (0: until Ctrl-C or SIGTERM), and then exits 0.
"""

import argparse
import logging
import os
import sys
import threading

from weave.sdk import Cancelled, Client, Worker, dumps, final, pending


def reserve(task) -> dict:
    return {"reservation_id": f"res-{task.workflow_id}"}


def ship(task) -> dict:
    paid = task.input["steps"]["payment"]["result"]  # the payment signal's payload, exactly
    return {"tracking": f"TRK-{task.workflow_id}", "paid": paid}


class Carrier:
    """A pretend carrier API: each parcel is in transit for `pending_rounds` questions, then delivered."""

    def __init__(self, pending_rounds: int, seconds: float):
        self.pending_rounds = pending_rounds
        self.seconds = seconds
        self.asked = {}  # workflow id -> the query tasks (rounds) asked about it
        self.lock = threading.Lock()

    def track(self, task) -> dict:
        """One query round of the POLL step `track`: PENDING or FINAL."""
        if self.seconds:
            print(f"{task.workflow_id} {task.step_key}: asking the carrier (slow)", flush=True)
            # The worker heartbeats meanwhile; wait() returns early when Weave asks to cancel (a
            # final signal won the POLL: C2.4 in docs/rules.md) or the lease is lost.
            task.wait(self.seconds)
            task.raise_if_cancel_requested()
        with self.lock:
            rounds = self.asked.setdefault(task.workflow_id, set())
            rounds.add(task.task_id)  # a retried attempt of a round is the same round
            asked = len(rounds)
        if asked <= self.pending_rounds:
            return pending()
        parcel = task.input["input"].get("tracking_number")
        return final({"status": "delivered", "tracking_number": parcel, "source": "query"})


class Counted:
    """Wraps the handlers: prints what each task reports and stops the worker after `limit` tasks."""

    def __init__(self, limit: int):
        self.limit = limit
        self.done = 0
        self.lock = threading.Lock()
        self.worker = None

    def __call__(self, handler):
        def run(task):
            try:
                result = handler(task)
            except Cancelled:
                self.finished(task, "CANCELLED (Weave asked to stop)")
                raise
            except Exception as exc:
                self.finished(task, f"FAILED ({type(exc).__name__}: {exc})")
                raise
            self.finished(task, dumps(result))
            return result

        return run

    def finished(self, task, told: str) -> None:
        print(f"{task.workflow_id} {task.step_key} -> {told}", flush=True)
        with self.lock:
            self.done += 1
            if self.limit and self.done >= self.limit:
                self.worker.stop()  # no new claims; this task is still reported


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("WEAVE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--namespace", default=os.environ.get("WEAVE_NAMESPACE", "demo"))
    parser.add_argument(
        "--token",
        default=os.environ.get("WEAVE_WORKER_TOKEN"),
        help="a credential with tasks:work and a grant for the queue (default: $WEAVE_WORKER_TOKEN)",
    )
    parser.add_argument("--queue", default="default")
    parser.add_argument("--tasks", type=int, default=0, help="stop after this many tasks (0: run until Ctrl-C)")
    parser.add_argument(
        "--pending-rounds", type=int, default=2, help="query rounds answered PENDING per workflow before FINAL"
    )
    parser.add_argument("--query-seconds", type=float, default=0, help="how long the carrier takes to answer")
    args = parser.parse_args()
    if not args.token:
        parser.error("set WEAVE_WORKER_TOKEN (the worker token weave dev printed) or pass --token")
    logging.basicConfig(format="worker: %(message)s", level=logging.WARNING)

    carrier = Carrier(args.pending_rounds, args.query_seconds)
    counted = Counted(args.tasks)
    handlers = {"reserve": counted(reserve), "ship": counted(ship), "track": counted(carrier.track)}
    client = Client(args.url, args.token, args.namespace)
    # One task at a time; a heartbeat every second, so that a cancellation is seen at once; claims
    # wait 5 s at most, so that Ctrl-C stops it soon (a real worker keeps the defaults).
    counted.worker = Worker(client, args.queue, handlers, lease_seconds=30, heartbeat_seconds=1, poll_seconds=5)
    counted.worker.run()  # until --tasks are done, Ctrl-C or SIGTERM
    return 0


if __name__ == "__main__":
    sys.exit(main())
