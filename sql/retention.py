"""Retention and purge (docs/rules.md#lifecycle, L1 and L3): a namespace's retention, and the three
scanner sources that apply it: ended instances with every row that belongs to them, settled facts
of no instance, and audit records past the audit retention.

The small instances of a scanner batch are purged together by `purge_instances`, one transaction
that holds at most `CHUNK_ROWS` rows of each table; an instance too big for it is purged by
`purge_instance` in chunks of at most `CHUNK_ROWS` rows of each table,
one transaction of three round trips each: every chunk locks the instance row (`SKIP LOCKED`: a purge never waits for, nor holds up for
long, a signal sent to the instance, which only finds it gone), checks that it ended and is past
its namespace's retention, and deletes the instance's rows children first (notification attempts
and notifications, inbox events and tasks, checkpoints, waits, signals, events, activations, then
the audit records the audit sweep has passed), so that what is left is still found from the
instance row through the same indexes. It adds what it removed to `instances.purge_counts`. The
chunk that finds nothing left deletes the instance row and writes the `workflow.purged` audit
record with the sum (L3). A crash between chunks leaves the counts of the committed chunks on the
instance row and the rest of its rows in place: the next pass goes on from there, and two scanners
never both count a row (the instance lock orders them; the second finds the row gone).

Lock order: the instance row, then its rows, deleted children first. A unit that claims one of
those rows first and then waits for the instance (a checkpoint or an inbox event of the instance
due at that moment) can deadlock with a chunk; one of them is rolled back and tried again by a
later batch (K2), and both find the instance as the other left it.

An instance whose task is still QUEUED or RUNNING (its lease holds a permit until it expires or
the worker reports) is left for a later pass: its task row must release the permit first.
Notifications of a purged instance go with it whatever their status, PENDING included (docs/
decisions.md, "Retention and purge").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave import jsontext
from weave.db import unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import retention as rules
from weave.sql import audit
from weave.sql.tenancy import ADMIN_ACTOR
from weave.times import rfc3339
from weave.tx import Tx

PURGE_ACTOR = "system:scanner"
# At most this many candidates of each purge source per scanner batch: a backlog days old sorts
# ahead of every workflow's progress (oldest due first) and must not take a whole batch (of 100).
# The instances of a batch are purged together (`purge_instances`): 50 cost 0.24 ms each, 25 cost
# 0.36 ms, one alone 1.2 ms (docs/decisions.md, "A paced purge").
PER_BATCH = 50
UNCHANGED = object()  # `set_retention`: leave this setting as it is

# ---- the namespace's retention (`weave admin namespace retention`) --------------------------------

LOCK_NAMESPACE_RETENTION = """
SELECT id, retention_days, audit_retention_days FROM namespaces WHERE name = %s FOR UPDATE
"""
UPDATE_RETENTION = "UPDATE namespaces SET retention_days = %s, audit_retention_days = %s WHERE id = %s"


def _shown(row: dict, namespace: str) -> dict:
    days, audit_days_ = row["retention_days"], row["audit_retention_days"]
    return {
        "namespace": namespace,
        "retention_days": days,
        "audit_retention_days": audit_days_,
        "effective_audit_days": rules.audit_days(days, audit_days_),
    }


@unit_of_work
def set_retention(tx: Tx, namespace: str, days=UNCHANGED, audit_days=UNCHANGED) -> dict:
    """Set the namespace's retention (L1) and audit retention: a number of days, None for forever,
    UNCHANGED to leave it; with neither, only shows them. Audited as `namespace.retention`."""
    row = tx.one(LOCK_NAMESPACE_RETENTION, (namespace,))
    if row is None:
        raise WeaveError(Code.NOT_FOUND, f"namespace {namespace!r} does not exist")
    for value in (days, audit_days):
        if value is not UNCHANGED and value is not None and not 0 <= value <= rules.MAX_DAYS:
            raise WeaveError(Code.VALIDATION_FAILED, f"days must be 0..{rules.MAX_DAYS}, or forever")
    before = _shown(row, namespace)
    after = {
        **row,
        "retention_days": row["retention_days"] if days is UNCHANGED else days,
        "audit_retention_days": row["audit_retention_days"] if audit_days is UNCHANGED else audit_days,
    }
    if (after["retention_days"], after["audit_retention_days"]) == (row["retention_days"], row["audit_retention_days"]):
        return before
    tx.execute(UPDATE_RETENTION, (after["retention_days"], after["audit_retention_days"], row["id"]))
    shown = _shown(after, namespace)
    audit.record(
        tx,
        row["id"],
        ADMIN_ACTOR,
        "namespace.retention",
        {"from": {k: before[k] for k in ("retention_days", "audit_retention_days")}, "to": shown},
    )
    return shown


# ---- ended instances (L1, L3) ----------------------------------------------------------------------

# The candidates are read in two steps, the first one (`purgeable_ranges`, the scanner's `prepare`)
# the oldest end in each (namespace, ended status) range of ix_instances_ended, one index dive each;
# the second (`listing_purgeable`) the oldest instances past retention of each range that has some,
# a range of the index read in order up to the limit. One statement could not do it in one read: the
# retention differs by namespace, and a join gives the server no range on `updated_at` by the
# namespace's row, only the namespace's whole part of the index (its live and kept instances too).
OLDEST_ENDED = """
SELECT n.id, n.name, n.retention_days,
       (SELECT i.updated_at FROM instances i FORCE INDEX (ix_instances_ended)
        WHERE i.namespace_id = n.id AND i.status = 'SUCCEEDED' ORDER BY i.updated_at LIMIT 1) AS succeeded,
       (SELECT i.updated_at FROM instances i FORCE INDEX (ix_instances_ended)
        WHERE i.namespace_id = n.id AND i.status = 'FAILED' ORDER BY i.updated_at LIMIT 1) AS failed,
       (SELECT i.updated_at FROM instances i FORCE INDEX (ix_instances_ended)
        WHERE i.namespace_id = n.id AND i.status = 'CANCELLED' ORDER BY i.updated_at LIMIT 1) AS cancelled
FROM namespaces n WHERE n.retention_days IS NOT NULL
"""
PURGEABLE_RANGE = """SELECT id, id AS instance_id, updated_at + INTERVAL %s DAY AS due_at
FROM instances FORCE INDEX (ix_instances_ended)
WHERE namespace_id = %s AND status = %s AND updated_at <= %s
ORDER BY updated_at LIMIT %s"""
NO_CANDIDATES = "SELECT NULL AS id, NULL AS instance_id, NULL AS due_at FROM DUAL WHERE FALSE"
MAX_RANGES = 8  # ranges listed in one batch, the longest past retention first


@dataclass(frozen=True)
class PurgeRange:
    namespace_id: int
    status: str
    days: int
    due_at: datetime  # when the oldest instance of the range passed its retention


def _heads(rows: list[dict]):
    for row in rows:
        for status, column in (("SUCCEEDED", "succeeded"), ("FAILED", "failed"), ("CANCELLED", "cancelled")):
            if row[column] is not None:
                yield row, status, rules.retention_ends(row[column], row["retention_days"])


def purgeable_ranges(tx: Tx) -> list[PurgeRange]:
    """The ranges whose oldest instance is past its namespace's retention, longest past first."""
    now = tx.now()
    found = [
        PurgeRange(row["id"], status, row["retention_days"], due_at)
        for row, status, due_at in _heads(tx.all(OLDEST_ENDED))
        if due_at <= now
    ]
    return sorted(found, key=lambda r: r.due_at)[:MAX_RANGES]


def listing_purgeable(now: datetime, limit: int, ranges: list[PurgeRange]) -> tuple[str, tuple]:
    """The read of up to `limit` (at most PER_BATCH) instances past retention of each range."""
    if not ranges:
        return NO_CANDIDATES, ()
    each = min(limit, PER_BATCH)
    params = tuple(
        value for r in ranges for value in (r.days, r.namespace_id, r.status, rules.cutoff(now, r.days), each)
    )
    return _union(PURGEABLE_RANGE, len(ranges)), params


def _union(statement: str, count: int) -> str:
    return "\nUNION ALL\n".join([f"({statement})"] * count)


# Subqueries in the select list are read, not locked: only the instance row is.
LOCK_ENDED_INSTANCE = """
SELECT UTC_TIMESTAMP(6) AS now, i.id, i.namespace_id, i.workflow_id, i.status, i.updated_at AS ended_at,
       i.purge_counts,
       (SELECT d.name FROM definitions d WHERE d.id = i.definition_id) AS definition,
       (SELECT d.version FROM definitions d WHERE d.id = i.definition_id) AS version,
       (SELECT n.retention_days FROM namespaces n WHERE n.id = i.namespace_id) AS retention_days,
       (SELECT n.audit_swept_id FROM namespaces n WHERE n.id = i.namespace_id) AS audit_swept_id
FROM instances i
WHERE i.id = %s
FOR UPDATE SKIP LOCKED
"""
# What an ended instance's purge waits for (`rules.waits`): its tasks still QUEUED or RUNNING (a
# task holds its queue's permit until it ends), and the newest of its notifications still to be
# sent (N2: a `workflow.*` notification written as it ended goes out before the purge, even with a
# retention of 0 days; for `rules.NOTIFICATION_GRACE` at most).
# Both subqueries of an instance `{id}` (a parameter, or a column of the outer query).
LIVE_TASKS = """(SELECT COUNT(*) FROM step_activations s JOIN tasks t ON t.activation_id = s.id
 WHERE s.instance_id = {id} AND t.status IN ('QUEUED', 'RUNNING'))"""
UNSENT_AT = "(SELECT MAX(n.occurred_at) FROM notifications n WHERE n.instance_id = {id} AND n.status = 'PENDING')"
COUNT_LIVE = f"SELECT {LIVE_TASKS.format(id='%(id)s')} AS live, {UNSENT_AT.format(id='%(id)s')} AS unsent_at"
SELECT_NOTIFICATION_IDS = "SELECT id FROM notifications WHERE instance_id = %s LIMIT %s"
# `tasks` has no index on instance_id: an instance's tasks are found by its activations' ids.
SELECT_TASK_IDS = """
SELECT t.id FROM step_activations a JOIN tasks t ON t.activation_id = a.id WHERE a.instance_id = %s LIMIT %s
"""
DELETE_NOTIFICATION_ATTEMPTS = "DELETE FROM notification_attempts WHERE notification_id IN %s"
DELETE_NOTIFICATIONS = "DELETE FROM notifications WHERE id IN %s"
DELETE_INBOX_EVENTS = "DELETE FROM inbox_events WHERE task_id IN %s"
DELETE_TASKS = "DELETE FROM tasks WHERE id IN %s"
DELETE_CHECKPOINTS = "DELETE FROM checkpoints WHERE instance_id = %s LIMIT %s"
DELETE_WAITS = "DELETE FROM waits WHERE instance_id = %s LIMIT %s"
DELETE_SIGNALS = "DELETE FROM signals WHERE instance_id = %s LIMIT %s"
DELETE_EVENTS = "DELETE FROM events WHERE instance_id = %s LIMIT %s"
DELETE_ACTIVATIONS = "DELETE FROM step_activations WHERE instance_id = %s LIMIT %s"
# The instance's audit records the audit sweep has read past while the instance was kept
# (`sweep_audit` keeps them then): they were past the audit retention when it did.
DELETE_SWEPT_AUDIT = "DELETE FROM audit_records WHERE instance_id = %s AND id <= %s LIMIT %s"
UPDATE_PURGE_COUNTS = "UPDATE instances SET purge_counts = %s WHERE id = %s"
DELETE_INSTANCE = "DELETE FROM instances WHERE id = %s AND status = %s"
# The rows keyed by the instance itself, deleted through its key's index.
BY_INSTANCE = (
    ("checkpoints", DELETE_CHECKPOINTS),
    ("waits", DELETE_WAITS),
    ("signals", DELETE_SIGNALS),
    ("events", DELETE_EVENTS),
)


def _chunk(instance: dict, notification_ids: tuple, task_ids: tuple, rows: int) -> list[tuple[str, str, tuple, bool]]:
    """The deletes of one chunk, children first: (table, statement, parameters, whether it has a
    LIMIT: a count that reaches it means more may be left). The activations go only with the last
    of the tasks: a task left behind is found through them."""
    instance_id = instance["id"]
    deletes = []
    if notification_ids:
        deletes += [
            ("notification_attempts", DELETE_NOTIFICATION_ATTEMPTS, (notification_ids,), False),
            ("notifications", DELETE_NOTIFICATIONS, (notification_ids,), False),
        ]
    if task_ids:
        deletes += [
            ("inbox_events", DELETE_INBOX_EVENTS, (task_ids,), False),
            ("tasks", DELETE_TASKS, (task_ids,), False),
        ]
    deletes += [(table, delete, (instance_id, rows), True) for table, delete in BY_INSTANCE]
    if len(task_ids) < rows:
        deletes.append(("step_activations", DELETE_ACTIVATIONS, (instance_id, rows), True))
    if instance["audit_swept_id"]:
        deletes.append(("audit_records", DELETE_SWEPT_AUDIT, (instance_id, instance["audit_swept_id"], rows), True))
    return deletes


def _purged_details(instance: dict, counts: dict) -> dict:
    """The `workflow.purged` record's details (L3)."""
    return {
        "workflow_id": instance["workflow_id"],
        "definition": instance["definition"],
        "version": instance["version"],
        "status": instance["status"],
        "ended_at": rfc3339(instance["ended_at"]),
        "rows": dict(sorted(counts.items())),
    }


PURGED = "PURGED"  # the instance is gone, its audit record written
PURGING = "PURGE_CHUNK"  # a chunk went, more is left


@unit_of_work
def purge_instance(tx: Tx, instance_id: int, chunk_rows: int = rules.CHUNK_ROWS) -> str | None:
    """One chunk of the purge of an ended instance past its namespace's retention (L1, L3):
    PURGED when the instance row went with it, PURGING when more is left, None when there is
    nothing to do now (another scanner has it, it is gone, not ended, not past its retention, or
    a task of it still runs)."""
    # One round trip: the lock, then (read, not locked) whether a task still runs and a chunk's
    # worth of the ids that its children are deleted by.
    found, live, notifications, tasks_ = tx.all_together(
        (LOCK_ENDED_INSTANCE, (instance_id,)),
        (COUNT_LIVE, {"id": instance_id}),
        (SELECT_NOTIFICATION_IDS, (instance_id, chunk_rows)),
        (SELECT_TASK_IDS, (instance_id, chunk_rows)),
    )
    instance = found[0] if found else None
    if instance is None or instance["status"] not in rules.ENDED:
        return None
    tx.now_read_with(instance.pop("now"))  # read after the lock was taken
    if not rules.past_retention(instance["ended_at"], instance["retention_days"], tx.now()):
        return None  # the retention was lengthened, or set to forever, since the listing
    if rules.waits(live[0]["live"], live[0]["unsent_at"], tx.now()):
        return None  # a task still holds its permit, or a notification is still to be sent
    notification_ids, task_ids = tuple(row["id"] for row in notifications), tuple(row["id"] for row in tasks_)
    deletes = _chunk(instance, notification_ids, task_ids, chunk_rows)
    removed = tx.execute_together(*((sql, params) for _, sql, params, _ in deletes))
    counts = jsontext.loads(instance["purge_counts"]) if instance["purge_counts"] else {}
    more = len(notification_ids) >= chunk_rows or len(task_ids) >= chunk_rows
    for (table, _, _, limited), rows in zip(deletes, removed):
        if rows:
            counts[table] = counts.get(table, 0) + rows
        more = more or (limited and rows >= chunk_rows)
    if more:
        tx.later(UPDATE_PURGE_COUNTS, (jsontext.compact(dict(sorted(counts.items()))), instance_id))
        return PURGING
    # Nothing of it is left (every statement above found fewer rows than it could take, under the
    # instance lock, which every writer of those rows but a notification attempt takes first).
    tx.transition(DELETE_INSTANCE, (instance_id, instance["status"]), f"purge instance {instance_id}")
    counts["instances"] = 1
    audit.record(
        tx,
        instance["namespace_id"],
        PURGE_ACTOR,
        "workflow.purged",
        _purged_details(instance, counts),
        instance_id=instance_id,
    )
    return PURGED


# ---- ended instances, several in one transaction (L1, L3) -----------------------------------------

# A purge's cost is mostly per transaction and per statement (a round trip, a result set, a COMMIT),
# hardly per row: a workflow of a dozen rows purged alone costs 3 round trips and about 16
# statements. `purge_instances` purges a batch's small instances together: one lock, one count, one
# delete per table with an `IN` list, whatever their number (docs/decisions.md, "A paced purge").

LOCK_ENDED_INSTANCES = LOCK_ENDED_INSTANCE.replace("WHERE i.id = %s\n", "WHERE i.id IN %s\nORDER BY i.id\n")
# The rows of each instance, table by table, one row per instance (read after the lock, in the
# same round trip: every writer of them but a notification attempt takes the instance lock
# first), and what its purge waits for (`live`, `unsent_at`, as COUNT_LIVE). One row an instance, not one a table and
# instance: the scanner's CPU goes mostly to reading rows (PyMySQL parses each packet).
_ROWS_BY_TABLE = (
    ("notification_attempts", "notifications n JOIN notification_attempts a ON a.notification_id = n.id", "n", ""),
    ("notifications", "notifications n", "n", ""),
    (
        "inbox_events",
        "step_activations s JOIN tasks t ON t.activation_id = s.id JOIN inbox_events e ON e.task_id = t.id",
        "s",
        "",
    ),
    ("tasks", "step_activations s JOIN tasks t ON t.activation_id = s.id", "s", ""),
    ("checkpoints", "checkpoints c", "c", ""),
    ("waits", "waits w", "w", ""),
    ("signals", "signals g", "g", ""),
    ("events", "events v", "v", ""),
    ("step_activations", "step_activations s", "s", ""),
    (
        "audit_records",
        "audit_records r",
        "r",
        " AND r.id <= (SELECT ns.audit_swept_id FROM namespaces ns WHERE ns.id = r.namespace_id)",
    ),
)
COUNTED_TABLES = tuple(table for table, _, _, _ in _ROWS_BY_TABLE)
COUNT_ROWS_OF_INSTANCES = (
    "SELECT i.id,\n"
    + ",\n".join(
        f"  (SELECT COUNT(*) FROM {source} WHERE {alias}.instance_id = i.id{condition}) AS {table}"
        for table, source, alias, condition in _ROWS_BY_TABLE
    )
    + f",\n  {LIVE_TASKS.format(id='i.id')} AS live,\n  {UNSENT_AT.format(id='i.id')} AS unsent_at"
    + "\nFROM instances i WHERE i.id IN %s"
)
# Children first, as `_chunk`; then the audit records the sweep passed, by namespace
# (`DELETE_SWEPT_AUDIT_OF`). The rows found through activations and notifications go by a join.
DELETE_ATTEMPTS_OF_INSTANCES = """
DELETE a FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id WHERE n.instance_id IN %s
"""
DELETE_INBOX_EVENTS_OF_INSTANCES = """
DELETE e FROM inbox_events e JOIN tasks t ON t.id = e.task_id JOIN step_activations s ON s.id = t.activation_id
WHERE s.instance_id IN %s
"""
DELETE_TASKS_OF_INSTANCES = """
DELETE t FROM tasks t JOIN step_activations s ON s.id = t.activation_id WHERE s.instance_id IN %s
"""
DELETE_ALL_OF_INSTANCES = (
    ("notification_attempts", DELETE_ATTEMPTS_OF_INSTANCES),
    ("notifications", "DELETE FROM notifications WHERE instance_id IN %s"),
    ("inbox_events", DELETE_INBOX_EVENTS_OF_INSTANCES),
    ("tasks", DELETE_TASKS_OF_INSTANCES),
    *(
        (table, f"DELETE FROM {table} WHERE instance_id IN %s")
        for table in ("checkpoints", "waits", "signals", "events", "step_activations")
    ),
)
DELETE_SWEPT_AUDIT_OF = "DELETE FROM audit_records WHERE instance_id IN %s AND id <= %s"
DELETE_INSTANCES = "DELETE FROM instances WHERE id IN %s"
ALONE = "PURGE_ALONE"  # too many rows for the group: `purge_instance` takes it, a chunk at a time


class CountsChanged(Exception):
    """A purge deleted other rows than it counted (a notification attempt written meanwhile):
    rolled back, the next batch counts again."""


@unit_of_work
def purge_instances(tx: Tx, instance_ids: tuple, chunk_rows: int = rules.CHUNK_ROWS) -> dict[int, str | None]:
    """Purge several ended instances past their namespace's retention in one transaction (L1, L3),
    each whole with its `workflow.purged` record, as long as together they hold at most
    `chunk_rows` rows of each table (a chunk of `purge_instance`, over several instances). The
    decision for each id: PURGED; ALONE when it has more rows than fit (`purge_instance` takes it
    on); None when there is nothing to do now (as `purge_instance`). The instances are locked in
    id order, `SKIP LOCKED`."""
    ids = tuple(sorted(instance_ids))
    found, counted = tx.all_together((LOCK_ENDED_INSTANCES, (ids,)), (COUNT_ROWS_OF_INSTANCES, (ids,)))
    decisions: dict[int, str | None] = dict.fromkeys(ids)
    if not found:
        return decisions
    tx.now_read_with(found[0]["now"])  # read after the locks were taken
    rows = {row["id"]: {table: row[table] for table in COUNTED_TABLES if row[table]} for row in counted}
    # a task still holds its permit (until its lease ends or its worker reports), or a notification
    # is still to be sent: as COUNT_LIVE
    live = {row["id"] for row in counted if rules.waits(row["live"], row["unsent_at"], tx.now())}
    purgeable = [
        instance
        for instance in found
        if instance["status"] in rules.ENDED
        and rules.past_retention(instance["ended_at"], instance["retention_days"], tx.now())
        and instance["id"] not in live
    ]
    small = []
    for instance in purgeable:
        if rules.fitting([rows[instance["id"]]], chunk_rows):
            small.append(instance)
        else:
            decisions[instance["id"]] = ALONE
    # the small ones that do not fit beside the others wait for a later batch (None)
    group = small[: rules.fitting([rows[instance["id"]] for instance in small], chunk_rows)]
    if not group:
        return decisions
    group_ids = tuple(instance["id"] for instance in group)
    deletes = [(table, statement, (group_ids,)) for table, statement in DELETE_ALL_OF_INSTANCES]
    for swept_id in sorted({instance["audit_swept_id"] for instance in group if instance["audit_swept_id"]}):
        swept = tuple(instance["id"] for instance in group if instance["audit_swept_id"] == swept_id)
        deletes.append(("audit_records", DELETE_SWEPT_AUDIT_OF, (swept, swept_id)))
    deletes.append(("instances", DELETE_INSTANCES, (group_ids,)))
    removed: dict[str, int] = {}
    for (table, _, _), n in zip(deletes, tx.execute_together(*((sql, params) for _, sql, params in deletes))):
        removed[table] = removed.get(table, 0) + n
    expected = {"instances": len(group)}
    for instance in group:
        for table, n in rows[instance["id"]].items():
            expected[table] = expected.get(table, 0) + n
    if {table: n for table, n in removed.items() if n} != expected:
        raise CountsChanged(f"purge of {group_ids}: counted {expected}, deleted {removed}")
    records = []
    for instance in group:
        counts = jsontext.loads(instance["purge_counts"]) if instance["purge_counts"] else {}
        for table, n in rows[instance["id"]].items():
            counts[table] = counts.get(table, 0) + n
        counts["instances"] = 1
        records.append((instance["namespace_id"], instance["id"], _purged_details(instance, counts)))
        decisions[instance["id"]] = PURGED
    audit.record_of_instances(tx, PURGE_ACTOR, "workflow.purged", records)
    return decisions


# ---- facts of no instance (L1, §14) ----------------------------------------------------------------

# The candidates: per namespace with a retention and per settled status, the oldest fact of its
# range of ix_signals_unrouted, when that one is past the retention. A pass takes the facts of the
# range in id order and stops at the first it must keep (`rules.leading_past`): a fact parked
# longer than the ones after it holds them back at most by its longer park (30 days at most).
PURGEABLE_FACT_HEADS = """
SELECT s.id, COALESCE(s.settled_at, s.accepted_at) + INTERVAL h.retention_days DAY AS due_at
FROM (
  SELECT n.retention_days,
         (SELECT f.id FROM signals f FORCE INDEX (ix_signals_unrouted)
          WHERE f.namespace_id = n.id AND f.instance_id IS NULL AND f.status = settled.status
          ORDER BY f.id LIMIT 1) AS head
  FROM namespaces n
  JOIN (SELECT 'EXPIRED' AS status UNION ALL SELECT 'REJECTED') settled
  WHERE n.retention_days IS NOT NULL
) h
JOIN signals s ON s.id = h.head
WHERE COALESCE(s.settled_at, s.accepted_at) <= %s - INTERVAL h.retention_days DAY
LIMIT %s
"""


def listing_purgeable_facts(now: datetime, limit: int) -> tuple[str, tuple]:
    return PURGEABLE_FACT_HEADS, (now, min(limit, PER_BATCH))


SELECT_FACT_RANGE = """
SELECT s.namespace_id, s.status, (SELECT n.retention_days FROM namespaces n WHERE n.id = s.namespace_id) AS retention_days
FROM signals s WHERE s.id = %s AND s.instance_id IS NULL AND s.status IN ('EXPIRED', 'REJECTED')
"""
LOCK_FACT_RUN = """
SELECT id, COALESCE(settled_at, accepted_at) AS settled_at FROM signals FORCE INDEX (ix_signals_unrouted)
WHERE namespace_id = %s AND instance_id IS NULL AND status = %s
ORDER BY id LIMIT %s
FOR UPDATE SKIP LOCKED
"""
DELETE_FACTS = "DELETE FROM signals WHERE id IN %s AND instance_id IS NULL AND status = %s"
FACTS_PURGED = "FACTS_PURGED"


@unit_of_work
def purge_facts(tx: Tx, head_id: int, chunk_rows: int = rules.CHUNK_ROWS) -> str | None:
    """Purge the oldest settled facts of no instance of `head_id`'s namespace and status that are
    past the namespace's retention, in id order, up to `chunk_rows`; one `facts.purged` audit
    record says how many (L1). None when the head is gone or kept."""
    head = tx.one(SELECT_FACT_RANGE, (head_id,))
    if head is None or head["retention_days"] is None:
        return None
    run = tx.all(LOCK_FACT_RUN, (head["namespace_id"], head["status"], chunk_rows))
    taken = run[
        : rules.leading_past([row["settled_at"] for row in run], rules.cutoff(tx.now(), head["retention_days"]))
    ]
    if not taken:
        return None
    ids = tuple(row["id"] for row in taken)
    tx.execute(DELETE_FACTS, (ids, head["status"]))
    audit.record(
        tx,
        head["namespace_id"],
        PURGE_ACTOR,
        "facts.purged",
        {"status": head["status"], "count": len(ids), "first_signal_id": str(ids[0]), "last_signal_id": str(ids[-1])},
    )
    return FACTS_PURGED


# ---- audit records (L1, L3) ------------------------------------------------------------------------

# The candidates, in two steps like the instances': the namespaces with both retentions (a few
# rows), then for each, its next unswept audit record (of any namespace: ids grow with time, one
# range of the primary key from its cursor), when that one is past the effective audit retention.
AUDIT_SWEPT_NAMESPACES = """
SELECT id, GREATEST(retention_days, audit_retention_days) AS days, audit_swept_id FROM namespaces
WHERE retention_days IS NOT NULL AND audit_retention_days IS NOT NULL
"""
NEXT_UNSWEPT = """SELECT * FROM (
  SELECT %s AS id, at + INTERVAL %s DAY AS due_at FROM audit_records WHERE id > %s ORDER BY id LIMIT 1
) next_record WHERE due_at <= %s"""


def swept_namespaces(tx: Tx) -> list[dict]:
    return tx.all(AUDIT_SWEPT_NAMESPACES)


def listing_audit_sweeps(now: datetime, limit: int, namespaces: list[dict]) -> tuple[str, tuple]:
    namespaces = namespaces[: min(limit, PER_BATCH)]
    if not namespaces:
        return NO_CANDIDATES, ()
    params = tuple(value for n in namespaces for value in (n["id"], n["days"], n["audit_swept_id"], now))
    return _union(NEXT_UNSWEPT, len(namespaces)), params


LOCK_SWEEP = """
SELECT retention_days, audit_retention_days, audit_swept_id FROM namespaces WHERE id = %s FOR UPDATE SKIP LOCKED
"""
SELECT_AUDIT_AFTER = """
SELECT id, namespace_id, instance_id, signal_id, action, at FROM audit_records WHERE id > %s ORDER BY id LIMIT %s
"""
SELECT_KEPT_INSTANCES = "SELECT id FROM instances WHERE id IN %s"
SELECT_PARKED_FACTS = "SELECT id FROM signals WHERE id IN %s AND status = 'PARKED'"
DELETE_AUDIT_RECORDS = "DELETE FROM audit_records WHERE id IN %s"
ADVANCE_AUDIT_SWEEP = "UPDATE namespaces SET audit_swept_id = %s WHERE id = %s"
AUDIT_SWEPT = "AUDIT_SWEPT"


@unit_of_work
def sweep_audit(tx: Tx, namespace_id: int, chunk_rows: int = rules.CHUNK_ROWS) -> str | None:
    """Delete the namespace's audit records past its effective audit retention (max(M, N) days),
    reading on from where the last sweep stopped, in id order, up to `chunk_rows` records of any
    namespace, and stopping at the first that is not past it. Kept, though past it: the records
    of an instance that is still stored (its purge deletes them, `DELETE_SWEPT_AUDIT`) and the
    acceptance record of a fact still parked (the take that routes it reads its digest, S1.12)."""
    namespace = tx.one(LOCK_SWEEP, (namespace_id,))
    if namespace is None:
        return None
    days = rules.audit_days(namespace["retention_days"], namespace["audit_retention_days"])
    if days is None:
        return None
    rows = tx.all(SELECT_AUDIT_AFTER, (namespace["audit_swept_id"], chunk_rows))
    passed = rows[: rules.leading_past([row["at"] for row in rows], rules.cutoff(tx.now(), days))]
    if not passed:
        return None
    own = [row for row in passed if row["namespace_id"] == namespace_id]
    instance_ids = tuple({row["instance_id"] for row in own if row["instance_id"] is not None})
    kept = {row["id"] for row in tx.all(SELECT_KEPT_INSTANCES, (instance_ids,))} if instance_ids else set()
    fact_ids = tuple({row["signal_id"] for row in own if row["instance_id"] is None and row["signal_id"] is not None})
    parked = {row["id"] for row in tx.all(SELECT_PARKED_FACTS, (fact_ids,))} if fact_ids else set()
    doomed = tuple(
        row["id"]
        for row in own
        if row["instance_id"] not in kept and (row["instance_id"] is not None or row["signal_id"] not in parked)
    )
    if doomed:
        tx.execute(DELETE_AUDIT_RECORDS, (doomed,))
    tx.execute(ADVANCE_AUDIT_SWEEP, (passed[-1]["id"], namespace_id))
    return AUDIT_SWEPT


# ---- the backlog (`weave admin stats`, the purge lag gauge) ------------------------------------------

# For one-off checks: a count over the index ranges past retention (as long as the backlog).
COUNT_PURGEABLE = """
SELECT n.name,
       (SELECT COUNT(*) FROM instances i FORCE INDEX (ix_instances_ended)
        WHERE i.namespace_id = n.id AND i.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
          AND i.updated_at <= %s - INTERVAL n.retention_days DAY) AS instances
FROM namespaces n WHERE n.retention_days IS NOT NULL ORDER BY n.name
"""


def purge_lag(tx: Tx) -> float:
    """Seconds since the retention of the oldest instance still stored passed (0 when none is past)."""
    ranges = purgeable_ranges(tx)
    return (tx.now() - ranges[0].due_at).total_seconds() if ranges else 0.0


def purgeable_by_namespace(tx: Tx) -> dict[str, int]:
    """Instances past their retention, by namespace (of the namespaces that have one)."""
    return {row["name"]: row["instances"] for row in tx.all(COUNT_PURGEABLE, (tx.now(),))}
