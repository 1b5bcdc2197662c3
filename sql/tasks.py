"""Pulse: tasks, their leases, the queues' permit budget and the inbox of final outcomes.

Lock order (a subset of the global one): queue -> task. The queue row is the permit budget and is
always locked for real (`FOR UPDATE`), never skipped: claim, complete and lease expiry of one queue
therefore take turns on it, which is what keeps `permits_in_use` within 0..max_permits.

Every way a RUNNING task ends goes through `_release_permit`; every final outcome goes through
`_settle`, which writes exactly one inbox event in the same transaction (P6). Every state change
is a guarded UPDATE checked by `Tx.transition`: a permit can neither go below 0 nor above
`max_permits` without the unit failing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from weave import auth, jsontext
from weave.db import unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import pulse
from weave.sql import audit, inbox, instances, tenancy
from weave.tx import Tx

# ---- creation (called by the workflow side inside its own transaction) ---------------------------

INSERT_TASK = """
INSERT INTO tasks (namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
                   available_at, deadline_at, created_at)
VALUES (%s, %s, %s, %s, %s, 'QUEUED', 0, %s, %s, %s, %s)
"""
SELECT_QUEUE_ID = "SELECT id FROM queues WHERE namespace_id = %s AND name = %s"


def create(
    tx: Tx,
    namespace_id: int,
    queue: str,
    instance_id: int,
    activation_id: int,
    kind: str,
    max_attempts: int,
    deadline_at: datetime,
    available_at: datetime | None = None,
) -> int:
    """A QUEUED task, claimable from `available_at` (now by default). The caller holds the instance lock."""
    queue_row = tx.one(SELECT_QUEUE_ID, (namespace_id, queue))
    now = tx.now()
    return tx.insert(
        INSERT_TASK,
        (
            namespace_id,
            queue_row["id"],
            instance_id,
            activation_id,
            kind,
            max_attempts,
            available_at or now,
            deadline_at,
            now,
        ),
    )


# ---- the permit and the one way to a final outcome ------------------------------------------------

LOCK_QUEUE = "SELECT id, name, max_permits, permits_in_use FROM queues WHERE id = %s FOR UPDATE"
RELEASE_PERMIT = "UPDATE queues SET permits_in_use = permits_in_use - 1 WHERE id = %s AND permits_in_use > 0"
TAKE_PERMIT = "UPDATE queues SET permits_in_use = permits_in_use + 1 WHERE id = %s AND permits_in_use < max_permits"
SETTLE_TASK = """
UPDATE tasks SET status = %s, result = %s, error = COALESCE(%s, error), completed_at = %s,
                 lease_token = NULL, lease_expires_at = NULL
WHERE id = %s AND status IN ('QUEUED', 'RUNNING')
"""


def _release_permit(tx: Tx, queue_id: int) -> None:
    """The one release of a permit; the caller holds the queue lock."""
    tx.transition(RELEASE_PERMIT, (queue_id,), f"release a permit of queue {queue_id}")


def _settle(tx: Tx, task: dict, outcome: str, result_text: str | None, error_text: str | None = None) -> None:
    """Give a QUEUED or RUNNING task its final outcome, release its permit if it held one, and
    write its one inbox event (P6). The caller holds the queue lock (when RUNNING) and the task lock."""
    now = tx.now()
    tx.transition(
        SETTLE_TASK, (outcome, result_text, error_text, now, task["id"]), f"settle task {task['id']} as {outcome}"
    )
    if task["status"] == "RUNNING":
        _release_permit(tx, task["queue_id"])
    inbox.append(
        tx, task["id"], task["instance_id"], outcome, result_text if outcome == "SUCCEEDED" else error_text, now
    )


REQUEUE_TASK = """
UPDATE tasks SET status = 'QUEUED', available_at = %s, lease_token = NULL, lease_expires_at = NULL,
                 worker_id = NULL, error = COALESCE(%s, error)
WHERE id = %s AND status = 'RUNNING'
"""


def _requeue(tx: Tx, task: dict, error_text: str | None) -> None:
    """Same task, next attempt, after backoff (P4). The caller holds queue and task locks."""
    available_at = tx.now() + pulse.retry_delay(task["attempt"])
    tx.transition(REQUEUE_TASK, (available_at, error_text, task["id"]), f"requeue task {task['id']}")
    _release_permit(tx, task["queue_id"])


# ---- claim ------------------------------------------------------------------------------------------

LOCK_QUEUE_BY_NAME = """
SELECT id, name, max_permits, permits_in_use FROM queues WHERE namespace_id = %s AND name = %s FOR UPDATE
"""
CLAIM_NEXT_TASK = """
SELECT id, instance_id, activation_id, kind, attempt, max_attempts, deadline_at FROM tasks
WHERE queue_id = %s AND status = 'QUEUED' AND available_at <= %s
ORDER BY available_at, id
LIMIT 1
FOR UPDATE SKIP LOCKED
"""
START_TASK = """
UPDATE tasks SET status = 'RUNNING', attempt = attempt + 1, lease_token = %s, lease_expires_at = %s,
                 worker_id = %s
WHERE id = %s AND status = 'QUEUED'
"""
# A claim re-run after a COMMIT whose answer was lost looks for the task its earlier attempt may have
# started (db.py): a running task of the queue holds a permit, so at most max_permits rows are read.
SELECT_STARTED_WITH_TOKEN = """
SELECT id, instance_id, activation_id, kind, attempt - 1 AS attempt, max_attempts, deadline_at, lease_expires_at
FROM tasks WHERE queue_id = %s AND status = 'RUNNING' AND lease_token = %s
"""
SELECT_TASK_CONTEXT = """
SELECT i.workflow_id, i.input, a.step_key, a.activation_sequence
FROM step_activations a JOIN instances i ON i.id = a.instance_id
WHERE a.id = %s
"""


@dataclass(frozen=True)
class ClaimedTask:
    task_id: int
    queue: str
    workflow_id: str
    step_key: str
    activation_sequence: int
    kind: str
    input: dict  # the instance context of D2, with raw JSON values
    attempt: int
    max_attempts: int
    lease_token: str
    lease_expires_at: datetime
    deadline_at: datetime


@unit_of_work
def claim_task(
    tx: Tx,
    namespace_id: int,
    queue: str,
    worker_id: str,
    lease_seconds: int,
    credential_id: int,
    actor: str,
    credential_sha256: bytes | None = None,
) -> ClaimedTask | None:
    """P2: take a permit and the oldest available QUEUED task of `queue`, or None.

    The lease token is chosen once per call: a re-run after a COMMIT whose answer was lost finds
    the task that the earlier attempt started with it, and answers that claim again.

    With `credential_sha256` (a claim that has waited since its request was authenticated), the
    credential is read again as authentication reads it, after the queue lock and in the same
    round trip, before any task is taken: revoked or expired is 401, a disabled application's 403,
    and the unit takes nothing (issue 26, item 7)."""
    token = tx.memo.setdefault("lease_token", secrets.token_hex(16))
    if credential_sha256 is None:
        queue_row = tx.one(LOCK_QUEUE_BY_NAME, (namespace_id, queue))
    else:
        locked, current = tx.all_together(
            (LOCK_QUEUE_BY_NAME, (namespace_id, queue)), (tenancy.SELECT_CURRENT_CREDENTIAL, (credential_sha256,))
        )
        queue_row = locked[0] if locked else None
        principal = tenancy.principal_of(tx, credential_sha256, current[0] if current else None)
        if principal is None:
            raise auth.unauthenticated(auth.NOT_CURRENT)
        principal.require_writable()
    if queue_row is None:
        raise WeaveError(Code.NOT_FOUND, f"queue {queue!r} does not exist")
    if tx.maybe_committed:
        task = tx.one(SELECT_STARTED_WITH_TOKEN, (queue_row["id"], token))
        if task is not None:
            return _claimed(tx, queue, task, token, task["lease_expires_at"])
    if queue_row["permits_in_use"] >= queue_row["max_permits"]:
        return None
    now = tx.now()
    task = tx.one(CLAIM_NEXT_TASK, (queue_row["id"], now))
    if task is None:
        return None
    lease_expires_at = now + timedelta(seconds=lease_seconds)
    tx.transition(START_TASK, (token, lease_expires_at, worker_id, task["id"]), f"start task {task['id']}")
    tx.transition(TAKE_PERMIT, (queue_row["id"],), f"take a permit of queue {queue_row['id']}")
    audit.record(
        tx,
        namespace_id,
        actor,
        "task.claim",
        {"task_id": str(task["id"]), "queue": queue, "worker_id": worker_id, "attempt": task["attempt"] + 1},
        instance_id=task["instance_id"],
        credential_id=credential_id,
    )
    return _claimed(tx, queue, task, token, lease_expires_at)


def _claimed(tx: Tx, queue: str, task: dict, token: str, lease_expires_at: datetime) -> ClaimedTask:
    """What the worker gets for `task` (as read before its start: `attempt` is the previous one)."""
    context = tx.one(SELECT_TASK_CONTEXT, (task["activation_id"],))
    return ClaimedTask(
        task_id=task["id"],
        queue=queue,
        workflow_id=context["workflow_id"],
        step_key=context["step_key"],
        activation_sequence=context["activation_sequence"],
        kind=task["kind"],
        input=instances.context(tx, task["instance_id"], context["workflow_id"], context["input"], jsontext.Raw),
        attempt=task["attempt"] + 1,
        max_attempts=task["max_attempts"],
        lease_token=token,
        lease_expires_at=lease_expires_at,
        deadline_at=task["deadline_at"],
    )


# ---- heartbeat and complete (the lease holder speaks) ------------------------------------------------

SELECT_TASK_QUEUE = """
SELECT t.queue_id, q.name AS queue FROM tasks t JOIN queues q ON q.id = t.queue_id
WHERE t.id = %s AND t.namespace_id = %s
"""
LOCK_TASK = """
SELECT id, namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
       lease_token, lease_expires_at, deadline_at, cancel_requested, cancel_requested_at
FROM tasks WHERE id = %s FOR UPDATE
"""
EXTEND_LEASE = "UPDATE tasks SET lease_expires_at = %s WHERE id = %s AND status = 'RUNNING' AND lease_token = %s"


def _task_queue(tx: Tx, namespace_id: int, task_id: int, granted_queues: frozenset[str]) -> dict:
    row = tx.one(SELECT_TASK_QUEUE, (task_id, namespace_id))
    if row is None:
        raise WeaveError(Code.TASK_NOT_FOUND, f"task {task_id} does not exist")
    if row["queue"] not in granted_queues:
        raise WeaveError(Code.FORBIDDEN, f"this credential has no grant for queue {row['queue']!r}")
    return row


def _lock_leased_task(tx: Tx, task_id: int, lease_token: str) -> dict:
    """The task, locked, if `lease_token` holds its current, unexpired lease; else LEASE_LOST."""
    task = tx.one(LOCK_TASK, (task_id,))
    now = tx.now()
    if (
        task["status"] != "RUNNING"
        or task["lease_token"] is None
        # As bytes: `compare_digest` refuses str that is not ASCII, and the client's token may be anything.
        or not secrets.compare_digest(task["lease_token"].encode(), lease_token.encode("utf-8"))
        or task["lease_expires_at"] <= now
    ):
        raise WeaveError(Code.LEASE_LOST, f"task {task_id} is not leased with this token any more")
    return task


@unit_of_work
def heartbeat(
    tx: Tx, namespace_id: int, task_id: int, lease_token: str, lease_seconds: int, granted_queues: frozenset[str]
) -> dict:
    """P3: extend the lease; tell the worker whether cancellation was requested."""
    _task_queue(tx, namespace_id, task_id, granted_queues)
    task = _lock_leased_task(tx, task_id, lease_token)
    lease_expires_at = tx.now() + timedelta(seconds=lease_seconds)
    tx.transition(EXTEND_LEASE, (lease_expires_at, task_id, lease_token), f"extend the lease of task {task_id}")
    return {"cancel_requested": bool(task["cancel_requested"]), "lease_expires_at": lease_expires_at}


@dataclass(frozen=True)
class Completion:
    outcome: str  # SUCCEEDED, FAILED or CANCELLED
    result_text: str | None = None  # compact JSON of the result (SUCCEEDED)
    error_text: str | None = None  # compact JSON of the error (FAILED)
    retryable: bool = False


@unit_of_work
def complete_task(
    tx: Tx,
    namespace_id: int,
    task_id: int,
    lease_token: str,
    completion: Completion,
    granted_queues: frozenset[str],
    credential_id: int,
    actor: str,
) -> dict:
    """P3/P4/P6: the lease holder reports; returns {"status", "attempt"} of the task afterwards.

    A re-run after a COMMIT whose answer was lost answers what the earlier attempt decided, if
    the task shows it (`_report_taken`), instead of LEASE_LOST for the lease that report ended."""
    queue = _task_queue(tx, namespace_id, task_id, granted_queues)
    tx.one(LOCK_QUEUE, (queue["queue_id"],))
    answer = tx.memo.get("answer")
    if tx.maybe_committed and answer is not None and _report_taken(tx, task_id, answer, completion):
        return answer
    task = _lock_leased_task(tx, task_id, lease_token)
    if (
        completion.outcome == "FAILED"
        and pulse.after_failure(
            completion.retryable, task["attempt"], task["max_attempts"], bool(task["cancel_requested"])
        )
        == pulse.REQUEUE
    ):
        _requeue(tx, task, completion.error_text)
        status = "QUEUED"
    else:
        _settle(tx, task, completion.outcome, completion.result_text, completion.error_text)
        status = completion.outcome
    audit.record(
        tx,
        namespace_id,
        actor,
        "task.complete",
        {
            "task_id": str(task_id),
            "reported": completion.outcome,
            "retryable": completion.retryable,
            "attempt": task["attempt"],
            "status": status,
        },
        instance_id=task["instance_id"],
        credential_id=credential_id,
    )
    tx.memo["answer"] = {"task_id": str(task_id), "status": status, "attempt": task["attempt"]}
    return tx.memo["answer"]


SELECT_REPORT = "SELECT status, attempt, result, error FROM tasks WHERE id = %s FOR UPDATE"


def _report_taken(tx: Tx, task_id: int, answer: dict, completion: Completion) -> bool:
    """Whether the task is as the earlier attempt that answered `answer` left it: that attempt
    held the lease, and only the lease holder's report sets this status at this attempt with this
    result or error (a lease expiry writes its own error, a new claim a new attempt). A lease that
    expired and a cancellation within the milliseconds between the attempts would pass for a
    CANCELLED report: it ends the task as that report would have."""
    task = tx.one(SELECT_REPORT, (task_id,))
    if (task["status"], task["attempt"]) != (answer["status"], answer["attempt"]):
        return False
    if completion.outcome == "SUCCEEDED":
        return task["result"] == completion.result_text
    if completion.outcome == "FAILED":
        return task["error"] == completion.error_text
    return True


# ---- lease expiry (the scanner) and cancellation (the workflow side) ---------------------------------

SELECT_EXPIRED_LEASES = """
SELECT id, queue_id, lease_expires_at AS due_at, instance_id FROM tasks
WHERE status = 'RUNNING' AND lease_expires_at <= %s
ORDER BY lease_expires_at
LIMIT %s
"""
# Lease expiry skips a task a lease holder's report has locked: the next batch looks again.
LOCK_TASK_SKIP_LOCKED = """
SELECT id, namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
       lease_token, lease_expires_at, deadline_at, cancel_requested, cancel_requested_at
FROM tasks WHERE id = %s FOR UPDATE SKIP LOCKED
"""


def listing_expired_leases(now: datetime, limit: int) -> tuple[str, tuple]:
    """The read of the RUNNING tasks whose lease passed at `now`, soonest passed first, for
    `Tx.all_together`: the arguments of `expire_lease` (`id`, `queue_id`) and `due_at`."""
    return SELECT_EXPIRED_LEASES, (now, limit)


def expired_lease_candidates(tx: Tx, limit: int) -> list[dict]:
    return tx.all(*listing_expired_leases(tx.now(), limit))


@unit_of_work
def expire_lease(tx: Tx, task_id: int, queue_id: int) -> str | None:
    """P4: a RUNNING task whose lease passed is re-queued, or settled UNKNOWN (or CANCELLED: a
    cancellation that came after the lease ended), by the facts' times (`pulse.after_lease_expired`).

    Returns what happened, or None when the candidate was no longer expired (a heartbeat won).
    """
    tx.one(LOCK_QUEUE, (queue_id,))
    task = tx.one(LOCK_TASK_SKIP_LOCKED, (task_id,))
    if task is None or task["status"] != "RUNNING" or task["lease_expires_at"] > tx.now():
        return None
    decision = pulse.after_lease_expired(
        pulse.LeaseFacts(
            task["attempt"], task["max_attempts"], task["lease_expires_at"], task["deadline_at"], _cancel_time(task)
        )
    )
    lost = jsontext.compact({"message": "lease expired", "attempt": task["attempt"]})
    if decision == pulse.REQUEUE:
        _requeue(tx, task, lost)
    else:
        _settle(tx, task, decision, None, lost)
    return decision


def _cancel_time(task: dict) -> datetime | None:
    """When the task was asked to stop; a request stored before that time was kept (NULL) counts
    as made while the lease held, as it was then decided."""
    if not task["cancel_requested"]:
        return None
    return task["cancel_requested_at"] or datetime.min


# The first request's time is the fact (`pulse.after_lease_expired` compares it with the lease's end).
REQUEST_CANCEL = """
UPDATE tasks SET cancel_requested = 1, cancel_requested_at = COALESCE(cancel_requested_at, %s)
WHERE id = %s AND status = 'RUNNING'
"""
LOCK_OPEN_TASKS_OF_ACTIVATION = """
SELECT id, namespace_id, queue_id, instance_id, activation_id, kind, status, attempt, max_attempts,
       lease_token, lease_expires_at, cancel_requested
FROM tasks WHERE activation_id = %s AND status IN ('QUEUED', 'RUNNING') ORDER BY id FOR UPDATE
"""


def lock_open_of_activation(tx: Tx, activation_id: int) -> list[dict]:
    """The activation's QUEUED and RUNNING tasks, locked: none can start or end while they are held."""
    return tx.all(LOCK_OPEN_TASKS_OF_ACTIVATION, (activation_id,))


def cancel_open_tasks(tx: Tx, activation_id: int, requested_at: datetime | None = None) -> list[str]:
    """P5: QUEUED tasks of the activation are CANCELLED at once (with their inbox event); RUNNING
    ones get a cancel intent and keep lease, permit and step until the worker reports.
    `requested_at`: the time of the fact that cancels them (a step deadline), now by default.

    The caller holds the instance and activation locks; tasks come last in the lock order, and a
    QUEUED task holds no permit, so no queue lock is needed.
    """
    done = []
    for task in tx.all(LOCK_OPEN_TASKS_OF_ACTIVATION, (activation_id,)):
        if task["status"] == "QUEUED":
            _settle(tx, task, "CANCELLED", None, jsontext.compact({"message": "cancelled before it started"}))
            done.append("CANCELLED")
        else:
            tx.transition(
                REQUEST_CANCEL, (requested_at or tx.now(), task["id"]), f"request cancellation of task {task['id']}"
            )
            done.append("CANCEL_REQUESTED")
    return done


LOCK_NEWEST_TASK = """
SELECT id, status, completed_at FROM tasks WHERE activation_id = %s ORDER BY id DESC LIMIT 1 FOR UPDATE
"""


def lock_newest_of_activation(tx: Tx, activation_id: int) -> dict | None:
    """The activation's latest task (`id`, `status`, `completed_at`), locked: a report that is
    being committed is waited for, not read as it was before it."""
    return tx.one(LOCK_NEWEST_TASK, (activation_id,))


SELECT_TASK = "SELECT id, activation_id, kind, status, attempt FROM tasks WHERE id = %s"


def read(tx: Tx, task_id: int) -> dict:
    """A task's identity and state, not locked (for a settled task: final)."""
    return tx.one(SELECT_TASK, (task_id,))


# The newest task of an activation is a POLL step's current round; its number is its position.
LOCK_CURRENT_ROUND = """
SELECT id, status, result, completed_at,
       (SELECT COUNT(*) FROM tasks r WHERE r.activation_id = t.activation_id) AS number
FROM tasks t WHERE activation_id = %s ORDER BY id DESC LIMIT 1
FOR UPDATE
"""


def lock_current_round(tx: Tx, activation_id: int) -> dict | None:
    """A POLL activation's newest query task, locked: Pulse cannot settle it while it is decided."""
    return tx.one(LOCK_CURRENT_ROUND, (activation_id,))
