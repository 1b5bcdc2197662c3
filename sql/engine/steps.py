"""What the engine works with: a definition's steps, parsed once per look, and what a step kind
decides about a step (`Outcome`), which `moves` then applies."""

from __future__ import annotations

from dataclasses import dataclass

from weave.sql import definitions
from weave.tx import Tx

SCANNER = "system:scanner"


@dataclass(frozen=True)
class Step:
    """One step of a pinned definition (docs/rules.md#definitions), as the engine reads it."""

    index: int
    key: str
    type: str  # TASK, SIGNAL or POLL: the key of `moves.KINDS`
    timeout_seconds: int
    queue: str | None  # TASK and POLL: where its tasks run
    max_attempts: int
    interval_seconds: int | None  # POLL: between rounds
    contract: dict | None  # SIGNAL's `signal`, POLL's `final_signal`: what its wait waits for
    correlation: str | None  # the JSON pointer of the wait's correlation key
    document: dict  # the step as published

    @classmethod
    def parse(cls, index: int, step: dict) -> "Step":
        return cls(
            index=index,
            key=step["key"],
            type=step["type"],
            timeout_seconds=step["timeout_seconds"],
            queue=step.get("queue"),
            max_attempts=step.get("max_attempts", 3),
            interval_seconds=step.get("interval_seconds"),
            contract=step.get("signal") or step.get("final_signal"),
            correlation=step.get("correlation"),
            document=step,
        )


def of_instance(tx: Tx, instance: dict) -> list[Step]:
    """The steps of the instance's pinned definition, in order."""
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    return [Step.parse(index, step) for index, step in enumerate(document["steps"])]


def named(tx: Tx, instance: dict, key: str) -> Step | None:
    """The step `key` of the instance's pinned definition, or None."""
    return next((step for step in of_instance(tx, instance) if step.key == key), None)


@dataclass(frozen=True)
class Outcome:
    """What a step kind decided about an ACTIVE step: it succeeded with `result` (compact JSON),
    it needs review for `review`, or neither (it is still waiting, or the look decided what a step
    kind decides alone: a round opened, a signal taken). `label` names the decision for logs,
    metrics and tests."""

    label: str
    result: str | None = None
    review: str | None = None


def succeeded(label: str, result: str) -> Outcome:
    return Outcome(label, result=result)


def needs_review(label: str, reason: str) -> Outcome:
    return Outcome(label, review=reason)


def waiting(label: str) -> Outcome:
    return Outcome(label)
