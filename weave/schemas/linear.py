"""Payload validation that stays linear on hostile schemas and payloads (issue 10, items 2-3).

A payload schema is written by whoever may publish definitions, and a payload by whoever may
send signals; neither may make one validation cost more than time proportional to its size.
jsonschema's stock keywords have two ways to do that:

- Regular expressions (`pattern`, `patternProperties`, and through them `additionalProperties`
  and `unevaluatedProperties`) run on Python's backtracking `re`: `^(a+)+$` against 26 characters
  costs seconds. Here every regular expression of a schema runs on RE2, which matches in linear
  time. RE2 refuses what needs backtracking (back-references, look-around): such a pattern is
  refused at publish (`pattern_problems`), so no stored contract ever needs it.
- `uniqueItems` compares every pair of items once sorting fails (objects): quadratic. Here it
  hashes each item's JSON Schema identity once (`1` equals `1.0`, member order does not count,
  `true` is not `1`).

jsonschema's documented extension point carries the first: `KEYWORDS` are the keyword functions
that run a regular expression (`pattern`, `patternProperties`, `additionalProperties`, and
`unevaluatedProperties` through the names its subschemas evaluate), given to
`jsonschema.validators.extend` by every validator Weave builds (the request validators and
`weave.schemas.Validator`, the payload validator in `weave.schemas.payload`).
jsonschema's own `re` is left alone: a validator built without `KEYWORDS` runs Python's.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

import re2
from jsonschema._utils import extras_msg
from jsonschema.exceptions import ValidationError

from weave.cache import BoundedCache
from weave.schemas import budget

# What one compiled pattern may hold (issue 26, item 3): RE2 bounds its program and the states its
# DFA keeps to `max_mem`, and stops compiling a program that would not fit (at 13,600
# instructions or fewer with 160 KiB). With RE2's default of 8 MiB, a 1.6 KB pattern compiled to
# 480,000 instructions in 0.1 s and kept 2.5 MB: 300 of them held 739 MB. A DFA that runs out of
# its share falls back to RE2's NFA, which the work budget charges for already (`budget.regex_units`).
PATTERN_MEMORY_BYTES = 160 * 1024
# Published patterns are refused above this program size: `^.{1,1000}$` compiles to 9,001
# instructions, the patterns of real schemas to a few hundred (a UUID: 70, an e-mail address: 18).
MAX_PATTERN_INSTRUCTIONS = 10_000
# Compiling costs up to 2 µs per instruction (counted repetitions of a class), and failing for
# lack of memory up to 3 ms: what publishing charges its budget for them (`pattern_problems`).
COMPILE_UNITS_PER_INSTRUCTION = 2
COMPILE_UNITS_FAILED = 2500
# RE2 keeps the pattern's parsed form beside its program: bytes per character of the pattern.
PATTERN_BYTES_PER_CHAR = 64
COMPILED_CACHE_BYTES = 32 * 1024 * 1024  # 200 patterns at their most

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the publisher, not to stderr
_OPTIONS.max_mem = PATTERN_MEMORY_BYTES

compiled = BoundedCache(COMPILED_CACHE_BYTES)


def compile_pattern(pattern: str):
    """The RE2 form of a schema's regular expression; raises `re2.error` when RE2 cannot run it
    (or its program would need more than `PATTERN_MEMORY_BYTES`).

    `re2._Regexp`, not `re2.compile`: that one keeps its own 128 patterns by count, and would keep
    alive those this cache has let go."""
    found = compiled.get(pattern)
    if found is None:
        found = re2._Regexp(pattern, _OPTIONS)
        # Counted at the most it can hold (a DFA fills its memory as searches run), so that the
        # cache's bytes bound what its patterns can grow to, not what they hold today.
        compiled.put(pattern, found, PATTERN_MEMORY_BYTES + PATTERN_BYTES_PER_CHAR * len(pattern))
    return found


def search(pattern: str, string: str):
    """`re.search(pattern, string)` on RE2, charged to the budget of the check in progress."""
    regex = compile_pattern(pattern)
    budget.spend(budget.regex_units(regex.programsize, string))
    return regex.search(string)


# ---- the keywords that run regular expressions: jsonschema's, with `search` for `re.search` --------


def pattern(validator, patrn: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def pattern_properties(validator, patterns: dict, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for name, value in instance.items():
            if search(patrn, name):
                yield from validator.descend(value, subschema, path=name, schema_path=patrn)


def additional_properties(validator, additional: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))  # one search per name, as jsonschema does
    extras = {name for name in instance if name not in properties and not (patterns and search(patterns, name))}
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            regexes = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {regexes}")
        else:
            message = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(message % extras_msg(sorted(extras, key=str)))


def evaluated_property_names(validator, instance: dict, schema: Any) -> set:
    """The names of `instance` that `schema` evaluates, for `unevaluatedProperties`: jsonschema's
    `find_evaluated_property_keys_by_schema`, with `search` and a set."""
    if validator.is_type(schema, "boolean"):
        return set()
    evaluated: set = set()
    for keyword in ("$ref", "$dynamicRef"):
        reference = schema.get(keyword)
        if reference is not None:
            resolved = validator._resolver.lookup(reference)
            below = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            evaluated |= evaluated_property_names(below, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        evaluated |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            evaluated |= {name for name, value in instance.items() if _valid(validator.descend(value, subschema))}
    if "patternProperties" in schema:
        evaluated |= {name for name in instance if any(search(p, name) for p in schema["patternProperties"])}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            evaluated |= evaluated_property_names(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                evaluated |= evaluated_property_names(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            evaluated |= evaluated_property_names(validator, instance, schema["if"])
            if "then" in schema:
                evaluated |= evaluated_property_names(validator, instance, schema["then"])
        elif "else" in schema:
            evaluated |= evaluated_property_names(validator, instance, schema["else"])
    return evaluated


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def unevaluated_properties(validator, unevaluated: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    """jsonschema's keyword with the evaluated names in a set (its list made it quadratic in the
    object's size), each unevaluated name tested once."""
    if not validator.is_type(instance, "object"):
        return
    evaluated = evaluated_property_names(validator, instance, schema)
    extras = [
        name
        for name, value in instance.items()
        if name not in evaluated and not validator.evolve(schema=unevaluated).is_valid(value)
    ]
    if not extras:
        return
    if unevaluated is False:
        message = "Unevaluated properties are not allowed (%s %s unexpected)"
        yield ValidationError(message % extras_msg(sorted(extras, key=str)))
    else:
        message = "Unevaluated properties are not valid under the given schema (%s %s unevaluated and invalid)"
        yield ValidationError(message % extras_msg(extras))


# What every validator Weave builds gives `jsonschema.validators.extend`: no regular expression of a
# schema runs on Python's `re`.
KEYWORDS = {
    "pattern": pattern,
    "patternProperties": pattern_properties,
    "additionalProperties": additional_properties,
    "unevaluatedProperties": unevaluated_properties,
}


# ---- uniqueItems in linear time -------------------------------------------------------------------

_TRUE, _FALSE = object(), object()  # equal only to themselves: JSON's true is not 1, false is not 0

# A schema can apply uniqueItems at every level of nested arrays (`items` pointing back through a
# `$ref`), and jsonschema checks an array before its items: without memory, every level would form
# its whole subtree's identity again, quadratic in the depth (docs/performance.md). So each array's
# and object's identity is formed once per validation and kept by `id()`: the payload outlives the
# validation, so no id is reused while `remembered_identities()` holds the memory.
_known: ContextVar[dict[int, Any] | None] = ContextVar("weave_known_identities", default=None)


@contextmanager
def remembered_identities() -> Iterator[None]:
    """Around one validation (`weave.schemas.payload.payload_errors`): identities formed inside are reused."""
    token = _known.set({})
    try:
        yield
    finally:
        _known.reset(token)


def identity(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema's equality. Python's own equality already
    is JSON Schema's for strings, numbers (`1 == Decimal("1.0")`, with equal hashes) and null; only
    booleans (`True == 1` in Python), arrays and objects need a form of their own."""
    return _identity(value, {})


class _Items:
    """An array's identity: its items' identities, hashed once. Python does not keep a tuple's hash,
    so nested tuples would hash their whole subtree again at every level (a frozenset keeps its own)."""

    __slots__ = ("items", "hash")

    def __init__(self, items: tuple) -> None:
        self.items, self.hash = items, hash(items)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Items) and self.hash == other.hash and self.items == other.items


def _identity(value: Any, known: dict[int, Any]) -> Any:
    """`identity`, reusing and keeping in `known` the forms of arrays and objects by `id()`."""
    if isinstance(value, list):
        found = known.get(id(value))
        if found is None:
            found = known[id(value)] = _Items(tuple([_identity(item, known) for item in value]))
        return found
    if isinstance(value, dict):
        found = known.get(id(value))
        if found is None:  # member order does not count
            found = known[id(value)] = frozenset([(key, _identity(item, known)) for key, item in value.items()])
        return found
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    return value


def unique_items(validator, unique: bool, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    known = _known.get()
    if known is None:  # validated outside `payload.payload_errors`: remember for this array only
        known = {}
    if id(instance) not in known:  # its items' identities are formed now, once for the whole check
        budget.spend(budget.size(instance) // budget.NODES_HASHED_PER_UNIT)
    seen = set()
    for index, item in enumerate(instance):
        key = _identity(item, known)
        if key in seen:
            yield ValidationError(f"item {index} repeats an earlier item; the items must be unique")
            return
        seen.add(key)


# ---- refusing at publish what RE2 cannot run ---------------------------------------------------------

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas (Draft 2020-12).
SCHEMA_KEYWORDS = (
    "additionalProperties",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "additionalItems",
)
SCHEMA_LIST_KEYWORDS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAP_KEYWORDS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")

_TOO_LARGE = (
    f"RE2 compiles this pattern to more than {MAX_PATTERN_INSTRUCTIONS:,} instructions (the limit of a "
    "pattern): write it with fewer or smaller repetitions, or check lengths with minLength/maxLength"
)


def pattern_problems(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(pointer, why) for every regular expression in `schema` that RE2 cannot compile, or compiles
    to a program of more than `MAX_PATTERN_INSTRUCTIONS`. Each compilation is charged to the budget
    of the check in progress (publishing's), by the size of its program."""
    if not isinstance(schema, dict):
        return
    candidates = []
    if isinstance(schema.get("pattern"), str):
        candidates.append((f"{where}/pattern", schema["pattern"]))
    if isinstance(schema.get("patternProperties"), dict):
        candidates += [(f"{where}/patternProperties/{escape(key)}", key) for key in schema["patternProperties"]]
    for pointer, pattern in candidates:
        try:
            program = compile_pattern(pattern).programsize
        except re2.error as exc:
            reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            if reason.startswith("pattern too large"):  # RE2 gave up at its memory
                budget.spend(COMPILE_UNITS_FAILED)
                yield pointer, _TOO_LARGE
                continue
            budget.spend(1)
            yield (
                pointer,
                f"the pattern cannot run in linear time (RE2: {reason}); back-references and "
                "look-around are not supported",
            )
            continue
        budget.spend(1 + program * COMPILE_UNITS_PER_INSTRUCTION)
        if program > MAX_PATTERN_INSTRUCTIONS:
            yield pointer, _TOO_LARGE
    for keyword in SCHEMA_KEYWORDS:
        if keyword in schema:
            yield from pattern_problems(schema[keyword], f"{where}/{keyword}")
    for keyword in SCHEMA_LIST_KEYWORDS:
        if isinstance(schema.get(keyword), list):
            for i, sub in enumerate(schema[keyword]):
                yield from pattern_problems(sub, f"{where}/{keyword}/{i}")
    for keyword in SCHEMA_MAP_KEYWORDS:
        if isinstance(schema.get(keyword), dict):
            for key, sub in schema[keyword].items():
                yield from pattern_problems(sub, f"{where}/{keyword}/{escape(key)}")


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")
