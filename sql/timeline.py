"""One workflow's record as the review console shows it, one page at a time: every generation of
every step with its wait, one page each of its signals, its query rounds and its history.

A page reads only its own rows and only the first characters of each stored value (issue 26,
item 1): a value is up to 256 KiB and an instance holds up to 1,024 signals and any number of
query rounds and events, and all of it on one page made one client's values every tenant's
memory and CPU. Values come as `LEFT(column, head)` with `OCTET_LENGTH(column)` beside it (the
console shows that much at most, and says how large the whole is), the instance's input too. Signals and rounds are paged by key in two steps: the page's ids from an index alone
(the instance's ≤ 1,024 signals through `uq_signals_idempotency`, the rounds through
`ix_tasks_activation`), then those rows by primary key, so that a sort never carries a value.
Events are paged through `uq_events_instance_seq`, in order.

Read only, without locks, after the same grant check as every read of an instance
(`instances.require_grants`). Nothing imports this module but the console.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave.auth import Principal
from weave.db import read_only
from weave.sql import instances
from weave.tx import Tx

# The instance with the first characters of its input, as every value on the page.
SELECT_INSTANCE = """
SELECT i.id, i.workflow_id, i.definition_id, d.name AS definition, d.version, d.digest AS definition_digest,
       i.status, i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at, i.signals_stored,
       LEFT(i.input, %s) AS input, OCTET_LENGTH(i.input) AS input_bytes
FROM instances i JOIN definitions d ON d.id = i.definition_id
WHERE i.namespace_id = %s AND i.workflow_id = %s
"""
# Every generation, oldest first per step.
SELECT_ACTIVATIONS = """
SELECT id, step_key, step_index, activation_sequence, status, LEFT(result, %s) AS result,
       OCTET_LENGTH(result) AS result_bytes, review_reason, activated_at, deadline_at, settled_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
SELECT_WAITS = """
SELECT id, activation_id, step_key, activation_sequence, status, deadline_at, correlation, winner_signal_id,
       created_at, settled_at
FROM waits WHERE instance_id = %s ORDER BY id
"""
# The newest task of each activation (a POLL step's current round), found by index alone.
SELECT_NEWEST_TASKS = """
SELECT t.id, t.activation_id, t.status, t.attempt
FROM (SELECT activation_id, MAX(id) AS id FROM tasks WHERE activation_id IN %s GROUP BY activation_id) n
JOIN tasks t ON t.id = n.id
"""
SIGNAL_IDS_AFTER = """
SELECT s.id FROM signals s FORCE INDEX (uq_signals_idempotency)
WHERE s.instance_id = %s AND s.id > %s ORDER BY s.id LIMIT %s
"""
SIGNAL_IDS_BEFORE = """
SELECT s.id FROM signals s FORCE INDEX (uq_signals_idempotency)
WHERE s.instance_id = %s AND s.id < %s ORDER BY s.id DESC LIMIT %s
"""
SELECT_SIGNALS = """
SELECT s.id, s.name, s.payload_version, s.target_step_key, s.target_activation_sequence, s.correlation,
       LEFT(s.payload, %s) AS payload, OCTET_LENGTH(s.payload) AS payload_bytes, s.payload_present, s.reason,
       s.actor, COALESCE(s.idempotency_key, s.route_key) AS idempotency_key, s.request_digest, s.status,
       s.disposition, s.accepted_at, s.consumed_at, s.route_key IS NOT NULL AS by_key
FROM signals s WHERE s.id IN %s ORDER BY s.id
"""
# The inbound source each of the page's signals came through, if it came as a webhook (W4).
SELECT_INBOUND_SOURCES = """
SELECT d.signal_id, s.name AS source FROM inbound_deliveries d JOIN inbound_sources s ON s.id = d.source_id
WHERE d.signal_id IN %s
"""
# The newest notifications written about the instance (N2), with their subscription's name.
NOTIFICATIONS_SHOWN = 20
SELECT_NOTIFICATIONS = """
SELECT n.id, n.event_type, n.status, n.attempts, n.occurred_at, n.delivered_at, s.name AS subscription
FROM notifications n FORCE INDEX (ix_notifications_instance) JOIN notify_subscriptions s ON s.id = n.subscription_id
WHERE n.instance_id = %s ORDER BY n.id DESC LIMIT %s
"""
ROUND_IDS_AFTER = "SELECT id FROM tasks WHERE activation_id IN %s AND id > %s ORDER BY id LIMIT %s"
ROUND_IDS_BEFORE = "SELECT id FROM tasks WHERE activation_id IN %s AND id < %s ORDER BY id DESC LIMIT %s"
SELECT_ROUNDS = """
SELECT id, activation_id, status, attempt, max_attempts, available_at, completed_at,
       LEFT(result, %s) AS result, OCTET_LENGTH(result) AS result_bytes,
       LEFT(error, %s) AS error, OCTET_LENGTH(error) AS error_bytes
FROM tasks WHERE id IN %s ORDER BY id
"""
# The rounds of each activation before the page: the page's rounds are numbered on from there.
COUNT_ROUNDS_BEFORE = """
SELECT activation_id, COUNT(*) AS n FROM tasks WHERE activation_id IN %s AND id < %s GROUP BY activation_id
"""
EVENTS_AFTER = """
SELECT seq, type, at, LEFT(data, %s) AS data, OCTET_LENGTH(data) AS data_bytes FROM events
WHERE instance_id = %s AND seq > %s ORDER BY seq LIMIT %s
"""
EVENTS_BEFORE = """
SELECT seq, type, at, LEFT(data, %s) AS data, OCTET_LENGTH(data) AS data_bytes FROM events
WHERE instance_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s
"""


@dataclass(frozen=True)
class Window:
    """Which page of a list: the first `limit` rows after the key `after` (oldest first), or, with
    `before`, the `limit` rows just before that key."""

    limit: int
    after: int = 0
    before: int | None = None


@dataclass(frozen=True)
class Page:
    rows: list[dict]
    earlier: bool  # rows before this page exist
    later: bool  # rows after it exist


@dataclass(frozen=True)
class WorkflowRecord:
    instance: dict
    document: dict
    activations: list[dict]  # every generation, by step then sequence; `result` is its head
    latest: dict[str, dict]  # step_key -> its latest activation
    waits: dict[int, dict]  # activation_id -> its wait
    tasks: dict[int, dict]  # activation_id -> its newest task
    signals: Page  # `payload` is its head, `payload_bytes` its size
    rounds: Page  # query rounds; `result` and `error` are heads, `round` the number in its activation
    history: Page  # `data` is its head
    notifications: list[dict]  # the newest NOTIFICATIONS_SHOWN written about it, newest first
    now: datetime


def _page(tx: Tx, window: Window, after_sql: str, before_sql: str, params: tuple) -> Page:
    """The rows of one window of a list read by `after_sql` / `before_sql`, whose last parameters
    are the key and the limit (`params` come first)."""
    if window.before is not None:
        rows = tx.all(before_sql, (*params, window.before, window.limit + 1))
        if len(rows) > window.limit:
            return Page(rows[: window.limit][::-1], True, True)
        # Back at the start: the first page, full, rather than the few rows before `before`.
    after = window.after if window.before is None else 0
    rows = tx.all(after_sql, (*params, after, window.limit + 1))
    return Page(rows[: window.limit], after > 0, len(rows) > window.limit)


@read_only
def read_record(
    tx: Tx,
    principal: Principal,
    workflow_id: str,
    signals: Window,
    rounds: Window,
    history: Window,
    head: int,
    data_head: int,
) -> WorkflowRecord:
    """The record's page that the windows name; each value's first `head` characters (an event's
    data: `data_head`)."""
    instance = tx.one(SELECT_INSTANCE, (head, principal.namespace_id, workflow_id))
    document, _ = instances.require_grants(tx, principal, workflow_id, instance)
    instance_id = instance["id"]
    activations = tx.all(SELECT_ACTIVATIONS, (head, instance_id))
    latest = {a["step_key"]: a for a in activations}  # sequence order: the last one stays
    newest_tasks = {}
    if activations:
        ids = tuple(a["id"] for a in latest.values())
        newest_tasks = {t["activation_id"]: t for t in tx.all(SELECT_NEWEST_TASKS, (ids,))}

    signal_ids = _page(tx, signals, SIGNAL_IDS_AFTER, SIGNAL_IDS_BEFORE, (instance_id,))
    signal_rows = tx.all(SELECT_SIGNALS, (head, tuple(r["id"] for r in signal_ids.rows))) if signal_ids.rows else []
    if signal_rows:
        sources = {
            r["signal_id"]: r["source"] for r in tx.all(SELECT_INBOUND_SOURCES, (tuple(r["id"] for r in signal_rows),))
        }
        for row in signal_rows:
            row["inbound_source"] = sources.get(row["id"])

    polls = {step["key"] for step in document["steps"] if step["type"] == "POLL"}
    poll_activations = tuple(a["id"] for a in activations if a["step_key"] in polls)
    round_rows, round_ids = [], Page([], False, False)
    if poll_activations:  # a POLL step's tasks are all query rounds
        round_ids = _page(tx, rounds, ROUND_IDS_AFTER, ROUND_IDS_BEFORE, (poll_activations,))
        if round_ids.rows:
            round_rows = tx.all(SELECT_ROUNDS, (head, head, tuple(r["id"] for r in round_ids.rows)))
            before = tx.all(COUNT_ROUNDS_BEFORE, (poll_activations, round_rows[0]["id"]))
            numbers = {row["activation_id"]: row["n"] for row in before}
            for row in round_rows:
                row["round"] = numbers[row["activation_id"]] = numbers.get(row["activation_id"], 0) + 1

    return WorkflowRecord(
        instance=instance,
        document=document,
        activations=activations,
        latest=latest,
        waits={w["activation_id"]: w for w in tx.all(SELECT_WAITS, (instance_id,))},
        tasks=newest_tasks,
        signals=Page(signal_rows, signal_ids.earlier, signal_ids.later),
        rounds=Page(round_rows, round_ids.earlier, round_ids.later),
        history=_page(tx, history, EVENTS_AFTER, EVENTS_BEFORE, (data_head, instance_id)),
        notifications=tx.all(SELECT_NOTIFICATIONS, (instance_id, NOTIFICATIONS_SHOWN)),
        now=tx.now(),
    )
