"""Issue 10, items 2-3: hostile payload schemas and payloads validate in linear time; patterns RE2
cannot run are refused at publish with their pointer."""

from __future__ import annotations

import re
from decimal import Decimal

import jsonschema._keywords
import jsonschema._utils
import pytest
from helpers import quickly
from jsonschema import Draft202012Validator

from weave import schemas
from weave.errors import WeaveError
from weave.rules import definitions as definition_rules
from weave.schemas import StockValidator, Validator, errors_of, linear
from weave.schemas.payload import PayloadValidator, payload_errors

# With Python's backtracking `re` each of these takes about 2**28 steps (tens of seconds).
EVIL = "^(a+)+$"
EVIL_TEXT = "a" * 28 + "!"


def errors(schema, value) -> list[dict]:
    return payload_errors(schema, value)


def unbudgeted_errors(schema, value) -> list[dict]:
    """The check without its work budget (tests/integration/test_schemas_budget.py): how the keywords scale."""
    with linear.remembered_identities():
        return errors_of(PayloadValidator(schema), value)


# Python's `$` also matches before a final newline, RE2's does not: which engine ran tells itself.
NEWLINE_PATTERN = {"pattern": "^[a-z]+$"}
NEWLINE_TEXT = "abc\n"


@pytest.mark.parametrize("validator_class", [StockValidator, Validator, PayloadValidator])
@pytest.mark.parametrize(
    "schema, value",
    [
        (NEWLINE_PATTERN, NEWLINE_TEXT),
        ({"patternProperties": {"^[a-z]+$": False}}, {NEWLINE_TEXT: 1}),
        ({"patternProperties": {"^[a-z]+$": {}}, "additionalProperties": False}, {NEWLINE_TEXT: 1}),
        ({"patternProperties": {"^[a-z]+$": {}}, "unevaluatedProperties": False}, {NEWLINE_TEXT: 1}),
        ({"allOf": [{"patternProperties": {"^[a-z]+$": {}}}], "unevaluatedProperties": False}, {NEWLINE_TEXT: 1}),
        ({"propertyNames": NEWLINE_PATTERN}, {NEWLINE_TEXT: 1}),
    ],
    ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties", "nested", "propertyNames"],
)
def test_every_validator_weave_builds_runs_its_regular_expressions_on_re2(validator_class, schema, value):
    """Through `jsonschema.validators.extend` (`linear.KEYWORDS`): jsonschema's stock validator,
    on Python's `re`, gives the other verdict on each of these."""
    assert validator_class(schema).is_valid(value) is not Draft202012Validator(schema).is_valid(value)


def test_request_bodies_run_their_patterns_on_re2():
    body = {"definition": "orders", "version": 1, "input": {}, "deadline_seconds": 60}
    schemas.validate("start_workflow", body)
    with pytest.raises(WeaveError) as refused:
        schemas.validate("start_workflow", {**body, "definition": "orders\n"})
    assert [error["pointer"] for error in refused.value.errors] == ["/definition"]


def test_jsonschema_itself_is_left_alone():
    assert jsonschema._keywords.re is re and jsonschema._utils.re is re


@pytest.mark.parametrize(
    "schema, value, refused",
    [
        ({"type": "string", "pattern": EVIL}, EVIL_TEXT, True),
        ({"type": "object", "patternProperties": {EVIL: {"type": "string"}}}, {EVIL_TEXT: 1}, False),
        ({"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False}, {EVIL_TEXT: 1}, True),
        ({"type": "object", "patternProperties": {EVIL: {}}, "unevaluatedProperties": False}, {EVIL_TEXT: 1}, True),
        ({"type": "object", "propertyNames": {"pattern": EVIL}}, {EVIL_TEXT: 1}, True),
    ],
    ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames"],
)
def test_a_catastrophic_pattern_costs_linear_time(schema, value, refused):
    assert (quickly(lambda: errors(schema, value)) != []) is refused  # and the verdict is still right


def test_patterns_still_match_what_they_should():
    assert errors({"type": "string", "pattern": "^o-[0-9]+$"}, "o-42") == []
    assert errors({"patternProperties": {"^x": {"type": "integer"}}}, {"xa": "no"})[0]["pointer"] == "/xa"
    assert errors({"patternProperties": {"^x": {}}, "additionalProperties": False}, {"xa": 1}) == []
    assert errors({"patternProperties": {"^x": {}}, "additionalProperties": False}, {"ya": 1}) != []


@pytest.mark.parametrize(
    "items, unique",
    [
        ([1, Decimal("1.0")], False),  # JSON Schema equality: 1 equals 1.0
        ([Decimal("1.00"), 1], False),
        ([True, 1], True),  # but true is not 1
        ([False, 0], True),
        ([None, False], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),  # member order does not count
        ([{"a": [1, 2]}, {"a": [2, 1]}], True),  # item order does
        ([[1], [Decimal("1.0")]], False),
        (["1", 1], True),
        ([{"a": {"b": True}}, {"a": {"b": 1}}], True),
        ([], True),
    ],
)
def test_unique_items_uses_json_schema_equality(items, unique):
    assert (errors({"uniqueItems": True}, items) == []) is unique


def test_unique_items_is_linear_for_thousands_of_objects():
    many = [{"id": i, "tags": ["x", str(i)]} for i in range(20_000)]
    assert quickly(lambda: unbudgeted_errors({"uniqueItems": True}, many)) == []
    repeated = many + [{"tags": ["x", "7"], "id": 7}]
    assert quickly(lambda: unbudgeted_errors({"uniqueItems": True}, repeated))[0]["message"] == (
        "item 20000 repeats an earlier item; the items must be unique"
    )


EVERY_LEVEL = {"$ref": "#/$defs/node", "$defs": {"node": {"uniqueItems": True, "items": {"$ref": "#/$defs/node"}}}}


def test_unique_items_at_every_level_of_a_deep_payload():
    """Identities are remembered across the levels of one validation: equal content in distinct
    objects is still equal, and a repeat deep down is found at its own level."""
    wide = [{"id": i} for i in range(1000)]
    deep = wide
    for _ in range(150):
        deep = [deep, [1]]
    assert quickly(lambda: unbudgeted_errors(EVERY_LEVEL, deep)) == []
    inner = [[[{"a": 1}], [{"a": Decimal("1.0")}]]]  # two distinct lists with equal content, three levels down
    found = errors(EVERY_LEVEL, [[inner, 2]])
    assert [e["pointer"] for e in found] == ["/0/0/0"]
    assert found[0]["message"] == "item 1 repeats an earlier item; the items must be unique"


def signal_step_document(payload_schema) -> dict:
    signal = {"name": "n", "payload_version": "v1", "payload_schema": payload_schema}
    step = {"key": "s", "type": "SIGNAL", "timeout_seconds": 60, "correlation": "/input/k", "signal": signal}
    return {"name": "d", "steps": [step]}


@pytest.mark.parametrize(
    "payload_schema, pointer",
    [
        ({"type": "string", "pattern": "(a)\\1"}, "/pattern"),
        ({"properties": {"code": {"pattern": "^(?=x)"}}}, "/properties/code/pattern"),
        ({"patternProperties": {"(?<=a)b": {}}}, "/patternProperties/(?<=a)b"),
        ({"items": {"anyOf": [{}, {"pattern": "a(?=b)"}]}}, "/items/anyOf/1/pattern"),
        ({"$defs": {"a/b": {"pattern": "(?!x)"}}}, "/$defs/a~1b/pattern"),
    ],
)
def test_d1_patterns_re2_cannot_run_are_refused_at_publish_with_their_pointer(payload_schema, pointer):
    document = signal_step_document(payload_schema)
    found = definition_rules.problems(document)
    assert [p.pointer for p in found] == ["/steps/0/signal/payload_schema" + pointer]
    assert "linear time" in found[0].message


def test_d1_patterns_re2_can_run_are_published():
    document = signal_step_document(
        {"properties": {"id": {"pattern": EVIL}}, "patternProperties": {"^[a-z]+\\d*$": {}}}
    )
    assert definition_rules.problems(document) == []
