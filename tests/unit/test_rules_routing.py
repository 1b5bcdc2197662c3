"""weave.rules.routing: where a fact sent by its key goes (B2) and whether a wait may take a parked
fact (B4), without a database."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from weave.rules import routing

NOW = datetime(2026, 12, 1, 12, 0, 0)
QUEUES = ["carrier", "inventory"]


def sender(**overrides) -> routing.Sender:
    values = {"revoked": False, "expires_at": None, "application_status": "ACTIVE", "granted": frozenset(QUEUES)}
    return routing.Sender(**{**values, **overrides})


@pytest.mark.parametrize(("candidates", "route"), [(0, "PARKED"), (1, "ROUTED"), (2, "AMBIGUOUS"), (7, "AMBIGUOUS")])
def test_B2_one_candidate_routes_none_parks_several_are_ambiguous(candidates, route):
    assert routing.route(candidates) == route


@pytest.mark.parametrize(
    ("changes", "problems", "refusal"),
    [
        ({}, [], None),
        ({"granted": frozenset([*QUEUES, "vault"])}, [], None),
        ({"expires_at": NOW + timedelta(microseconds=1)}, [], None),
        ({"revoked": True}, [], routing.CREDENTIAL_NOT_CURRENT),
        ({"application_status": "DISABLED"}, [], routing.CREDENTIAL_NOT_CURRENT),
        ({"application_status": None}, [], routing.CREDENTIAL_NOT_CURRENT),  # the credential is gone
        ({"expires_at": NOW}, [], routing.CREDENTIAL_NOT_CURRENT),  # expiry equal to now: expired
        ({"granted": frozenset(["inventory"])}, [], routing.QUEUE_GRANTS_MISSING),
        ({}, ["/payload: off the contract"], routing.CONTRACT_MISMATCH),
        ({"revoked": True, "granted": frozenset()}, ["x"], routing.CREDENTIAL_NOT_CURRENT),  # first reason
    ],
)
def test_B4_a_parked_fact_is_taken_only_for_a_sender_who_could_send_it_there_now(changes, problems, refusal):
    assert routing.refusal(sender(**changes), QUEUES, problems, NOW) == refusal


@pytest.mark.parametrize(
    "in_instance, disposition, where",
    [
        (True, None, "ROUTED"),  # routed at once, or a parked fact a wait took
        (True, "LATE", "ROUTED"),  # turned down by its instance: still there
        (True, "EXPIRED_UNMATCHED", "ROUTED"),
        (False, "SIGNAL_LIMIT_REACHED", "ROUTED"),  # refused by the instance it was routed to
        (False, "AMBIGUOUS_CORRELATION", "AMBIGUOUS"),
        (False, None, "PARKED"),
        (False, "EXPIRED_UNROUTED", "PARKED"),  # no wait took it in time
    ],
)
def test_B6_where_a_fact_is_now(in_instance, disposition, where):
    assert routing.where(in_instance, disposition) == where
