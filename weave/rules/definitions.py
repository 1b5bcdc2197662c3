"""What makes a definition document publishable beyond its JSON Schema (D1, D2, D5), and whether
an input fits it.

The JSON Schema (`weave/schemas/definition.json`) checks shapes; this module checks what a
schema cannot say: step keys are unique, every `payload_schema` and the `input_schema` are
themselves valid Draft 2020-12 schemas that resolve without the network and stay within the
limits of issue 26 (all of them checked together, under one budget of work:
`weave.schemas.publish`), and which queues the document needs. At start, the input is checked
against the `input_schema` by the payload validator (`weave.schemas.payload`): the same keywords,
RE2 patterns and budget of work as a signal's payload.
"""

from __future__ import annotations

from typing import Any, Iterator

from weave.rules.problems import Problem
from weave.schemas import publish
from weave.schemas.payload import payload_errors

CONTRACT_FIELDS = {"SIGNAL": "signal", "POLL": "final_signal"}


def schemas(document: dict) -> Iterator[tuple[str, Any]]:
    """(pointer, schema) of every schema in the document: its input schema (D5), then those of the
    signal contracts (a SIGNAL step's signal, a POLL step's final signal), which also check
    `complete_step` results."""
    if "input_schema" in document:
        yield "/input_schema", document["input_schema"]
    for i, step in enumerate(document["steps"]):
        contract_field = CONTRACT_FIELDS.get(step["type"])
        contract = step.get(contract_field) if contract_field else None
        if contract is not None:
            yield f"/steps/{i}/{contract_field}/payload_schema", contract["payload_schema"]


def problems(document: dict) -> list[Problem]:
    """Everything wrong with a schema-valid document (empty when publishable): duplicate step keys,
    then the problems of its schemas (input, payloads) in document order."""
    found: list[Problem] = []
    seen: dict[str, int] = {}
    for i, step in enumerate(document["steps"]):
        if step["key"] in seen:
            found.append(
                Problem(f"/steps/{i}/key", f"duplicate step key {step['key']!r} (first at /steps/{seen[step['key']]})")
            )
        seen.setdefault(step["key"], i)
    found += [Problem(where, why) for where, why in publish.problems(list(schemas(document)))]
    return found


def queues_used(document: dict) -> list[str]:
    """The queues a definition's steps run on, sorted: the order in which they are locked (S1.3)."""
    return sorted({step["queue"] for step in document["steps"] if "queue" in step})


def input_problems(document: dict, value: Any) -> list[Problem]:
    """Where a workflow's input breaks its definition's `input_schema` (D5), with pointers under
    `/input`; none when it fits or the definition has no input schema (any input, as before D5)."""
    if "input_schema" not in document:
        return []
    return [Problem(e["pointer"], e["message"]) for e in payload_errors(document["input_schema"], value, "/input")]
