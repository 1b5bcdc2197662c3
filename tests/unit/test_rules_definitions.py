"""D1 semantic checks of a definition document, without a database."""

from weave import schemas
from weave.rules import definitions as rules

SIGNAL = {"name": "payment.settled", "payload_version": "v1", "payload_schema": {"type": "object"}}


def doc(*steps):
    return {"name": "d", "steps": list(steps)}


def test_d1_unique_step_keys():
    found = rules.problems(
        doc(
            {"key": "a", "type": "TASK", "queue": "q", "timeout_seconds": 1},
            {"key": "a", "type": "TASK", "queue": "q", "timeout_seconds": 1},
        )
    )
    assert [(p.pointer, "duplicate step key" in p.message) for p in found] == [("/steps/1/key", True)]


def test_d1_payload_schema_must_be_a_valid_draft_2020_12_schema():
    bad = dict(SIGNAL, payload_schema={"type": "no-such-type"})
    found = rules.problems(
        doc({"key": "s", "type": "SIGNAL", "timeout_seconds": 5, "signal": bad, "correlation": "/input/id"})
    )
    assert [p.pointer for p in found] == ["/steps/0/signal/payload_schema"]
    assert "not a valid Draft 2020-12 schema" in found[0].message


def test_d1_payload_schema_with_invalid_regex_is_refused():
    bad = dict(SIGNAL, payload_schema={"type": "string", "pattern": "("})
    found = rules.problems(
        doc({"key": "s", "type": "SIGNAL", "timeout_seconds": 5, "signal": bad, "correlation": "/input/id"})
    )
    assert [p.pointer for p in found] == ["/steps/0/signal/payload_schema"]


def test_d1_remote_refs_are_refused_local_refs_allowed():
    remote = dict(SIGNAL, payload_schema={"$ref": "https://example.com/s.json"})
    local = dict(SIGNAL, payload_schema={"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"})
    found = rules.problems(
        doc(
            {
                "key": "p",
                "type": "POLL",
                "queue": "q",
                "interval_seconds": 1,
                "timeout_seconds": 5,
                "final_signal": remote,
                "correlation": "/x",
            },
            {"key": "s", "type": "SIGNAL", "timeout_seconds": 5, "signal": local, "correlation": "/x"},
        )
    )
    assert [p.pointer for p in found] == ["/steps/0/final_signal/payload_schema/$ref"]


def test_valid_document_has_no_problems_and_lists_sorted_queues():
    document = doc(
        {"key": "a", "type": "TASK", "queue": "zeta", "timeout_seconds": 1},
        {"key": "b", "type": "SIGNAL", "timeout_seconds": 5, "signal": SIGNAL, "correlation": "/input/id"},
        {"key": "c", "type": "POLL", "queue": "alpha", "interval_seconds": 1, "timeout_seconds": 5},
    )
    schemas.validate("definition", document)
    assert rules.problems(document) == []
    assert rules.queues_used(document) == ["alpha", "zeta"]
