"""Issue 25 item 9: JSON Schema 2020-12's `integer` is any number with a zero fractional part, so
`1.0`, `1e3` and `-0.0` are integers. Weave parses JSON exactly (`weave.jsontext`: a number with a
fraction or an exponent is a `Decimal`), and jsonschema's stock check refused such Decimals.
Without a database: the type check, payload checks, payload schemas at publish, and request
bodies (their `integer` fields reach the code as `int`)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from helpers import quickly

from weave import jsontext, schemas
from weave.errors import WeaveError
from weave.schemas import publish
from weave.schemas.payload import payload_errors

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
INTEGRAL = ["1.0", "1e3", "1E3", "-0.0", "0.000", "100e-2", "-7.00", "1E+999999", "0e-999999", "12.000e1"]
FRACTIONAL = ["1.5", "1e-1", "-0.5", "1.0000000001", "1E-999999", "123456789.000000000000000000001"]


@pytest.mark.parametrize("text", INTEGRAL)
def test_a_number_whose_fraction_is_zero_is_an_integer_in_a_payload(text):
    assert schemas.is_integer(None, Decimal(text))
    assert payload_errors({"type": "integer"}, jsontext.loads(text)) == []
    assert payload_errors({"properties": {"n": {"type": "integer"}}}, jsontext.loads('{"n": %s}' % text)) == []


@pytest.mark.parametrize("text", FRACTIONAL)
def test_a_number_with_a_fraction_is_not_an_integer(text):
    assert not schemas.is_integer(None, Decimal(text))
    found = payload_errors({"properties": {"n": {"type": "integer"}}}, jsontext.loads('{"n": %s}' % text))
    assert [e["pointer"] for e in found] == ["/n"] and "is not of type 'integer'" in found[0]["message"]


@pytest.mark.parametrize("value", [True, False, None, "1", [1], {"n": 1}, 1.5, Decimal("NaN"), Decimal("Infinity")])
def test_booleans_strings_and_non_numbers_are_not_integers(value):
    assert not schemas.is_integer(None, value)
    assert payload_errors({"type": "integer"}, value) != []


@pytest.mark.parametrize("value", [0, -3, pytest.param(10**999, id="10**999"), 2.0])
def test_ints_and_integral_floats_stay_integers(value):
    assert schemas.is_integer(None, value) and payload_errors({"type": "integer"}, value) == []


def test_a_huge_exponent_is_read_off_the_number_never_expanded():
    """`1e999999` as an int has a million digits; the check reads the exponent. 10,000 checks of
    the largest and smallest exponents JSON lets through take a fraction of the bound."""
    numbers = [Decimal("1e999999"), Decimal("-9.99e999999"), Decimal("1e-999999"), Decimal("0e-999999")]
    verdicts = quickly(lambda: [schemas.is_integer(None, n) for _ in range(2500) for n in numbers], limit=1.0)
    assert verdicts[:4] == [True, True, False, True]
    schema = {"type": "integer", "minimum": 1, "multipleOf": 2}
    assert quickly(lambda: payload_errors(schema, Decimal("1e999999")), limit=1.0) == []


def test_integer_keywords_agree_with_the_type():
    schema = {"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 2, "enum": [2, 4, 6]}
    assert payload_errors(schema, Decimal("4.0")) == []
    assert [e["message"] for e in payload_errors(schema, Decimal("12.0"))] == [
        "Decimal('12.0') is greater than the maximum of 10",
        "Decimal('12.0') is not one of [2, 4, 6]",
    ]


def test_a_schema_that_names_its_draft_and_refers_back_to_itself_keeps_integers_by_value():
    """Below `"$ref": "#"` into a root naming Draft 2020-12, jsonschema went on with its stock class
    (tests/integration/test_schemas_budget.py): Weave's class, and so its integers, must stay."""
    recursive = {"$schema": DRAFT_2020_12, "properties": {"n": {"type": "integer"}, "child": {"$ref": "#"}}}
    assert payload_errors(recursive, {"child": {"child": {"n": Decimal("1.0")}}}) == []
    assert [e["pointer"] for e in payload_errors(recursive, {"child": {"n": Decimal("1.5")}})] == ["/child/n"]


# ---- payload schemas at publish: the meta-schema's integers -------------------------------------------


def test_a_payload_schema_may_write_its_lengths_and_counts_as_integral_decimals():
    for keyword in ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minContains"):
        assert publish.schema_problems({keyword: Decimal("2.0")}) == [], keyword
    assert publish.schema_problems({"maxLength": Decimal("1E+999999")}) == []
    (problem,) = publish.schema_problems({"maxLength": Decimal("2.5")})
    assert problem == ("", "not a valid Draft 2020-12 schema: Decimal('2.5') is not of type 'integer'")
    schema = {"minLength": Decimal("2.0"), "maxLength": Decimal("3e0")}
    assert payload_errors(schema, "ab") == [] and payload_errors(schema, "abc") == []
    assert [e["message"] for e in payload_errors(schema, "abcd")] == ["'abcd' is too long"]


# ---- request bodies: the API's own integer fields ---------------------------------------------------------


def validated(name: str, text: str):
    body = jsontext.loads(text)
    schemas.validate(name, body)
    return body


def refusal(name: str, text: str) -> list[dict]:
    with pytest.raises(WeaveError) as refused:
        validated(name, text)
    return refused.value.errors


def test_an_integral_decimal_in_a_request_field_is_accepted_and_handed_on_as_an_int():
    body = validated("claim", '{"worker_id": "w", "lease_seconds": 6e1, "wait_seconds": 0.0}')
    assert body == {"worker_id": "w", "lease_seconds": 60, "wait_seconds": 0}
    assert type(body["lease_seconds"]) is int and type(body["wait_seconds"]) is int
    start = validated("start_workflow", '{"definition": "d", "version": 1.0, "input": 2.0, "deadline_seconds": 3.6e3}')
    assert start == {"definition": "d", "version": 1, "input": Decimal("2.0"), "deadline_seconds": 3600}
    assert type(start["version"]) is int and type(start["input"]) is Decimal  # input is kept as sent


def test_the_definition_documents_integers_become_ints_and_its_payload_schemas_stay_as_written():
    text = (
        '{"name": "d", "steps": ['
        '{"key": "t", "type": "TASK", "queue": "q", "timeout_seconds": 3e2, "max_attempts": 2.0},'
        '{"key": "p", "type": "POLL", "queue": "q", "interval_seconds": 5.00, "timeout_seconds": 60, "correlation": "/x",'
        ' "final_signal": {"name": "n", "payload_version": "v1", "payload_schema": {"maxLength": 5.0, "const": 1.0}}}]}'
    )
    steps = validated("definition", text)["steps"]
    assert [(s["timeout_seconds"], s.get("max_attempts"), s.get("interval_seconds")) for s in steps] == [
        (300, 2, None),
        (60, None, 5),
    ]
    assert all(type(v) is int for s in steps for k, v in s.items() if k.endswith(("_seconds", "_attempts")))
    schema = steps[1]["final_signal"]["payload_schema"]
    assert [type(v) for v in schema.values()] == [Decimal, Decimal]
    assert jsontext.compact(schema) == '{"maxLength":5.0,"const":1.0}'


@pytest.mark.parametrize(
    "text, messages",
    [
        ('{"worker_id": "w", "lease_seconds": 1.5}', ["Decimal('1.5') is not of type 'integer'"]),
        ('{"worker_id": "w", "lease_seconds": 0.0}', ["Decimal('0.0') is less than the minimum of 1"]),
        ('{"worker_id": "w", "lease_seconds": 1e999999}', ["Decimal('1E+999999') is greater than the maximum of 3600"]),
        ('{"lease_seconds": 1.0}', ["'worker_id' is a required property"]),
    ],
)
def test_a_request_field_is_refused_for_what_2020_12_finds_wrong_with_it(text, messages):
    """`0.0` is an integer below the minimum (not "not an integer"), and `1e999999` one above the
    maximum, answered without being expanded."""
    assert [e["message"] for e in quickly(lambda: refusal("claim", text), limit=1.0)] == messages


def _integer_places(node, keywords: tuple, root: dict, seen: frozenset = frozenset()):
    """(the keywords walked from the root, the subschema) of every subschema typed `integer`,
    following local references."""
    if not isinstance(node, dict):
        return
    types = node.get("type")
    if "integer" in (types if isinstance(types, list) else [types]):
        yield keywords, node
    for keyword, value in node.items():
        if keyword == "$ref" and value not in seen:
            target = root
            for part in value.removeprefix("#/").split("/") if value != "#" else ():
                target = target[part]
            yield from _integer_places(target, keywords + ("$ref",), root, seen | {value})
        elif keyword in ("properties", "patternProperties", "$defs", "dependentSchemas"):
            for member in value.values():
                yield from _integer_places(member, keywords + (keyword,), root, seen)
        elif keyword in ("allOf", "anyOf", "oneOf", "prefixItems"):
            for member in value:
                yield from _integer_places(member, keywords + (keyword,), root, seen)
        elif isinstance(value, dict):
            yield from _integer_places(value, keywords + (keyword,), root, seen)


REQUEST_SCHEMAS = sorted(path.stem for path in Path(schemas.__file__).parent.glob("*.json") if path.stem != "responses")


@pytest.mark.parametrize("name", REQUEST_SCHEMAS)
def test_request_schemas_type_integers_only_where_validate_can_find_them(name):
    """`schemas.validate` lets jsonschema's stock validator answer first and finds the integral
    decimals to replace where it refused them. That is exact while every `integer` is reached
    through keywords whose errors are reported as they are (not tested by `if` or `not`, nor one
    branch among others), and the replacement is small while every one has a `maximum`."""
    document = schemas.schema(name)
    reached = [
        (keywords, node) for keywords, node in _integer_places(document, (), document) if keywords[:1] != ("$defs",)
    ]
    allowed = {"properties", "items", "$ref", "allOf", "then", "else"}
    for keywords, node in reached:
        assert set(keywords) <= allowed, (name, keywords)
        assert isinstance(node.get("maximum"), int) and node["maximum"] < 2**63, (name, keywords)
    assert name in ("complete", "control", "review", "signal_batch") or reached


def test_every_request_schema_is_walked():
    assert REQUEST_SCHEMAS == [
        "claim",
        "complete",
        "control",
        "definition",
        "heartbeat",
        "inbound_mapping",
        "review",
        "route_signal",
        "signal",
        "signal_batch",
        "start_workflow",
    ]
