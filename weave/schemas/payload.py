"""Checking a payload (a signal's, a task's result, a POLL round's final result) against the payload
schema of its contract: the one place that builds payload validators and runs them.

The validator is Draft 2020-12 with five changes: integers by value (`1.0` is an integer, issue 25
item 9: `weave.schemas.is_integer`), and four for a hostile schema or payload: regular
expressions on RE2 and `uniqueItems` by hashing (`linear`), `multipleOf` exact for numbers of any
exponent (below), every keyword charged against a work budget (`budget`), and references resolved
once per validator, not once per value they are followed for (`references`, issue 26). A check
answers with errors, never with an exception: a payload that cannot be checked (the budget ran out,
a reference that does not resolve) is refused with one error saying why.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Iterator

import referencing
from jsonschema import Draft202012Validator, validators
from jsonschema._utils import extras_msg, find_evaluated_item_indexes_by_schema
from jsonschema.exceptions import ValidationError

from weave.cache import BoundedCache
from weave.schemas import TYPE_CHECKER, budget, errors_of, linear, staying
from weave.schemas.references import ResolvedOnce


def is_multiple(value: int | Decimal, divisor: int | Decimal | float) -> bool:
    """`value / divisor` is an integer, exactly, for numbers of any exponent (`1e999999` is a
    multiple of 0.5), without building numbers much larger than the ones given."""
    if isinstance(value, int) and isinstance(divisor, int):
        return value % divisor == 0
    if isinstance(divisor, float):  # a schema read by a plain JSON parser: its shortest decimal form
        divisor = Decimal(repr(divisor))
    value, divisor = Decimal(value), Decimal(divisor)
    if value == 0:
        return True
    value_int, value_exponent = _integer_and_exponent(value)
    divisor_int, divisor_exponent = _integer_and_exponent(divisor)
    shift = value_exponent - divisor_exponent  # value / divisor = value_int / divisor_int · 10^shift
    if shift < 0:
        if -shift > len(str(value_int)):  # divisor_int · 10^-shift > value_int: a fraction
            return False
        return value_int % (divisor_int * 10**-shift) == 0
    # 10^shift supplies factors 2 and 5 only: take up to `shift` of each out of the divisor.
    for prime in (2, 5):
        taken = 0
        while taken < shift and divisor_int % prime == 0:
            divisor_int //= prime
            taken += 1
    return value_int % divisor_int == 0


def _integer_and_exponent(number: Decimal) -> tuple[int, int]:
    sign, digits, exponent = number.as_tuple()
    return int("".join(map(str, digits))), exponent


def multiple_of(validator, divisor, instance, schema) -> Iterator[ValidationError]:
    if validator.is_type(instance, "number") and not is_multiple(instance, divisor):
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


# jsonschema keeps the evaluated indexes in a list and tests every item against it: quadratic in the
# array's length. The same, with a set (and `unevaluatedProperties` in `linear`, which runs patterns).


def unevaluated_items(validator, unevaluated, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array"):
        return
    evaluated = set(find_evaluated_item_indexes_by_schema(validator, instance, schema))
    extras = [item for index, item in enumerate(instance) if index not in evaluated]
    if extras:
        yield ValidationError("Unevaluated items are not allowed (%s %s unexpected)" % extras_msg(extras))


_KEYWORDS = dict(
    Draft202012Validator.VALIDATORS,
    **linear.KEYWORDS,
    uniqueItems=linear.unique_items,
    multipleOf=multiple_of,
    unevaluatedItems=unevaluated_items,
)
PayloadValidator = staying(
    validators.extend(
        Draft202012Validator,
        {keyword: budget.charged(keyword, check) for keyword, check in _KEYWORDS.items()},
        type_checker=TYPE_CHECKER,
    )
)

# Weave never fetches a schema: a reference that is not in the payload schema does not resolve
# (publishing refuses any that is not local; this also holds for one a `$id` could send elsewhere).
NO_RETRIEVAL = referencing.Registry()


def build(schema: Any, **options: Any) -> PayloadValidator:
    """A validator of `schema` that resolves each of its references once (`references`)."""
    built = PayloadValidator(schema, registry=NO_RETRIEVAL, **options)
    return built.evolve(_resolver=ResolvedOnce(built._resolver))


# A validator keeps its schema alive (its parsed form: up to 32 bytes per character of its JSON
# text, for arrays of decimals; 4 for typical schemas, see sql/definitions.py) and what it resolved.
BYTES_PER_SCHEMA_CHAR = 32
BYTES_PER_RESOLUTION = 256
VALIDATOR_CACHE_BYTES = 32 * 1024 * 1024
_validators = BoundedCache(VALIDATOR_CACHE_BYTES)


def validator(payload_schema: Any) -> PayloadValidator:
    """The validator of a payload schema, cached by its sorted JSON text.

    The key is made with the C encoder on every signal, so it must be cheap; it is an identity for
    the cache, not a digest (exact decimals are written by `str`).
    """
    key = json.dumps(payload_schema, sort_keys=True, separators=(",", ":"), default=str)
    found = _validators.get(key)
    if found is None:
        found = build(payload_schema)
        references = key.count('"$ref":') + key.count('"$dynamicRef":')  # each kept once per scope
        _validators.put(key, found, BYTES_PER_SCHEMA_CHAR * len(key) + BYTES_PER_RESOLUTION * references)
    return found


def payload_errors(payload_schema: Any, value: Any, prefix: str = "") -> list[dict]:
    """Where `value` breaks `payload_schema`, as `{"pointer", "message"}` under `prefix`: empty when it fits."""
    try:
        with budget.budgeted(), linear.remembered_identities():
            return errors_of(validator(payload_schema), value, prefix)
    except budget.BudgetExceeded as exc:
        return [{"pointer": prefix, "message": str(exc)}]
    except Exception as exc:  # e.g. a reference the schema cannot resolve: refuse, never crash
        return [{"pointer": prefix, "message": f"the payload could not be checked against the contract: {exc}"}]
