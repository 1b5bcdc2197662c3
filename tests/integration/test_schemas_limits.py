"""Issue 26, items 2-4: a payload schema's references are resolved once, publishing does bounded
work (limits of shape and size, one budget for the meta-schema check and RE2), caches are bounded
by bytes, and a schema too deep to check is refused at publish (422), never a 500.

The hostile inputs are built as the issue describes them."""

from __future__ import annotations

import copy
import json
import time

import pytest
import referencing._core
from helpers import payment, signal_flow_definition

from weave.cache import BoundedCache
from weave.rules import definitions as definition_rules
from weave.schemas import linear, publish
from weave.schemas import payload as payload_module
from weave.schemas.payload import payload_errors

SCHEMA_AT = "/steps/1/signal/payload_schema"
REFUSED = str(payload_module.budget.BudgetExceeded())


def nested_defs_schema(depth: int = 90) -> dict:
    """Item 2: `$defs` nested `depth` deep, `items` referring to the innermost entry (2.6 KB at 90)."""
    node: dict = {"type": "integer"}
    for _ in range(depth):
        node = {"$defs": {"a": node}}
    return {**node, "items": {"$ref": "#" + "/$defs/a" * depth}}


def nested_nots(depth: int, inner: dict | bool = True) -> dict | bool:
    """Item 4: `depth` nested `not`s (150 of them: 1.2 KB)."""
    node = inner
    for _ in range(depth):
        node = {"not": node}
    return node


def many_subschemas(count: int = 55_000) -> dict:
    """Item 3: one `anyOf` of `count` small subschemas (55,000: a 979 KB definition)."""
    return {"anyOf": [{"type": "string"} for _ in range(count)]}


def large_pattern(tag: int, branches: int = 80) -> str:
    """Item 3: a pattern of about 1.6 KB that RE2 compiles to about 480,000 instructions with its
    default memory (8 MiB): 300 of them took 31 s and kept 739 MB."""
    return f"{tag}(?:" + "|".join(f"{i}[^\\x00-\\x7f]{{1000}}" for i in range(branches)) + ")"


def with_schema(schema) -> dict:
    definition = signal_flow_definition()
    definition["steps"][1]["signal"]["payload_schema"] = schema
    return definition


def problems_of(schema) -> list[tuple[str, str]]:
    return [(p.pointer, p.message) for p in definition_rules.problems(with_schema(schema))]


@pytest.fixture
def headers(tenant):
    return tenant.headers("definitions:write", "definitions:read")


def publish_http(client, headers, document):
    """POST the document as compact JSON (the 979 KB of item 3 are compact)."""
    body = json.dumps(document, separators=(",", ":"))
    return client.simulate_post(
        "/v1/namespaces/acme/definitions", body=body, headers={**headers, "Content-Type": "application/json"}
    )


def stored_definitions(database) -> int:
    return database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM definitions"))["n"]


# ---- item 2: references -------------------------------------------------------------------------------


@pytest.fixture
def counted_lookups(monkeypatch) -> list[tuple[str, str]]:
    """Every reference `referencing` resolves, with the base URI it is resolved against (jsonschema
    asks it once per `$ref` it follows)."""
    calls: list[tuple[str, str]] = []
    lookup = referencing._core.Resolver.lookup

    def counting(self, ref):
        calls.append((ref, self._base_uri))
        return lookup(self, ref)

    monkeypatch.setattr(referencing._core.Resolver, "lookup", counting)
    return calls


def test_a_reference_nested_90_deep_is_resolved_once_per_validator_not_once_per_item(counted_lookups):
    """Item 2: resolving `#/$defs/a/…` (180 segments) walked the schema again for every item, in
    time quadratic in the pointer: a 24 KB payload cost 6.4 s before its 422."""
    schema, payload = nested_defs_schema(), [0] * 12_000  # 24,001 bytes
    assert payload_errors(schema, payload, "/payload") == [{"pointer": "/payload", "message": REFUSED}]
    assert len(counted_lookups) == 1
    started = time.process_time()
    assert payload_errors(schema, [0] * 1000) == []
    assert len(counted_lookups) == 1  # the validator keeps what it resolved
    assert time.process_time() - started < 1.0  # before: 0.4 s per 1,000 items here


def test_references_resolved_once_give_the_verdicts_they_gave(counted_lookups):
    tree = {"$ref": "#/$defs/node", "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    assert payload_errors(tree, [[[]], [[], [[]]]]) == []
    assert [e["pointer"] for e in payload_errors(tree, [[[]], [1]])] == ["/1/0"]
    with_id = {
        "$id": "urn:weave:test",
        "properties": {"a": {"$id": "urn:weave:inner", "$defs": {"n": {"type": "string"}}, "$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "integer"}},
        "items": {"$ref": "#/$defs/n"},
    }
    # `#/$defs/n` is the inner resource's under `a` (its `$id` is the base there), the root's elsewhere
    assert payload_errors(with_id, {"a": "x"}) == [] and payload_errors(with_id, [1, 2]) == []
    assert [e["pointer"] for e in payload_errors(with_id, {"a": 1})] == ["/a"]
    assert [e["pointer"] for e in payload_errors(with_id, ["x"])] == ["/0"]
    dynamic = {
        "$dynamicAnchor": "node",
        "type": "array",
        "items": {"$dynamicRef": "#node"},
    }
    assert payload_errors(dynamic, [[], [[]]]) == [] and payload_errors(dynamic, [[1]]) != []
    assert len(set(counted_lookups)) == len(counted_lookups)  # each resolved once in its scope


def test_a_schema_with_defs_nested_90_deep_is_refused_at_publish_with_the_limits(client, headers, database):
    refused = publish_http(client, headers, with_schema(nested_defs_schema()))
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED"), refused.text
    found = {e["pointer"]: e["message"] for e in refused.json["errors"]}
    deepest_allowed = SCHEMA_AT + "/$defs/a" * publish.MAX_DEFS_NESTING
    assert f"more than {publish.MAX_DEFS_NESTING} levels deep" in found[deepest_allowed + "/$defs"]
    assert f"more than {publish.MAX_REF_CHARS} characters" in found[SCHEMA_AT + "/items/$ref"]
    assert stored_definitions(database) == 0


def test_defs_nested_to_the_limit_and_the_longest_reference_are_publishable():
    assert problems_of(nested_defs_schema(publish.MAX_DEFS_NESTING)) == []
    name = "n" * (publish.MAX_REF_CHARS - len("#/$defs/"))
    assert problems_of({"$defs": {name: {}}, "$ref": f"#/$defs/{name}"}) == []
    assert problems_of({"$defs": {name + "n": {}}, "$ref": f"#/$defs/{name}n"}) == [
        (
            f"{SCHEMA_AT}/$ref",
            f"a reference of more than {publish.MAX_REF_CHARS} characters (this one has "
            f"{publish.MAX_REF_CHARS + 1}; the limit of a payload schema)",
        )
    ]


# ---- item 3: publishing does bounded work -------------------------------------------------------------


def test_a_979_kb_definition_of_55000_subschemas_is_refused_at_publish_quickly(client, headers, database):
    """Item 3: its meta-schema check took 25 s."""
    document = with_schema(many_subschemas())
    started = time.process_time()
    refused = publish_http(client, headers, document)
    spent = time.process_time() - started
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED"), refused.text
    (error,) = refused.json["errors"]
    assert error["pointer"] == f"{SCHEMA_AT}/anyOf/{publish.MAX_SUBSCHEMAS - 1}"
    assert f"more than {publish.MAX_SUBSCHEMAS:,} subschemas (the limit of a payload schema)" in error["message"]
    assert spent < 2.0  # parsing the 979 KB body is most of it
    assert stored_definitions(database) == 0


def test_the_meta_schema_check_has_a_budget_for_the_whole_definition():
    """Schemas each within every limit still share one budget: values the meta-schema looks at one
    by one (an `enum`) are charged too."""
    items = publish.MAX_SCHEMA_CHARS // 3
    definition = signal_flow_definition()
    signal = definition["steps"][1]
    definition["steps"] = [definition["steps"][0]] + [
        {
            **copy.deepcopy(signal),
            "key": f"pay{i}",
            "signal": {**signal["signal"], "payload_schema": {"title": f"pay{i}", "enum": [0] * items}},
        }
        for i in range(publish.PUBLISH_BUDGET_UNITS // items + 1)
    ]
    found = definition_rules.problems(definition)
    assert len(found) == 1 and found[0].pointer.startswith("/steps/") and found[0].pointer.endswith("/payload_schema")
    assert f"more than the {publish.PUBLISH_BUDGET_UNITS:,} units" in found[0].message
    identical = copy.deepcopy(definition)
    for step in identical["steps"][1:]:
        step["signal"]["payload_schema"]["title"] = "pay"
    assert definition_rules.problems(identical) == []  # a schema the steps share is checked once
    definition["steps"] = definition["steps"][:2]
    assert definition_rules.problems(definition) == []  # one of them is within the budget


def test_a_schema_over_the_size_limit_is_refused_with_its_pointer():
    big = {"description": "x" * publish.MAX_SCHEMA_CHARS}
    assert problems_of(big) == [
        (
            SCHEMA_AT,
            f"larger than {publish.MAX_SCHEMA_CHARS:,} characters of compact JSON (the limit of a payload schema)",
        )
    ]
    assert problems_of({"description": "x" * (publish.MAX_SCHEMA_CHARS - 20)}) == []


def test_large_patterns_are_refused_by_the_size_of_their_program_and_compiled_within_bounded_memory():
    """Item 3: RE2 compiled each to 480,000 instructions (8 MiB of memory allowed), 0.1 s each."""
    schema = {"anyOf": [{"pattern": large_pattern(tag)} for tag in range(3)]}
    started = time.process_time()
    found = problems_of(schema)
    assert time.process_time() - started < 1.0  # before: 0.3 s of RE2 per pattern
    assert [pointer for pointer, _ in found] == [f"{SCHEMA_AT}/anyOf/{i}/pattern" for i in range(3)]
    assert all(f"more than {linear.MAX_PATTERN_INSTRUCTIONS:,} instructions" in why for _, why in found)
    largest = "^.{1,1000}$"  # 9,001 instructions: patterns of real schemas stay far below the limit
    assert problems_of({"pattern": largest}) == []
    assert linear.compile_pattern(largest).programsize <= linear.MAX_PATTERN_INSTRUCTIONS


def test_a_pattern_over_the_length_limit_is_refused_before_it_is_compiled(monkeypatch):
    compiled = []
    monkeypatch.setattr(linear, "compile_pattern", lambda pattern: compiled.append(pattern))
    long = "a" * (publish.MAX_PATTERN_CHARS + 1)
    assert problems_of({"patternProperties": {long: {}}}) == [
        (
            f"{SCHEMA_AT}/patternProperties/{long}",
            f"a pattern of more than {publish.MAX_PATTERN_CHARS:,} characters (this one has {len(long):,}; "
            "the limit of a payload schema)",
        )
    ]
    assert compiled == []


def test_the_walk_gives_every_place_its_own_pointer_and_depth():
    """The items of a list are met after their siblings' subtrees: each keeps the path and the
    depth it was found at."""
    assert problems_of({"anyOf": [{"type": "string"}] * 100}) == []
    schema = {"anyOf": [{"properties": {"a": nested_nots(30)}}, {"pattern": "x" * (publish.MAX_PATTERN_CHARS + 1)}]}
    assert [pointer for pointer, _ in problems_of(schema)] == [f"{SCHEMA_AT}/anyOf/1/pattern"]
    schema = {"allOf": [{"examples": [[[[]]]]}, {"not": nested_nots(publish.MAX_SCHEMA_DEPTH - 3)}]}
    assert problems_of(schema) == []


def test_json_nested_deeper_than_the_limit_anywhere_in_a_schema_is_refused_without_recursing():
    deep: list = []
    for _ in range(900):  # about as deep as the JSON parser lets a body be
        deep = [deep]
    assert problems_of({"const": deep}) == [
        (SCHEMA_AT + "/const" + "/0" * (publish.MAX_SCHEMA_DEPTH - 1), publish._TOO_DEEP)
    ]


def test_contracts_of_poll_steps_have_the_same_limits():
    definition = {
        "name": "polled",
        "steps": [
            {
                "key": "p",
                "type": "POLL",
                "queue": "carrier",
                "interval_seconds": 60,
                "timeout_seconds": 600,
                "correlation": "/input/id",
                "final_signal": {"name": "f", "payload_version": "v1", "payload_schema": nested_nots(150)},
            }
        ],
    }
    (found,) = definition_rules.problems(definition)
    assert found.pointer == "/steps/0/final_signal/payload_schema" + "/not" * publish.MAX_SCHEMA_DEPTH


# ---- item 3: caches bounded by bytes ------------------------------------------------------------------


def test_a_bounded_cache_drops_the_least_recently_used_entries_to_stay_within_its_bytes():
    cache = BoundedCache(100)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3, 40)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), cache.bytes) == (1, None, 3, 80)
    cache.put("huge", 4, 101)  # larger than the whole cache: not kept, nothing dropped for it
    assert (cache.get("huge"), len(cache), cache.bytes) == (None, 2, 80)
    cache.put("a", 5, 10)
    assert (cache.get("a"), cache.bytes) == (5, 50)


def test_compiled_patterns_are_kept_within_their_bytes():
    before = linear.compiled.bytes
    for tag in range(2 * linear.COMPILED_CACHE_BYTES // linear.PATTERN_MEMORY_BYTES):
        linear.compile_pattern(f"^{tag}[a-z]+$")
    assert linear.compiled.bytes <= linear.COMPILED_CACHE_BYTES
    assert linear.compiled.bytes >= before


def test_payload_validators_are_kept_within_their_bytes():
    text_of = {"description": "d" * 100_000}
    for tag in range(2 * payload_module.VALIDATOR_CACHE_BYTES // (100_000 * payload_module.BYTES_PER_SCHEMA_CHAR)):
        payload_errors({**text_of, "title": str(tag)}, 1)
    assert payload_module._validators.bytes <= payload_module.VALIDATOR_CACHE_BYTES


def test_parsed_documents_are_kept_within_their_bytes(flow):
    """Item 3: twenty 1 MB definitions added 228 MB to the document cache (1,024 entries)."""
    from weave.sql import definitions

    definitions._documents.clear()
    description = "x" * 60_000
    for n in range(3):
        document = signal_flow_definition()
        document["name"] = f"big{n}"
        document["steps"][1]["signal"]["payload_schema"] = {"description": description}
        flow.publish(document)
        flow.start(f"big-{n}", definition=f"big{n}", input={"order_id": "o"})
    assert 0 < definitions._documents.bytes <= definitions.DOCUMENT_CACHE_BYTES
    assert definitions._documents.bytes >= 60_000 * definitions.BYTES_PER_DOCUMENT_CHAR


def test_credential_identities_are_kept_within_their_bytes(tenant, monkeypatch):
    from weave import auth
    from weave.sql import tenancy

    tenancy._principals.clear()
    tokens = [tenant.token("workflows:read", queues=("inventory", "carrier"), actor=f"a{i}") for i in range(6)]
    first = tenancy.authenticate(tenant.database, auth.token_hash(tokens[0]))
    one = tenancy._principals.bytes
    assert one >= len(first.queues) * len("inventory")
    monkeypatch.setattr(tenancy._principals, "limit_bytes", 3 * one)
    for token in tokens:
        assert tenancy.authenticate(tenant.database, auth.token_hash(token)) is not None
    assert (len(tenancy._principals), tenancy._principals.bytes) == (3, 3 * one)


# ---- item 4: depth --------------------------------------------------------------------------------------


def test_a_schema_of_150_nested_nots_is_refused_422_not_500(client, headers, database):
    """Item 4: check_schema raised RecursionError (500, and a 152 KB traceback in the log)."""
    refused = publish_http(client, headers, with_schema(nested_nots(150)))
    assert (refused.status_code, refused.json["code"]) == (422, "VALIDATION_FAILED"), refused.text
    assert refused.json["errors"] == [
        {
            "pointer": SCHEMA_AT + "/not" * publish.MAX_SCHEMA_DEPTH,
            "message": f"nested deeper than {publish.MAX_SCHEMA_DEPTH} levels (the limit of a payload schema)",
        }
    ]
    assert stored_definitions(database) == 0


def test_a_schema_as_deep_as_the_limit_is_published_and_checks_payloads(flow):
    # the root, `properties`, then 61 `not`s around `{"type": "integer"}`: 64 levels
    deepest = nested_nots(publish.MAX_SCHEMA_DEPTH - 3, {"type": "integer"})
    flow.publish(with_schema({"properties": {"x": deepest}}))
    flow.start("order-1", input={"order_id": "o-1"})
    refused = flow.send("order-1", "k1", payment(payload={"x": 1}))
    assert (refused.status_code, refused.json["code"]) == (422, "CONTRACT_MISMATCH"), refused.text
