"""What makes a definition document publishable beyond its JSON Schema (D1, D2).

The JSON Schema (`weave/schemas/definition.json`) checks shapes; this module checks what a
schema cannot say: step keys are unique, every `payload_schema` is itself a valid Draft 2020-12
schema that resolves without the network and stays within the limits of issue 26 (all of them
checked together, under one budget of work: `weave.schemas.publish`), and which queues the
document needs.
"""

from __future__ import annotations

from typing import Any, Iterator

from weave.rules.problems import Problem
from weave.schemas import publish

CONTRACT_FIELDS = {"SIGNAL": "signal", "POLL": "final_signal"}


def payload_schemas(document: dict) -> Iterator[tuple[str, Any]]:
    """(pointer, schema) of every payload schema in the document: those of the signal contracts
    (a SIGNAL step's signal, a POLL step's final signal), which also check `complete_step` results."""
    for i, step in enumerate(document["steps"]):
        contract_field = CONTRACT_FIELDS.get(step["type"])
        contract = step.get(contract_field) if contract_field else None
        if contract is not None:
            yield f"/steps/{i}/{contract_field}/payload_schema", contract["payload_schema"]


def problems(document: dict) -> list[Problem]:
    """Everything wrong with a schema-valid document (empty when publishable): duplicate step keys,
    then the payload schemas' problems in document order."""
    found: list[Problem] = []
    seen: dict[str, int] = {}
    for i, step in enumerate(document["steps"]):
        if step["key"] in seen:
            found.append(
                Problem(f"/steps/{i}/key", f"duplicate step key {step['key']!r} (first at /steps/{seen[step['key']]})")
            )
        seen.setdefault(step["key"], i)
    found += [Problem(where, why) for where, why in publish.problems(list(payload_schemas(document)))]
    return found


def queues_used(document: dict) -> list[str]:
    """The queues a definition's steps run on, sorted: the order in which they are locked (S1.3)."""
    return sorted({step["queue"] for step in document["steps"] if "queue" in step})
