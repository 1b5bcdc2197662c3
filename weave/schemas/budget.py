"""A budget of work for checking one payload against its contract's schema (issue 10).

Publishers write payload schemas and senders write payloads; together they choose how much work a
check costs, and jsonschema spends several microseconds on every keyword it applies to every node.
A 256 KiB payload holds 131,071 nodes, so a schema that applies anything per item costs about a
second of a server thread; nesting (`$ref` back into itself, `anyOf` over many branches, an error
message that prints its instance at every level) multiplies that. Rather than forbid keywords at
publish, every check gets a fixed budget of work units, charged before and while the work is
done, and a check that runs out is refused (422) instead of finished. Kubernetes does the same for
CRD validation rules (a CEL cost budget per evaluation).

The charge is deterministic: it depends on the schema and the payload, never on time or load, so
a payload is refused or accepted the same way on every server and every retry. One unit is about
the cost of one keyword applied to one value (1.5–3 µs here, `descend` included); the budget is
16,000 units, calibrated by `scripts/bench --only validation` so that the worst payload against the
worst schema it knows ends (passing, failing or refused) well inside 100 ms (docs/performance.md).
Schemas that only look at the top of a payload cost a handful of units whatever its size; a schema
with one keyword per item runs out at 8,000 items (one unit to descend, one for the keyword).

What a keyword costs, charged before it runs (`_CHARGES`):
- applicators charge one unit per child they may descend into (`items`: every item;
  `properties`: every named property; `additionalProperties`: every member; `anyOf`: every branch…);
- `enum` and `const` charge the size of the values compared against (deep equality);
- `uniqueItems` one unit per item, and the first time it meets a part of the payload, a unit per
  `NODES_HASHED_PER_UNIT` nodes in it (charged by `linear.unique_items`);
- every other keyword one unit.
Charged while it runs: each regular-expression search, by the length of the text times the size of
RE2's program (`linear.LinearRe`), and each error a keyword reports, by the size of the instance
its message prints (jsonschema builds messages with `repr`).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

BUDGET_UNITS = 16_000
# An error costs more than the keyword that found it (a ValidationError with its paths, and its
# message), and its message prints its instance: large instances cost a unit per this many nodes.
ERROR_UNITS = 4
NODES_PER_UNIT = 24
CHARS_PER_NODE = 64  # a string counts one node per this many characters (copying, repr)
NODES_HASHED_PER_UNIT = 2  # `uniqueItems` forms each array's and object's identity once per check
# RE2 steps at most every instruction of its program for every character (its NFA, when the DFA
# would need too many states): about 10 ns per instruction and character here.
REGEX_STEPS_PER_UNIT = 500


class BudgetExceeded(Exception):
    """The check used up its budget; the payload is refused without a verdict on its content."""

    def __init__(self) -> None:
        super().__init__(
            f"checking this value against its schema (a contract's payload schema, a definition's input "
            f"schema) needs more than the {BUDGET_UNITS:,} units of work one check may use (a unit is one "
            "keyword applied to one value); send a smaller value or publish a schema that does less per item"
        )


class _Account:
    __slots__ = ("left", "sizes", "errors")

    def __init__(self, units: int) -> None:
        self.left = units
        self.sizes: dict[int, int] = {}  # id() of an array or object of this check → its size
        self.errors: dict[int, Any] = {}  # id() of every error charged for its making → the error (kept alive)

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise BudgetExceeded()


_account: ContextVar[_Account | None] = ContextVar("weave_validation_budget", default=None)


@contextmanager
def budgeted(units: int = BUDGET_UNITS) -> Iterator[None]:
    """Around one check: charges inside it draw on `units` and raise `BudgetExceeded` past them.
    Outside any check (a schema's own validation, a test) nothing is charged."""
    token = _account.set(_Account(units))
    try:
        yield
    finally:
        _account.reset(token)


def spend(units: int) -> None:
    account = _account.get()
    if account is not None:
        account.spend(units)


def regex_units(program_size: int, text: str) -> int:
    return 1 + program_size * len(text) // REGEX_STEPS_PER_UNIT


def size(value: Any) -> int:
    """Nodes in `value` (long strings count a node per `CHARS_PER_NODE` characters), each array's
    and object's size kept for the rest of the check: the payload outlives the check, so no `id()`
    is reused while the check's account holds it."""
    account = _account.get()
    return _size(value, account.sizes if account is not None else {})


def _size(value: Any, sizes: dict[int, int]) -> int:
    if isinstance(value, (list, dict)):
        found = sizes.get(id(value))
        if found is None:
            items = value.values() if isinstance(value, dict) else value
            found = sizes[id(value)] = 1 + sum(_size(item, sizes) for item in items)
        return found
    if isinstance(value, str):
        return 1 + len(value) // CHARS_PER_NODE
    return 1


def _members(value: Any, instance: Any, schema: Any) -> int:
    return len(instance) if isinstance(instance, dict) else 1


def _items(value: Any, instance: Any, schema: Any) -> int:
    return len(instance) if isinstance(instance, list) else 1


def _prefix_items(value: Any, instance: Any, schema: Any) -> int:
    return min(len(value), len(instance)) if isinstance(instance, list) and isinstance(value, list) else 1


def _listed(value: Any, instance: Any, schema: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 1


def _compared(value: Any, instance: Any, schema: Any) -> int:
    return size(value)


def _pattern_properties(value: Any, instance: Any, schema: Any) -> int:
    return len(value) * len(instance) if isinstance(instance, dict) and isinstance(value, dict) else 1


def _dependent_required(value: Any, instance: Any, schema: Any) -> int:
    if not isinstance(value, dict):
        return 1
    return len(value) + sum(len(names) for names in value.values() if isinstance(names, list))


def _unevaluated(value: Any, instance: Any, schema: Any) -> int:
    """`unevaluatedItems`/`unevaluatedProperties` first find what the schema's other in-place
    applicators evaluated: every item or member once per such subschema."""
    if not isinstance(instance, (list, dict)):
        return 1
    in_place = sum(
        len(schema[k])
        for k in ("allOf", "anyOf", "oneOf", "dependentSchemas")
        if isinstance(schema.get(k), (list, dict))
    )
    in_place += sum(1 for k in ("$ref", "$dynamicRef", "if", "then", "else") if k in schema)
    return len(instance) * (1 + in_place)


# keyword → units charged before it runs, from (the keyword's value, the instance, the schema it is
# in); one unit otherwise
_CHARGES: dict[str, Callable[[Any, Any, Any], int]] = {
    "items": _items,
    "prefixItems": _prefix_items,
    "contains": _items,
    "unevaluatedItems": _unevaluated,
    "uniqueItems": _items,
    "additionalProperties": _members,
    "propertyNames": _members,
    "unevaluatedProperties": _unevaluated,
    "patternProperties": _pattern_properties,
    "properties": _listed,
    "required": _listed,
    "dependentSchemas": _listed,
    "allOf": _listed,
    "anyOf": _listed,
    "oneOf": _listed,
    "dependentRequired": _dependent_required,
    "enum": _compared,
    "const": _compared,
}


def charged(keyword: str, check: Callable) -> Callable:
    """`check` (a jsonschema keyword function) charging the budget for what it does."""
    charge = _CHARGES.get(keyword)

    def charged_check(validator, value, instance, schema):
        account = _account.get()
        if account is None:
            yield from check(validator, value, instance, schema) or ()
            return
        account.spend(charge(value, instance, schema) if charge is not None else 1)
        for error in check(validator, value, instance, schema) or ():
            if id(error) in account.errors:  # passed up from a deeper keyword: paths extended
                account.spend(1)
            else:  # made here: its message printed the instance
                account.errors[id(error)] = error
                account.spend(ERROR_UNITS + size(instance) // NODES_PER_UNIT)
            yield error

    charged_check.__name__ = f"charged_{keyword}"
    return charged_check
