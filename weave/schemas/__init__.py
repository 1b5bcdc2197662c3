"""JSON Schemas of every request body and of the definition document, with validators built once.

The same documents feed the OpenAPI description (`weave.openapi`), so what is documented is
exactly what is enforced. `validate(name, value)` raises `VALIDATION_FAILED` with one JSON
Pointer per problem.

Integers are JSON Schema 2020-12's (issue 25 item 9): a number whose fractional part is zero is an
integer, however it is written (`1.0`, `1e3`, `-0.0`). Weave parses numbers exactly
(`weave.jsontext`: a number with a fraction or an exponent is a `Decimal`), and jsonschema's stock
check counts only Python ints (and floats of integral value), so every validator Weave builds for
input uses `TYPE_CHECKER` (`Validator`, and the payload validator built on it).
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal
from importlib import resources
from typing import Any, Callable

import attrs
from jsonschema import Draft202012Validator, validators

from weave.errors import Code, WeaveError
from weave.schemas import linear

MAX_REPORTED_ERRORS = 20
MAX_MESSAGE_CHARS = 300


def integral(number: Decimal) -> bool:
    """`number` has no fractional part, read off its digits and exponent without computing with it:
    `1E+999999` is answered at once (never expanded), `1.000` and `0E-999999` by their few digits
    (at most `jsontext.MAX_NUMBER_CHARS` of them)."""
    _, digits, exponent = number.as_tuple()
    if not isinstance(exponent, int):  # NaN and Infinity ('n', 'N', 'F'): not numbers in JSON
        return False
    # the digits right of the point are the last -exponent ones (all of them, and zeros in front,
    # when -exponent is more than there are digits)
    return exponent >= 0 or not any(digits[exponent:])


def is_integer(checker, instance: Any) -> bool:
    """JSON Schema 2020-12's `integer`: a number with a zero fractional part, of any spelling;
    `true` and `false` are not numbers."""
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    if isinstance(instance, Decimal):
        return integral(instance)
    return isinstance(instance, float) and instance.is_integer()


def staying(validator_class: type) -> type:
    """`validator_class`, made to stay itself in every subschema.

    jsonschema descends into a subschema with `evolve`, which picks the class anew from the
    subschema's `$schema`: a payload schema naming Draft 2020-12 (or another draft) in `$defs`, or
    at its root and reached again by `"$ref": "#"`, went on below it with jsonschema's stock class,
    without the work budget, the exact `multipleOf`, the linear keywords or integers by value. A
    payload schema is Draft 2020-12 throughout, whatever a `$schema` inside it says (it is
    published as one), so the class is kept. jsonschema's validator classes are attrs classes;
    this `evolve` is theirs, less the choice of class."""
    init = [(field.name, field.alias) for field in attrs.fields(validator_class) if field.init]

    def evolve(self, **changes):
        changes.setdefault("schema", self.schema)
        for name, alias in init:
            if alias not in changes:
                changes[alias] = getattr(self, name)
        return validator_class(**changes)

    validator_class.evolve = evolve
    return validator_class


TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer)
# Draft 2020-12 with its regular expressions on RE2 (`linear.KEYWORDS`): what checks request bodies
# first, integers by Python type (see `validate`).
StockValidator = validators.extend(Draft202012Validator, linear.KEYWORDS)
# The same with integers by value: the verdict on request bodies and payload schemas.
Validator = staying(validators.extend(StockValidator, type_checker=TYPE_CHECKER))


@functools.cache
def schema(name: str) -> dict:
    """The schema document `weave/schemas/<name>.json`."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text("utf-8"))


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    """The stock validator of a request schema: integers by Python type. It answers most requests
    alone (see `validate`)."""
    document = schema(name)
    Draft202012Validator.check_schema(document)
    return StockValidator(document)


@functools.cache
def _exact_validator(name: str) -> Draft202012Validator:
    return Validator(schema(name))


@functools.cache
def _compiled(name: str) -> Callable[[Any], bool] | None:
    """The compiled check of a request schema that answers a body it passes at once (`_compiled_check`)."""
    return _compiled_check(schema(name))


def pointer(path) -> str:
    return "".join("/" + linear.escape(str(part)) for part in path)


def short_message(error) -> str:
    text = error.message
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def _described(errors, prefix: str = "") -> list[dict]:
    found = sorted(errors, key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [{"pointer": prefix + pointer(e.absolute_path), "message": short_message(e)} for e in found]


def errors_of(validator: Draft202012Validator, value: Any, prefix: str = "") -> list[dict]:
    return _described(validator.iter_errors(value), prefix)


def _refuse(errors: list[dict], code: Code = Code.VALIDATION_FAILED) -> None:
    if errors:
        shown = errors[:MAX_REPORTED_ERRORS]
        raise WeaveError(code, f"{shown[0]['pointer'] or '/'}: {shown[0]['message']}", shown)


def check(validator: Draft202012Validator, value: Any, code: Code = Code.VALIDATION_FAILED, prefix: str = "") -> None:
    """Raise `code` listing every place where `value` breaks the schema."""
    _refuse(errors_of(validator, value, prefix), code)


def _integral_decimal_refused(error) -> bool:
    """The stock check refused an integral `Decimal` as an `integer`: 2020-12 counts it as one."""
    expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
    return (
        error.validator == "type"
        and "integer" in expected
        and isinstance(error.instance, Decimal)
        and integral(error.instance)
    )


def validate(name: str, value: Any) -> None:
    """Raise `VALIDATION_FAILED` where the request body `value` breaks `weave/schemas/<name>.json`.

    A body the compiled check of the schema passes (`_compiled_check`, a subset of what the stock
    validator accepts) is answered at once, with nothing to replace.

    The verdict is Draft 2020-12's with integers by value (`Validator`), and a field the schema
    types `integer` reaches the code as an `int` whatever its spelling: `1.0` and `1e3` are
    replaced in `value` by `1` and `1000` (issue 25 item 9). The stock validator answers first;
    where it accepts, so does `Validator`, and there is nothing to replace (Weave's own schemas
    test no type in `if`, `not`, `anyOf` or `oneOf`: tests/unit/test_schemas_integer.py). Only a body
    it refuses is judged again by `Validator`, and where that accepts it, the places the stock
    validator refused as non-integers are the integral decimals to replace. Those are small: every
    `integer` of a request schema has a `maximum`, so no huge number is expanded.
    """
    passes = _compiled(name)
    if passes is not None and passes(value):
        return
    found = list(_validator(name).iter_errors(value))
    if not found:
        return
    refused_integers = [error for error in found if _integral_decimal_refused(error)]
    if not refused_integers:
        _refuse(_described(found))
        return
    _refuse(errors_of(_exact_validator(name), value))
    for error in refused_integers:
        *parents, last = error.absolute_path
        container = value
        for part in parents:
            container = container[part]
        container[last] = int(error.instance)


# ---- a compiled check for the bodies that pass (issue 31, item 4) -----------------------------------

# What a compiled check ignores: words that describe, and constrain nothing.
ANNOTATIONS = frozenset(("$schema", "$id", "title", "description", "examples", "default", "$comment"))


def _compiled_check(document: Any) -> Callable[[Any], bool] | None:
    """A check that answers True only for values the stock validator accepts (so `validate` may
    return at once), False for any other (which `validate` then judges as before), compiled from
    the few keywords Weave's flat request schemas use; None for a schema with any other keyword
    (it is judged by jsonschema alone). It is a subset by construction: an integer must be an
    `int` (no `bool`, float or `Decimal`, which the stock validator judges), and every keyword it
    knows it checks as jsonschema does (`len` for lengths, RE2 `search` for patterns)."""
    if not isinstance(document, dict) or not set(document) - ANNOTATIONS <= {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "items",
    }:
        return None
    kind = document.get("type")
    if kind is None:
        if set(document) - ANNOTATIONS:
            return None
        return lambda value: True
    if kind == "object":
        if set(document) - ANNOTATIONS - {"type", "properties", "required", "additionalProperties"}:
            return None
        members = {}
        for name, subschema in document.get("properties", {}).items():
            members[name] = _compiled_check(subschema)
            if members[name] is None:
                return None
        required = tuple(document.get("required", ()))
        additional = document.get("additionalProperties", True)
        if additional not in (True, False):
            return None

        def check_object(value: Any) -> bool:
            if type(value) is not dict:
                return False
            for name in required:
                if name not in value:
                    return False
            for name, member in value.items():
                check = members.get(name)
                if check is None:
                    if not additional:
                        return False
                elif not check(member):
                    return False
            return True

        return check_object
    if kind == "string":
        if set(document) - ANNOTATIONS - {"type", "minLength", "maxLength", "pattern"}:
            return None
        shortest, longest = document.get("minLength", 0), document.get("maxLength")
        pattern = document.get("pattern")

        def check_string(value: Any) -> bool:
            return (
                type(value) is str
                and shortest <= len(value)
                and (longest is None or len(value) <= longest)
                and (pattern is None or linear.search(pattern, value) is not None)
            )

        return check_string
    if kind == "integer":
        if set(document) - ANNOTATIONS - {"type", "minimum", "maximum"}:
            return None
        low, high = document.get("minimum"), document.get("maximum")

        def check_integer(value: Any) -> bool:
            return type(value) is int and (low is None or low <= value) and (high is None or value <= high)

        return check_integer
    if kind == "array":
        if set(document) - ANNOTATIONS - {"type", "minItems", "maxItems", "items"}:
            return None
        fewest, most = document.get("minItems", 0), document.get("maxItems")
        each = _compiled_check(document.get("items", {}))
        if each is None:
            return None

        def check_array(value: Any) -> bool:
            return (
                type(value) is list
                and fewest <= len(value)
                and (most is None or len(value) <= most)
                and all(each(item) for item in value)
            )

        return check_array
    return None
