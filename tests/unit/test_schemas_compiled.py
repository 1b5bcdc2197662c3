"""Issue 31 item 4: a request body is first judged by a check compiled from its schema
(`weave.schemas._compiled_check`), which answers only the bodies it passes; every other body is
judged by jsonschema as before. The check must never pass a body that jsonschema refuses, and
must pass the ordinary ones (else it saves nothing). Without a database."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest

from weave import jsontext, schemas

SIGNAL = {
    "name": "payment.settled",
    "payload_version": "1",
    "target_step_key": "pay",
    "target_activation_sequence": 1,
    "correlation_key": "o-1",
    "payload": {"amount": 12.5, "nested": [1, {"x": None}]},
    "reason": "psp webhook",
    "evidence_ref": "evt_123",
}
ROUTE = {k: v for k, v in SIGNAL.items() if k not in ("target_step_key", "target_activation_sequence")}
ROUTE["park_seconds"] = 60


def variants(body: dict) -> list:
    """The body itself, and bodies one change away from it: each member removed, replaced by
    values of other types, too short, too long, off its pattern, out of range; one member added."""
    found = [body, {**body, "extra": 1}, [body], "text", None, 1]
    for name in body:
        found.append({k: v for k, v in body.items() if k != name})
        for other in (
            None,
            True,
            False,
            0,
            -1,
            2**31,
            2**40,
            1.0,
            Decimal("1.0"),
            Decimal("1.5"),
            "",
            " ",
            "x" * 129,
            "x" * 2000,
            "a b",
            "\u00e9",
            "ok",
            [],
            {},
            ["ok"],
        ):
            found.append({**body, name: other})
    return found


@pytest.mark.parametrize(
    "name, body",
    [
        ("signal", SIGNAL),
        ("route_signal", ROUTE),
        ("signal_batch", {"signals": [{**SIGNAL, "workflow_id": "w", "idempotency_key": "k"}]}),
        ("signal_batch", {"signals": [{}] * 100}),
    ],
)
def test_the_compiled_check_passes_only_what_jsonschema_accepts(name, body):
    passes = schemas._compiled(name)
    assert passes is not None and passes(copy.deepcopy(body))
    for value in variants(body) + (variants(body["signals"][0]) if name == "signal_batch" else []):
        if passes(copy.deepcopy(value)):
            assert list(schemas._validator(name).iter_errors(value)) == [], value


def test_a_batch_over_its_cap_or_empty_is_left_to_jsonschema():
    passes = schemas._compiled("signal_batch")
    assert not passes({"signals": []}) and not passes({"signals": [{}] * 101})
    with pytest.raises(schemas.WeaveError):
        schemas.validate("signal_batch", {"signals": [{}] * 101})


def test_an_integral_decimal_still_reaches_the_code_as_an_int():
    body = jsontext.loads(jsontext.compact({**SIGNAL, "target_activation_sequence": 1}).replace(':1,"c', ':1.0,"c'))
    assert body["target_activation_sequence"] == Decimal("1.0")
    schemas.validate("signal", body)
    assert type(body["target_activation_sequence"]) is int


def test_a_schema_with_keywords_it_does_not_compile_is_judged_by_jsonschema_alone():
    assert schemas._compiled_check({"type": "object", "anyOf": [{"required": ["a"]}]}) is None
    assert schemas._compiled_check({"type": "number"}) is None
    assert schemas._compiled_check({"type": "string", "enum": ["a"]}) is None
    assert schemas._compiled_check({"type": "object", "additionalProperties": {"type": "string"}}) is None
    assert schemas._compiled_check({"type": "object", "properties": {"a": {"const": 1}}}) is None
