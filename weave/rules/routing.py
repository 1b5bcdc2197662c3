"""Routing decisions without I/O (docs/rules.md#routing): where a fact sent by its business key goes (B2), and
whether a parked fact may be taken by a wait that opens for it (B4)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

ROUTED = "ROUTED"
PARKED = "PARKED"
AMBIGUOUS = "AMBIGUOUS"

PARK_SECONDS_DEFAULT = 86_400
PARK_SECONDS_MAX = 2_592_000

# Why a parked fact stays parked when a wait with its key opens (it then expires unrouted: B5).
CREDENTIAL_NOT_CURRENT = "CREDENTIAL_NOT_CURRENT"
QUEUE_GRANTS_MISSING = "QUEUE_GRANTS_MISSING"
CONTRACT_MISMATCH = "CONTRACT_MISMATCH"


def route(candidates: int) -> str:
    """B2: one candidate wait takes the fact, none parks it, several refuse it (never a guess)."""
    if candidates == 1:
        return ROUTED
    return PARKED if candidates == 0 else AMBIGUOUS


def where(in_instance: bool, disposition: str | None) -> str:
    """B6: where a fact sent by its business key is now, as its reads show it (`route`): ROUTED
    once it belongs to an instance (or was refused by the one it was routed to, which held its
    1,024 signals), AMBIGUOUS when several waits matched, else PARKED (parked, or expired unrouted)."""
    if in_instance or disposition == "SIGNAL_LIMIT_REACHED":
        return ROUTED
    return AMBIGUOUS if disposition == "AMBIGUOUS_CORRELATION" else PARKED


@dataclass(frozen=True)
class Sender:
    """The credential of a parked fact as it is now (B4), read in the taking transaction."""

    revoked: bool
    expires_at: datetime | None
    application_status: str | None  # None: the credential is gone
    granted: frozenset[str]


def refusal(sender: Sender, queues: list[str], contract_problems: list, now: datetime) -> str | None:
    """Why a parked fact may not be taken into an instance whose pinned definition uses `queues`
    (None: it may). The credential must still be one that could send it there (S1.1 as now):
    current, of an ACTIVE application, with a grant for every queue; and the payload must fit the
    wait's contract (S1.9), which only the wait knows."""
    if sender.revoked or sender.application_status != "ACTIVE":
        return CREDENTIAL_NOT_CURRENT
    if sender.expires_at is not None and sender.expires_at <= now:
        return CREDENTIAL_NOT_CURRENT
    if not sender.granted.issuperset(queues):
        return QUEUE_GRANTS_MISSING
    return CONTRACT_MISMATCH if contract_problems else None
