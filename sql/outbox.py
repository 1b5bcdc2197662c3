"""The delivery side of the notifications' outbox (docs/rules.md#notifications, N2, N3).

The scanner's "notification" source lists what is due (`listing_due`), passing over the
subscriptions that hold their share of the delivery threads (`weave.delivery`); a delivery is then
two short units around an HTTP POST that runs outside any transaction:

- `claim` locks the notification (`SKIP LOCKED`: another scanner has it), re-checks it is PENDING
  and due, and reads its subscription. A subscription disabled or deleted since drops it (DROPPED,
  `due_at` NULL, nothing sent: N3). Otherwise its `due_at` moves a lease ahead, longer than the
  POST's timeout, so that no scanner lists it while it is in flight, and the unit commits.
- `record_attempt` writes the attempt (`notification_attempts`) and its consequence: a 2xx
  delivers it (DELIVERED, `due_at` NULL) and clears the subscription's `failing_since`; anything
  else counts the attempt, sets the next retry's `due_at` (weave.rules.notify.retry_delay) and
  marks the subscription failing from then on (N2).

A process that dies between the two (SIGKILL mid-POST) loses nothing: its lease passes, the
notification is due again and another batch sends it again (at least once; the `webhook-id` is the
same, so the receiver can tell). Lock order: a notification's row, then its subscription's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from weave.db import unit_of_work
from weave.rules import notify
from weave.tx import Tx

ERROR_CHARS = 1024  # notification_attempts.error, notifications.last_error

DUE = """
SELECT id, due_at, instance_id, subscription_id FROM notifications FORCE INDEX (ix_notifications_due)
WHERE due_at <= %s AND subscription_id NOT IN %s
ORDER BY due_at, id
LIMIT %s
"""
COUNT_DUE = "SELECT COUNT(*) AS n FROM notifications WHERE due_at <= %s"
NO_SUBSCRIPTION = 0  # ids start at 1: `NOT IN (0)` passes over none


def listing_due(now: datetime, limit: int, passed_over: tuple[int, ...] = ()) -> tuple[str, tuple]:
    """The read of the notifications due at `now`, oldest due first, for `Tx.all_together`; none
    of the subscriptions `passed_over` (those holding their share of the delivery threads: theirs
    stay PENDING and due, for a later batch)."""
    return DUE, (now, tuple(passed_over) or (NO_SUBSCRIPTION,), limit)


def count_due(tx: Tx) -> int:
    return tx.one(COUNT_DUE, (tx.now(),))["n"]


# ---- the claim -----------------------------------------------------------------------------------------

LOCK_NOTIFICATION = """
SELECT id, subscription_id, event_type, webhook_id, body, status, due_at, attempts FROM notifications
WHERE id = %s FOR UPDATE SKIP LOCKED
"""
SELECT_SUBSCRIPTION = "SELECT status, url, ciphertext FROM notify_subscriptions WHERE id = %s"
DROP = "UPDATE notifications SET status = 'DROPPED', due_at = NULL WHERE id = %s AND status = 'PENDING'"
LEASE = "UPDATE notifications SET due_at = %s WHERE id = %s AND status = 'PENDING'"

DROPPED = "NOTIFICATION_DROPPED"  # the claim's decisions (weave_scanner_decisions_total{kind})
CLAIMED = "NOTIFICATION_CLAIMED"


@dataclass(frozen=True)
class Dropped:
    """A notification whose subscription was disabled or deleted: DROPPED, nothing sent (N3)."""

    event_type: str


@dataclass(frozen=True)
class Claimed:
    """A notification taken for one attempt: what the POST needs, and its lease's start."""

    id: int
    subscription_id: int
    event_type: str
    webhook_id: str
    body: str
    url: str
    ciphertext: bytes  # the subscription's secret, encrypted (weave.secretbox); decrypted for signing only
    claimed_at: datetime


@unit_of_work
def claim(tx: Tx, notification_id: int, lease: timedelta) -> Claimed | Dropped | None:
    """Take a due notification for one attempt: `Claimed`, its `due_at` moved `lease` ahead (no
    other scanner lists it meanwhile); `Dropped` when its subscription was disabled or deleted (N3);
    None when another scanner holds it, or it is no longer PENDING and due."""
    row = tx.one(LOCK_NOTIFICATION, (notification_id,))
    now = tx.now()
    if row is None or row["status"] != "PENDING" or row["due_at"] is None or row["due_at"] > now:
        return None
    subscription = tx.one(SELECT_SUBSCRIPTION, (row["subscription_id"],))
    if subscription is None or subscription["status"] != "ENABLED":
        tx.transition(DROP, (notification_id,), f"drop notification {notification_id}")
        return Dropped(row["event_type"])
    tx.transition(LEASE, (now + lease, notification_id), f"lease notification {notification_id}")
    return Claimed(
        id=row["id"],
        subscription_id=row["subscription_id"],
        event_type=row["event_type"],
        webhook_id=row["webhook_id"],
        body=row["body"],
        url=subscription["url"],
        ciphertext=bytes(subscription["ciphertext"]),
        claimed_at=now,
    )


# ---- the record of an attempt --------------------------------------------------------------------------

LOCK_FOR_RECORD = "SELECT status, attempts FROM notifications WHERE id = %s FOR UPDATE"
INSERT_ATTEMPT = """
INSERT INTO notification_attempts (notification_id, attempted_at, http_status, error, duration_ms)
VALUES (%s, %s, %s, %s, %s)
"""
DELIVER = """
UPDATE notifications SET status = 'DELIVERED', due_at = NULL, delivered_at = %s, attempts = attempts + 1
WHERE id = %s AND status = 'PENDING'
"""
RETRY = """
UPDATE notifications SET due_at = %s, attempts = attempts + 1, last_error = %s
WHERE id = %s AND status = 'PENDING'
"""
# Written only when the health changes: a healthy endpoint's deliveries do not all write its row.
HEALTHY = (
    "UPDATE notify_subscriptions SET failing_since = NULL, updated_at = %s WHERE id = %s AND failing_since IS NOT NULL"
)
FAILING = "UPDATE notify_subscriptions SET failing_since = %s, updated_at = %s WHERE id = %s AND failing_since IS NULL"

DELIVERED = "delivered"  # the outcomes of attempts and drops (weave_notifications_total{outcome})
FAILED = "failed"
SETTLED = "settled"  # it was delivered or dropped meanwhile (a lease that passed, a disable): recorded only
DROPPED_OUTCOME = "dropped"


@unit_of_work
def record_attempt(
    tx: Tx,
    claimed: Claimed,
    http_status: int | None,
    error: str | None,
    duration_ms: int,
    jitter: float | None = None,
) -> str:
    """Record one attempt of `claimed` and settle what it decided: DELIVERED on a 2xx, else the
    next retry (`jitter` in [0, 1) draws its delay; random when None). The attempt is recorded
    whatever the notification's state now; a re-run after a COMMIT whose answer was lost
    (`Tx.maybe_committed`) that finds its count moved takes its first run as committed."""
    row = tx.one(LOCK_FOR_RECORD, (claimed.id,))
    if row is None:  # deleted with its subscription: nothing to record against
        return SETTLED
    seen = tx.memo.get("attempts")
    if tx.maybe_committed and seen is not None and row["attempts"] > seen:
        return tx.memo["outcome"]
    tx.memo["attempts"] = row["attempts"]
    now = tx.now()
    error_text = None if error is None else error[:ERROR_CHARS]
    tx.later(INSERT_ATTEMPT, (claimed.id, claimed.claimed_at, http_status, error_text, duration_ms))
    if row["status"] != "PENDING":
        outcome = SETTLED
    elif notify.succeeded(http_status):
        tx.transition(DELIVER, (now, claimed.id), f"deliver notification {claimed.id}")
        tx.later(HEALTHY, (now, claimed.subscription_id))
        outcome = DELIVERED
    else:
        delay = notify.retry_delay(row["attempts"] + 1, random.random() if jitter is None else jitter)
        tx.transition(RETRY, (now + delay, error_text, claimed.id), f"retry notification {claimed.id}")
        tx.later(FAILING, (now, now, claimed.subscription_id))
        outcome = FAILED
    tx.memo["outcome"] = outcome
    return outcome


# ---- read at scrape time (weave.scanner.backlog) --------------------------------------------------------

OLDEST_UNDELIVERED = """
SELECT MIN(occurred_at) AS oldest FROM notifications FORCE INDEX (ix_notifications_due) WHERE due_at IS NOT NULL
"""
COUNT_FAILING = """
SELECT COUNT(*) AS n FROM notify_subscriptions WHERE status = 'ENABLED' AND failing_since IS NOT NULL
"""


def health(tx: Tx) -> dict:
    """`oldest_undelivered_seconds`: the age of the oldest PENDING notification (0 when none);
    `failing_subscriptions`: enabled subscriptions whose last attempt failed."""
    now = tx.now()
    oldest = tx.one(OLDEST_UNDELIVERED)["oldest"]
    return {
        "oldest_undelivered_seconds": max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
        "failing_subscriptions": tx.one(COUNT_FAILING)["n"],
    }
