"""Issue 10: one payload check has a fixed budget of work (weave/schemas/budget.py), charged the same
way on every run; a check that runs out refuses the payload. Also the keywords Weave replaced so that
their cost is what the budget assumes: exact `multipleOf`, and `unevaluated*` with sets."""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction

import pytest
import re2
from helpers import payment, quickly, signal_flow_definition
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from weave.rules import signals as signal_rules
from weave.schemas import budget, errors_of, linear
from weave.schemas.payload import is_multiple, payload_errors, validator

REFUSED = str(budget.BudgetExceeded())
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def spent(schema, value) -> int:
    """Units a check of `value` against `schema` charges (it must not run out)."""
    with budget.budgeted(), linear.remembered_identities():
        errors_of(validator(schema), value)
        return budget.BUDGET_UNITS - budget._account.get().left


def runs_out(schema, value, units: int) -> bool:
    with budget.budgeted(units), linear.remembered_identities():
        try:
            errors_of(validator(schema), value)
        except budget.BudgetExceeded:
            return True
    return False


def test_a_per_item_schema_charges_a_unit_per_item_and_per_keyword_applied():
    schema, value = {"items": {"type": "integer"}}, [1] * 500
    assert spent(schema, value) == 500 + 500  # `items` descends 500 times; `type` runs 500 times
    assert not runs_out(schema, value, 1000) and runs_out(schema, value, 999)


def test_errors_are_charged_where_they_are_made_and_a_unit_at_each_level_they_pass():
    # 3 × `type` fails: made under `items` (4 units each, small instances), then passed up through it (1 each)
    assert spent({"items": {"type": "string"}}, [1, 2, 3]) == 3 + 3 + 3 * budget.ERROR_UNITS + 3
    wide = list(range(24 * 10))  # a failing `enum` prints its instance: a unit per 24 nodes of it
    assert spent({"enum": [0]}, wide) == 2 + budget.ERROR_UNITS + (len(wide) + 1) // budget.NODES_PER_UNIT


def test_a_regular_expression_is_charged_by_its_program_times_its_text():
    pattern, text = "[ab]*a[ab]{100}c", "ab" * 5000
    program = re2.compile(pattern).programsize
    assert spent({"pattern": pattern}, text) == 1 + 1 + program * len(text) // budget.REGEX_STEPS_PER_UNIT + (
        budget.ERROR_UNITS + (1 + len(text) // budget.CHARS_PER_NODE) // budget.NODES_PER_UNIT
    )


def test_unique_items_pays_once_for_each_part_of_the_payload_it_hashes():
    every_level = {"$ref": "#/$defs/n", "$defs": {"n": {"uniqueItems": True, "items": {"$ref": "#/$defs/n"}}}}
    deep = [1, 2]
    for _ in range(50):
        deep = [deep, [3]]
    flat_cost = spent({"uniqueItems": True}, deep)
    assert flat_cost == len(deep) + budget.size(deep) // budget.NODES_HASHED_PER_UNIT
    # every level hashes again only what the top one has not: linear in the payload, not quadratic
    assert spent(every_level, deep) < 12 * budget.size(deep)


@pytest.mark.parametrize(
    "schema, value",
    [
        ({"items": {"type": "integer"}}, list(range(30_000))),  # 60,000 units
        ({"pattern": "[ab]*a[ab]{1000}c"}, "ab" * 131_072),  # RE2's NFA over 256 KiB: seconds of CPU
        ({"patternProperties": {f"^{i}x+$": {} for i in range(100)}}, {f"{i:x}!": 0 for i in range(5000)}),
        ({"anyOf": [{"items": {"type": "string"}} for _ in range(50)]}, list(range(500))),
        (
            {"$ref": "#/$defs/n", "$defs": {"n": {"enum": [0], "items": {"$ref": "#/$defs/n"}}}},
            [[[list(range(5000))]]] * 9,
        ),
    ],
    ids=["per-item", "nfa-pattern", "many-patterns", "many-branches", "repr-at-every-level"],
)
def test_a_check_that_runs_out_refuses_the_payload_with_one_error_the_same_way_every_time(schema, value):
    first = payload_errors(schema, value, "/payload")
    assert first == [{"pointer": "/payload", "message": REFUSED}]
    assert payload_errors(schema, copy.deepcopy(value), "/payload") == first  # deterministic: no clock involved


def test_schemas_that_only_look_at_the_top_cost_the_same_for_any_payload_size():
    schema = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}
    small, large = {"amount": 1}, {"amount": 1, "lines": list(range(50_000)), "note": "x" * 100_000}
    assert spent(schema, small) == spent(schema, large) == 4  # type, required, properties, amount's type


def test_a_payload_nested_deeper_than_the_check_can_follow_is_refused_not_crashed():
    every_level = {"$ref": "#/$defs/n", "$defs": {"n": {"items": {"$ref": "#/$defs/n"}}}}
    deep = []
    for _ in range(400):
        deep = [deep]
    found = payload_errors(every_level, deep, "/payload")
    assert len(found) == 1 and found[0]["pointer"] == "/payload"
    assert "could not be checked" in found[0]["message"]


def test_a_schema_that_names_a_draft_inside_it_is_still_checked_by_weaves_validator():
    """Found with issue 25 item 9: jsonschema picks the class of every subschema it descends into by
    that subschema's `$schema`, so below `"$ref": "#"` into a root naming Draft 2020-12, or below a
    `$defs` entry naming Draft 7, jsonschema's stock class checked the payload: nothing charged, and
    the stock keywords (`multipleOf` could not check `1e999999` again)."""
    recursive = {"$schema": DRAFT_2020_12, "properties": {"c": {"$ref": "#"}}, "items": {"type": "integer"}}
    assert payload_errors(recursive, {"c": list(range(30_000))}) == [{"pointer": "", "message": REFUSED}]
    draft_7 = {"$schema": "http://json-schema.org/draft-07/schema#", "items": {"type": "integer"}}
    named = {"$defs": {"x": draft_7}, "$ref": "#/$defs/x"}
    assert payload_errors(named, list(range(30_000))) == [{"pointer": "", "message": REFUSED}]
    halves = {"$schema": DRAFT_2020_12, "properties": {"c": {"$ref": "#"}}, "multipleOf": Decimal("0.5")}
    assert payload_errors(halves, {"c": Decimal("1e999999")}) == []


# ---- multipleOf, exactly -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, divisor, multiple",
    [
        (Decimal("1e999999"), Decimal("0.5"), True),  # the stock keyword raised InvalidOperation here
        (Decimal("1e999999"), 3, False),
        (Decimal("3e999999"), 3, True),
        (Decimal("1e-999999"), Decimal("0.5"), False),
        (Decimal("7.5"), Decimal("2.5"), True),
        (Decimal("7.5"), Decimal("0.2"), False),
        (Decimal("1.5e3"), Decimal("0.25"), True),
        (10**40, 10**20, True),
        (-12, Decimal("4"), True),
        (0, Decimal("0.3"), True),
        (Decimal("0.3"), 0.1, True),  # a float divisor counts as its shortest decimal, as JSON wrote it
        (Decimal("1e300"), Decimal("1e-300"), True),
        (Decimal("1e300"), Decimal("7e-300"), False),
    ],
)
def test_multiple_of_is_exact_for_numbers_of_any_exponent(value, divisor, multiple):
    assert is_multiple(value, divisor) is multiple
    assert (payload_errors({"multipleOf": divisor}, value) == []) is multiple


decimals = st.builds(
    lambda digits, exponent: Decimal(digits).scaleb(exponent),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.integers(min_value=-30, max_value=30),
)


@given(decimals, decimals.filter(lambda d: d != 0))
def test_multiple_of_agrees_with_rational_arithmetic(value, divisor):
    assert is_multiple(value, divisor) is ((Fraction(value) / Fraction(divisor)).denominator == 1)


# ---- unevaluatedItems / unevaluatedProperties: the same verdicts as jsonschema, in linear time -------


@pytest.mark.parametrize(
    "schema, value",
    [
        ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1}),
        ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1, "b": 2}),
        ({"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": {"type": "integer"}}, {"a": "x", "b": 2}),
        ({"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": {"type": "integer"}}, {"a": "x", "b": "y"}),
        ({"anyOf": [{"patternProperties": {"^x": {}}}], "unevaluatedProperties": False}, {"xa": 1, "y": 2}),
        ({"prefixItems": [{}], "unevaluatedItems": False}, [1]),
        ({"prefixItems": [{}], "unevaluatedItems": False}, [1, 2]),
        ({"allOf": [{"contains": {"type": "string"}}], "unevaluatedItems": {"type": "integer"}}, ["a", 1]),
        ({"allOf": [{"contains": {"type": "string"}}], "unevaluatedItems": {"type": "integer"}}, ["a", None]),
    ],
)
def test_unevaluated_keywords_give_the_verdicts_of_jsonschema(schema, value):
    stock = [error.message for error in Draft202012Validator(schema).iter_errors(value)]
    ours = payload_errors(schema, value)
    assert bool(ours) is bool(stock)
    assert [e["message"] for e in ours] == sorted(stock)


def test_unevaluated_properties_is_linear_in_the_members():
    schema = {"patternProperties": {"^k": {}}, "unevaluatedProperties": False}
    # patternProperties: a unit per member and per search; unevaluatedProperties: the same again
    assert spent(schema, {f"k{i}": i for i in range(4000)}) == 4 * 4000
    # Without the budget: jsonschema's keyword tests each of 40,000 members against a list of the
    # evaluated ones, 800 M comparisons (about 10 s here); with a set it is a fraction of a second.
    many = {f"k{i}": i for i in range(40_000)}
    with linear.remembered_identities():
        assert quickly(lambda: errors_of(validator(schema), many)) == []


# ---- where payloads are checked -------------------------------------------------------------------------


def test_a_task_result_or_poll_report_that_cannot_be_checked_is_a_problem_not_an_exception():
    assert signal_rules.schema_problems({"multipleOf": Decimal("0.5")}, Decimal("1e999999"), "/result") == []
    found = signal_rules.schema_problems({"items": {"type": "integer"}}, list(range(30_000)), "/result")
    assert [(p.pointer, p.message) for p in found] == [("/result", REFUSED)]


def test_a_signal_whose_check_runs_out_is_refused_422_and_stores_nothing(flow):
    definition = signal_flow_definition()
    definition["steps"][1]["signal"]["payload_schema"] = {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "lines": {"items": {"type": "integer"}}},
    }
    flow.publish(definition)
    flow.start("order-1", input={"order_id": "o-1"})
    refused = flow.send("order-1", "k1", payment(payload={"amount": 1, "lines": list(range(20_000))}))
    assert (refused.status_code, refused.json["code"]) == (422, "CONTRACT_MISMATCH"), refused.text
    assert refused.json["errors"] == [{"pointer": "/payload", "message": REFUSED}]
    assert flow.rows("SELECT COUNT(*) AS n FROM signals")[0]["n"] == 0
    accepted = flow.send("order-1", "k1", payment(payload={"amount": 1, "lines": list(range(5_000))}))
    assert accepted.status_code == 201, accepted.text
