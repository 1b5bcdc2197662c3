#!/usr/bin/env python3
"""A small Pulse worker for the README walk-through (standard library only).

    .venv/bin/python scripts/example_worker.py --token wv_... [--base http://127.0.0.1:8080]
        [--namespace demo] [--queue default] [--tasks N]

It long-polls the queue, "does" each task (reserve answers a reservation id, ship a tracking
number, anything else echoes its input) and completes it. Stops after --tasks tasks, or on Ctrl-C.
"""

import argparse
import json
import sys
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
        return response.status, (json.loads(data) if data else None)


def work(task: dict) -> dict:
    context = task["input"]
    if task["step_key"] == "reserve":
        return {"reservation_id": f"res-{context['workflow_id']}"}
    if task["step_key"] == "ship":
        paid = context["steps"].get("payment", {}).get("result")
        return {"tracking": f"TRK-{context['workflow_id']}", "paid": paid}
    return {"echo": context["input"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--token", required=True, help="a credential with tasks:work and a grant for the queue")
    parser.add_argument("--base", default="http://127.0.0.1:8080")
    parser.add_argument("--namespace", default="demo")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--tasks", type=int, default=0, help="stop after this many tasks (0: run until Ctrl-C)")
    args = parser.parse_args()
    prefix = f"/v1/namespaces/{args.namespace}"
    done = 0
    try:
        while not args.tasks or done < args.tasks:
            status, task = call(
                args.base,
                args.token,
                f"{prefix}/queues/{args.queue}/claim",
                {"worker_id": "example-worker", "lease_seconds": 60, "wait_seconds": 5},
            )
            if status == 204:
                continue
            result = work(task)
            call(
                args.base,
                args.token,
                f"{prefix}/tasks/{task['task_id']}/complete",
                {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": result},
            )
            done += 1
            print(f"{task['workflow_id']} {task['step_key']} -> {json.dumps(result)}", flush=True)
    except urllib.error.HTTPError as exc:
        print(f"worker: {exc.code} {exc.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
