"""Signals: acceptance (send), query (get, list), the per-application quota (S1.1-S1.12), the
rows' consumer-side transitions and the expiry of unmatched signals (S2.7).

The signal path: the API accepts here (`send_signal`, which stores the signal and wakes its
wait's checkpoint); the scanner consumes through the engine (`engine.consume_wait`, which takes
the winner with `consume` and turns the losers down with `reject`).

`send_signal` follows S1.3: (authentication and quota happen before it) → idempotency lookup →
queues of the pinned definition locked in sorted order (shared: send only reads them, but it must
keep the global lock order) → instance locked → idempotency re-checked under the lock → limit →
target checks → one write of signal, receipt, checkpoint, event and audit record (S1.4).

Two requests with one idempotency key meet at the instance lock: the second re-reads the key
under the lock and replays the first receipt. The UNIQUE key `uq_signals_idempotency` is the
backstop: a duplicate re-runs the unit, which then replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from weave import jsontext, views
from weave.auth import Principal
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError, refusal
from weave.rules import signals as rules
from weave.sql import audit, backoff, checkpoints, events, instances, notifications, waits
from weave.statuses import NotifyEvent
from weave.times import rfc3339
from weave.tx import Tx

SIGNALS_PER_INSTANCE = 1024
EXPIRY_RECHECK = timedelta(seconds=1)  # a wait's deadline checkpoint is due: let it decide first


@dataclass(frozen=True)
class SignalRequest:
    idempotency_key: str
    fields: dict  # the validated body without `payload`
    payload: object  # the parsed payload, or rules.ABSENT
    payload_text: str | None  # compact JSON of the payload; None when absent
    correlation: bytes
    request_digest: str


@dataclass(frozen=True)
class Receipt:
    text: str  # the frozen body, byte for byte
    replayed: bool
    status: str | None = None  # a new signal's status and disposition (for metrics); None on a replay
    disposition: str | None = None
    route: str | None = None  # a new fact sent by its business key: ROUTED, PARKED or AMBIGUOUS (B2)


# The receipt is frozen in the row it describes, written by the same INSERT. Its first member, the
# signal_id, is the row's own key and unknown before the INSERT, so the stored text starts after it:
# the body is `{"signal_id":"<id>",` + the stored rest, identical on every replay.
def receipt_rest(
    workflow_id: str | None,
    status: str,
    disposition: str | None,
    accepted_at: datetime,
    expires_at: datetime,
    idempotency_key: str,
    request_digest: str,
    route_fields: dict | None = None,
) -> str:
    """The frozen receipt (S1.4) without its signal id, which is known only once the row is
    inserted (`receipt_text` puts it first); a fact sent by its key adds its route (B3)."""
    receipt = {
        "workflow_id": workflow_id,
        "status": status,
        "disposition": disposition,
        "accepted_at": rfc3339(accepted_at),
        "expires_at": rfc3339(expires_at),
        "idempotency_key": idempotency_key,
        "request_digest": request_digest,
    }
    return jsontext.compact(receipt | (route_fields or {}))[1:]


def receipt_text(signal_id: int, rest: str) -> str:
    return '{"signal_id":"%d",%s' % (signal_id, rest)


def accepted_texts(
    signal_id: int,
    fields: dict,
    decision: rules.Acceptance,
    actor: str,
    idempotency_key: str,
    now: datetime,
    deadline_at: datetime,
    route_outcome: str | None = None,
) -> tuple[dict, dict]:
    """A new signal's SIGNAL_ACCEPTED event data, and its `signal.send` audit details (the same and
    the key and times); a routed fact's say how it came (B3)."""
    data = {
        "signal_id": str(signal_id),
        "name": fields["name"],
        "target_step_key": fields["target_step_key"],
        "target_activation_sequence": fields["target_activation_sequence"],
        "status": decision.status,
        "disposition": decision.disposition,
        "actor": actor,
    }
    if route_outcome is not None:
        data["route"] = route_outcome
    details = {
        **data,
        "idempotency_key": idempotency_key,
        "accepted_at": rfc3339(now),
        "instance_deadline_at": rfc3339(deadline_at),
    }
    return data, details


# ---- quota ----------------------------------------------------------------------------------------

COUNT_IN_WINDOW = """
INSERT INTO signal_quota_windows (application_id, window_start, used) VALUES (%s, %s, 1)
ON DUPLICATE KEY UPDATE used = used + 1
"""
USED_IN_WINDOW = "SELECT used FROM signal_quota_windows WHERE application_id = %s AND window_start = %s"
FORGET_OLD_WINDOWS = "DELETE FROM signal_quota_windows WHERE application_id = %s AND window_start < %s"


@unit_of_work
def take_quota(tx: Tx, application_id: int, per_minute: int) -> int | None:
    """Count one signal request in the current minute; the seconds to wait when over the quota.

    A re-run after a COMMIT whose answer was lost (`Tx.maybe_committed`) does not count again: it
    answers what the earlier attempt decided (`Tx.memo`). A window row has no identity of each
    count, so had that COMMIT not happened the request is counted none: one request short in
    one minute is the harmless side of the doubt (the client is never throttled for a count it
    did not make)."""
    if tx.maybe_committed and "quota_answer" in tx.memo:
        return tx.memo["quota_answer"]
    now = tx.now()
    window = now.replace(second=0, microsecond=0)
    tx.later(COUNT_IN_WINDOW, (application_id, window))  # sent with the read of the count: one round trip
    used = tx.one(USED_IN_WINDOW, (application_id, window))["used"]
    if used == 1:
        tx.later(FORGET_OLD_WINDOWS, (application_id, window))  # sent with COMMIT
    answer = None if used <= per_minute else max(1, int((window + timedelta(minutes=1) - now).total_seconds() + 0.999))
    tx.memo["quota_answer"] = answer
    return answer


# ---- send -----------------------------------------------------------------------------------------

# The idempotency lookup rides along with finding the instance: one round trip, no locks (S1.3).
# A send's target and its idempotency key's signal, unlocked (S1.3's lookup), by namespace id.
SELECT_TARGET_INSTANCE_AND_KEY = """
SELECT i.id, i.definition_id, (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest,
       s.id AS signal_id, s.request_digest, s.receipt
FROM instances i LEFT JOIN signals s ON s.instance_id = i.id AND s.idempotency_key = %s
WHERE i.namespace_id = %s AND i.workflow_id = %s
"""
# The same in the namespace of the presented token's credential: the single send's, read in its
# authentication's round trip (`send_signal`'s `target`).
SELECT_TARGET_OF_TOKEN = SELECT_TARGET_INSTANCE_AND_KEY.replace(
    "i.namespace_id = %s", "i.namespace_id = (SELECT namespace_id FROM credentials WHERE token_sha256 = %s)"
)
SELECT_BY_IDEMPOTENCY_KEY = """
SELECT id AS signal_id, request_digest, receipt FROM signals WHERE instance_id = %s AND idempotency_key = %s
"""
LOCK_QUEUES_SHARED = """
SELECT id FROM queues WHERE namespace_id = %s AND name IN %s ORDER BY name LOCK IN SHARE MODE
"""
# Everything acceptance needs to know once the instance is locked, in one round trip: the
# instance, the database time (read by this statement, which runs after the lock is held: I5), how
# many signals it holds (its stored count), whether a twin with our key committed first, and the target's latest
# activation with its wait (NULLs before the first activation). The lock is taken by the write that
# is sent just before it in the same round trip (`instances.mark_deciding`).
FACTS_UNDER_LOCK = """
SELECT UTC_TIMESTAMP(6) AS now, i.id, i.namespace_id, i.workflow_id, i.status, i.deadline_at,
       i.signals_stored AS stored,
       (SELECT COUNT(*) FROM signals WHERE instance_id = i.id AND idempotency_key = %(key)s) AS twin,
       a.activation_sequence, a.status AS activation_status, w.id AS wait_id, w.status AS wait_status,
       w.deadline_at AS wait_deadline_at, w.correlation, w.winner_signal_id
FROM instances i
LEFT JOIN step_activations a ON a.id = (
    SELECT id FROM step_activations WHERE instance_id = i.id AND step_key = %(step)s
    ORDER BY activation_sequence DESC LIMIT 1)
LEFT JOIN waits w ON w.activation_id = a.id
WHERE i.id = %(instance)s
"""
INSERT_SIGNAL = """
INSERT INTO signals (instance_id, name, payload_version, target_step_key, target_activation_sequence, correlation,
                     payload, payload_sha256, payload_present, reason, evidence_ref, actor, credential_id,
                     idempotency_key, request_digest, status, disposition, accepted_at, expires_at, available_at,
                     settled_at, created_at, receipt, namespace_id, route_key, route_hash, park_seconds)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


@dataclass(frozen=True)
class Route:
    """A fact sent by its business key (docs/rules.md#routing): its namespace, its key's hash and where it went
    (`weave.rules.routing`: ROUTED, PARKED or AMBIGUOUS). Its Idempotency-Key is unique in the
    namespace (`uq_signals_route`), not in an instance."""

    namespace_id: int
    route_hash: int
    outcome: str


def replay(existing: dict, request: SignalRequest) -> Receipt:
    """The first receipt of an idempotency key, or IDEMPOTENCY_CONFLICT for other content (S1.5)."""
    if existing["request_digest"] != request.request_digest:
        raise WeaveError(
            Code.IDEMPOTENCY_CONFLICT, f"Idempotency-Key {request.idempotency_key!r} was used for a different signal"
        )
    return Receipt(receipt_text(existing["signal_id"], existing["receipt"]), replayed=True)


def require_contract(document: dict, fields: dict, payload: object) -> None:
    """CONTRACT_MISMATCH (422, nothing stored: S1.9) unless the signal fits its target step's contract."""
    problems = rules.contract_problems(document["steps"], fields, payload)
    if problems:
        raise refusal(Code.CONTRACT_MISMATCH, problems)


def target_facts(tx: Tx, request: SignalRequest, known: dict) -> rules.TargetFacts:
    """What acceptance decides on (S1.10), from FACTS_UNDER_LOCK's row."""
    return rules.TargetFacts(
        instance_status=known["status"],
        target_sequence=request.fields["target_activation_sequence"],
        current_sequence=known["activation_sequence"],
        activation_status=known["activation_status"],
        wait_status=known["wait_status"],
        wait_deadline=known["wait_deadline_at"],
        wait_correlation=known["correlation"],
        wait_won_by_query=known["wait_status"] == "SATISFIED" and known["winner_signal_id"] is None,
        correlation=request.correlation,
        accepted_at=tx.now_read_with(known["now"]),
    )


def lock_target(tx: Tx, principal: Principal, instance_id: int, queues: list[str], key: str | None, step: str) -> dict:
    """Lock the queues of the pinned definition (shared), then the instance (by its mark), and read
    FACTS_UNDER_LOCK: one round trip (S1.3's lock order)."""
    if queues:
        tx.lock(LOCK_QUEUES_SHARED, (principal.namespace_id, tuple(queues)))
    instances.mark_deciding(tx, instance_id)
    return tx.one(FACTS_UNDER_LOCK, {"instance": instance_id, "key": key, "step": step})


def refuse_over_limit(stored: int, workflow_id: str) -> None:
    """SIGNAL_LIMIT_REACHED (409) when the instance holds its 1,024 signals (S1.6)."""
    if stored >= SIGNALS_PER_INSTANCE:
        raise WeaveError(
            Code.SIGNAL_LIMIT_REACHED, f"workflow {workflow_id!r} already holds {SIGNALS_PER_INSTANCE} signals"
        )


@unit_of_work(replay_on=("uq_signals_idempotency",))
def send_signal(
    tx: Tx, principal: Principal, workflow_id: str, request: SignalRequest, target: list[dict] | None = None
) -> Receipt:
    """Accept one signal, or answer its replay or its refusal (S1.3-S1.10). `target`: the rows of
    SELECT_TARGET_OF_TOKEN for this request, as its authentication read them in its own round trip
    (`tenancy.authenticate_reading`), else read here. Read before the transaction or in it, the row
    is unlocked either way: what it says is checked again under the instance's lock (`twin`)."""
    if target is None:
        target = tx.all(SELECT_TARGET_INSTANCE_AND_KEY, (request.idempotency_key, principal.namespace_id, workflow_id))
    unlocked = target[0] if target else None
    document, queues = instances.require_grants(tx, principal, workflow_id, unlocked)
    if unlocked["receipt"] is not None:
        return replay(unlocked, request)
    require_contract(document, request.fields, request.payload)

    known = lock_target(
        tx, principal, unlocked["id"], queues, request.idempotency_key, request.fields["target_step_key"]
    )
    return decide(tx, principal, workflow_id, request, known)


@unit_of_work(replay_on=("uq_signals_idempotency",))
def send_signals(tx: Tx, principal: Principal, sends: list[tuple[str, SignalRequest]]) -> list[Receipt | WeaveError]:
    """Several signals, each to its workflow, in one transaction (B8): each decided exactly as
    `send_signal` decides it alone, in their order, as if sent one after another; a refusal is
    returned in its place (it has written nothing: every refusal comes before `accept`).

    One round trip finds every target with its idempotency key; the instances left to accept
    for are then locked together, in the global order (the union of their queues sorted, then the
    instances by id), and every item's facts are read in the same round trip, after the locks, so
    that they and the transaction's time are read with every lock held. A concurrent twin's key, a deadlock
    or a lost COMMIT re-runs the whole unit (`unit_of_work`): a COMMIT that had landed answers
    every item of it as a replay, as a single send after a lost COMMIT does."""
    found = tx.all_of_each(
        SELECT_TARGET_INSTANCE_AND_KEY, [(r.idempotency_key, principal.namespace_id, w) for w, r in sends]
    )
    outcomes: list[Receipt | WeaveError | None] = [None] * len(sends)
    to_lock: dict[int, tuple[int, list[str]]] = {}  # item index -> (instance id, queues), in item order
    for index, ((workflow_id, request), rows) in enumerate(zip(sends, found)):
        unlocked = rows[0] if rows else None
        try:
            document, queues = instances.require_grants(tx, principal, workflow_id, unlocked)
            if unlocked["receipt"] is not None:
                outcomes[index] = replay(unlocked, request)
                continue
            require_contract(document, request.fields, request.payload)
        except WeaveError as exc:
            outcomes[index] = exc
            continue
        to_lock[index] = (unlocked["id"], queues)
    if not to_lock:
        return outcomes
    queues = sorted({queue for _, used in to_lock.values() for queue in used})
    if queues:
        tx.lock(LOCK_QUEUES_SHARED, (principal.namespace_id, tuple(queues)))
    for instance_id in sorted({instance_id for instance_id, _ in to_lock.values()}):
        instances.mark_deciding(tx, instance_id)
    # Every item's facts in one round trip, under every lock. What an earlier item of the run
    # changes in them is only its instance's stored count (its key is not another item's, its
    # acceptance moves no activation or wait): counted here, as `accept` counts it in the row.
    reads = []
    for index, (instance_id, _) in to_lock.items():
        request = sends[index][1]
        step = request.fields["target_step_key"]
        reads.append({"instance": instance_id, "key": request.idempotency_key, "step": step})
    facts = tx.all_of_each(FACTS_UNDER_LOCK, reads)
    stored_by_run: dict[int, int] = {}
    planned: dict[int, Planned] = {}  # item index -> its acceptance, its row not inserted yet
    for (index, (instance_id, _)), (known,) in zip(to_lock.items(), facts):
        workflow_id, request = sends[index]
        known = {**known, "stored": known["stored"] + stored_by_run.get(instance_id, 0)}
        try:
            outcome = decide(tx, principal, workflow_id, request, known, planning=True)
        except WeaveError as exc:
            outcomes[index] = exc
            continue
        if isinstance(outcome, Planned):
            planned[index] = outcome
            stored_by_run[instance_id] = stored_by_run.get(instance_id, 0) + 1
        else:
            outcomes[index] = outcome
    # The accepted items' signal rows in one round trip (their ids are in their receipts, events
    # and audit records); then what follows each insert, queued in item order, sent with COMMIT.
    signal_ids = tx.insert_all(INSERT_SIGNAL, [accepted.row for accepted in planned.values()])
    for (index, accepted), signal_id in zip(planned.items(), signal_ids):
        outcomes[index] = recorded(tx, principal, accepted, signal_id)
    return outcomes


def decide(
    tx: Tx, principal: Principal, workflow_id: str, request: SignalRequest, known: dict, planning: bool = False
) -> Receipt | Planned:
    """Accept a signal for the locked instance whose FACTS_UNDER_LOCK are `known`, or refuse it
    (before anything is written); a twin of its key that committed first is replayed. `planning`:
    an acceptance is answered `Planned`, its row not inserted yet (`send_signals`)."""
    if known["twin"]:  # a concurrent twin committed first (or an earlier item of the same batch)
        return replay(tx.one(SELECT_BY_IDEMPOTENCY_KEY, (known["id"], request.idempotency_key)), request)
    refuse_over_limit(known["stored"], workflow_id)
    facts = target_facts(tx, request, known)
    decision = rules.accept(facts)
    if decision.status == rules.ACTIVATION_NOT_FOUND:
        raise WeaveError(
            Code.ACTIVATION_NOT_FOUND,
            f"step {request.fields['target_step_key']!r} has no activation "
            f"{request.fields['target_activation_sequence']}",
        )
    if planning:
        return plan(principal, known, request, facts.accepted_at, decision, known["wait_id"])
    return accept(tx, principal, known, request, facts.accepted_at, decision, known["wait_id"])


def accept(tx: Tx, principal: Principal, *decided) -> Receipt:
    """Store a signal of the locked instance with its checkpoint, event and audit record (S1.4);
    `decided`: `plan`'s arguments after the principal (the instance, the request, the time, the
    decision, the wait, the route)."""
    planned = plan(principal, *decided)
    return recorded(tx, principal, planned, tx.insert(INSERT_SIGNAL, planned.row))


@dataclass(frozen=True)
class Planned:
    """An acceptance decided, whose signal row (`row`, INSERT_SIGNAL's parameters) is yet to be
    inserted: a batch inserts its items' rows in one round trip (`send_signals`)."""

    instance: dict
    request: SignalRequest
    now: datetime
    decision: rules.Acceptance
    wait_id: int | None
    route: Route | None
    row: tuple
    rest: str  # the receipt without its signal id (`receipt_rest`)


def plan(
    principal: Principal,
    instance: dict,
    request: SignalRequest,
    now: datetime,
    decision: rules.Acceptance,
    wait_id: int | None,
    route: Route | None = None,
) -> Planned:
    """`accept`'s signal row, not yet inserted."""
    row, rest = signal_row(
        principal,
        request,
        instance=instance,
        status=decision.status,
        disposition=decision.disposition,
        accepted_at=now,
        expires_at=instance["deadline_at"],
        route=route,
    )
    return Planned(instance, request, now, decision, wait_id, route, row, rest)


def recorded(tx: Tx, principal: Principal, planned: Planned, signal_id: int) -> Receipt:
    """What follows the insert of a planned signal (`signal_id`): its instance's count, its
    checkpoint, its event and its audit record, queued; its receipt."""
    instance, request, decision, route = planned.instance, planned.request, planned.decision, planned.route
    instances.count_stored_signal(tx, instance["id"])
    if decision.wakes_wait:
        checkpoints.schedule_wait(tx, instance["id"], planned.wait_id, planned.now)
    data, details = accepted_texts(
        signal_id,
        request.fields,
        decision,
        principal.actor,
        request.idempotency_key,
        planned.now,
        instance["deadline_at"],
        route.outcome if route else None,
    )
    events.append(tx, instance["id"], "SIGNAL_ACCEPTED", data)
    audit.record(
        tx,
        principal.namespace_id,
        principal.actor,
        "signal.send",
        details,
        instance_id=instance["id"],
        signal_id=signal_id,
        credential_id=principal.credential_id,
        request_digest=request.request_digest,
    )
    return Receipt(receipt_text(signal_id, planned.rest), False, decision.status, decision.disposition)


def store(tx: Tx, principal: Principal, request: SignalRequest, **row) -> tuple[int, str]:
    """Insert the signal's row (`signal_row`) with its frozen receipt; (signal_id, the receipt's text)."""
    params, rest = signal_row(principal, request, **row)
    signal_id = tx.insert(INSERT_SIGNAL, params)
    return signal_id, receipt_text(signal_id, rest)


def signal_row(
    principal: Principal,
    request: SignalRequest,
    *,
    instance: dict | None,
    status: str,
    disposition: str | None,
    accepted_at: datetime,
    expires_at: datetime,
    route: Route | None,
    workflow_id: str | None = None,
) -> tuple[tuple, str]:
    """The signal's row (INSERT_SIGNAL's parameters) with its frozen receipt, and that receipt
    without its signal id (`receipt_rest`). A fact of `route` that belongs to no instance (parked,
    ambiguous, refused by a full one: `workflow_id`) has `instance` None; a PARKED one expires at
    its `parked_until` (`expires_at`)."""
    fields = request.fields
    payload_sha = jsontext.sha256_text(request.payload_text) if request.payload_text is not None else None
    route_fields = None
    if route is not None:  # B3
        route_fields = {
            "route": route.outcome,
            "target_step_key": fields.get("target_step_key"),
            "target_activation_sequence": fields.get("target_activation_sequence"),
        }
        if status == "PARKED":
            route_fields["parked_until"] = rfc3339(expires_at)
    rest = receipt_rest(
        instance["workflow_id"] if instance else workflow_id,
        status,
        disposition,
        accepted_at,
        expires_at,
        request.idempotency_key,
        request.request_digest,
        route_fields,
    )
    return (
        (
            instance["id"] if instance else None,
            fields["name"],
            fields["payload_version"],
            fields.get("target_step_key"),
            fields.get("target_activation_sequence"),
            request.correlation,
            request.payload_text,
            payload_sha,
            request.payload_text is not None,
            fields["reason"],
            fields.get("evidence_ref"),
            principal.actor,
            principal.credential_id,
            None if route else request.idempotency_key,
            request.request_digest,
            status,
            disposition,
            accepted_at,
            expires_at,
            expires_at,  # available_at: a PENDING (or PARKED) signal's first look is at its expiry
            accepted_at if status not in (rules.PENDING, "PARKED") else None,
            accepted_at,
            rest,
            route.namespace_id if route else None,
            request.idempotency_key if route else None,
            route.route_hash if route else None,
            fields.get("park_seconds") if route else None,
        ),
        rest,
    )


# ---- get and list ---------------------------------------------------------------------------------

# A fact sent by its business key keeps its Idempotency-Key in `route_key` (unique in its namespace).
SIGNAL_COLUMNS = """
s.id, s.name, s.payload_version, s.target_step_key, s.target_activation_sequence, s.correlation, s.payload,
s.payload_present, s.reason, s.evidence_ref, s.actor, COALESCE(s.idempotency_key, s.route_key) AS idempotency_key,
s.request_digest, s.status,
s.disposition, s.accepted_at, s.expires_at, s.consumed_at, s.instance_id, s.route_key IS NOT NULL AS by_key
"""
SELECT_SIGNAL = "SELECT " + SIGNAL_COLUMNS + " FROM signals s WHERE s.instance_id = %s AND s.id = %s"
# One instance's signals (at most 1,024, S1.6) through the index its key leads, then sorted: the
# index is named, as a backward scan of the primary key from `id > %s` would read other instances'.
SELECT_SIGNAL_PAGE = (
    "SELECT " + SIGNAL_COLUMNS + " FROM signals s FORCE INDEX (uq_signals_idempotency) "
    "WHERE s.instance_id = %s AND s.id > %s ORDER BY s.id LIMIT %s"
)
SELECT_SIGNAL_PAGE_BY_STATUS = (
    "SELECT " + SIGNAL_COLUMNS + " FROM signals s FORCE INDEX (uq_signals_idempotency) "
    "WHERE s.instance_id = %s AND s.status = %s AND s.id > %s ORDER BY s.id LIMIT %s"
)


@read_only
def get_signal(tx: Tx, principal: Principal, workflow_id: str, signal_id: int) -> dict:
    instance = instances.addressed(tx, principal, workflow_id)
    row = tx.one(SELECT_SIGNAL, (instance["id"], signal_id))
    if row is None:
        raise WeaveError(Code.SIGNAL_NOT_FOUND, f"signal {signal_id} does not exist in workflow {workflow_id!r}")
    return row


@read_only
def list_signals(
    tx: Tx, principal: Principal, workflow_id: str, status: str | None, after: int, limit: int
) -> list[dict]:
    instance = instances.addressed(tx, principal, workflow_id)
    if status is None:
        return tx.all(SELECT_SIGNAL_PAGE, (instance["id"], after, limit))
    return tx.all(SELECT_SIGNAL_PAGE_BY_STATUS, (instance["id"], status, after, limit))


# ---- facts sent by their business key, read by the namespace (B6) ----------------------------------

# One fact by its id, wherever it is now, with its instance (when routed) as `instances.require_grants` takes it.
SELECT_FACT = (
    "SELECT "
    + SIGNAL_COLUMNS
    + """, i.workflow_id, i.definition_id,
       (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest
FROM signals s LEFT JOIN instances i ON i.id = s.instance_id
WHERE s.id = %s AND s.namespace_id = %s
"""
)


@read_only
def get_fact(tx: Tx, principal: Principal, signal_id: int) -> dict:
    """A fact sent by its business key in the credential's namespace (B6), with its `workflow_id`
    (None while it belongs to no instance). Parked, expired unrouted and refused facts are the
    namespace's; a routed one is its instance's too, and needs that instance's grants (S1.1).
    A signal sent to an instance by its id is not a fact of the namespace: SIGNAL_NOT_FOUND."""
    row = tx.one(SELECT_FACT, (signal_id, principal.namespace_id))
    if row is None:
        raise WeaveError(Code.SIGNAL_NOT_FOUND, f"no fact sent by its business key has signal_id {signal_id} here")
    if row["instance_id"] is not None:
        instances.require_grants(tx, principal, row["workflow_id"], row)
    return row


# The facts of the namespace that belong to no instance, newest first from the cursor, through
# `ix_signals_unrouted` (migration 0018): one status is a backward range of it; all three are three
# such ranges of at most a page each, merged. Name and key filter the entries the ranges read.
def _facts_of_status(status: str) -> str:
    return f"""
SELECT {SIGNAL_COLUMNS} FROM signals s FORCE INDEX (ix_signals_unrouted)
WHERE s.namespace_id = %(namespace)s AND s.instance_id IS NULL AND s.status = {status} AND s.id < %(after)s
  AND (%(name)s IS NULL OR s.name = %(name)s) AND (%(key)s IS NULL OR s.correlation = %(key)s)
ORDER BY s.id DESC LIMIT %(limit)s
"""


UNROUTED_STATUSES = ("PARKED", "EXPIRED", "REJECTED")
SELECT_FACT_PAGE = _facts_of_status("%(status)s")
# Each status bound as a parameter of its own range (`status_0`, …: `EACH_STATUS`).
EACH_STATUS = {f"status_{n}": status for n, status in enumerate(UNROUTED_STATUSES)}
SELECT_FACT_PAGE_ALL = (
    "SELECT * FROM ("
    + " UNION ALL ".join(f"({_facts_of_status(f'%({key})s')})" for key in EACH_STATUS)
    + ") facts ORDER BY id DESC LIMIT %(limit)s"
)


@read_only
def list_facts(
    tx: Tx,
    principal: Principal,
    status: str | None,
    name: str | None,
    correlation: bytes | None,
    before: int,
    limit: int,
) -> list[dict]:
    """Up to `limit` facts of the credential's namespace that belong to no instance (B6: parked,
    expired unrouted, refused), newest first, with ids below `before`: readable by any credential
    of the namespace, as their single-fact read is."""
    params = {
        "namespace": principal.namespace_id,
        "status": status,
        "name": name,
        "key": correlation,
        "after": before,
        "limit": limit,
    }
    return tx.all(SELECT_FACT_PAGE, params) if status else tx.all(SELECT_FACT_PAGE_ALL, params | EACH_STATUS)


# ---- consumption: the rows' side of the engine's decision (S2.2-S2.5, S2.8) -------------------------

REJECT_SIGNAL = """
UPDATE signals SET status = 'REJECTED', disposition = %s, settled_at = %s WHERE id = %s AND status = 'PENDING'
"""
CONSUME_SIGNAL = """
UPDATE signals SET status = 'CONSUMED', consumed_wait_id = %s, consumed_at = %s, settled_at = %s
WHERE id = %s AND status = 'PENDING'
"""
REJECT_PENDING_OF_GENERATION = """
UPDATE signals SET status = 'REJECTED', disposition = %s, settled_at = %s
WHERE instance_id = %s AND target_step_key = %s AND target_activation_sequence = %s AND status = 'PENDING'
"""
REJECT_PENDING_OF_INSTANCE = """
UPDATE signals SET status = 'REJECTED', disposition = %s, settled_at = %s
WHERE instance_id = %s AND status = 'PENDING'
"""


# The generation of a wait the unit has just locked (the join re-reads that row under its own lock):
# what adjudication needs of each signal, and no more (S2.2: ids, contract, key and times; never
# payloads, up to 1,024 × 256 KiB under the instance lock). The index is named: left to itself the
# planner may read the whole instance (up to 1,024 signals) through uq_signals_idempotency.
LOCK_PENDING_OF_WAIT = """
SELECT s.id, s.name, s.payload_version, s.correlation, s.accepted_at
FROM waits w
JOIN signals s FORCE INDEX (ix_signals_generation) ON s.instance_id = w.instance_id AND s.target_step_key = w.step_key
              AND s.target_activation_sequence = w.activation_sequence AND s.status = 'PENDING'
WHERE w.id = %s
ORDER BY s.accepted_at, s.id
FOR UPDATE
"""


def locking_pending_of_wait(wait_id: int) -> tuple[str, tuple]:
    """The PENDING signals aimed at a locked wait's generation, locked, first accepted first
    (S2.2), without their payloads; a read for `Tx.all_together`, after the wait's lock."""
    return LOCK_PENDING_OF_WAIT, (wait_id,)


# The one signal adjudication chose, whole: its payload and what its acceptance proof is checked
# against (S1.12), with the digest its acceptance audit record holds. Already locked by the unit.
SELECT_CANDIDATE = (
    """
SELECT s.id, s.name, s.payload_version, s.correlation, s.payload, s.payload_present, s.accepted_at, s.request_digest,
       s.reason, s.evidence_ref, s.target_step_key, s.target_activation_sequence, s.route_key, s.park_seconds,
       """
    + audit.ACCEPTANCE_DIGEST_OF_SIGNAL_ROW
    + """ AS recorded_digest
FROM signals s WHERE s.id = %s
"""
)


def read_candidate(tx: Tx, signal_id: int) -> dict:
    """The signal adjudication chose, with its payload and `recorded_digest` (the caller holds its lock)."""
    return tx.one(SELECT_CANDIDATE, (signal_id,))


SELECT_PAYLOAD = "SELECT id, accepted_at, payload FROM signals WHERE id = %s"


def read_payload(tx: Tx, signal_id: int) -> dict:
    """`id`, `accepted_at` and `payload` of a signal (not locked: a consumed signal does not change)."""
    return tx.one(SELECT_PAYLOAD, (signal_id,))


def reject(tx: Tx, signal_id: int, disposition: str) -> None:
    tx.transition(REJECT_SIGNAL, (disposition, tx.now(), signal_id), f"reject signal {signal_id} ({disposition})")


def consume(tx: Tx, signal_id: int, wait_id: int) -> None:
    now = tx.now()
    tx.transition(CONSUME_SIGNAL, (wait_id, now, now, signal_id), f"consume signal {signal_id}")


LOCK_PENDING_OF_GENERATION = """
SELECT id FROM signals FORCE INDEX (ix_signals_generation)
WHERE instance_id = %s AND target_step_key = %s AND target_activation_sequence = %s AND status = 'PENDING'
FOR UPDATE
"""


def lock_pending_of_generation(tx: Tx, instance_id: int, step_key: str, sequence: int) -> None:
    """Lock the PENDING signals aimed at one step generation, before the tasks (global lock order),
    for a unit that settles them after it has looked at the tasks (review)."""
    tx.all(LOCK_PENDING_OF_GENERATION, (instance_id, step_key, sequence))


SELECT_PENDING_OF_GENERATION = """
SELECT id FROM signals FORCE INDEX (ix_signals_generation)
WHERE instance_id = %s AND target_step_key = %s AND target_activation_sequence = %s AND status = 'PENDING'
"""
SELECT_PENDING_OF_INSTANCE = """
SELECT id FROM signals FORCE INDEX (uq_signals_idempotency) WHERE instance_id = %s AND status = 'PENDING'
"""


def reject_pending_of_generation(tx: Tx, instance: dict, step_key: str, sequence: int, disposition: str) -> int:
    """Every PENDING signal aimed at one step generation of the locked instance (any number, none
    included) is REJECTED, each notified when the namespace subscribes (N2)."""
    generation = (instance["id"], step_key, sequence)
    settled = _pending_if_notified(tx, instance, SELECT_PENDING_OF_GENERATION, generation)
    rejected = tx.execute(REJECT_PENDING_OF_GENERATION, (disposition, tx.now(), *generation))
    notify_settled(tx, instance, settled)
    return rejected


def reject_all_pending(tx: Tx, instance: dict, disposition: str) -> int:
    """Every PENDING signal of the locked instance (any number, none included) is REJECTED, each
    notified when the namespace subscribes (N2)."""
    settled = _pending_if_notified(tx, instance, SELECT_PENDING_OF_INSTANCE, (instance["id"],))
    rejected = tx.execute(REJECT_PENDING_OF_INSTANCE, (disposition, tx.now(), instance["id"]))
    notify_settled(tx, instance, settled)
    return rejected


def _pending_if_notified(tx: Tx, instance: dict, sql: str, params: tuple) -> list[int]:
    """The ids a bulk rejection is about to settle, read only when they are to be notified (the
    instance lock keeps them PENDING until the rejection)."""
    if not notifications.subscribed(instance.get("notify_mask"), NotifyEvent.SIGNAL_SETTLED):
        return []
    return [row["id"] for row in tx.all(sql, params)]


# ---- signal.settled (N1, N2): a signal that left PENDING or PARKED, as GET renders it (§5) ---------

SELECT_SETTLED = "SELECT " + SIGNAL_COLUMNS + " FROM signals s WHERE s.id IN %s ORDER BY s.id"


def notify_settled(tx: Tx, holder: dict, signal_ids: list[int], workflow_id: str | None = None) -> None:
    """Record `signal.settled` for each of `signal_ids`, just settled in this transaction, when the
    namespace subscribes to it: `holder` is the locked instance (or, for a fact in no instance,
    a row with its `namespace_id` and `notify_mask`), whose `workflow_id` the view shows unless
    the fact belongs to none. Nothing is read or rendered otherwise (the hot path)."""
    if not signal_ids or not notifications.subscribed(holder.get("notify_mask"), NotifyEvent.SIGNAL_SETTLED):
        return
    for row in tx.all(SELECT_SETTLED, (tuple(signal_ids),)):
        shown = holder.get("workflow_id") if row["instance_id"] is not None else workflow_id
        notifications.record(
            tx,
            holder["namespace_id"],
            NotifyEvent.SIGNAL_SETTLED,
            row["instance_id"],
            views.signal_view(row, shown),
        )


# ---- expiry of unmatched signals (the scanner's third source, S2.7) -------------------------------

# A PENDING signal's first look is at its expiry (`available_at` starts at `expires_at`, S2.7) and
# later ones only move it later: the next look is the candidate's due time, for the sort and for the
# scanner's lag alike, so a signal deferred again and again never sorts ahead of fresh work.
DUE_EXPIRIES = """
SELECT id, available_at AS due_at, instance_id FROM signals FORCE INDEX (ix_signals_next_look)
WHERE status = 'PENDING' AND available_at <= %s
ORDER BY available_at, id
LIMIT %s
"""
SELECT_SIGNAL_INSTANCE = "SELECT instance_id FROM signals WHERE id = %s"
LOCK_PENDING_SIGNAL = """
SELECT id, target_step_key, target_activation_sequence, expires_at, available_at FROM signals
WHERE id = %s AND status = 'PENDING' FOR UPDATE SKIP LOCKED
"""
EXPIRE_SIGNAL = """
UPDATE signals SET status = 'EXPIRED', disposition = 'EXPIRED_UNMATCHED', settled_at = %s
WHERE id = %s AND status = 'PENDING'
"""
LOOK_AGAIN_AT = "UPDATE signals SET available_at = %s WHERE id = %s AND status = 'PENDING'"
FAILURES = backoff.Source(
    lock="SELECT attempts, available_at FROM signals WHERE id = %s AND status = 'PENDING' FOR UPDATE",
    record="UPDATE signals SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)


COUNT_DUE_EXPIRIES = "SELECT COUNT(*) AS n FROM signals WHERE status = 'PENDING' AND available_at <= %s"


def listing_expiries(now: datetime, limit: int) -> tuple[str, tuple]:
    """The read of the signals whose expiry is due at `now`, oldest first, for `Tx.all_together`."""
    return DUE_EXPIRIES, (now, limit)


def count_expiry_due(tx: Tx) -> int:
    return tx.one(COUNT_DUE_EXPIRIES, (tx.now(),))["n"]


@unit_of_work
def expire_unmatched_signal(tx: Tx, signal_id: int) -> str | None:
    """A PENDING signal past its `expires_at` that no wait can take any more becomes EXPIRED_UNMATCHED.

    The instance is locked before the signal (global lock order). A signal whose wait can still
    take it (WAITING, under an ACTIVE step) belongs to that wait's decision (it may be on time):
    the expiry looks again after the wait's deadline, without a decision (the unit rolls back, and
    only the signal's next look moves). A wait under a step in review takes no signal: the expiry
    goes ahead (S2.7).
    """
    row = tx.one(SELECT_SIGNAL_INSTANCE, (signal_id,))
    if row is None:
        return None
    instance = instances.lock(tx, row["instance_id"])
    signal = tx.one(LOCK_PENDING_SIGNAL, (signal_id,))
    now = tx.now()
    if signal is None or signal["available_at"] > now:
        return None
    if signal["expires_at"] > now:  # a next look before the expiry (a row written so by hand): move it there
        tx.afterwards(LOOK_AGAIN_AT, (signal["expires_at"], signal_id))
        return None
    wait = waits.open_for(tx, instance["id"], signal["target_step_key"], signal["target_activation_sequence"])
    if wait is not None:
        tx.afterwards(LOOK_AGAIN_AT, (max(wait["deadline_at"], now + EXPIRY_RECHECK), signal_id))
        return "EXPIRY_DEFERRED"
    tx.transition(EXPIRE_SIGNAL, (now, signal_id), f"expire signal {signal_id}")
    notify_settled(tx, instance, [signal_id])
    events.append(
        tx, instance["id"], "SIGNAL_EXPIRED", {"signal_id": str(signal_id), "disposition": "EXPIRED_UNMATCHED"}
    )
    return "SIGNAL_EXPIRED"
