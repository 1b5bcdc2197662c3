#!/usr/bin/env python3
"""A small Pulse worker for the README walk-throughs (standard library only).

    .venv/bin/python scripts/example_worker.py --token wv_... [--base http://127.0.0.1:8080]
        [--namespace demo] [--queue default] [--tasks N] [--pending-rounds N] [--query-seconds S]

It long-polls the queue, does each task it claims and completes it:

- a TASK (kind "TASK"): reserve answers a reservation id, ship a tracking number, anything else
  echoes its input;
- a query round of a POLL step (kind "QUERY") asks a pretend carrier where the parcel is. The
  carrier says "in transit" ({"state": "PENDING"}) for the first --pending-rounds rounds of each
  workflow, then "delivered" ({"state": "FINAL", "result": {...}}). With --query-seconds S the
  carrier takes S seconds to answer; meanwhile the worker heartbeats every second, and when Weave
  asks it to stop (the carrier's webhook signal won), it gives up and reports CANCELLED.

Stops after --tasks tasks, or on Ctrl-C.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def call(base: str, token: str, path: str, body: dict):
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
        return response.status, (json.loads(data) if data else None), response.headers.get("Retry-After")


def work(task: dict) -> dict:
    context = task["input"]
    if task["step_key"] == "reserve":
        return {"reservation_id": f"res-{context['workflow_id']}"}
    if task["step_key"] == "ship":
        paid = context["steps"].get("payment", {}).get("result")
        return {"tracking": f"TRK-{context['workflow_id']}", "paid": paid}
    return {"echo": context["input"]}


class Carrier:
    """A pretend carrier API: each parcel is in transit for `pending_rounds` questions, then delivered."""

    def __init__(self, pending_rounds: int):
        self.pending_rounds = pending_rounds
        self.asked = {}  # workflow id -> the query tasks (rounds) asked about it

    def where_is(self, task: dict) -> dict:
        rounds = self.asked.setdefault(task["workflow_id"], set())
        rounds.add(task["task_id"])  # a retried attempt of a round is the same round
        if len(rounds) <= self.pending_rounds:
            return {"state": "PENDING"}
        parcel = task["input"]["input"].get("tracking_number")
        return {"state": "FINAL", "result": {"status": "delivered", "tracking_number": parcel, "source": "query"}}


def query(args, prefix: str, task: dict, carrier: Carrier) -> tuple[str, dict | None]:
    """One POLL round: (outcome, result). While the carrier is slow, heartbeat once a second; stop
    when Weave says the round is no longer needed (a final signal won: SPEC C2.4)."""
    answer_at = time.monotonic() + args.query_seconds
    while time.monotonic() < answer_at:
        time.sleep(min(1.0, answer_at - time.monotonic()))
        _, beat, _ = call(
            args.base,
            args.token,
            f"{prefix}/tasks/{task['task_id']}/heartbeat",
            {"lease_token": task["lease_token"], "lease_seconds": 60},
        )
        if beat["cancel_requested"]:
            return "CANCELLED", None
    return "SUCCEEDED", carrier.where_is(task)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--token", required=True, help="a credential with tasks:work and a grant for the queue")
    parser.add_argument("--base", default="http://127.0.0.1:8080")
    parser.add_argument("--namespace", default="demo")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--tasks", type=int, default=0, help="stop after this many tasks (0: run until Ctrl-C)")
    parser.add_argument(
        "--pending-rounds", type=int, default=2, help="query rounds answered PENDING per workflow before FINAL"
    )
    parser.add_argument("--query-seconds", type=float, default=0, help="how long the carrier takes to answer")
    args = parser.parse_args()
    prefix = f"/v1/namespaces/{args.namespace}"
    carrier = Carrier(args.pending_rounds)
    done = 0
    try:
        while not args.tasks or done < args.tasks:
            status, task, retry_after = call(
                args.base,
                args.token,
                f"{prefix}/queues/{args.queue}/claim",
                {"worker_id": "example-worker", "lease_seconds": 60, "wait_seconds": 5},
            )
            if status == 204:
                # Retry-After: the server had enough claims waiting and answered without waiting.
                time.sleep(int(retry_after or 0))
                continue
            if task["kind"] == "QUERY":
                if args.query_seconds:
                    print(f"{task['workflow_id']} {task['step_key']}: asking the carrier (slow)", flush=True)
                outcome, result = query(args, prefix, task, carrier)
            else:
                outcome, result = "SUCCEEDED", work(task)
            call(
                args.base,
                args.token,
                f"{prefix}/tasks/{task['task_id']}/complete",
                {"lease_token": task["lease_token"], "outcome": outcome}
                | ({"result": result} if outcome == "SUCCEEDED" else {}),
            )
            done += 1
            told = json.dumps(result) if outcome == "SUCCEEDED" else f"{outcome} (Weave asked to stop)"
            print(f"{task['workflow_id']} {task['step_key']} -> {told}", flush=True)
    except urllib.error.HTTPError as exc:
        print(f"worker: {exc.code} {exc.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
