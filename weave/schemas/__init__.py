"""JSON Schemas of every request body and of the definition document, with validators built once.

The same documents feed the OpenAPI description (`weave.openapi`), so what is documented is
exactly what is enforced. `validate(name, value)` raises `VALIDATION_FAILED` with one JSON
Pointer per problem.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import attrs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from weave.errors import Code, WeaveError
from weave.schemas import linear

# Every schema this process validates with runs its regular expressions on RE2 (linear.py).
linear.install()

MAX_REPORTED_ERRORS = 20
MAX_MESSAGE_CHARS = 300


def staying(validator_class: type) -> type:
    """`validator_class`, made to stay itself in every subschema.

    jsonschema descends into a subschema with `evolve`, which picks the class anew from the
    subschema's `$schema`: a payload schema naming Draft 2020-12 (or another draft) in `$defs`, or
    at its root and reached again by `"$ref": "#"`, went on below it with jsonschema's stock class,
    without the work budget, the exact `multipleOf` or the linear keywords. A payload schema is
    Draft 2020-12 throughout, whatever a `$schema` inside it says (it is published as one), so the
    class is kept. jsonschema's validator classes are attrs classes; this `evolve` is theirs, less
    the choice of class."""
    init = [(field.name, field.alias) for field in attrs.fields(validator_class) if field.init]

    def evolve(self, **changes):
        changes.setdefault("schema", self.schema)
        for name, alias in init:
            if alias not in changes:
                changes[alias] = getattr(self, name)
        return validator_class(**changes)

    validator_class.evolve = evolve
    return validator_class


@functools.cache
def schema(name: str) -> dict:
    """The schema document `weave/schemas/<name>.json`."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text("utf-8"))


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    document = schema(name)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document)


def pointer(path) -> str:
    return "".join("/" + linear.escape(str(part)) for part in path)


def _message(error) -> str:
    text = error.message
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def errors_of(validator: Draft202012Validator, value: Any, prefix: str = "") -> list[dict]:
    found = sorted(validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [{"pointer": prefix + pointer(e.absolute_path), "message": _message(e)} for e in found]


def check(validator: Draft202012Validator, value: Any, code: Code = Code.VALIDATION_FAILED, prefix: str = "") -> None:
    """Raise `code` listing every place where `value` breaks the schema."""
    errors = errors_of(validator, value, prefix)
    if errors:
        shown = errors[:MAX_REPORTED_ERRORS]
        raise WeaveError(code, f"{shown[0]['pointer'] or '/'}: {shown[0]['message']}", shown)


def validate(name: str, value: Any) -> None:
    check(_validator(name), value)


def schema_problems(candidate: Any) -> list[tuple[str, str]]:
    """(pointer inside `candidate`, why) for what makes it unusable as a payload schema: not a
    valid Draft 2020-12 schema, or a regular expression RE2 cannot run. Empty when usable."""
    try:
        Draft202012Validator.check_schema(candidate)
    except SchemaError as exc:
        return [("", f"not a valid Draft 2020-12 schema: {_message(exc)}")]
    return list(linear.pattern_problems(candidate))
