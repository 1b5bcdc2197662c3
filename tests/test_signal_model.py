"""A model of signals and waits (SPEC §5-§6, with R1 and R2 around them) run by hypothesis against
the real service: the in-process app, the real database and the test clock.

The service runs two workflows of `reserve` (TASK) -> `payment` (SIGNAL, correlated on the order
id) -> `ship` (TASK) with different total deadlines. Hypothesis interleaves, in any order:
- sends: new idempotency keys, exact replays, conflicting replays (same key, other content),
  the workflow's own correlation key, another workflow's, the own one with a trailing space (other
  bytes), sequences 1-3 (older, current, future ones once a review made a new generation),
  sequence 0, a payload version or a payload off the contract;
- a worker claiming and completing the next task of a queue (which activates `payment` or ends
  the workflow), maybe after the step's deadline;
- scanner passes (every due unit of every source, until none is due);
- the clock moving by a few seconds, or to exactly a coming deadline (a wait's, a step's, a
  workflow's), a microsecond before it or a microsecond after it;
- pause, resume and cancel, and a review's retry_step (which makes sequence 2, 3, …).

`Model` below is a small pure reading of SPEC §5-§6 (and R1, R2, I3, I4, P7 as far as these
workflows need them) written for this test: it does not import `weave.rules`. Every answer of the
service (HTTP status, problem code, every receipt field, replays byte for byte) is compared with the
model's, and after every step so is every workflow (status, gate, review reason, each step's
activation, result, wait and task) and every signal (status, disposition, times). Each example
ends by letting time pass beyond every deadline: then every signal must have its one final
disposition, every wait at most one winner (read from the rows), and both sides must still agree.

CI runs EXAMPLES examples of at most STEPS steps (well under a minute). The longer run is
`WEAVE_SOAK=1 scripts/test tests/test_signal_model.py -s` (50 times as many examples; WEAVE_SOAK=N:
N times that); `-s` prints what the examples reached.
"""

from __future__ import annotations

import collections
import functools
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from helpers import Flow, empty_database, make_tenant, run_units_until_idle, signal_flow_definition
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from weave.scanner import SOURCES

pytestmark = pytest.mark.slow

SOAK = int(os.environ.get("WEAVE_SOAK") or 0)
EXAMPLES = int(os.environ.get("MODEL_EXAMPLES") or 40 * (50 * SOAK if SOAK else 1))
STEPS = 50

WAIT_TIMEOUT = 600  # payment's wait, after its activation
TASK_TIMEOUT = 300  # reserve and ship (signal_flow_definition)
WORKFLOWS = {"o-1": 1800, "o-2": 900}  # workflow id (also its order id and correlation key) -> total deadline
STEPS_IN_ORDER = ("reserve", "payment", "ship")
QUEUE_OF = {"reserve": "inventory", "ship": "carrier"}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
US = timedelta(microseconds=1)


def stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="microseconds") + "Z"


def counted(fn):
    """A rule that counts itself, so that teardown knows whether every step passed its checks."""

    @functools.wraps(fn)
    def wrapper(self, **kwargs):
        self.steps += 1
        self.uses[fn.__name__] += 1
        return fn(self, **kwargs)

    return wrapper


def canonical(body: dict) -> str:
    return json.dumps(body, sort_keys=True)


# ---- the model ------------------------------------------------------------------------------------------


@dataclass
class Signal:
    key: str
    body: dict
    accepted_at: datetime
    expires_at: datetime
    status: str
    disposition: str | None
    order: int  # acceptance order within the workflow: ids grow with it (ties of accepted_at)
    consumed_at: datetime | None = None
    signal_id: str | None = None  # the service's, from the first receipt
    receipt: str | None = None  # the first receipt, byte for byte

    @property
    def sequence(self) -> int:
        return self.body["target_activation_sequence"]

    @property
    def correlation(self) -> str:
        return self.body["correlation_key"]


@dataclass
class Wait:
    correlation: str
    deadline: datetime
    status: str = "WAITING"
    winner: Signal | None = None


@dataclass
class Activation:
    step: str
    sequence: int
    deadline: datetime
    status: str = "ACTIVE"
    review_reason: str | None = None
    result: Any = None
    task: str | None = None  # TASK steps: QUEUED, SUCCEEDED, CANCELLED
    completed_at: datetime | None = None
    task_result: Any = None
    reported: bool = False  # the task's final outcome was applied to the step (P7)
    wait: Wait | None = None


@dataclass
class Workflow:
    workflow_id: str
    deadline: datetime
    status: str = "RUNNING"
    gate: str = "OPEN"
    review_reason: str | None = None
    activations: dict[str, list[Activation]] = field(default_factory=lambda: {k: [] for k in STEPS_IN_ORDER})
    signals: list[Signal] = field(default_factory=list)
    keys: dict[str, Signal] = field(default_factory=dict)

    def latest(self, step: str) -> Activation | None:
        return self.activations[step][-1] if self.activations[step] else None


@dataclass(frozen=True)
class Expected:
    http: int
    code: str | None = None  # the problem code of a refusal
    signal: Signal | None = None  # the signal a 201 answers with
    replayed: bool = False


class Model:
    """SPEC §5-§6 for these workflows, as plain Python over the records above."""

    def __init__(self, started_at: datetime):
        self.workflows = {
            wid: Workflow(wid, started_at + timedelta(seconds=seconds)) for wid, seconds in WORKFLOWS.items()
        }

    # ---- S1.3-S1.10: acceptance ----

    def send(self, wf: Workflow, key: str, body: dict, now: datetime) -> Expected:
        if body["target_activation_sequence"] < 1:
            return Expected(422, "VALIDATION_FAILED")  # the body's schema, before anything is looked up
        first = wf.keys.get(key)
        if first is not None:  # S1.5: the idempotency lookup comes before every other check
            if canonical(first.body) == canonical(body):
                return Expected(201, signal=first, replayed=True)
            return Expected(409, "IDEMPOTENCY_CONFLICT")
        if body["payload_version"] != "v1" or not isinstance(body["payload"].get("amount"), (int, float)):
            return Expected(422, "CONTRACT_MISMATCH")  # S1.9: stores nothing
        current = wf.latest("payment")
        if body["target_activation_sequence"] > max(current.sequence if current else 0, 1):
            return Expected(409, "ACTIVATION_NOT_FOUND")  # §5: a sequence that does not exist yet
        status, disposition = self.disposition_at_acceptance(wf, current, body, now)
        signal = Signal(key, body, now, wf.deadline, status, disposition, len(wf.signals))
        wf.signals.append(signal)
        wf.keys[key] = signal
        return Expected(201, signal=signal)

    @staticmethod
    def disposition_at_acceptance(wf: Workflow, current: Activation | None, body: dict, now: datetime):
        """S1.10, S2.1, S2.3 (and docs/decisions.md: after an expired wait, LATE)."""
        if wf.status in TERMINAL:
            return "REJECTED", "INSTANCE_SETTLED"
        if current is None:
            return "PENDING", None  # early: kept for the step's first activation
        if body["target_activation_sequence"] < current.sequence:
            return "REJECTED", "STALE_ACTIVATION"
        wait = current.wait
        if wait.status == "WAITING":
            if body["correlation_key"] != wait.correlation:  # exact bytes: a trailing space counts
                return "REJECTED", "CORRELATION_MISMATCH"
            if now >= wait.deadline:  # equal to the deadline is late
                return "REJECTED", "LATE"
            return "PENDING", None
        if wait.status == "EXPIRED":
            return "REJECTED", "LATE"
        return "REJECTED", "STEP_SETTLED"

    # ---- the scanner: everything that is due, until nothing is ----

    def scan(self, now: datetime) -> None:
        for wf in self.workflows.values():
            while self._one_move(wf, now):
                pass

    def _one_move(self, wf: Workflow, now: datetime) -> bool:
        for step in QUEUE_OF:
            for a in wf.activations[step]:
                if a.task == "SUCCEEDED" and not a.reported:  # P7: the task's inbox event
                    a.reported = True
                    if a.status == "ACTIVE":
                        if a.completed_at >= a.deadline:
                            self.review(wf, a, "STEP_DEADLINE_EXCEEDED")
                        else:
                            self.succeed(wf, a, a.task_result, now)
                    return True
            a = wf.latest(step)
            if a is not None and a.status == "ACTIVE" and now >= a.deadline and a.task != "SUCCEEDED":
                self.review(wf, a, "STEP_DEADLINE_EXCEEDED")  # P7: the step's deadline passed without an outcome
                a.task = "CANCELLED"
                return True
        a = wf.latest("payment")
        if a is not None and a.status == "ACTIVE":
            pending = [s for s in wf.signals if s.status == "PENDING" and s.sequence == a.sequence]
            if pending or now >= a.wait.deadline:
                self.adjudicate(wf, a, pending, now)
                return True
        if self.advance(wf, now):
            return True
        for s in wf.signals:  # S2.7: an unmatched signal past the total deadline at its acceptance
            waiting = wf.latest("payment")
            if s.status == "PENDING" and s.expires_at <= now:
                if waiting is not None and waiting.sequence == s.sequence and waiting.wait.status == "WAITING":
                    continue  # its wait decides at its own deadline
                s.status, s.disposition = "EXPIRED", "EXPIRED_UNMATCHED"
                return True
        return False

    def adjudicate(self, wf: Workflow, a: Activation, pending: list[Signal], now: datetime) -> None:
        """S2.2-S2.6: the first match by (accepted_at, id) wins if accepted before the deadline."""
        wait, winner = a.wait, None
        for s in sorted(pending, key=lambda s: (s.accepted_at, s.order)):
            if s.correlation != wait.correlation:
                s.status, s.disposition = "REJECTED", "CORRELATION_MISMATCH"
            elif winner is not None:
                s.status, s.disposition = "REJECTED", "WAIT_SETTLED"
            elif s.accepted_at >= wait.deadline:
                s.status, s.disposition = "REJECTED", "LATE"
            else:
                winner = s
        if winner is not None:
            winner.status, winner.consumed_at = "CONSUMED", now
            wait.status, wait.winner = "SATISFIED", winner
            self.succeed(wf, a, winner.body["payload"], now)
        elif now >= wait.deadline:
            wait.status = "EXPIRED"
            self.review(wf, a, "WAIT_EXPIRED")

    def advance(self, wf: Workflow, now: datetime) -> bool:
        """D3, I3, I4: the next step starts when the gate is open and the total deadline allows."""
        for step in STEPS_IN_ORDER:
            a = wf.latest(step)
            if a is not None and a.status == "SUCCEEDED":
                continue
            if a is not None or wf.status != "RUNNING" or wf.gate != "OPEN":
                return False
            if now >= wf.deadline:
                self.move(wf, "NEEDS_REVIEW", "CLOSED", "DEADLINE_EXCEEDED")
            else:
                self.activate(wf, step, 1, now)
            return True
        if wf.status in TERMINAL:
            return False
        self.move(wf, "SUCCEEDED", "CLOSED")
        return True

    def activate(self, wf: Workflow, step: str, sequence: int, now: datetime) -> None:
        timeout = WAIT_TIMEOUT if step == "payment" else TASK_TIMEOUT
        a = Activation(step, sequence, now + timedelta(seconds=timeout))
        if step == "payment":
            a.wait = Wait(wf.workflow_id, a.deadline)  # correlated on /input/order_id, the workflow id here
        else:
            a.task = "QUEUED"
        wf.activations[step].append(a)

    def succeed(self, wf: Workflow, a: Activation, result: Any, now: datetime) -> None:
        a.status, a.result, a.review_reason = "SUCCEEDED", result, None
        self.advance(wf, now)

    def review(self, wf: Workflow, a: Activation, reason: str) -> None:
        a.status, a.review_reason = "NEEDS_REVIEW", reason
        if wf.status not in TERMINAL:
            self.move(wf, "NEEDS_REVIEW", "CLOSED", reason)

    @staticmethod
    def move(wf: Workflow, status: str, gate: str, reason: str | None = None) -> None:
        wf.status, wf.gate, wf.review_reason = status, gate, reason

    # ---- R1, R2 ----

    def control(self, wf: Workflow, action: str) -> Expected:
        allowed = {"pause": ("RUNNING",), "resume": ("PAUSED",), "cancel": ("RUNNING", "PAUSED", "NEEDS_REVIEW")}
        if wf.status not in allowed[action]:
            return Expected(409, "INVALID_STATE")
        if action == "pause":
            self.move(wf, "PAUSED", "CLOSED")
        elif action == "resume":
            self.move(wf, "RUNNING", "OPEN")  # the next scanner pass advances it (a ROOT checkpoint due now)
        else:
            for step in STEPS_IN_ORDER:
                for a in wf.activations[step]:
                    if a.status in ("ACTIVE", "NEEDS_REVIEW"):
                        a.status, a.review_reason = "CANCELLED", None
                    if a.wait is not None and a.wait.status == "WAITING":
                        a.wait.status = "CANCELLED"
                    if a.task == "QUEUED":
                        a.task = "CANCELLED"
            for s in wf.signals:
                if s.status == "PENDING":
                    s.status, s.disposition = "REJECTED", "INSTANCE_SETTLED"
            self.move(wf, "CANCELLED", "CLOSED")
        return Expected(200)

    def retry_step(self, wf: Workflow, step: str, now: datetime) -> Expected:
        a = wf.latest(step)
        if wf.status != "NEEDS_REVIEW" or a is None or a.status != "NEEDS_REVIEW" or now >= wf.deadline:
            return Expected(409, "INVALID_STATE")
        a.status, a.review_reason = "SUPERSEDED", None
        if a.wait is not None:
            a.wait.status = "SUPERSEDED"
        for s in wf.signals:
            if s.status == "PENDING" and s.sequence == a.sequence and step == "payment":
                s.status, s.disposition = "REJECTED", "STALE_ACTIVATION"
        if a.task == "QUEUED":
            a.task = "CANCELLED"
        self.move(wf, "RUNNING", "OPEN")
        self.activate(wf, step, a.sequence + 1, now)
        return Expected(200)

    # ---- the worker ----

    def claimable(self, queue: str) -> set[tuple[str, str, int]]:
        return {
            (wf.workflow_id, a.step, a.sequence)
            for wf in self.workflows.values()
            for step, q in QUEUE_OF.items()
            if q == queue
            for a in wf.activations[step]
            if a.task == "QUEUED"
        }

    def complete(self, workflow_id: str, step: str, sequence: int, result: Any, now: datetime) -> None:
        a = self.workflows[workflow_id].activations[step][sequence - 1]
        a.task, a.completed_at, a.task_result = "SUCCEEDED", now, result

    def deadlines(self) -> list[datetime]:
        """Every deadline the model knows of (workflows', steps', waits')."""
        found = []
        for wf in self.workflows.values():
            found.append(wf.deadline)
            found += [a.deadline for step in STEPS_IN_ORDER for a in wf.activations[step]]
        return sorted(set(found))


# ---- the test ----------------------------------------------------------------------------------------------


def body_of(workflow_id: str, correlation: str, sequence: int, amount, variant: str) -> dict:
    own = {"own": workflow_id, "own+space": workflow_id + " ", "other": "o-2" if workflow_id == "o-1" else "o-1"}
    body = {
        "name": "payment.settled",
        "payload_version": "v2" if variant == "other_version" else "v1",
        "target_step_key": "payment",
        "target_activation_sequence": 0 if variant == "sequence_0" else sequence,
        "correlation_key": own[correlation],
        "payload": {"amount": "twelve" if variant == "payload_off_schema" else amount},
        "reason": "PSP webhook",
    }
    return body


def test_signal_model(database, weave_tables, client, clock):
    seen = collections.Counter()  # what the sends were answered, over every example
    figures = collections.Counter()
    reached = collections.Counter()  # how the workflows ended, over every example
    rules_run = collections.Counter()
    settled = collections.Counter()  # every signal's final state

    class SignalModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            empty_database(database, weave_tables, clock)
            tenant = make_tenant(database, "acme", {"inventory": 4, "carrier": 4})
            self.flow = Flow(client, tenant, database)
            self.operator = tenant.headers(
                "workflows:control", "workflows:review", "workflows:read", queues=("inventory", "carrier")
            )
            self.flow.publish(signal_flow_definition(timeout=WAIT_TIMEOUT))
            self.model = Model(clock.now())
            for workflow_id, seconds in WORKFLOWS.items():
                self.flow.start(workflow_id, input={"order_id": workflow_id}, deadline_seconds=seconds)
            self.digests: dict[str, str] = {}  # canonical body -> the request digest the service gave it
            self.requests: list[tuple[str, str, dict]] = []  # every send, for replays
            self.steps = self.checked = 0
            self.uses = collections.Counter()  # rule name -> times run in this example
            figures["examples"] += 1

        @initialize(stage=st.sampled_from(["fresh", "reserving", "paying", "paying", "paying"]))
        def start(self, stage):
            """Most examples begin with both payment waits active; some with the reserve tasks queued,
            some before the scanner's first look (early signals then come before any step)."""
            if stage != "fresh":
                self.scan_both()
            if stage == "paying":
                for _ in WORKFLOWS:
                    self.work_on("inventory")
                self.scan_both()

        # ---- the outside world ----

        @rule(
            workflow_id=st.sampled_from(sorted(WORKFLOWS)),
            correlation=st.sampled_from(["own", "own", "own", "own+space", "other"]),
            sequence=st.sampled_from([1, 1, 1, 2, 3]),
            amount=st.sampled_from([12.5, 7]),
            variant=st.sampled_from(["ok"] * 6 + ["other_version", "payload_off_schema", "sequence_0"]),
        )
        @counted
        def send(self, workflow_id, correlation, sequence, amount, variant):
            """A new idempotency key (k1, k2, … per workflow: the same key in the other one is another signal)."""
            key = f"k{sum(1 for wid, _, _ in self.requests if wid == workflow_id) + 1}"
            self.send_and_compare(workflow_id, key, body_of(workflow_id, correlation, sequence, amount, variant))

        @precondition(lambda self: self.requests and self.uses["replay"] < 6)
        @rule(data=st.data())
        @counted
        def replay(self, data):
            """The same request again (a client retrying): a stored one answers its first receipt."""
            workflow_id, key, body = data.draw(st.sampled_from(self.requests), label="request")
            self.send_and_compare(workflow_id, key, body)

        @precondition(
            lambda self: any(wf.keys for wf in self.model.workflows.values()) and self.uses["conflicting_replay"] < 4
        )
        @rule(data=st.data(), change=st.sampled_from(["reason", "amount", "sequence", "correlation"]))
        @counted
        def conflicting_replay(self, data, change):
            """A used key with other content: 409 IDEMPOTENCY_CONFLICT, whatever the content says."""
            stored = [(wid, s) for wid, wf in self.model.workflows.items() for s in wf.signals]
            workflow_id, first = data.draw(st.sampled_from(stored), label="stored signal")
            body = dict(first.body, payload=dict(first.body["payload"]))
            if change == "reason":
                body["reason"] += " (again)"
            elif change == "amount":
                body["payload"]["amount"] = body["payload"]["amount"] + 1
            elif change == "sequence":
                body["target_activation_sequence"] += 1
            else:
                body["correlation_key"] += "-x"
            self.send_and_compare(workflow_id, first.key, body)

        def send_and_compare(self, workflow_id: str, key: str, body: dict) -> None:
            self.requests.append((workflow_id, key, body))
            now = clock.now()
            expected = self.model.send(self.model.workflows[workflow_id], key, body, now)
            answer = self.flow.send(workflow_id, key, body)
            figures["sends"] += 1
            label = expected.code or (
                "replay" if expected.replayed else f"{expected.signal.status} {expected.signal.disposition}"
            )
            seen[label] += 1
            assert answer.status_code == expected.http, (label, answer.text)
            if expected.code is not None:
                assert answer.json["code"] == expected.code, answer.text
                return
            signal = expected.signal
            if expected.replayed:  # S1.5: the first receipt, byte for byte
                assert answer.headers.get("Idempotent-Replayed") == "true"
                assert answer.text == signal.receipt
                return
            assert "Idempotent-Replayed" not in answer.headers
            receipt = answer.json
            assert list(receipt) == [
                "signal_id",
                "workflow_id",
                "status",
                "disposition",
                "accepted_at",
                "expires_at",
                "idempotency_key",
                "request_digest",
            ]
            assert receipt["signal_id"] not in {s.signal_id for s in self.model.workflows[workflow_id].signals}
            assert (receipt["workflow_id"], receipt["idempotency_key"]) == (workflow_id, key)
            assert (receipt["status"], receipt["disposition"]) == (signal.status, signal.disposition), label
            assert (receipt["accepted_at"], receipt["expires_at"]) == (stamp(now), stamp(signal.expires_at))
            # S1.11: one digest per content, whichever workflow it went to
            assert self.digests.setdefault(canonical(body), receipt["request_digest"]) == receipt["request_digest"]
            assert list(self.digests.values()).count(receipt["request_digest"]) == 1
            signal.signal_id, signal.receipt = receipt["signal_id"], answer.text

        # ---- the worker ----

        @precondition(lambda self: self.model.claimable("inventory") or self.model.claimable("carrier"))
        @rule(data=st.data())
        @counted
        def work(self, data):
            """Claim the queue's next task and complete it at once (a worker that never fails)."""
            self.work_on(data.draw(st.sampled_from([q for q in ("inventory", "carrier") if self.model.claimable(q)])))

        def work_on(self, queue: str) -> None:
            claimable = self.model.claimable(queue)
            claimed = self.flow.claim(queue)
            assert claimed.status_code == 200, claimed.text
            task = claimed.json
            assert (task["workflow_id"], task["step_key"], task["activation_sequence"]) in claimable, task
            assert (task["kind"], task["attempt"]) == ("TASK", 1)
            result = {"done": f"{task['step_key']}-{task['workflow_id']}-{task['activation_sequence']}"}
            assert self.flow.complete(task, result=result).status_code == 200
            self.model.complete(task["workflow_id"], task["step_key"], task["activation_sequence"], result, clock.now())
            figures["tasks"] += 1

        # ---- the scanner and the clock ----

        @precondition(lambda self: something_due())
        @rule(data=st.data(), shuffled=st.booleans())
        @counted
        def scan(self, data, shuffled):
            """A scanner pass: every due unit until none is due, in the scanner's order or in any
            order (as several scanners may take them): the outcome must not depend on it."""
            if not shuffled:
                return self.scan_both()
            for _ in range(50):
                due = [(source, row["id"]) for source in SOURCES for row in database.read(source.due, 100)]
                if not due:
                    break
                for index in data.draw(st.permutations(range(len(due))), label="order"):
                    source, candidate = due[index]
                    source.process(database, candidate)
            else:
                raise AssertionError("the scanner's units kept finding work")
            self.model.scan(clock.now())
            figures["passes"] += 1

        def scan_both(self):
            run_units_until_idle(database)
            self.model.scan(clock.now())
            figures["passes"] += 1

        @precondition(lambda self: self.uses["advance_clock"] < 8)
        @rule(seconds=st.sampled_from([1, 10, 60]))
        @counted
        def advance_clock(self, seconds):
            clock.advance(seconds)

        @precondition(
            lambda self: self.uses["advance_to_a_deadline"] < 3 and any(d > clock.now() for d in self.model.deadlines())
        )
        @rule(data=st.data(), offset=st.sampled_from([-US, timedelta(0), timedelta(0), US]))
        @counted
        def advance_to_a_deadline(self, data, offset):
            """To a coming deadline exactly (S2.3: equal is late), or a microsecond either side."""
            coming = [d for d in self.model.deadlines() if d > clock.now()]
            target = data.draw(st.sampled_from(coming[:3]), label="deadline") + offset
            if target > clock.now():
                clock.set(target)

        # ---- operators ----

        @precondition(lambda self: self.uses["control"] < 3)  # a cancelled workflow has little left to say
        @rule(
            workflow_id=st.sampled_from(sorted(WORKFLOWS)),
            action=st.sampled_from(["pause", "resume", "pause", "resume", "cancel"]),
        )
        @counted
        def control(self, workflow_id, action):
            expected = self.model.control(self.model.workflows[workflow_id], action)
            answer = self.flow.client.simulate_post(
                f"{self.flow.ns}/workflows/{workflow_id}/{action}", json={"reason": "model"}, headers=self.operator
            )
            self.compare_answer(answer, expected, workflow_id)
            seen[f"{action} {expected.code or 'done'}"] += 1

        @precondition(lambda self: self.under_review() and self.uses["retry_step"] < 3)
        @rule(data=st.data(), anywhere=st.booleans())
        @counted
        def retry_step(self, data, anywhere):
            """R2 on the step under review, or on any step of either workflow (refused unless it is the one)."""
            choices = [(w, s) for w in sorted(WORKFLOWS) for s in STEPS_IN_ORDER] if anywhere else self.under_review()
            workflow_id, step = data.draw(st.sampled_from(choices), label="step")
            expected = self.model.retry_step(self.model.workflows[workflow_id], step, clock.now())
            answer = self.flow.client.simulate_post(
                f"{self.flow.ns}/workflows/{workflow_id}/review",
                json={"action": "retry_step", "step_key": step, "reason": "model"},
                headers=self.operator,
            )
            self.compare_answer(answer, expected, workflow_id)
            seen[f"retry_step {expected.code or 'done'}"] += 1

        def under_review(self) -> list[tuple[str, str]]:
            return [
                (wid, step)
                for wid, wf in sorted(self.model.workflows.items())
                for step in STEPS_IN_ORDER
                if wf.latest(step) is not None and wf.latest(step).status == "NEEDS_REVIEW"
            ]

        def compare_answer(self, answer, expected: Expected, workflow_id: str) -> None:
            assert answer.status_code == expected.http, answer.text
            if expected.code is not None:
                assert answer.json["code"] == expected.code, answer.text
            else:
                self.compare_workflow(answer.json, self.model.workflows[workflow_id])

        # ---- what must agree after every step ----

        @invariant()
        def service_agrees_with_the_model(self):
            for workflow_id, wf in self.model.workflows.items():
                self.compare_workflow(self.flow.workflow(workflow_id), wf)
                self.compare_signals(workflow_id, wf)
            self.checked = self.steps
            figures["checks"] += 1

        def compare_workflow(self, view: dict, wf: Workflow) -> None:
            expected = {"status": wf.status, "gate": wf.gate, "review_reason": wf.review_reason}
            assert {k: view[k] for k in expected} == expected, (wf.workflow_id, view)
            for step_view, key in zip(view["steps"], STEPS_IN_ORDER):
                a = wf.latest(key)
                assert step_view == step_view | self.step_view(a), (wf.workflow_id, key, step_view)
                if a is not None and a.task is not None:
                    assert step_view["task"]["status"] == a.task, (wf.workflow_id, key, step_view)

        @staticmethod
        def step_view(a: Activation | None) -> dict:
            if a is None:
                return {"activation_sequence": None, "status": "NOT_STARTED", "wait": None, "task": None}
            view = {
                "activation_sequence": a.sequence,
                "status": a.status,
                "review_reason": a.review_reason,
                "result": a.result,
                "deadline_at": stamp(a.deadline),
            }
            if a.wait is not None:
                view["wait"] = {
                    "status": a.wait.status,
                    "deadline_at": stamp(a.wait.deadline),
                    "correlation_key": a.wait.correlation,
                    "winner_signal_id": a.wait.winner.signal_id if a.wait.winner else None,
                }
            return view

        def compare_signals(self, workflow_id: str, wf: Workflow) -> None:
            listed = self.flow.client.simulate_get(
                f"{self.flow.ns}/workflows/{workflow_id}/signals", headers=self.flow.signaller
            ).json["signals"]
            assert [s["signal_id"] for s in listed] == [s.signal_id for s in wf.signals]  # refusals store nothing
            for row, signal in zip(listed, wf.signals):
                expected = {
                    "status": signal.status,
                    "disposition": signal.disposition,
                    "accepted_at": stamp(signal.accepted_at),
                    "expires_at": stamp(signal.expires_at),
                    "consumed_at": stamp(signal.consumed_at),
                    "target_activation_sequence": signal.sequence,
                    "correlation_key": signal.correlation,
                    "idempotency_key": signal.key,
                }
                assert {k: row[k] for k in expected} == expected, (workflow_id, row)

        def teardown(self):
            """Time passes beyond every deadline with nobody sending or working: everything settles."""
            if self.checked != self.steps:
                return  # a step failed: that is the failure to report
            clock.advance(days=2)
            run_units_until_idle(database)
            self.model.scan(clock.now())
            self.service_agrees_with_the_model()
            rows = database.run(lambda tx: tx.all("SELECT status, disposition, consumed_wait_id FROM signals"))
            assert all(
                r["status"] != "PENDING" and (r["status"] == "CONSUMED") == (r["disposition"] is None) for r in rows
            )
            waits = database.run(lambda tx: tx.all("SELECT id, winner_signal_id FROM waits"))
            consumed = collections.Counter(r["consumed_wait_id"] for r in rows if r["status"] == "CONSUMED")
            for wait in waits:  # S2.5: at most one winner, and it is the one signal that wait consumed
                assert consumed[wait["id"]] == (wait["winner_signal_id"] is not None)
            figures["signals"] += len(rows)
            figures["waits"] += len(waits)
            figures["steps"] += self.steps
            rules_run.update(self.uses)
            for wf in self.model.workflows.values():
                settled.update(f"{s.status} {s.disposition or ''}".strip() for s in wf.signals)
            for wf in self.model.workflows.values():
                reached[f"{wf.status} {wf.review_reason or ''}".strip()] += 1
                reached[f"payment activations: {len(wf.activations['payment'])}"] += 1

    def something_due() -> bool:
        """Whether a scanner pass would find work now (a pass with none is a step wasted)."""
        return any(database.read(source.due, 1) for source in SOURCES)

    run_state_machine_as_test(
        SignalModel,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    print("signal model:", dict(figures))
    print("answers:", dict(sorted(seen.items())))
    print("signals ended:", dict(sorted(settled.items())))
    print("rules run:", dict(rules_run))
    print("workflows ended:", dict(sorted(reached.items())))
