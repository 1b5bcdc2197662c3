"""Workflow instances: start (idempotent on workflow_id), read with their steps, list, lock, move.

Lock order: the instance row first, then what hangs off it (activations, waits, signals, tasks).
Starting checks the input against the definition's input schema (D5), then writes the instance
(RUNNING, gate OPEN), a ROOT checkpoint due now, one at its total deadline (I6), the first event
and an audit record in one transaction (I2); the checkpoint scanner activates the first step.
Every later change of an instance's status or deadline is the engine's, through `move` and
`set_deadline`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from weave import jsontext
from weave.auth import Principal
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError, refusal
from weave.rules import definitions as definition_rules
from weave.sql import audit, checkpoints, definitions, events, notifications
from weave.times import rfc3339
from weave.tx import Tx


@dataclass(frozen=True)
class StartRequest:
    workflow_id: str
    definition: str
    version: int
    input_text: str  # compact JSON of the input
    deadline_seconds: int
    request_digest: str


@dataclass(frozen=True)
class WorkflowFacts:
    """Everything the workflow representation shows, read in one transaction."""

    instance: dict
    document: dict
    activations: dict[str, dict]  # step_key -> latest activation
    tasks: dict[int, dict]  # activation_id -> its newest task
    waits: dict[int, dict]  # activation_id -> its wait


SELECT_INSTANCE = """
SELECT i.id, i.namespace_id, n.name AS namespace, i.workflow_id, i.definition_id, d.name AS definition,
       d.version, d.digest AS definition_digest, i.application_id, i.input, i.request_digest, i.status,
       i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM instances i
JOIN definitions d ON d.id = i.definition_id
JOIN namespaces n ON n.id = i.namespace_id
WHERE i.namespace_id = %s AND i.workflow_id = %s
"""
SELECT_LATEST_ACTIVATIONS = """
SELECT id, step_key, step_index, activation_sequence, status, result, review_reason, activated_at,
       deadline_at, settled_at
FROM step_activations WHERE instance_id = %s ORDER BY step_index, activation_sequence
"""
SELECT_ACTIVATION_TASKS = """
SELECT id, activation_id, status, attempt FROM tasks WHERE activation_id IN %s ORDER BY id
"""
SELECT_ACTIVATION_WAITS = """
SELECT activation_id, status, deadline_at, correlation, winner_signal_id FROM waits WHERE activation_id IN %s
"""
INSERT_INSTANCE = """
INSERT INTO instances (namespace_id, workflow_id, definition_id, application_id, input, request_digest,
                       status, gate, deadline_at, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, 'RUNNING', 'OPEN', %s, %s, %s)
"""


def read_facts(tx: Tx, namespace_id: int, workflow_id: str) -> WorkflowFacts | None:
    instance = tx.one(SELECT_INSTANCE, (namespace_id, workflow_id))
    if instance is None:
        return None
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    activations = {row["step_key"]: row for row in tx.all(SELECT_LATEST_ACTIVATIONS, (instance["id"],))}
    tasks: dict[int, dict] = {}
    waits: dict[int, dict] = {}
    if activations:
        ids = tuple(row["id"] for row in activations.values())
        for task in tx.all(SELECT_ACTIVATION_TASKS, (ids,)):
            tasks[task["activation_id"]] = task
        waits = {wait["activation_id"]: wait for wait in tx.all(SELECT_ACTIVATION_WAITS, (ids,))}
    return WorkflowFacts(instance, document, activations, tasks, waits)


@read_only
def read_workflow(tx: Tx, principal: Principal, workflow_id: str) -> WorkflowFacts:
    facts = read_facts(tx, principal.namespace_id, workflow_id)
    require_grants(tx, principal, workflow_id, facts.instance if facts else None)
    return facts


# ---- an instance addressed by a credential (S1.1, docs/rules.md#api) -------------------------------

SELECT_ADDRESSED_INSTANCE = """
SELECT id, definition_id, (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest
FROM instances i WHERE namespace_id = %s AND workflow_id = %s
"""


def require_grants(tx: Tx, principal: Principal, workflow_id: str, instance: dict | None) -> tuple[dict, list[str]]:
    """The pinned document of `instance` (a row with `definition_id` and `definition_digest`, or
    None) and its queues, sorted; WORKFLOW_NOT_FOUND when there is no instance, FORBIDDEN unless
    the credential holds a grant for every one of those queues. Every operation on an instance
    passes here: what the instance's steps run on is what a credential must be trusted with."""
    if instance is None:
        raise WeaveError(Code.WORKFLOW_NOT_FOUND, f"workflow {workflow_id!r} does not exist")
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    queues = definition_rules.queues_used(document)
    principal.require_queues(queues)
    return document, queues


def addressed(tx: Tx, principal: Principal, workflow_id: str) -> dict:
    """The instance (not locked: `id`, `definition_id`, `definition_digest`) `principal` may act on."""
    instance = tx.one(SELECT_ADDRESSED_INSTANCE, (principal.namespace_id, workflow_id))
    require_grants(tx, principal, workflow_id, instance)
    return instance


@read_only
def list_events(tx: Tx, principal: Principal, workflow_id: str, after: int, limit: int) -> list[dict]:
    """Up to `limit` events of the workflow with seq > `after`, oldest first."""
    return events.page(tx, addressed(tx, principal, workflow_id)["id"], after, limit)


# ---- the workflow list (docs/rules.md#api): newest first, only what the credential may read ----------

# One page of the list: an index of migration 0006 read backwards from the cursor. The index is
# named because it is always the best plan (exactly `limit` entries read, no sort), while the
# optimizer sometimes costs a backward scan of the primary key, filtered, as cheaper when the
# namespace holds most instances; on a namespace holding few, that scan reads the whole table.
SELECT_NEWEST = """
SELECT i.id, i.workflow_id, i.definition_id, d.name AS definition, d.version,
       d.queues AS definition_queues, i.status, i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM instances i FORCE INDEX (ix_instances_namespace_recent) JOIN definitions d ON d.id = i.definition_id
WHERE i.namespace_id = %s AND i.id < %s ORDER BY i.id DESC LIMIT %s
"""
SELECT_NEWEST_BY_STATUS = """
SELECT i.id, i.workflow_id, i.definition_id, d.name AS definition, d.version,
       d.queues AS definition_queues, i.status, i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM instances i FORCE INDEX (ix_instances_namespace_status) JOIN definitions d ON d.id = i.definition_id
WHERE i.namespace_id = %s AND i.status = %s AND i.id < %s ORDER BY i.id DESC LIMIT %s
"""
NO_CURSOR = 2**64 - 1  # above every BIGINT UNSIGNED id

# The page of a credential that may read some versions only: one backward range of each readable
# version's index (ids alone, from the index), at most a page each, merged by the server (the
# outer sort sees at most versions x page ids, never the namespace), then the page's rows by key.
RANGE_OF_VERSION = """(SELECT id FROM instances FORCE INDEX (ix_instances_definition_recent)
 WHERE definition_id = %s AND id < %s ORDER BY id DESC LIMIT %s)"""
RANGE_OF_VERSION_BY_STATUS = """(SELECT id FROM instances FORCE INDEX (ix_instances_definition_status)
 WHERE definition_id = %s AND status = %s AND id < %s ORDER BY id DESC LIMIT %s)"""
# `{ranges}`: one range per version, the only text made when the statement runs (how many there
# are is the one thing no bound parameter can say).
SELECT_NEWEST_OF_VERSIONS = """
SELECT i.id, i.workflow_id, i.definition_id, d.name AS definition, d.version,
       d.queues AS definition_queues, i.status, i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM (SELECT id FROM ({ranges}) ranges ORDER BY id DESC LIMIT %s) page
JOIN instances i ON i.id = page.id JOIN definitions d ON d.id = i.definition_id
ORDER BY i.id DESC
"""


def newest_of_versions(versions: list[int], status: str | None, before: int, count: int) -> tuple[str, tuple]:
    """The statement (and its parameters) reading the `count` newest instances below `before` of
    `versions` (of `status` when given): one statement whatever the number of versions, its text
    one range per version, every value bound."""
    if status is None:
        ranges, params = RANGE_OF_VERSION, [(version, before, count) for version in versions]
    else:
        ranges, params = RANGE_OF_VERSION_BY_STATUS, [(version, status, before, count) for version in versions]
    sql = SELECT_NEWEST_OF_VERSIONS.format(ranges="\nUNION ALL ".join([ranges] * len(versions)))
    return sql, (*(value for range_params in params for value in range_params), count)


def _may_read(principal: Principal, stored_queues: str) -> bool:
    """Whether `principal` holds a grant for every queue of a definition (S1.1, docs/rules.md#api),
    from the definition's `queues` column: no document is read or parsed."""
    return principal.holds_queues(definitions.queues(stored_queues))


def _versions_to_list(tx: Tx, principal: Principal, name: str | None) -> list[int] | None:
    """The definition versions whose instances the page is read from, one index range each; None
    when a namespace-wide range serves (no name given, and every definition is readable)."""
    namespace_id = principal.namespace_id
    if name is None and principal.holds_queues(definitions.queue_names(tx, namespace_id)):
        return None  # every definition runs on the namespace's queues, and all of them are granted
    versions = definitions.versions(tx, namespace_id, name)
    readable = [v["id"] for v in versions if _may_read(principal, v["queues"])]
    return None if name is None and len(readable) == len(versions) else readable


@read_only
def list_workflows(
    tx: Tx, principal: Principal, status: str | None, definition: str | None, after: int | None, limit: int
) -> tuple[list[dict], int | None]:
    """A page of the namespace's instances, newest first (ids below the cursor `after`), of one
    status and one definition name when given; and the cursor of the next page (None on the last).

    Only instances the credential may read are listed: those whose pinned definition's queues are
    all granted (docs/decisions.md). Such a credential's list is read from the readable versions,
    one index range per version, merged in the same statement: never from a scan that skips what
    it may not see. At most three statements, however many versions there are (issue 26, item 6).
    """
    before = after or NO_CURSOR
    versions = _versions_to_list(tx, principal, definition)
    if versions is not None:
        rows = tx.all(*newest_of_versions(versions, status, before, limit + 1)) if versions else []
    elif status is None:
        rows = tx.all(SELECT_NEWEST, (principal.namespace_id, before, limit + 1))
    else:
        rows = tx.all(SELECT_NEWEST_BY_STATUS, (principal.namespace_id, status, before, limit + 1))
    page = rows[:limit]
    next_after = page[-1]["id"] if len(rows) > limit else None
    # Checked row by row as well: a definition on a new queue may have been published (and started)
    # since the grants were compared above, and the namespace-wide range would list it.
    return [row for row in page if _may_read(principal, row["definition_queues"])], next_after


# ---- search (issue 34, item 2): by a business key, by the start of the workflow id --------------------

# A search first reads the ids it matches, from an index alone, at most SEARCH_MATCHES of them
# (one more, to know there are more: then the search is refused as too broad, rather than read a
# namespace's worth of rows for one page); then a page of those rows by primary key, newest first
# (STRAIGHT_JOIN: the few definitions would otherwise be read whole first, then every instance joined).
SEARCH_MATCHES = 10_000
# The instances of the namespace with a wait or a signal of exactly this key, any generation
# (migration 0023: the first 32 bytes of the key in the index, the whole key compared on its rows).
IDS_BY_KEY = """
SELECT w.instance_id AS id FROM waits w FORCE INDEX (ix_waits_correlation) JOIN instances i ON i.id = w.instance_id
WHERE w.correlation = %s AND i.namespace_id = %s
UNION
SELECT s.instance_id FROM signals s FORCE INDEX (ix_signals_correlation) JOIN instances i ON i.id = s.instance_id
WHERE s.correlation = %s AND i.namespace_id = %s
LIMIT %s
"""
IDS_BY_PREFIX = """
SELECT id FROM instances FORCE INDEX (uq_instances_workflow)
WHERE namespace_id = %s AND workflow_id LIKE %s LIMIT %s
"""
SELECT_SEARCH_PAGE = """
SELECT i.id, i.workflow_id, i.definition_id, d.name AS definition, d.version,
       d.queues AS definition_queues, i.status, i.gate, i.review_reason, i.deadline_at, i.created_at, i.updated_at
FROM instances i STRAIGHT_JOIN definitions d FORCE INDEX (PRIMARY) ON d.id = i.definition_id
WHERE i.id IN %s AND i.id < %s AND (%s IS NULL OR i.status = %s) AND (%s IS NULL OR d.name = %s)
ORDER BY i.id DESC LIMIT %s
"""


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching the texts that start with `prefix` (its % _ and \\ taken literally)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _too_broad(name: str) -> WeaveError:
    message = f"matches more than {SEARCH_MATCHES:,} workflows: narrow it"
    return WeaveError(
        Code.VALIDATION_FAILED, f"query parameter {name!r} {message}", [{"pointer": f"?{name}", "message": message}]
    )


@read_only
def search_workflows(
    tx: Tx,
    principal: Principal,
    correlation_key: bytes | None,
    workflow_id_prefix: str | None,
    status: str | None,
    definition: str | None,
    after: int | None,
    limit: int,
) -> tuple[list[dict], int | None]:
    """A page of the namespace's instances with a wait or a signal of exactly `correlation_key`
    and/or whose workflow id starts with `workflow_id_prefix` (both: both hold), of one status and
    definition name when given, newest first below the cursor `after`; and the next page's cursor.
    Only instances the credential may read are listed, as by `list_workflows`. A search matching
    more than SEARCH_MATCHES instances is refused (VALIDATION_FAILED on its parameter)."""
    namespace_id = principal.namespace_id
    found: set[int] | None = None
    if correlation_key is not None:
        rows = tx.all(IDS_BY_KEY, (correlation_key, namespace_id, correlation_key, namespace_id, SEARCH_MATCHES + 1))
        if len(rows) > SEARCH_MATCHES:
            raise _too_broad("correlation_key")
        found = {row["id"] for row in rows}
    if workflow_id_prefix is not None:
        rows = tx.all(IDS_BY_PREFIX, (namespace_id, like_prefix(workflow_id_prefix), SEARCH_MATCHES + 1))
        if len(rows) > SEARCH_MATCHES:
            raise _too_broad("workflow_id_prefix")
        ids = {row["id"] for row in rows}
        found = ids if found is None else found & ids
    if not found:
        return [], None
    before = after or NO_CURSOR
    rows = tx.all(SELECT_SEARCH_PAGE, (tuple(found), before, status, status, definition, definition, limit + 1))
    page = rows[:limit]
    next_after = page[-1]["id"] if len(rows) > limit else None
    return [row for row in page if _may_read(principal, row["definition_queues"])], next_after


@unit_of_work(replay_on=("uq_instances_workflow",))
def start_workflow(tx: Tx, principal: Principal, request: StartRequest) -> tuple[WorkflowFacts, bool]:
    """Start an instance (I1, I2); returns (facts, created).

    The same workflow_id with the same request digest answers the existing instance; with another
    digest it is `WORKFLOW_EXISTS`. Two concurrent starts of one id meet at `uq_instances_workflow`:
    the loser's unit is re-run and takes the first branch. Either way the credential needs a grant
    for every queue of the definition (S1.1, docs/rules.md#api).
    """
    namespace_id, actor = principal.namespace_id, principal.actor
    existing = read_facts(tx, namespace_id, request.workflow_id)
    if existing is not None:
        require_grants(tx, principal, request.workflow_id, existing.instance)
        if existing.instance["request_digest"] != request.request_digest:
            raise WeaveError(
                Code.WORKFLOW_EXISTS, f"workflow {request.workflow_id!r} exists and was started with another request"
            )
        return existing, False
    definition = definitions.pinned(tx, namespace_id, request.definition, request.version)
    if definition is None:
        raise WeaveError(
            Code.DEFINITION_NOT_FOUND, f"definition {request.definition!r} version {request.version} does not exist"
        )
    document = definitions.document(tx, definition.id, definition.digest)
    principal.require_queues(definition_rules.queues_used(document))
    if "input_schema" in document:  # D5: an input the definition refuses is refused before anything is written
        problems = definition_rules.input_problems(document, jsontext.loads(request.input_text))
        if problems:
            raise refusal(Code.VALIDATION_FAILED, problems)
    now = tx.now()
    deadline_at = now + timedelta(seconds=request.deadline_seconds)
    instance_id = tx.insert(
        INSERT_INSTANCE,
        (
            namespace_id,
            request.workflow_id,
            definition.id,
            principal.application_id,
            request.input_text,
            request.request_digest,
            deadline_at,
            now,
            now,
        ),
    )
    checkpoints.schedule_root(tx, instance_id, now)
    checkpoints.schedule_root(tx, instance_id, deadline_at)  # I6: the gate closes at the deadline
    events.append(
        tx,
        instance_id,
        "WORKFLOW_STARTED",
        {
            "definition": definition.name,
            "version": definition.version,
            "actor": actor,
            "deadline_at": rfc3339(deadline_at),
        },
    )
    audit.record(
        tx,
        namespace_id,
        actor,
        "workflow.start",
        {
            "workflow_id": request.workflow_id,
            "definition": definition.name,
            "version": definition.version,
            "deadline_at": rfc3339(deadline_at),
        },
        instance_id=instance_id,
        credential_id=principal.credential_id,
        request_digest=request.request_digest,
    )
    return read_facts(tx, namespace_id, request.workflow_id), True


SELECT_STEP_RESULTS = """
SELECT step_key, result FROM step_activations WHERE instance_id = %s AND status = 'SUCCEEDED'
ORDER BY step_index, activation_sequence
"""


def context(tx: Tx, instance_id: int, workflow_id: str, input_text: str, value: Callable[[str], Any]) -> dict:
    """The instance context of D2: `{"workflow_id", "input", "steps": {key: {"result"}}}`.

    `value` turns stored JSON text into what the caller needs: parsed values to resolve a pointer,
    or `jsontext.Raw` to hand the text to a worker unchanged.
    """
    steps = {row["step_key"]: {"result": value(row["result"])} for row in tx.all(SELECT_STEP_RESULTS, (instance_id,))}
    return {"workflow_id": workflow_id, "input": value(input_text), "steps": steps}


# ---- the instance lock and the instance's state ------------------------------------------------------

# Subqueries in the select list are read, not locked (MySQL and MariaDB alike): only the instance
# row is locked, never the definition or application rows that many instances share. The
# namespace's mask of subscribed event types rides along (`notify_mask`, N2): the units that lock
# an instance render and record a notification only when its event's bit is set.
LOCK_INSTANCE = (
    """
SELECT UTC_TIMESTAMP(6) AS now, i.id, i.namespace_id, i.workflow_id, i.definition_id, i.application_id, i.input, i.status, i.gate,
       i.review_reason, i.deadline_at,
       (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest,
       (SELECT a.status FROM applications a WHERE a.id = i.application_id) AS application_status,
       """
    + notifications.enabled_mask("i.namespace_id")
    + """ AS notify_mask
FROM instances i
WHERE i.id = %s
FOR UPDATE
"""
)
UPDATE_INSTANCE_STATE = """
UPDATE instances SET status = %s, gate = %s, review_reason = %s, updated_at = %s
WHERE id = %s AND status = %s AND gate = %s
"""


# A Galera cluster does not replicate `FOR UPDATE`: two nodes may both "hold" an instance's lock.
# Writing the row under the lock makes any two units that lock one instance write a common row, so
# the cluster refuses one of them at certification (a deadlock error: the unit is re-run whole).
MARK_DECIDING = "UPDATE instances SET version = version + 1 WHERE id = %s"


def lock(tx: Tx, instance_id: int) -> dict | None:
    """Lock the instance row and mark it (`mark_deciding`), in one round trip that also reads the
    transaction's time, after the lock is held (I5); the result also carries its definition digest,
    application status and the namespace's `notify_mask` (`notifications.subscribed`). None when
    there is no such instance."""
    mark_deciding(tx, instance_id)
    instance = tx.one(LOCK_INSTANCE, (instance_id,))
    if instance is not None:
        tx.now_read_with(instance.pop("now"))
    return instance


# The audit record of one call (control or review) of one instance, found by the identity the call
# wrote into it: through ix_audit_instance, newest first, so only the instance's records are read.
SELECT_RECORD_OF_CALL = """
SELECT id FROM audit_records FORCE INDEX (ix_audit_instance)
WHERE instance_id = %s AND action = %s AND JSON_UNQUOTE(JSON_EXTRACT(details, '$.call_id')) = %s
ORDER BY id DESC LIMIT 1
"""


def call_id(tx: Tx) -> str:
    """The identity of this call of a unit, the same for every attempt of it (`Tx.memo`): a unit
    that decides about an instance writes it into its audit record, so that a re-run after a lost
    COMMIT can tell whether its earlier attempt committed (`decided_by_lost_commit`)."""
    return tx.memo.setdefault("call_id", secrets.token_hex(16))


def decided_by_lost_commit(tx: Tx, instance: dict, action: str) -> bool:
    """Whether an earlier attempt of this call decided about the locked `instance` and committed,
    its COMMIT's answer lost (`Tx.maybe_committed`). The unit then answers what the instance shows
    instead of deciding again: a re-run pause would find PAUSED and refuse with 409.

    The earlier attempt is recognised by what it wrote, never by arithmetic on the instance: its
    audit record (`action`) carries the call's `call_id`. Found: it committed, whatever others
    did since. Not found: it rolled back, and the unit decides from what it finds."""
    if not tx.maybe_committed or "call_id" not in tx.memo:
        return False
    return tx.one(SELECT_RECORD_OF_CALL, (instance["id"], action, tx.memo["call_id"])) is not None


def mark_deciding(tx: Tx, instance_id: int) -> None:
    """Write the instance's row (its `version`), which takes its lock: every unit that locks an
    instance calls it. Queued: it is sent with the unit's next statement, which then runs under
    the lock."""
    tx.lock(MARK_DECIDING, (instance_id,))


COUNT_STORED_SIGNAL = "UPDATE instances SET signals_stored = signals_stored + 1 WHERE id = %s"


def count_stored_signal(tx: Tx, instance_id: int) -> None:
    """The locked instance holds one signal more (`signals_stored`, the S1.6 limit); queued with the
    unit's last writes and COMMIT (unguarded: the unit has just read the locked row)."""
    tx.later(COUNT_STORED_SIGNAL, (instance_id,))


def move(tx: Tx, instance: dict, status: str, gate: str, review_reason: str | None) -> dict:
    """Move the locked instance from the (status, gate) it was read with; returns the instance as
    it is now (the caller's dict is left as it was read)."""
    tx.transition(
        UPDATE_INSTANCE_STATE,
        (status, gate, review_reason, tx.now(), instance["id"], instance["status"], instance["gate"]),
        f"move instance {instance['id']} from {instance['status']} to {status}",
    )
    return {**instance, "status": status, "gate": gate, "review_reason": review_reason}


UPDATE_DEADLINE = "UPDATE instances SET deadline_at = %s, updated_at = %s WHERE id = %s AND deadline_at = %s"


def set_deadline(tx: Tx, instance: dict, deadline_at) -> dict:
    """The locked instance's total deadline is `deadline_at` now (R4); returns the instance as it is
    now (the caller's dict is left as it was read)."""
    tx.transition(
        UPDATE_DEADLINE,
        (deadline_at, tx.now(), instance["id"], instance["deadline_at"]),
        f"set the deadline of instance {instance['id']}",
    )
    return {**instance, "deadline_at": deadline_at}


# One index range per namespace (ix_instances_namespace_status): namespaces are few, reviews too.
NEEDS_REVIEW_BY_NAMESPACE = """
SELECT n.name,
       (SELECT COUNT(*) FROM instances i WHERE i.namespace_id = n.id AND i.status = 'NEEDS_REVIEW') AS waiting
FROM namespaces n ORDER BY n.name
"""


def needs_review_by_namespace(tx: Tx) -> dict[str, int]:
    """How many instances wait for an operator (NEEDS_REVIEW), by namespace name, every namespace."""
    return {row["name"]: row["waiting"] for row in tx.all(NEEDS_REVIEW_BY_NAMESPACE)}
