"""What makes a definition document publishable beyond its JSON Schema (D1, D2).

The JSON Schema (`weave/schemas/definition.json`) checks shapes; this module checks what a
schema cannot say: step keys are unique, every `payload_schema` is itself a valid Draft 2020-12
schema that resolves without the network, and which queues the document needs.
"""

from __future__ import annotations

from typing import Any, Iterator

from weave import schemas
from weave.rules.problems import Problem

CONTRACT_FIELDS = {"SIGNAL": "signal", "POLL": "final_signal"}


def _remote_refs(node: Any, path: str) -> Iterator[Problem]:
    """`$ref`s that would need fetching: Weave never fetches, so only local ones are allowed."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}/{schemas.pointer([key])[1:]}"
            if key in ("$ref", "$dynamicRef") and isinstance(value, str) and not value.startswith("#"):
                yield Problem(here, f"only local references ('#...') are allowed, got {value!r}")
            else:
                yield from _remote_refs(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _remote_refs(item, f"{path}/{i}")


def problems(document: dict) -> list[Problem]:
    """Everything wrong with a schema-valid document, in document order (empty when publishable)."""
    found: list[Problem] = []
    seen: dict[str, int] = {}
    for i, step in enumerate(document["steps"]):
        if step["key"] in seen:
            found.append(
                Problem(f"/steps/{i}/key", f"duplicate step key {step['key']!r} (first at /steps/{seen[step['key']]})")
            )
        seen.setdefault(step["key"], i)
        contract_field = CONTRACT_FIELDS.get(step["type"])
        contract = step.get(contract_field) if contract_field else None
        if contract is not None:
            where = f"/steps/{i}/{contract_field}/payload_schema"
            found += [Problem(where + inner, why) for inner, why in schemas.schema_problems(contract["payload_schema"])]
            found.extend(_remote_refs(contract["payload_schema"], where))
    return found


def queues_used(document: dict) -> list[str]:
    """The queues a definition's steps run on, sorted: the order in which they are locked (S1.3)."""
    return sorted({step["queue"] for step in document["steps"] if "queue" in step})
