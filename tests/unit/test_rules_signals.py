"""Signal rules without a database: the contract check (S1.9), the request digest (S1.11) and the
disposition a signal gets at acceptance (S1.10, S2.1, S2.3)."""

import hashlib
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from weave.rules import signals as rules
from weave.rules.signals import ABSENT, Acceptance

# ---- S1.9: the contract of the pinned definition ---------------------------------------------------------

PAYMENT_SCHEMA = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}
TRACKING_SCHEMA = {"type": "object", "required": ["tracking"]}


def signal_step(key: str, payload_schema) -> dict:
    return {
        "key": key,
        "type": "SIGNAL",
        "timeout_seconds": 60,
        "correlation": "/input/order_id",
        "signal": {"name": f"{key}.sent", "payload_version": "v1", "payload_schema": payload_schema},
    }


STEPS = [
    {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 300},
    signal_step("payment", PAYMENT_SCHEMA),
    signal_step("any", {}),
    signal_step("anything", True),
    signal_step("nothing", False),
    signal_step("nullable", {"type": ["object", "null"]}),
    signal_step("broken", {"$ref": "#/$defs/missing"}),  # publishing refuses this; acceptance must not crash
    {
        "key": "shipment",
        "type": "POLL",
        "queue": "carrier",
        "interval_seconds": 60,
        "timeout_seconds": 600,
        "correlation": "/input/order_id",
        "final_signal": {"name": "shipment.sent", "payload_version": "v1", "payload_schema": TRACKING_SCHEMA},
    },
    {"key": "probe", "type": "POLL", "queue": "carrier", "interval_seconds": 60, "timeout_seconds": 600},
]


def contract_pointers(target: str, payload, name: str | None = None, version: str = "v1") -> list[str]:
    fields = {"target_step_key": target, "name": name or f"{target}.sent", "payload_version": version}
    return [p.pointer for p in rules.contract_problems(STEPS, fields, payload)]


@pytest.mark.parametrize(
    "target, payload, name, version, pointers",
    [
        ("payment", {"amount": Decimal("12.50")}, None, "v1", []),
        ("nowhere", {"amount": 1}, None, "v1", ["/target_step_key"]),
        ("reserve", {"amount": 1}, None, "v1", ["/target_step_key"]),
        ("probe", {"state": "FINAL", "result": {}}, None, "v1", ["/target_step_key"]),
        ("payment", {"amount": 1}, "payment.other", "v1", ["/name"]),
        ("payment", {"amount": 1}, "Payment.sent", "v1", ["/name"]),
        ("payment", {"amount": 1}, None, "v2", ["/payload_version"]),
        ("payment", {"amount": "not a number"}, "payment.other", "v2", ["/name", "/payload_version"]),
    ],
    ids=[
        "s1_9_fitting_signal_has_no_problem",
        "s1_9_unknown_target_step",
        "s1_9_task_step_takes_no_signal",
        "s1_9_poll_step_without_final_signal_takes_no_signal",
        "s1_9_other_signal_name",
        "s1_9_signal_name_compared_exactly",
        "s1_9_other_payload_version",
        "s1_9_name_and_version_both_reported_and_payload_not_checked_against_a_wrong_contract",
    ],
)
def test_s1_9_target_name_and_version_must_match_the_pinned_contract(target, payload, name, version, pointers):
    assert contract_pointers(target, payload, name, version) == pointers


@pytest.mark.parametrize(
    "target, payload, pointers",
    [
        ("payment", {"amount": "12"}, ["/payload/amount"]),
        ("payment", {}, ["/payload"]),
        ("payment", None, ["/payload"]),
        ("payment", ABSENT, ["/payload"]),
        ("any", ABSENT, []),
        ("anything", ABSENT, []),
        ("any", None, []),
        ("nothing", ABSENT, ["/payload"]),
        ("nothing", {}, ["/payload"]),
        ("nullable", None, []),
        ("nullable", ABSENT, ["/payload"]),
    ],
    ids=[
        "s1_9_payload_failing_the_schema_points_at_the_member",
        "s1_9_missing_required_member",
        "s1_9_explicit_null_is_checked_against_the_schema",
        "s1_9_absent_payload_refused_when_the_schema_is_not_trivial",
        "s1_9_absent_payload_allowed_by_empty_schema",
        "s1_9_absent_payload_allowed_by_true_schema",
        "s1_9_explicit_null_allowed_by_empty_schema",
        "s1_9_false_schema_is_not_trivial_absent_refused",
        "s1_9_false_schema_refuses_every_payload",
        "s1_9_null_allowed_where_the_schema_allows_null",
        "s1_9_absent_is_not_null_even_where_null_is_allowed",
    ],
)
def test_s1_9_signal_payload_against_the_contract_schema(target, payload, pointers):
    assert contract_pointers(target, payload) == pointers


def test_s1_9_absent_payload_problem_says_a_payload_is_required():
    [problem] = rules.contract_problems(
        STEPS, {"target_step_key": "payment", "name": "payment.sent", "payload_version": "v1"}, ABSENT
    )
    assert problem == rules.Problem("/payload", "this contract's payload schema requires a payload")


def test_s1_9_schema_that_cannot_be_checked_refuses_instead_of_crashing():
    [problem] = rules.contract_problems(
        STEPS, {"target_step_key": "broken", "name": "broken.sent", "payload_version": "v1"}, {}
    )
    assert problem.pointer == "/payload"
    assert problem.message.startswith("the payload could not be checked against the contract: ")


@pytest.mark.parametrize(
    "payload, pointers",
    [
        ({"state": "FINAL", "result": {"tracking": "T-1"}}, []),
        ({"state": "FINAL", "result": {}}, ["/payload/result"]),
        ({"state": "FINAL", "result": None}, ["/payload/result"]),
        ({"state": "PENDING"}, ["/payload/state"]),
        ({"state": "PENDING", "result": {"tracking": "T-1"}}, ["/payload/state"]),
        (ABSENT, ["/payload"]),
        (None, ["/payload"]),
        ([{"state": "FINAL", "result": {"tracking": "T-1"}}], ["/payload"]),
        ("FINAL", ["/payload"]),
        ({"state": "FINAL"}, ["/payload"]),
        ({"result": {"tracking": "T-1"}}, ["/payload"]),
        ({"state": "FINAL", "result": {"tracking": "T-1"}, "extra": 1}, ["/payload"]),
        ({"state": "DONE", "result": {"tracking": "T-1"}}, ["/payload"]),
        ({"state": "final", "result": {"tracking": "T-1"}}, ["/payload"]),
    ],
    ids=[
        "c1_final_envelope_with_valid_result",
        "s1_9_final_result_checked_against_the_schema",
        "s1_9_final_null_result_checked_against_the_schema",
        "s1_9_poll_final_signal_may_not_be_pending",
        "s1_9_pending_refused_even_with_a_result",
        "s1_9_final_signal_needs_a_payload",
        "s1_9_final_signal_payload_null",
        "s1_9_final_signal_payload_array",
        "s1_9_final_signal_payload_string",
        "s1_9_final_without_result",
        "s1_9_result_without_state",
        "s1_9_final_envelope_has_exactly_two_members",
        "s1_9_unknown_state",
        "s1_9_state_compared_exactly",
    ],
)
def test_s1_9_poll_final_signal_envelope(payload, pointers):
    assert contract_pointers("shipment", payload) == pointers


# ---- S1.11: the request digest -----------------------------------------------------------------------------

FIELDS = {
    "name": "payment.settled",
    "payload_version": "v1",
    "target_step_key": "payment",
    "target_activation_sequence": 1,
    "correlation_key": "o-1",
    "reason": "PSP webhook",
    "evidence_ref": None,
}
CANONICAL_WITHOUT_PAYLOAD = (
    '{"correlation_key":"o-1","name":"payment.settled","payload_version":"v1",'
    '"reason":"PSP webhook","target_activation_sequence":1,"target_step_key":"payment"}'
)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_s1_11_digest_is_sha256_of_the_sorted_compact_fields():
    payload = {"b": [1, Decimal("2.50")], "a": "ü"}
    expected = sha256(
        '{"correlation_key":"o-1","evidence_ref":"s3://bucket/receipt","name":"payment.settled",'
        '"payload":{"a":"ü","b":[1,2.50]},"payload_version":"v1","reason":"PSP webhook",'
        '"target_activation_sequence":1,"target_step_key":"payment"}'
    )
    assert rules.request_digest(dict(FIELDS, evidence_ref="s3://bucket/receipt"), payload) == expected


def test_s1_11_absent_payload_leaves_the_member_out():
    assert rules.request_digest(FIELDS, ABSENT) == sha256(CANONICAL_WITHOUT_PAYLOAD)


def test_s1_11_null_payload_is_not_an_absent_payload():
    with_null = CANONICAL_WITHOUT_PAYLOAD.replace('"payload_version"', '"payload":null,"payload_version"')
    assert rules.request_digest(FIELDS, None) == sha256(with_null)
    assert rules.request_digest(FIELDS, None) != rules.request_digest(FIELDS, ABSENT)


def test_s1_11_missing_evidence_ref_digests_like_a_null_one():
    without = {key: value for key, value in FIELDS.items() if key != "evidence_ref"}
    assert rules.request_digest(without, ABSENT) == rules.request_digest(FIELDS, ABSENT)


def test_s1_11_member_order_of_the_payload_does_not_change_the_digest():
    assert rules.request_digest(FIELDS, {"a": 1, "b": {"x": 1, "y": 2}}) == rules.request_digest(
        FIELDS, {"b": {"y": 2, "x": 1}, "a": 1}
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", "payment.refunded"),
        ("payload_version", "v2"),
        ("target_step_key", "refund"),
        ("target_activation_sequence", 2),
        ("correlation_key", "o-1 "),
        ("reason", "PSP webhook "),
        ("evidence_ref", "s3://bucket/receipt"),
    ],
    ids=[
        "name",
        "payload_version",
        "target_step_key",
        "target_activation_sequence",
        "correlation_key_trailing_space",
        "reason",
        "evidence_ref",
    ],
)
def test_s1_11_every_signal_field_enters_the_digest(field, value):
    assert rules.request_digest(dict(FIELDS, **{field: value}), ABSENT) != rules.request_digest(FIELDS, ABSENT)


@pytest.mark.parametrize(
    "one, other",
    [
        (Decimal("0.1"), Decimal("0.10000000000000001")),
        (1, Decimal("1.0")),
        (Decimal("1.0"), Decimal("1.00")),
    ],
    ids=["s1_11_no_float_rounding", "s1_11_integer_is_not_decimal", "s1_11_trailing_zero_kept"],
)
def test_s1_11_numbers_are_digested_exactly(one, other):
    assert rules.request_digest(FIELDS, {"amount": one}) != rules.request_digest(FIELDS, {"amount": other})


def test_s1_11_fields_outside_the_signal_do_not_enter_the_digest():
    assert rules.request_digest(dict(FIELDS, actor="someone"), ABSENT) == sha256(CANONICAL_WITHOUT_PAYLOAD)


# ---- S1.10, S2.1, S2.3: the disposition at acceptance -------------------------------------------------------

T0 = datetime(2026, 11, 30, 7, 0, 0)
DEADLINE = T0 + timedelta(hours=1)
US = timedelta(microseconds=1)

# Baseline: the target's sequence 1 is ACTIVE with a WAITING wait for b"o-1"; the signal matches, on time.
ON_TIME = rules.TargetFacts(
    instance_status="RUNNING",
    target_sequence=1,
    current_sequence=1,
    activation_status="ACTIVE",
    wait_status="WAITING",
    wait_deadline=DEADLINE,
    wait_correlation=b"o-1",
    wait_won_by_query=False,
    correlation=b"o-1",
    accepted_at=T0,
)
NOT_STARTED = dict(
    current_sequence=None, activation_status=None, wait_status=None, wait_deadline=None, wait_correlation=None
)
PENDING = Acceptance("PENDING")
WAKES = Acceptance("PENDING", wakes_wait=True)
REFUSED = Acceptance("ACTIVATION_NOT_FOUND")  # nothing stored


def rejected(disposition: str) -> Acceptance:
    return Acceptance("REJECTED", disposition)


ACCEPTANCE_CASES = [
    # S1.4: an on-time match for an active wait is PENDING and wakes the wait at once
    ("s1_4_on_time_match_for_active_wait_wakes_it", {}, WAKES),
    ("s2_4_paused_instance_wait_still_collects", dict(instance_status="PAUSED"), WAKES),
    ("i3_wait_started_before_review_still_collects", dict(instance_status="NEEDS_REVIEW"), WAKES),
    # S2.1: early signals wait for their step, whatever their correlation
    ("s2_1_early_signal_stays_pending", NOT_STARTED, PENDING),
    ("s2_1_early_signal_kept_whatever_its_correlation", dict(NOT_STARTED, correlation=b"o-2"), PENDING),
    ("s2_1_early_signal_while_paused", dict(NOT_STARTED, instance_status="PAUSED"), PENDING),
    ("s2_1_early_signal_while_in_review", dict(NOT_STARTED, instance_status="NEEDS_REVIEW"), PENDING),
    # §5 target_activation_sequence: one that does not exist yet (and is not 1) is refused
    ("s1_10_sequence_2_before_any_activation_refused", dict(NOT_STARTED, target_sequence=2), REFUSED),
    ("s1_10_sequence_after_the_current_one_refused", dict(target_sequence=3, current_sequence=2), REFUSED),
    ("s1_10_unknown_sequence_refused_even_when_settled", dict(target_sequence=2, instance_status="CANCELLED"), REFUSED),
    ("s1_10_current_sequence_after_recovery_accepted", dict(target_sequence=2, current_sequence=2), WAKES),
    # S1.10: terminal instance
    ("s1_10_succeeded_instance", dict(instance_status="SUCCEEDED"), rejected("INSTANCE_SETTLED")),
    ("s1_10_failed_instance", dict(instance_status="FAILED"), rejected("INSTANCE_SETTLED")),
    ("s1_10_cancelled_instance", dict(instance_status="CANCELLED"), rejected("INSTANCE_SETTLED")),
    (
        "s1_10_terminal_instance_before_the_step_started",
        dict(NOT_STARTED, instance_status="CANCELLED"),
        rejected("INSTANCE_SETTLED"),
    ),
    (
        "s1_10_terminal_instance_before_stale_sequence",
        dict(instance_status="FAILED", current_sequence=2),
        rejected("INSTANCE_SETTLED"),
    ),
    # S1.10: older sequence
    ("s1_10_older_sequence_is_stale", dict(current_sequence=2), rejected("STALE_ACTIVATION")),
    (
        "s1_10_older_sequence_is_stale_even_with_a_matching_active_wait",
        dict(target_sequence=2, current_sequence=3),
        rejected("STALE_ACTIVATION"),
    ),
    # S1.10: correlation mismatch against an active wait, compared as exact bytes
    ("s1_10_other_correlation_key", dict(correlation=b"o-2"), rejected("CORRELATION_MISMATCH")),
    ("s1_10_trailing_space_matters", dict(correlation=b"o-1 "), rejected("CORRELATION_MISMATCH")),
    ("s1_10_case_matters", dict(correlation=b"O-1"), rejected("CORRELATION_MISMATCH")),
    (
        "s1_10_mismatch_is_reported_before_lateness",
        dict(correlation=b"o-2", accepted_at=DEADLINE),
        rejected("CORRELATION_MISMATCH"),
    ),
    # S2.3: strictly before the deadline counts; equal is late
    ("s2_3_one_microsecond_before_deadline_is_on_time", dict(accepted_at=DEADLINE - US), WAKES),
    ("s2_3_equal_to_deadline_is_late", dict(accepted_at=DEADLINE), rejected("LATE")),
    ("s2_3_after_deadline_is_late", dict(accepted_at=DEADLINE + US), rejected("LATE")),
    (
        "s2_3_after_expired_wait_is_late",
        dict(wait_status="EXPIRED", activation_status="NEEDS_REVIEW", accepted_at=DEADLINE + US),
        rejected("LATE"),
    ),
    (
        "s2_2_after_expired_wait_a_mismatch_is_a_mismatch_not_late",
        dict(wait_status="EXPIRED", activation_status="NEEDS_REVIEW", correlation=b"o-2", accepted_at=DEADLINE + US),
        rejected("CORRELATION_MISMATCH"),
    ),
    # S1.10: settled step
    ("s1_10_succeeded_step", dict(activation_status="SUCCEEDED", wait_status="SATISFIED"), rejected("STEP_SETTLED")),
    (
        "s1_10_succeeded_step_won_by_query",
        dict(activation_status="SUCCEEDED", wait_status="SATISFIED", wait_won_by_query=True),
        rejected("STEP_SETTLED"),
    ),
    ("s1_10_failed_step", dict(activation_status="FAILED", wait_status=None), rejected("STEP_SETTLED")),
    (
        "s1_10_step_in_review_without_wait",
        dict(activation_status="NEEDS_REVIEW", wait_status=None, wait_deadline=None, wait_correlation=None),
        rejected("STEP_SETTLED"),
    ),
    ("s1_10_cancelled_step", dict(activation_status="CANCELLED", wait_status="CANCELLED"), rejected("STEP_SETTLED")),
    (
        "s1_10_active_step_without_wait",
        dict(wait_status=None, wait_deadline=None, wait_correlation=None),
        rejected("STEP_SETTLED"),
    ),
    # C3: a POLL step stays ACTIVE after its wait was satisfied, until its query ends
    ("c3_wait_taken_by_a_signal_while_the_query_runs", dict(wait_status="SATISFIED"), rejected("WAIT_SETTLED")),
    ("c2_1_wait_taken_by_the_query", dict(wait_status="SATISFIED", wait_won_by_query=True), rejected("QUERY_SETTLED")),
    # S2.2 (issue 25, D): WAIT_SETTLED, QUERY_SETTLED, STEP_SETTLED and LATE only for a signal with
    # the wait's frozen key; any other key is a mismatch whatever the wait's state
    (
        "s2_2_c3_other_key_for_a_wait_taken_by_a_signal_is_a_mismatch",
        dict(wait_status="SATISFIED", correlation=b"o-2"),
        rejected("CORRELATION_MISMATCH"),
    ),
    (
        "s2_2_c2_1_other_key_for_a_wait_taken_by_the_query_is_a_mismatch",
        dict(wait_status="SATISFIED", wait_won_by_query=True, correlation=b"o-2"),
        rejected("CORRELATION_MISMATCH"),
    ),
    (
        "s2_2_other_key_for_a_settled_step_is_a_mismatch",
        dict(activation_status="SUCCEEDED", wait_status="SATISFIED", correlation=b"o-1 "),
        rejected("CORRELATION_MISMATCH"),
    ),
    (
        "s2_2_other_key_for_a_cancelled_wait_is_a_mismatch",
        dict(activation_status="SUCCEEDED", wait_status="CANCELLED", correlation=b"O-1"),
        rejected("CORRELATION_MISMATCH"),
    ),
    (
        "s2_2_stale_comes_before_the_key",
        dict(current_sequence=2, correlation=b"o-2"),
        rejected("STALE_ACTIVATION"),
    ),
    (
        "s2_2_a_step_without_a_wait_has_no_key_to_compare",
        dict(activation_status="NEEDS_REVIEW", wait_status=None, wait_correlation=None, correlation=b"o-2"),
        rejected("STEP_SETTLED"),
    ),
]


@pytest.mark.parametrize(
    "changes, expected", [case[1:] for case in ACCEPTANCE_CASES], ids=[case[0] for case in ACCEPTANCE_CASES]
)
def test_s1_10_disposition_at_acceptance(changes, expected):
    assert rules.accept(replace(ON_TIME, **changes)) == expected
