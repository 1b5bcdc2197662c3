"""`Worker`: claims tasks of one queue, runs a handler per step key, keeps the lease, reports.

    worker = Worker(client, "inventory", {"reserve": reserve, "shipment": track}, threads=4)
    worker.run()  # until worker.stop() or SIGTERM/SIGINT

Each of `threads` threads long-polls `claim` and runs the tasks it gets one at a time. While a
handler runs, a heartbeat thread of that task extends the lease every third of `lease_seconds`
and sets `task.cancel_requested` when Weave asks to cancel (P5). The handler receives a
`RunningTask`: the claimed task's fields (`task.input`, `task.kind`, `task.attempt`, …) plus
`cancel_requested`, `lease_lost` and `wait(seconds)` (a sleep that ends early on either).

What the handler does decides the report (`complete`):

| handler | report |
| --- | --- |
| returns a value | SUCCEEDED with the value as result (for a QUERY task: the report `pending()` or `final(result)`) |
| raises `Fail(message, retryable=False)` | FAILED, retryable only when it says so |
| raises `Cancelled` (e.g. `task.raise_if_cancel_requested()`) | CANCELLED |
| raises anything else | FAILED, retryable: Pulse runs the task again while attempts remain (P4) |
| returns after the lease was lost | nothing: the task is someone else's now (LEASE_LOST is quiet) |

A result the server refuses (not JSON, over 256 KiB) is reported as a FAILED that is not
retryable, saying why. A report that gets no answer is sent again: the lease token lets at most
one report in, so a `LEASE_LOST` answer to the repeat means the first one landed (or the lease
expired), and either way the task is done here.

Stopping (`stop()`, or SIGTERM/SIGINT while `run()` runs in the main thread; a second signal
exits at once): no new claims; a claim already waiting returns within its long-poll
(`poll_seconds`) and a task it brings is run like the others; running handlers get
`grace_seconds` to finish and report (`run()` waits at least as long as a waiting claim may
take). Then `run()` returns. A handler still running after that is abandoned: its heartbeats
stop, its lease expires and Pulse gives the task to another worker (or, on its last attempt,
records its effect as unknown), exactly as if this process had died.
"""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import socket
import threading
import time
from typing import Any, Callable, Mapping

from weave.sdk import errors
from weave.sdk.client import Client
from weave.sdk.models import Task

log = logging.getLogger("weave.sdk.worker")

POLL_SECONDS = 20  # the longest long-poll the API allows
GRACE_SECONDS = 30.0
ERROR_BACKOFF_MAX_SECONDS = 30.0
REPORT_ATTEMPTS = 5
ERROR_MESSAGE_MAX_CHARS = 4096  # the API's limit for error.message


class Fail(Exception):
    """Raise from a handler to report FAILED with the given retryability (not retryable unless
    `retryable=True`); `details` is any JSON value stored with the error."""

    def __init__(self, message: str, *, retryable: bool = False, details: Any = None):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.details = details


class Cancelled(Exception):
    """Raise from a handler to report CANCELLED: the work was stopped because Weave asked."""


def pending() -> dict:
    """A QUERY handler's report that the outside system has no final answer yet (C1)."""
    return {"state": "PENDING"}


def final(result: Any) -> dict:
    """A QUERY handler's report of the outside system's final answer (C2)."""
    return {"state": "FINAL", "result": result}


class RunningTask:
    """What a handler receives: every attribute of the claimed `Task`, plus cancellation."""

    def __init__(self, task: Task):
        self.task = task
        self._cancel = threading.Event()
        self._lease_lost = threading.Event()
        self._either = threading.Event()  # set with either of the two: what `wait` waits for

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def __repr__(self) -> str:
        return f"RunningTask({self.task!r}, cancel_requested={self.cancel_requested})"

    @property
    def cancel_requested(self) -> bool:
        """Weave asked to cancel this task (its workflow was cancelled, or a signal won the POLL)."""
        return self._cancel.is_set()

    @property
    def lease_lost(self) -> bool:
        """The lease expired or was taken: nothing this handler returns will be reported."""
        return self._lease_lost.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True (early) when cancellation was requested or the lease lost."""
        return self._either.wait(seconds)

    def raise_if_cancel_requested(self) -> None:
        if self.cancel_requested:
            raise Cancelled(f"task {self.task.task_id}: cancellation requested")

    def _request_cancel(self) -> None:
        self._cancel.set()
        self._either.set()

    def _lose_lease(self) -> None:
        self._lease_lost.set()
        self._either.set()


def default_worker_id(index: int) -> str:
    """host:pid:thread, in the characters a worker id may hold (printable ASCII, no space)."""
    host = re.sub(r"[^\x21-\x7e]", "_", socket.gethostname())[:80] or "host"
    return f"{host}:{os.getpid()}:{index}"


class Worker:
    def __init__(
        self,
        client: Client,
        queue: str,
        handlers: Mapping[str, Callable[[RunningTask], Any]],
        *,
        threads: int = 1,
        lease_seconds: int = 30,
        worker_id: str | None = None,
        poll_seconds: int = POLL_SECONDS,
        grace_seconds: float = GRACE_SECONDS,
        heartbeat_seconds: float | None = None,
    ):
        if threads < 1:
            raise ValueError("threads must be at least 1")
        for key, handler in handlers.items():
            if not callable(handler):
                raise TypeError(f"the handler for step {key!r} is not callable")
        self.client = client
        self.queue = queue
        self.handlers = dict(handlers)
        self.threads = threads
        self.lease_seconds = lease_seconds
        self.worker_id = worker_id
        self.poll_seconds = poll_seconds
        self.grace_seconds = grace_seconds
        self.heartbeat_seconds = heartbeat_seconds if heartbeat_seconds is not None else lease_seconds / 3
        self._stopping = threading.Event()

    # ---- running and stopping ---------------------------------------------------------------------

    def run(self) -> None:
        """Claim and run tasks until `stop()` (or SIGTERM/SIGINT, when called in the main thread)."""
        previous = self._install_signal_handlers()
        try:
            claimers = [
                threading.Thread(target=self._claim_loop, args=(i,), name=f"weave-worker-{i}", daemon=True)
                for i in range(self.threads)
            ]
            for thread in claimers:
                thread.start()
            log.info("worker started: queue %s, %d thread(s)", self.queue, self.threads)
            while not self._stopping.wait(0.5):  # a timed wait lets signal handlers run promptly
                pass
            log.info("worker stopping: no new claims; running handlers have %.1f s", self.grace_seconds)
            # An idle thread's claim returns within its long-poll: wait that long at least.
            deadline = time.monotonic() + max(self.grace_seconds, self.poll_seconds + 1.0)
            for thread in claimers:
                thread.join(max(0.0, deadline - time.monotonic()))
            left = [thread.name for thread in claimers if thread.is_alive()]
            if left:
                log.warning("worker stopped with handlers still running in %s: their leases will expire", left)
            else:
                log.info("worker stopped")
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def stop(self) -> None:
        """Stop claiming; running handlers may finish (see the module docstring). Returns at once."""
        self._stopping.set()

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum, frame):
            if self._stopping.is_set():
                raise SystemExit(128 + signum)  # asked twice: stop at once, leases will expire
            self.stop()

        return {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}

    # ---- one claiming thread ----------------------------------------------------------------------

    def _claim_loop(self, index: int) -> None:
        worker_id = self.worker_id or default_worker_id(index)
        failures = 0
        while not self._stopping.is_set():
            try:
                task, retry_after = self.client._claim(self.queue, worker_id, self.lease_seconds, self.poll_seconds)
            except errors.WeaveError as exc:
                failures += 1
                delay = exc.retry_after or random.uniform(0, min(ERROR_BACKOFF_MAX_SECONDS, 0.5 * 2**failures))
                log.error("claim on queue %s failed (%s: %s); again in %.1f s", self.queue, exc.code, exc.detail, delay)
                self._stopping.wait(delay)
                continue
            failures = 0
            if task is None:
                if retry_after:
                    self._stopping.wait(retry_after)
                continue
            # Claimed, so ours to run even when a stop came meanwhile: dropping it would leave it
            # leased, unworked, until its lease expired.
            try:
                self._process(task)
            except Exception:  # a bug here must not end this thread's claiming
                log.exception("task %s: unexpected error in the worker", task.task_id)

    def _process(self, task: Task) -> None:
        running = RunningTask(task)
        finished = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat_loop, args=(running, finished), name=f"weave-heartbeat-{task.task_id}", daemon=True
        )
        beat.start()
        try:
            report = self._run_handler(running)
        finally:
            finished.set()
            beat.join()
        if running.lease_lost:
            log.info("task %s: lease lost; its outcome is not reported", task.task_id)
            return
        self._report(running, *report)

    def _run_handler(self, running: RunningTask) -> tuple[str, Any, dict | None]:
        """(outcome, result, error) as the handler decided it."""
        handler = self.handlers.get(running.step_key)
        if handler is None:
            # Retryable: another worker on this queue (a newer version, say) may know the step.
            log.error("task %s: no handler for step %r", running.task_id, running.step_key)
            return "FAILED", None, {"message": f"no handler for step {running.step_key!r} here", "retryable": True}
        try:
            return "SUCCEEDED", handler(running), None
        except Cancelled:
            return "CANCELLED", None, None
        except Fail as exc:
            error = {"message": exc.message[:ERROR_MESSAGE_MAX_CHARS], "retryable": exc.retryable}
            if exc.details is not None:
                error["details"] = exc.details
            return "FAILED", None, error
        except Exception as exc:
            log.exception("task %s: handler for step %r raised", running.task_id, running.step_key)
            return (
                "FAILED",
                None,
                {"message": f"{type(exc).__name__}: {exc}"[:ERROR_MESSAGE_MAX_CHARS], "retryable": True},
            )

    def _heartbeat_loop(self, running: RunningTask, finished: threading.Event) -> None:
        while not finished.wait(self.heartbeat_seconds):
            try:
                beat = self.client.heartbeat(running.task, self.lease_seconds)
            except (errors.LeaseLost, errors.TaskNotFound):
                running._lose_lease()
                return
            except errors.WeaveError as exc:
                # The client retried already; the lease may still hold until the next beat.
                log.warning("task %s: heartbeat failed (%s: %s)", running.task_id, exc.code, exc.detail)
                continue
            if beat.cancel_requested and not running.cancel_requested:
                log.info("task %s: cancellation requested", running.task_id)
                running._request_cancel()

    def _report(self, running: RunningTask, outcome: str, result: Any, error: dict | None) -> None:
        for attempt in range(REPORT_ATTEMPTS):
            try:
                completion = self.client.complete(running.task, outcome, result, error)
            except errors.LeaseLost:
                # Our earlier report landed (its answer was lost), or the lease expired: done here.
                log.info("task %s: lease lost when reporting %s", running.task_id, outcome)
                return
            except (TypeError, ValueError, errors.ValidationFailed, errors.PayloadTooLarge) as exc:
                if outcome != "SUCCEEDED":
                    log.error("task %s: the server refused the %s report: %s", running.task_id, outcome, exc)
                    return
                # The result is not something Weave can store: a failure no retry will fix.
                detail = exc.detail if isinstance(exc, errors.WeaveError) else str(exc)
                outcome, result, error = "FAILED", None, {"message": f"result refused: {detail}", "retryable": False}
                continue
            except (errors.ConnectionFailed, errors.Unavailable) as exc:
                delay = exc.retry_after or random.uniform(0, 0.5 * 2**attempt)
                log.warning("task %s: report failed (%s); again in %.1f s", running.task_id, exc.detail, delay)
                time.sleep(delay)
                continue
            except errors.WeaveError as exc:
                log.error("task %s: the %s report was refused (%s: %s)", running.task_id, outcome, exc.code, exc.detail)
                return
            log.debug("task %s reported %s: task now %s", running.task_id, outcome, completion.status)
            return
        log.error("task %s: the %s report got no answer; the lease will expire", running.task_id, outcome)
