"""Outbound notifications, the storage side (docs/rules.md#notifications, N1-N3): subscriptions
with their encrypted secrets, the outbox rows a change writes (`record`), and the listing of
deliveries with their attempts. Delivering them (claiming, attempts, backoff) is `sql.outbox`'s.

A subscription belongs to a namespace; its `event_mask` has bit `NotifyEvent.bit` for each type it
receives. Secrets arrive here already encrypted (`weave.secretbox`, WEAVE_SECRET_KEY): this module
stores and returns ciphertexts and never sees a secret.

The unit that makes a change reads the namespace's mask of ENABLED subscriptions in a statement it
already sends (`enabled_mask`, folded into the instance's locking read), and renders and records a
notification only when the event's bit is set: a namespace without subscriptions pays no round
trip and no rendering (`subscribed`). `record` is queued (`Tx.later`): its `INSERT ... SELECT`
travels with the unit's next statement or its COMMIT, so the notifications commit with the change
or not at all (N2). Under READ COMMITTED the subscriptions it selects are read, not locked.

Disable and delete (N3) take the subscription's row lock; pending notifications are DROPPED by
disable and removed by delete with their history (docs/decisions.md, "Notifications: disable and
delete"). Admin units are audited as `system:admin`, never with a secret.
"""

from __future__ import annotations

import secrets

from weave import jsontext
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError
from weave.sql import audit, tenancy
from weave.sql.tenancy import ADMIN_ACTOR
from weave.statuses import NotificationStatus, NotifyEvent, SubscriptionStatus
from weave.times import rfc3339
from weave.tx import Tx

NO_CURSOR = 2**64 - 1  # above every BIGINT UNSIGNED id


def events_of(mask: int) -> list[str]:
    """The event types a mask holds, in declaration order."""
    return [event.value for event in NotifyEvent if mask & event.bit]


def mask_of(events: list[str]) -> int:
    """The mask of event types (already checked: `weave.rules.subscriptions`)."""
    mask = 0
    for event in events:
        mask |= NotifyEvent(event).bit
    return mask


# ---- the change's side (N2) ----------------------------------------------------------------------


def enabled_mask(namespace_id_column: str) -> str:
    """A select-list subquery: the OR of the event masks of the ENABLED subscriptions of the
    namespace in `namespace_id_column` (a column of the enclosing read), 0 when there are none.
    Folded into a read the unit makes anyway; one range of ix_notify_subscriptions_namespace."""
    return (
        "(SELECT BIT_OR(ns.event_mask) FROM notify_subscriptions ns "
        f"WHERE ns.namespace_id = {namespace_id_column} AND ns.status = 'ENABLED')"
    )


def subscribed(mask: int | None, event: NotifyEvent) -> bool:
    """Whether some ENABLED subscription of the namespace receives `event` (`mask` as
    `enabled_mask` read it: 0 when there is none; None from a row read without it)."""
    return bool(mask) and bool(mask & event.bit)


# One outbox row per ENABLED subscription of the namespace that receives the event, in one
# statement. Its webhook-id is the change's random token and the subscription's id: unique per
# row, the same on every attempt of its delivery (N2), and it reveals nothing of the server.
INSERT_NOTIFICATIONS = """
INSERT INTO notifications (subscription_id, namespace_id, instance_id, event_type, webhook_id, occurred_at, body,
                           status, due_at, attempts)
SELECT s.id, s.namespace_id, %s, %s, CONCAT(%s, s.id), %s, %s, 'PENDING', %s, 0
FROM notify_subscriptions s FORCE INDEX (ix_notify_subscriptions_namespace)
WHERE s.namespace_id = %s AND s.status = 'ENABLED' AND s.event_mask & %s <> 0
"""


def body(event: NotifyEvent, occurred_at, data: dict) -> str:
    """The JSON document delivered (N2): `{"type", "timestamp", "data"}`."""
    return jsontext.compact({"type": event.value, "timestamp": rfc3339(occurred_at), "data": data})


def record(tx: Tx, namespace_id: int, event: NotifyEvent, instance_id: int | None, data: dict) -> None:
    """Write the notifications of one change (N2): a PENDING row, due now, for every ENABLED
    subscription of the namespace that receives `event`. Queued: it commits with the change. The
    caller has checked `subscribed` (so that a namespace without subscriptions renders nothing)."""
    now = tx.now()
    webhook_prefix = f"msg_{secrets.token_hex(12)}_"
    tx.later(
        INSERT_NOTIFICATIONS,
        (instance_id, event.value, webhook_prefix, now, body(event, now, data), now, namespace_id, event.bit),
    )


# ---- the operator's units (N1, N3) ---------------------------------------------------------------

SELECT_SUBSCRIPTION = "SELECT id FROM notify_subscriptions WHERE namespace_id = %s AND name = %s"
LOCK_SUBSCRIPTION = "SELECT id, status FROM notify_subscriptions WHERE namespace_id = %s AND name = %s FOR UPDATE"
INSERT_SUBSCRIPTION = """
INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at, updated_at)
VALUES (%s, %s, %s, %s, 'ENABLED', %s, %s, %s)
"""
SELECT_CREATED = (
    "SELECT id, created_at FROM notify_subscriptions WHERE namespace_id = %s AND name = %s AND ciphertext = %s"
)
DISABLE_SUBSCRIPTION = """
UPDATE notify_subscriptions SET status = 'DISABLED', updated_at = %s WHERE id = %s AND status = 'ENABLED'
"""
# What was still to be sent is never sent (N3): DROPPED, no longer due.
DROP_PENDING = """
UPDATE notifications FORCE INDEX (ix_notifications_subscription)
SET status = 'DROPPED', due_at = NULL, last_error = %s
WHERE subscription_id = %s AND status = 'PENDING'
"""
DELETE_ATTEMPTS = """
DELETE a FROM notifications n FORCE INDEX (ix_notifications_subscription)
JOIN notification_attempts a ON a.notification_id = n.id
WHERE n.subscription_id = %s
"""
DELETE_NOTIFICATIONS = "DELETE FROM notifications WHERE subscription_id = %s"
DELETE_SUBSCRIPTION = "DELETE FROM notify_subscriptions WHERE id = %s"


SUBSCRIPTION = "notification subscription"  # what NOT_FOUND calls it


def _lock_subscription(tx: Tx, namespace: str, name: str) -> tuple[int, dict]:
    return tenancy.lock_named(tx, LOCK_SUBSCRIPTION, SUBSCRIPTION, namespace, name)


@unit_of_work(replay_on=("uq_notify_subscriptions_name",))
def create_subscription(tx: Tx, namespace: str, name: str, url: str, events: list[str], ciphertext: bytes) -> dict:
    """An ENABLED subscription of `namespace` to `events` (N1), its secret already encrypted; the
    url and the events were checked by the caller (`weave.rules.subscriptions`). NOT_FOUND for an
    unknown namespace, INVALID_STATE for a name in use. A re-run after a lost COMMIT finds its own
    row by the ciphertext (Fernet puts a random IV in each)."""
    namespace_id = tenancy.namespace_id_of(tx, namespace)
    if tx.one(SELECT_SUBSCRIPTION, (namespace_id, name)) is not None:
        mine = tx.maybe_committed and tx.one(SELECT_CREATED, (namespace_id, name, ciphertext))
        if mine:
            return _created(namespace, name, url, events, mine["id"], mine["created_at"])
        raise WeaveError(Code.INVALID_STATE, f"notification subscription {name!r} already exists in {namespace!r}")
    now = tx.now()
    mask = mask_of(events)
    subscription_id = tx.insert(INSERT_SUBSCRIPTION, (namespace_id, name, url, mask, ciphertext, now, now))
    created = _created(namespace, name, url, events, subscription_id, now)
    audit.record(tx, namespace_id, ADMIN_ACTOR, "notify.create", {k: v for k, v in created.items() if k != "namespace"})
    return created


def _created(namespace: str, name: str, url: str, events: list[str], subscription_id: int, created_at) -> dict:
    return {
        "subscription_id": str(subscription_id),
        "namespace": namespace,
        "name": name,
        "url": url,
        "events": events_of(mask_of(events)),
        "status": SubscriptionStatus.ENABLED.value,
        "created_at": rfc3339(created_at),
    }


@unit_of_work
def disable_subscription(tx: Tx, namespace: str, name: str) -> dict:
    """N3: the subscription receives nothing more and sends nothing more: its PENDING
    notifications are DROPPED in the same transaction. Disabling a disabled one changes nothing."""
    namespace_id, row = _lock_subscription(tx, namespace, name)
    dropped = 0
    if row["status"] == SubscriptionStatus.ENABLED:
        now = tx.now()
        tx.transition(DISABLE_SUBSCRIPTION, (now, row["id"]), f"disable subscription {name!r}")
        dropped = tx.execute(DROP_PENDING, ("subscription disabled", row["id"]))
        audit.record(tx, namespace_id, ADMIN_ACTOR, "notify.disable", {"name": name, "dropped": dropped})
    return {"namespace": namespace, "name": name, "status": SubscriptionStatus.DISABLED.value, "dropped": dropped}


@unit_of_work
def delete_subscription(tx: Tx, namespace: str, name: str) -> dict:
    """N3: the subscription, its notifications (pending or not) and their attempts are deleted in
    one transaction, so nothing of it is ever sent again (docs/decisions.md)."""
    namespace_id, row = _lock_subscription(tx, namespace, name)
    tx.execute(DELETE_ATTEMPTS, (row["id"],))
    removed = tx.execute(DELETE_NOTIFICATIONS, (row["id"],))
    tx.transition(DELETE_SUBSCRIPTION, (row["id"],), f"delete subscription {name!r}")
    audit.record(tx, namespace_id, ADMIN_ACTOR, "notify.delete", {"name": name, "notifications_deleted": removed})
    return {"namespace": namespace, "name": name, "notifications_deleted": removed, "deleted": True}


SELECT_SUBSCRIPTIONS = """
SELECT s.id, s.name, s.url, s.event_mask, s.status, s.failing_since, s.created_at, s.updated_at
FROM notify_subscriptions s
WHERE s.namespace_id = %s
ORDER BY s.name
"""


def subscription_view(row: dict) -> dict:
    return {
        "subscription_id": str(row["id"]),
        "name": row["name"],
        "url": row["url"],
        "events": events_of(row["event_mask"]),
        "status": row["status"],
        "failing_since": rfc3339(row["failing_since"]) if row["failing_since"] is not None else None,
        "created_at": rfc3339(row["created_at"]),
        "updated_at": rfc3339(row["updated_at"]),
    }


@read_only
def list_subscriptions(tx: Tx, namespace: str) -> list[dict]:
    """The namespace's subscriptions by name (never a secret); NOT_FOUND for an unknown namespace."""
    namespace_id = tenancy.namespace_id_of(tx, namespace)
    return [subscription_view(row) for row in tx.all(SELECT_SUBSCRIPTIONS, (namespace_id,))]


# ---- deliveries and their attempts (N3) ---------------------------------------------------------

# A page is a backward range of ix_notifications_subscription from the cursor, the subscription
# found by its unique key first (a constant of the plan), so no sort; a status filters that range.
SELECT_DELIVERY_PAGE = """
SELECT n.id, n.event_type, n.webhook_id, n.occurred_at, n.status, n.due_at, n.attempts, n.delivered_at,
       n.last_error, i.workflow_id
FROM notify_subscriptions s
JOIN notifications n FORCE INDEX (ix_notifications_subscription) ON n.subscription_id = s.id
LEFT JOIN instances i ON i.id = n.instance_id
WHERE s.namespace_id = %(namespace)s AND s.name = %(name)s AND n.id < %(after)s
  AND (%(status)s IS NULL OR n.status = %(status)s)
ORDER BY n.id DESC
LIMIT %(limit)s
"""
SELECT_ATTEMPTS = """
SELECT notification_id, attempted_at, http_status, error, duration_ms
FROM notification_attempts FORCE INDEX (ix_notification_attempts_notification)
WHERE notification_id IN %s
ORDER BY notification_id, id
"""


def _attempt_view(row: dict) -> dict:
    return {
        "attempted_at": rfc3339(row["attempted_at"]),
        "http_status": row["http_status"],
        "error": row["error"],
        "duration_ms": row["duration_ms"],
    }


def _delivery_view(row: dict, attempts: list[dict]) -> dict:
    return {
        "notification_id": str(row["id"]),
        "event_type": row["event_type"],
        "webhook_id": row["webhook_id"],
        "workflow_id": row["workflow_id"],
        "occurred_at": rfc3339(row["occurred_at"]),
        "status": row["status"],
        "due_at": rfc3339(row["due_at"]) if row["due_at"] is not None else None,
        "attempts": attempts,
        "delivered_at": rfc3339(row["delivered_at"]) if row["delivered_at"] is not None else None,
        "last_error": row["last_error"],
    }


@read_only
def list_deliveries(tx: Tx, namespace: str, name: str, status: str | None, after: int | None, limit: int) -> list[dict]:
    """Up to `limit` notifications of a subscription, newest first, with ids below `after` (None:
    from the newest), of one status or all, each with its attempts oldest first (N3); NOT_FOUND
    when the namespace or the subscription does not exist."""
    namespace_id = tenancy.namespace_id_of(tx, namespace)
    params = {
        "namespace": namespace_id,
        "name": name,
        "status": None if status is None else NotificationStatus(status).value,
        "after": NO_CURSOR if after is None else after,
        "limit": limit,
    }
    found, rows = tx.all_together((SELECT_SUBSCRIPTION, (namespace_id, name)), (SELECT_DELIVERY_PAGE, params))
    if not found:
        raise tenancy.no_such(SUBSCRIPTION, name, namespace)
    attempts: dict[int, list[dict]] = {row["id"]: [] for row in rows}
    if rows:
        for attempt in tx.all(SELECT_ATTEMPTS, (tuple(attempts),)):
            attempts[attempt["notification_id"]].append(_attempt_view(attempt))
    return [_delivery_view(row, attempts[row["id"]]) for row in rows]


# ---- rotation of WEAVE_SECRET_KEY (the second step: `weave admin inbound secret reencrypt`) -------

# Subscriptions first (a range of their primary key from the cursor), their namespaces by key after.
SELECT_SECRETS_AFTER = """
SELECT STRAIGHT_JOIN s.id, s.namespace_id, s.name, s.ciphertext, n.name AS namespace
FROM notify_subscriptions s JOIN namespaces n ON n.id = s.namespace_id
WHERE s.id > %s
ORDER BY s.id
LIMIT %s
"""
REWRITE_SECRET = "UPDATE notify_subscriptions SET ciphertext = %s WHERE id = %s AND ciphertext = %s"
SELECT_REWRITTEN = "SELECT id FROM notify_subscriptions WHERE id = %s AND ciphertext = %s"


@read_only
def secrets_after(tx: Tx, after: int, limit: int) -> list[dict]:
    """Up to `limit` subscriptions of every namespace with ids above `after`, in id order, with
    their encrypted secrets (`subscription_id` an int)."""
    return [
        {
            "subscription_id": row["id"],
            "namespace_id": row["namespace_id"],
            "namespace": row["namespace"],
            "name": row["name"],
            "ciphertext": bytes(row["ciphertext"]),
        }
        for row in tx.all(SELECT_SECRETS_AFTER, (after, limit))
    ]


@unit_of_work
def rewrite_secret(tx: Tx, subscription: dict, ciphertext: bytes) -> bool:
    """Store `ciphertext` (the same secret under another key) in place of the one `secrets_after`
    read; False when the subscription was deleted or its secret rewritten since."""
    if tx.maybe_committed and tx.one(SELECT_REWRITTEN, (subscription["subscription_id"], ciphertext)) is not None:
        return True  # an earlier attempt of this call committed it
    if tx.execute(REWRITE_SECRET, (ciphertext, subscription["subscription_id"], subscription["ciphertext"])) != 1:
        return False
    audit.record(
        tx,
        subscription["namespace_id"],
        ADMIN_ACTOR,
        "notify.secret.reencrypt",
        {"name": subscription["name"], "subscription_id": str(subscription["subscription_id"])},
    )
    return True
