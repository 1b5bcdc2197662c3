"""The `validation` section (issue 10, items 2-3): payload validation under hostile schemas, in the
bench's process, beside stock jsonschema in a subprocess."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from decimal import Decimal
from statistics import median

from weave import jsontext, schemas
from weave.rules import definitions as definition_rules
from weave.schemas import budget
from weave.schemas.payload import payload_errors

VALIDATION_BYTES = 256 * 1024
VALIDATION_TARGET_MS = 100.0
VALIDATION_RUNS = 5
CHAIN_DEPTH = 200  # arrays nested around the wide one; jsonschema's own recursion stops near 300
# Stock jsonschema runs in a subprocess (Weave's RE2 and uniqueItems replace its code in-process) on
# inputs small enough to finish: it doubles with every character of the first, is quadratic in the second.
STOCK_PATTERN_CHARS = 24
STOCK_UNIQUE_OBJECTS = 1000

CATASTROPHIC = "^(a+)+$"  # exponential on backtracking engines
# Linear on RE2 too, but with a factor: its DFA needs 2^1000 states here, so RE2 falls back to its NFA,
# which steps every instruction of the program (≈1,000 here) for every character of the subject.
NFA_FALLBACK = "[ab]*a[ab]{1000}c"
MANY_PATTERNS = 100
MANY_BRANCHES = 50


def _json_bytes(value) -> int:
    return len(jsontext.compact(value))


def _largest(build, size: int) -> int:
    """The largest n whose build(n) has a compact JSON text of at most `size` bytes."""
    low, high = 0, 1
    while _json_bytes(build(high)) <= size:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _json_bytes(build(middle)) <= size else (low, middle)
    return low


def _recursive(node: dict) -> dict:
    """A schema applying `node` (with `items` pointing back to it) at every level of nested arrays."""
    return {"$ref": "#/$defs/node", "$defs": {"node": {**node, "items": {"$ref": "#/$defs/node"}}}}


def _tree(low: int, high: int):
    """A balanced binary tree of arrays over the integers low..high-1: every array is distinct."""
    if high - low <= 2:
        return list(range(low, high))
    middle = (low + high) // 2
    return [_tree(low, middle), _tree(middle, high)]


def _chain(depth: int, inner):
    for _ in range(depth):
        inner = [inner]
    return inner


def validation_cases(chain_depth: int = CHAIN_DEPTH) -> list[tuple[str, dict, object]]:
    """(label, hostile schema, build): build(n) is a payload growing with n, the worst shape for
    that schema that we know of."""
    rng = random.Random(7)
    subject = "".join(rng.choice("ab") for _ in range(VALIDATION_BYTES))
    keys = lambda n: {format(i, "x") + "!": 0 for i in range(n)}  # noqa: E731
    return [
        (f"pattern {CATASTROPHIC}, one string a…a!", {"pattern": CATASTROPHIC}, lambda n: "a" * n + "!"),
        (f"pattern {NFA_FALLBACK}, one string of a/b", {"pattern": NFA_FALLBACK}, lambda n: subject[:n]),
        (f'items.pattern {CATASTROPHIC}, strings "" (each fails)', {"items": {"pattern": CATASTROPHIC}}, _strings),
        (
            f"patternProperties {CATASTROPHIC} + additionalProperties:false, keys <hex>!",
            {"patternProperties": {CATASTROPHIC: {}}, "additionalProperties": False},
            keys,
        ),
        (
            f"patternProperties, {MANY_PATTERNS} patterns, keys <hex>!",
            {"patternProperties": {f"^{i}x+$": {} for i in range(MANY_PATTERNS)}},
            keys,
        ),
        (
            f"propertyNames.pattern {CATASTROPHIC}, keys <hex>! (each fails)",
            {"propertyNames": {"pattern": CATASTROPHIC}},
            keys,
        ),
        ("uniqueItems, distinct small objects", {"uniqueItems": True}, lambda n: [{"k": i} for i in range(n)]),
        ("uniqueItems, distinct small arrays", {"uniqueItems": True}, lambda n: [[i] for i in range(n)]),
        (
            "uniqueItems at every level ($ref), balanced tree of arrays",
            _recursive({"uniqueItems": True}),
            lambda n: _tree(0, n),
        ),
        (
            f"uniqueItems at every level ($ref), {chain_depth} arrays around one wide array",
            _recursive({"uniqueItems": True}),
            lambda n: _chain(chain_depth, list(range(n))),
        ),
        (
            f"enum at every level ($ref), {chain_depth} arrays around one wide array (each level fails)",
            _recursive({"enum": [0]}),
            lambda n: _chain(chain_depth, list(range(n))),
        ),
        (
            f"anyOf of {MANY_BRANCHES} per-item branches, integers (each branch fails)",
            {"anyOf": [{"items": {"type": "string", "minLength": i}} for i in range(MANY_BRANCHES)]},
            lambda n: [i % 10 for i in range(n)],
        ),
        (
            f"unevaluatedProperties after allOf of {MANY_BRANCHES} schemas, keys <hex>!",
            {
                "allOf": [
                    {"properties": {f"p{i}": {}}, "patternProperties": {"^[0-9a-f]+!$": {}}}
                    for i in range(MANY_BRANCHES)
                ],
                "unevaluatedProperties": False,
            },
            keys,
        ),
        (
            "multipleOf 0.001, numbers 1e999",
            {"items": {"multipleOf": Decimal("0.001")}},
            lambda n: [Decimal("1e999")] * n,
        ),
        (
            "reference: items.type integer, small integers",
            {"items": {"type": "integer"}},
            lambda n: [i % 10 for i in range(n)],
        ),
        ('reference: items.type integer, strings "" (each fails)', {"items": {"type": "integer"}}, _strings),
    ]


def _strings(n: int) -> list:
    return [""] * n


def _publishable(schema: dict) -> None:
    """The schema passes every check a definition's payload schema passes at publish."""
    document = {
        "name": "hostile",
        "steps": [
            {
                "key": "s",
                "type": "SIGNAL",
                "timeout_seconds": 60,
                "correlation": "/input/id",
                "signal": {"name": "x", "payload_version": "v1", "payload_schema": schema},
            }
        ],
    }
    schemas.validate("definition", document)
    assert definition_rules.problems(document) == [], definition_rules.problems(document)


def _outcome(errors: list[dict]) -> str:
    if any(e["message"] == str(budget.BudgetExceeded()) for e in errors):
        return "refused: budget"
    return f"{len(errors)} error(s)" if errors else "passes"


def _validation_ms(schema: dict, payload, runs: int) -> tuple[float, float, str]:
    """Median milliseconds (elapsed, and CPU of this process: the machine may be shared) of checking
    the payload exactly as a signal's is, and how the check ended."""
    payload_errors(schema, payload)  # untimed: builds and caches the validator
    elapsed, cpu, errors = [], [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        errors = payload_errors(schema, payload, "/payload")
        elapsed.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return median(elapsed) * 1000, median(cpu) * 1000, _outcome(errors)


def _largest_checked(build, schema: dict, most: int) -> int:
    """The largest n ≤ `most` whose payload the budget lets the check finish (passing or failing)."""
    refused = lambda n: _outcome(payload_errors(schema, build(n))) == "refused: budget"  # noqa: E731
    if not refused(most):
        return most
    low, high = 0, most  # refused(high) holds; refused(low) does not (an empty payload is cheap)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if refused(middle) else (middle, high)
    return low


STOCK_CHECK = """
import json, re, sys, time
from statistics import median
import jsonschema._keywords
from jsonschema import Draft202012Validator
assert jsonschema._keywords.re is re  # stock: Weave's RE2 is not installed in this process
case = json.load(sys.stdin)
validator, payload = Draft202012Validator(case["schema"]), json.loads(case["text"])
times = []
for _ in range(case["runs"]):
    started = time.perf_counter()
    list(validator.iter_errors(payload))
    times.append(time.perf_counter() - started)
print(median(times) * 1000)
"""


def _stock_ms(schema: dict, text: str, runs: int) -> float:
    """Median milliseconds of stock jsonschema (Python's `re`, pairwise uniqueItems) in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", STOCK_CHECK],
        input=json.dumps({"schema": schema, "text": text, "runs": runs}),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def run(
    size: int = VALIDATION_BYTES,
    runs: int = VALIDATION_RUNS,
    stock_pattern_chars: int = STOCK_PATTERN_CHARS,
    stock_unique_objects: int = STOCK_UNIQUE_OBJECTS,
    chain_depth: int = CHAIN_DEPTH,
) -> list[dict]:
    """Each hostile payload schema against the worst payloads for it, timed as a signal's payload is
    checked (validator from the cache, work budget and all): the largest payload of `size` bytes,
    and the largest one the budget lets the check finish (the most work a check can do). Beside it
    the same payload against `{}`. Medians of `runs`."""
    print(
        f"payload validation, payloads of at most {size:,} bytes, median of {runs} runs, "
        f"budget {budget.BUDGET_UNITS:,} units, target {VALIDATION_TARGET_MS:.0f} ms",
        flush=True,
    )
    results = []
    for label, schema, build in validation_cases(chain_depth):
        _publishable(schema)
        largest = _largest(build, size)
        checked = _largest_checked(build, schema, largest)
        full_ms, full_cpu, full_outcome = _validation_ms(schema, build(largest), runs)
        worst_ms, worst_cpu, worst_outcome = _validation_ms(schema, build(checked), runs)
        trivial, _, _ = _validation_ms({}, build(largest), runs)
        meets = max(full_ms, worst_ms) < VALIDATION_TARGET_MS
        print(
            f"  {label:<86} {_json_bytes(build(largest)):>7,} B {full_ms:6.1f} ms {full_outcome:<16} "
            f"largest checked {_json_bytes(build(checked)):>7,} B {worst_ms:6.1f} ms (CPU {worst_cpu:6.1f}) {worst_outcome:<14} "
            f"{{}} {trivial:5.2f} ms   {'meets' if meets else 'MISSES'} target",
            flush=True,
        )
        results.append(
            {
                "label": label,
                "bytes": _json_bytes(build(largest)),
                "weave_ms": round(full_ms, 2),
                "weave_cpu_ms": round(full_cpu, 2),
                "outcome": full_outcome,
                "largest_checked_bytes": _json_bytes(build(checked)),
                "largest_checked_ms": round(worst_ms, 2),
                "largest_checked_cpu_ms": round(worst_cpu, 2),
                "largest_checked_outcome": worst_outcome,
                "trivial_ms": round(trivial, 3),
                "meets_target": meets,
            }
        )
    small = [
        (
            f"pattern {CATASTROPHIC}, {stock_pattern_chars} characters a…a!",
            {"pattern": CATASTROPHIC},
            "a" * (stock_pattern_chars - 1) + "!",
        ),
        (
            f"uniqueItems, {stock_unique_objects} distinct small objects",
            {"uniqueItems": True},
            [{"k": i} for i in range(stock_unique_objects)],
        ),
    ]
    for label, schema, payload in small:
        text = json.dumps(payload, separators=(",", ":"))
        weave_ms, _, _ = _validation_ms(schema, payload, runs)
        stock = _stock_ms(schema, text, runs)
        print(
            f"  stock jsonschema, {label:<55} {stock:9.1f} ms   Weave {weave_ms:7.2f} ms ({len(text):,} bytes)",
            flush=True,
        )
        results.append(
            {
                "label": f"stock jsonschema: {label}",
                "bytes": len(text),
                "stock_ms": round(stock, 2),
                "weave_ms": round(weave_ms, 3),
            }
        )
    return results
