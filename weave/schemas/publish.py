"""What makes the payload schemas of a definition, and its input schema (D5), publishable (D1):
each a valid Draft 2020-12 schema, with regular expressions RE2 runs (`linear`) and within limits
of shape and size, and all of them checked within one budget of work (issue 26). The limits and
messages speak of payload schemas; an input schema is held to the same.

Checking a definition's schemas takes two passes. The first walks each schema's JSON
without recursing (`shape_problems`): its size, nesting, subschemas, `$defs` nesting and the
lengths of its references and patterns, and that every reference is local. Only when every
schema is within the limits does the second run the meta-schema check and compile the patterns
(`schema_problems`), once for each distinct schema. Both passes draw on one budget for the whole
definition (`PUBLISH_BUDGET_UNITS`), so a publish is refused, not finished, when it would cost more.

Without this, a 979 KB definition of 55,000 subschemas took 25 s to publish (the meta-schema
check), 300 large patterns took 31 s and kept 739 MB, 150 nested `not`s overflowed Python's
stack inside the meta-schema check (a 500), and a reference through `$defs` nested 90 deep made
every item of a payload cost a walk of 180 segments.

A refusal is a (JSON pointer, message) pair: the place in the document, and the limit it passes.
docs/decisions.md says why each limit is what it is.
"""

from __future__ import annotations

import itertools
import json
import re
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Iterator

from jsonschema import Draft202012Validator, FormatChecker

from weave.schemas import budget, linear, pointer, short_message
from weave.schemas.payload import NO_RETRIEVAL, PayloadValidator
from weave.schemas.references import ResolvedOnce

# Per payload schema. Real ones hold a few dozen subschemas in a few KB, nested a dozen levels.
MAX_SCHEMA_CHARS = 64 * 1024  # characters of its compact JSON
# Objects and arrays inside one another. The meta-schema check takes about 8 Python frames per
# level (RecursionError at 123 nested `not`s); 64 leave room under Python's limit of 1,000 for the
# server's own frames, and the payload check descends no deeper than the schema.
MAX_SCHEMA_DEPTH = 64
MAX_SUBSCHEMAS = 400  # the budget allows about that many small ones in a definition anyway
MAX_DEFS_NESTING = 8  # `$defs` (or `definitions`) inside a `$defs` entry, and so on
MAX_REF_CHARS = 512  # a `$ref` or `$dynamicRef` (`referencing` walks a pointer in time quadratic in it)
MAX_PATTERN_CHARS = 4096  # a `pattern`, or a name in `patternProperties`
# The work of checking one definition's payload schemas, in units of 1-2 µs of CPU here: a keyword
# of the meta-schema applied to one value (charged as payload checks are, `budget`), a resolution
# of the meta-schema's references (`META_RESOLUTION_UNITS`), a character of a pattern that Python's
# `re` parses (the meta-schema's `format: regex`), two per instruction of an RE2 program compiled
# (`linear.pattern_problems`), and a value of the schema's JSON walked. The costliest definition
# within it takes about 80 ms of the server's CPU to publish (scripts/bench --only hostile), under
# the 100 ms a request may cost; it admits about 400 small subschemas (of one or two keywords) in
# all the definition's distinct schemas.
PUBLISH_BUDGET_UNITS = 40_000
META_RESOLUTION_UNITS = 32  # the meta-schema's references resolve anew at every level of nesting: 25-35 µs
PATTERN_CHARS_PER_UNIT = 1  # Python's `re` parses about a character per µs
SCALARS_PER_UNIT = 16  # a list or an object of scalars (an `enum`) is measured by the C encoder
MAX_REPORTED = 20  # as `schemas.MAX_REPORTED_ERRORS`

_LIMIT = "the limit of a payload schema"
_TOO_DEEP = f"nested deeper than {MAX_SCHEMA_DEPTH} levels ({_LIMIT})"
_TOO_LARGE = f"larger than {MAX_SCHEMA_CHARS:,} characters of compact JSON ({_LIMIT})"
_TOO_MANY = f"more than {MAX_SUBSCHEMAS:,} subschemas ({_LIMIT}); this is the first one past it"
_DEFS_TOO_DEEP = f"$defs nested more than {MAX_DEFS_NESTING} levels deep ({_LIMIT})"
_OVER_BUDGET = (
    f"checking the schemas of this definition (payload and input) needs more than the {PUBLISH_BUDGET_UNITS:,} units "
    "of work one publish may use (about 400 small subschemas in its distinct schemas, fewer with large "
    "enums or patterns); publish smaller schemas"
)
_REFERENCES = ("$ref", "$dynamicRef")
_DEFINITIONS = ("$defs", "definitions")
_REFERENCES_IN = frozenset(_REFERENCES).intersection
_WORK_CHARGED_EVERY = 1024  # units the walk adds up before it charges them (and may stop)


def _is_regex(instance: Any) -> bool:
    """The meta-schema's `format: regex`, as jsonschema checks it (Python's `re` parses it), charged
    by its length: 4,096 characters cost about 5 ms."""
    if isinstance(instance, str):
        budget.spend(1 + len(instance) // PATTERN_CHARS_PER_UNIT)
        re.compile(instance)
    return True


_FORMATS = FormatChecker()
_FORMATS.checkers = {**Draft202012Validator.FORMAT_CHECKER.checkers, "regex": (_is_regex, re.error)}
# The meta-schema check: Weave's payload validator (every keyword charged, integers by value, so
# `{"maxLength": 5.0}` is a valid schema) over Draft 2020-12's meta-schema. Each check gets a
# `ResolvedOnce` of its own: the meta-schema's references resolve anew at every depth (their
# dynamic scope grows), so what one schema made it resolve is of little use to the next, and a
# resolver kept for one check only may charge its resolutions.
_META = PayloadValidator(Draft202012Validator.META_SCHEMA, format_checker=_FORMATS, registry=NO_RETRIEVAL)


def problems(located: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(pointer, why) for everything that keeps the payload schemas `located` ((pointer in the
    document, schema) pairs: all those of one definition) from being published; empty when they
    are publishable."""
    found: list[tuple[str, str]] = []
    where = ""
    with budget.budgeted(PUBLISH_BUDGET_UNITS):
        try:
            for where, schema in located:
                found += [(where + inner, why) for inner, why in shape_problems(schema)]
            if found:  # the second pass would cost what the limits are there to bound
                return found[:MAX_REPORTED]
            checked: dict[str, list[tuple[str, str]]] = {}  # a contract's schema is often the same in several steps
            for where, schema in located:
                key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
                if key not in checked:
                    checked[key] = schema_problems(schema)
                found += [(where + inner, why) for inner, why in checked[key]]
        except budget.BudgetExceeded:
            found.append((where, _OVER_BUDGET))
    return found[:MAX_REPORTED]


def schema_problems(schema: Any) -> list[tuple[str, str]]:
    """(pointer inside `schema`, why) for what makes a schema within the limits unusable as a
    payload schema: not valid Draft 2020-12 (the first error, as `check_schema` reports it), or a
    regular expression RE2 cannot run or runs with too large a program. Charged to the budget of
    the check in progress, if any (`budget.budgeted`)."""
    meta = _META.evolve(_resolver=ResolvedOnce(_META._resolver, charged=META_RESOLUTION_UNITS))
    for error in meta.iter_errors(schema):
        return [("", f"not a valid Draft 2020-12 schema: {short_message(error)}")]
    return list(linear.pattern_problems(schema))


# What a value met in the walk is: a schema (in a schema's place), the list or the map of schemas
# of an applicator (`anyOf`'s, `properties`'), or any other JSON (`enum`, `const`, annotations).
SCHEMA, SCHEMA_LIST, SCHEMA_MAP, VALUE = range(4)


class _Walk:
    """What the walk of one schema has counted so far."""

    __slots__ = ("chars", "subschemas", "work", "found")

    def __init__(self) -> None:
        self.chars = self.subschemas = self.work = 0
        self.found: list[tuple[str, str]] = []


def shape_problems(schema: Any) -> list[tuple[str, str]]:
    """(pointer, why) for every limit of shape and size that `schema` passes, and every reference
    in it that is not local (Weave never fetches), from one walk that does not recurse. It stops at
    the size limit and at the subschema limit, does not descend below a place it refuses, and
    charges the budget of the check in progress a unit per value it walks.

    The walk keeps a stack of iterators over the members of the containers it is in, so that a
    container is never copied: a list of 55,000 subschemas costs what its first 400 cost."""
    walk = _Walk()
    found = walk.found
    # each item: (value, its path as nested (parent, token) pairs, containers around it and itself, $defs above it, kind)
    stack: list[Iterator[tuple[Any, Any, int, int, int]]] = [iter([(schema, None, 1, 0, SCHEMA)])]
    while stack and len(found) < MAX_REPORTED:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        value, path, depth, defs, kind = entry
        walk.work += 1
        if walk.work >= _WORK_CHARGED_EVERY:
            budget.spend(walk.work)
            walk.work = 0
        if kind == SCHEMA and isinstance(value, (dict, bool)):
            walk.subschemas += 1
            if walk.subschemas > MAX_SUBSCHEMAS:
                found.append((_pointer(path), _TOO_MANY))
                break
        if isinstance(value, (dict, list)):
            if depth > MAX_SCHEMA_DEPTH:
                found.append((_pointer(path), _TOO_DEEP))
                continue
            walk.chars += 1 + (2 if isinstance(value, dict) else 1) * len(value)  # brackets, commas (colons)
            if walk.chars > MAX_SCHEMA_CHARS:
                break
            if kind in (SCHEMA_LIST, SCHEMA_MAP) and len(value) > MAX_SUBSCHEMAS - walk.subschemas:
                # each member is a schema (or the schema is invalid): the first one past the limit
                first_past = MAX_SUBSCHEMAS - walk.subschemas
                token = first_past if isinstance(value, list) else next(itertools.islice(value, first_past, None))
                found.append((_pointer((path, token)), _TOO_MANY))
                break
            if kind == VALUE and _scalars(value) and not (isinstance(value, dict) and _REFERENCES_IN(value)):
                # an `enum` or a `const` of scalars: measured by the C encoder, charged less
                text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
                walk.chars += len(text) - 1 - len(value)
                walk.work += len(value) // SCALARS_PER_UNIT
            elif isinstance(value, dict):
                stack.append(_members(value, path, depth, defs, kind, walk))
            else:
                stack.append(_items(value, path, depth, defs, SCHEMA if kind == SCHEMA_LIST else VALUE))
        elif isinstance(value, str):
            walk.chars += len(encode_basestring(value))
        elif value is None or isinstance(value, bool):
            walk.chars += 5 if value is False else 4
        else:
            walk.chars += len(str(value))  # a number, as written
        if walk.chars > MAX_SCHEMA_CHARS:
            break
    if walk.chars > MAX_SCHEMA_CHARS:
        found.append(("", _TOO_LARGE))
    budget.spend(walk.work)
    return found


def _items(value: list, path, depth: int, defs: int, held: int) -> Iterator[tuple]:
    """The items of the list `value` for the walk, each of kind `held` (a generator function, not a
    generator expression: that would read `path` and `depth` when it runs, after the walk moved on)."""
    for i, item in enumerate(value):
        yield item, (path, i), depth + 1, defs, held


def _members(value: dict, path, depth: int, defs: int, kind: int, walk: _Walk) -> Iterator[tuple]:
    """The members of the object `value` for the walk, each with what it is; the problems of the
    object itself go to `walk.found` as they are met."""
    for key, member in value.items():
        walk.chars += len(encode_basestring(key))
        here = (path, key)
        if key in _REFERENCES and isinstance(member, str):
            walk.found += _reference_problems(member, here, kind == SCHEMA)
        if kind != SCHEMA:  # the members of a map of schemas are schemas; those of other JSON are not
            yield member, here, depth + 1, defs, SCHEMA if kind == SCHEMA_MAP else VALUE
            continue
        held, inner = VALUE, defs
        if key in linear.SCHEMA_KEYWORDS:
            held = SCHEMA
        elif key in linear.SCHEMA_LIST_KEYWORDS and isinstance(member, list):
            held = SCHEMA_LIST
        elif key in linear.SCHEMA_MAP_KEYWORDS and isinstance(member, dict):
            held = SCHEMA_MAP
            if key in _DEFINITIONS:
                if defs >= MAX_DEFS_NESTING:
                    walk.found.append((_pointer(here), _DEFS_TOO_DEEP))
                    continue
                inner = defs + 1
            if key == "patternProperties":
                walk.found += [(_pointer((here, name)), why) for name, why in _too_long(member)]
        elif key == "pattern" and isinstance(member, str):
            walk.found += [(_pointer(here), why) for _, why in _too_long([member])]
        yield member, here, depth + 1, inner, held


def _scalars(container: dict | list) -> bool:
    items = container.values() if isinstance(container, dict) else container
    return not any(isinstance(item, (dict, list)) for item in items)


def _reference_problems(reference: str, here, in_schema: bool) -> list[tuple[str, str]]:
    if not reference.startswith("#"):  # anywhere in the schema, as it always was
        return [(_pointer(here), f"only local references ('#...') are allowed, got {_shortened(reference)!r}")]
    if in_schema and len(reference) > MAX_REF_CHARS:
        why = f"a reference of more than {MAX_REF_CHARS} characters (this one has {len(reference)}; {_LIMIT})"
        return [(_pointer(here), why)]
    return []


def _too_long(patterns) -> list[tuple[str, str]]:
    """(pattern, why) for the patterns over the length limit."""
    return [
        (pattern, f"a pattern of more than {MAX_PATTERN_CHARS:,} characters (this one has {len(pattern):,}; {_LIMIT})")
        for pattern in patterns
        if len(pattern) > MAX_PATTERN_CHARS
    ]


def _shortened(text: str, most: int = 100) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def _pointer(path) -> str:
    tokens = []
    while path is not None:
        path, token = path
        tokens.append(token)
    return pointer(reversed(tokens))
