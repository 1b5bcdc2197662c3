"""Routing a fact by its business key (docs/rules.md#routing, B1-B4): the sender names the contract (name,
payload version) and the correlation key, never the workflow, step or activation.

Two sides meet here. The route (`route_signal`, B1-B3) looks for the WAITING waits with the fact's
frozen name, payload version and key bytes that the credential may signal: one → the fact becomes
a signal of that activation, accepted as `signals.send_signal` would accept it there; none → it is
stored PARKED; several → REJECTED/AMBIGUOUS_CORRELATION. The take (`take_parked`, B4) runs in
the transaction that opens a wait and makes the PARKED facts of its key signals of it.

A route that finds no wait and a wait that finds no fact meet at a route lock: one row of the
fixed table `route_locks`, the bucket `route_hash mod ROUTE_BUCKETS`, locked by writing it (so a
Galera cluster certifies the conflict too). The route takes it with no instance locked and reads
the waits again; the take takes it after writing its wait, then reads the parked facts. Whichever
commits first, the other sees it (docs/decisions.md, "Routing by business key: the race").

Global lock order: queues (sorted) → instance → activation → wait → route bucket → signals → tasks.
A route that must lock an instance after it found a wait under the bucket rolls back and starts
again (`Rerouted`), so no unit ever takes an instance lock while it holds a bucket.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import timedelta

from weave import jsontext
from weave.auth import Principal
from weave.db import Unavailable, read_only, unit_of_work
from weave.rules import definitions as definition_rules
from weave.rules import routing as rules
from weave.rules import signals as signal_rules
from weave.sql import audit, backoff, definitions, events, instances, notifications, signals
from weave.times import rfc3339
from weave.tx import Tx

ROUTE_BUCKETS = 4096  # rows of route_locks (migration 0017)
ROUTE_ATTEMPTS = 8  # a route that finds its waits changing under it starts again, this many times at most


def route_hash(namespace_id: int, name: str, payload_version: str, correlation: bytes) -> int:
    """The first 64 bits of SHA-256 over the business key of a fact or a wait (its namespace,
    contract and key bytes); migration 0017 computes the same in SQL. Equal keys have equal
    hashes; a collision only shares an index entry or a bucket, as every read compares the columns."""
    prefix = f"{namespace_id}\0{name}\0{payload_version}\0".encode()
    return int.from_bytes(hashlib.sha256(prefix + correlation).digest()[:8], "big")


# A write takes the lock: on a Galera cluster, where FOR UPDATE locks are local to a node, two
# transactions that write one row conflict at certification. Upsert: a bucket row that went
# missing (a table emptied by hand) is made again rather than silently not locked.
LOCK_BUCKET = "INSERT INTO route_locks (bucket, version) VALUES (%s, 1) ON DUPLICATE KEY UPDATE version = version + 1"


def lock_bucket(tx: Tx, hashed: int) -> None:
    """Lock the route bucket of a business key by writing its row (queued: it runs with the unit's
    next statement, which then holds it)."""
    tx.lock(LOCK_BUCKET, (hashed % ROUTE_BUCKETS,))


class Rerouted(Exception):
    """What a route found changed under it: its unit rolls back, and the route starts again."""


# ---- the route (B1-B3) ---------------------------------------------------------------------------------

SELECT_BY_ROUTE_KEY = """
SELECT s.id AS signal_id, s.request_digest, s.receipt, i.id, i.workflow_id, i.definition_id,
       (SELECT d.digest FROM definitions d WHERE d.id = i.definition_id) AS definition_digest
FROM signals s LEFT JOIN instances i ON i.id = s.instance_id
WHERE s.namespace_id = %s AND s.route_key = %s
"""
# The WAITING waits of one business key in the namespace (not locked), each with its instance (`id`,
# as `instances.require_grants` takes it) and what the credential's grants are compared with: the
# queues of the instance's pinned definition (S1.1).
SELECT_CANDIDATE_WAITS = """
SELECT w.id AS wait_id, w.step_key, w.activation_sequence, i.id, i.workflow_id, i.definition_id,
       d.digest AS definition_digest, d.queues AS definition_queues
FROM waits w FORCE INDEX (ix_waits_route)
JOIN instances i ON i.id = w.instance_id
JOIN definitions d ON d.id = i.definition_id
WHERE w.route_hash = %s AND w.status = 'WAITING' AND w.name = %s AND w.payload_version = %s AND w.correlation = %s
  AND i.namespace_id = %s
ORDER BY w.id
"""


def route_signal(db, principal: Principal, request: signals.SignalRequest) -> signals.Receipt:
    """Route a fact by its business key (B1-B3): one unit per attempt, started again (at most
    ROUTE_ATTEMPTS times) when the waits it found changed before it could lock them."""
    for _ in range(ROUTE_ATTEMPTS):
        try:
            return _route(db, principal, request)
        except Rerouted:
            continue
    raise Unavailable(f"the waits of this key kept changing during {ROUTE_ATTEMPTS} attempts to route the fact")


@unit_of_work(replay_on=("uq_signals_route",))
def _route(tx: Tx, principal: Principal, request: signals.SignalRequest) -> signals.Receipt:
    receipt, outcome = _route_once(tx, principal, request)
    return receipt if receipt.replayed else replace(receipt, route=outcome)


def _route_once(tx: Tx, principal: Principal, request: signals.SignalRequest) -> tuple[signals.Receipt, str | None]:
    """The receipt of one attempt at the route, with its outcome (B2; None on a replay)."""
    existing = tx.one(SELECT_BY_ROUTE_KEY, (principal.namespace_id, request.idempotency_key))
    if existing is not None:  # a replay passes the current checks of where the fact is (S1.5)
        if existing["id"] is not None:
            instances.require_grants(tx, principal, existing["workflow_id"], existing)
        return signals.replay(existing, request), None
    fields = request.fields
    hashed = route_hash(principal.namespace_id, fields["name"], fields["payload_version"], request.correlation)
    found = _candidates(tx, principal, request, hashed)
    outcome = rules.route(len(found))
    if outcome == rules.ROUTED:
        return _route_to(tx, principal, request, hashed, found[0]), outcome
    if outcome == rules.AMBIGUOUS:
        return _store_unrouted(tx, principal, request, hashed, outcome, "REJECTED", "AMBIGUOUS_CORRELATION"), outcome
    # None found without a lock. A wait being opened now may not be committed yet: meet it at the
    # bucket, and read again with a fresh statement, which sees every wait committed before.
    lock_bucket(tx, hashed)
    if _candidates(tx, principal, request, hashed):
        raise Rerouted()  # its instance must be locked before the bucket: start again
    return _store_unrouted(tx, principal, request, hashed, outcome, "PARKED", None), outcome


@read_only
def stored_receipt(tx: Tx, principal: Principal, key: str) -> signals.Receipt | None:
    """The frozen receipt of the fact routed under `key` in the principal's namespace, whatever it
    was sent with; None when none was. An inbound source's redelivery whose fact changed (its
    mapping was edited since) answers with it, as the first delivery did (W3)."""
    existing = tx.one(SELECT_BY_ROUTE_KEY, (principal.namespace_id, key))
    if existing is None:
        return None
    return signals.Receipt(signals.receipt_text(existing["signal_id"], existing["receipt"]), replayed=True)


def _candidates(tx: Tx, principal: Principal, request: signals.SignalRequest, hashed: int) -> list[dict]:
    """B2's candidates: the WAITING waits of the key on instances the credential may signal."""
    fields = request.fields
    rows = tx.all(
        SELECT_CANDIDATE_WAITS,
        (hashed, fields["name"], fields["payload_version"], request.correlation, principal.namespace_id),
    )
    return [row for row in rows if principal.holds_queues(definitions.queues(row["definition_queues"]))]


def _route_to(
    tx: Tx, principal: Principal, request: signals.SignalRequest, hashed: int, candidate: dict
) -> signals.Receipt:
    """The fact as a signal of the one candidate's activation, accepted by S1.3-S1.12 as if it had
    been sent there; started again when the wait is no longer the step's WAITING one under the lock."""
    document, queues = instances.require_grants(tx, principal, candidate["workflow_id"], candidate)
    aimed = replace(
        request,
        fields={
            **request.fields,
            "target_step_key": candidate["step_key"],
            "target_activation_sequence": candidate["activation_sequence"],
        },
    )
    signals.require_contract(document, aimed.fields, request.payload)
    known = signals.lock_target(tx, principal, candidate["id"], queues, None, candidate["step_key"])
    if known["wait_id"] != candidate["wait_id"] or known["wait_status"] != "WAITING":
        raise Rerouted()  # taken, expired or superseded since it was read
    route = signals.Route(principal.namespace_id, hashed, rules.ROUTED)
    facts = signals.target_facts(tx, aimed, known)
    if known["stored"] >= signals.SIGNALS_PER_INSTANCE:  # docs/decisions.md: refused, kept in the namespace
        return _store_unrouted(tx, principal, aimed, hashed, rules.ROUTED, "REJECTED", "SIGNAL_LIMIT_REACHED", known)
    return signals.accept(
        tx, principal, known, aimed, facts.accepted_at, signal_rules.accept(facts), candidate["wait_id"], route
    )


def _store_unrouted(
    tx: Tx,
    principal: Principal,
    request: signals.SignalRequest,
    hashed: int,
    outcome: str,
    status: str,
    disposition: str | None,
    refused_by: dict | None = None,
) -> signals.Receipt:
    """A fact that belongs to no instance: PARKED until `parked_until` (its `expires_at`), or
    refused (ambiguous; or routed into an instance that holds its 1,024 signals), with its audit
    record (`signal.park`: its acceptance record, whose digest the take carries into the instance's
    `signal.route` record, where a wait's proof check finds it: S1.12)."""
    now = tx.now()
    if refused_by is None:
        expires_at = now + timedelta(seconds=request.fields["park_seconds"])
    else:
        expires_at = refused_by["deadline_at"]
    signal_id, text = signals.store(
        tx,
        principal,
        request,
        instance=None,
        status=status,
        disposition=disposition,
        accepted_at=now,
        expires_at=expires_at,
        route=signals.Route(principal.namespace_id, hashed, outcome),
        workflow_id=refused_by["workflow_id"] if refused_by else None,
    )
    audit.record(
        tx,
        principal.namespace_id,
        principal.actor,
        "signal.park",
        {
            "signal_id": str(signal_id),
            "name": request.fields["name"],
            "route": outcome,
            "status": status,
            "disposition": disposition,
            "target_step_key": request.fields.get("target_step_key"),
            "target_activation_sequence": request.fields.get("target_activation_sequence"),
            "idempotency_key": request.idempotency_key,
            "accepted_at": rfc3339(now),
            "expires_at": rfc3339(expires_at),
        },
        signal_id=signal_id,
        credential_id=principal.credential_id,
        request_digest=request.request_digest,
    )
    return signals.Receipt(text, False, status, disposition)


# ---- the take (B4): in the transaction that opens a wait -------------------------------------------------

# The PARKED facts of one business key, oldest first, locked, with their credential as it is now
# and the digest their acceptance recorded: the subqueries in the select list are read, not locked
# (the credential and application rows are shared by every fact of their sender).
LOCK_PARKED = """
SELECT s.id, s.name, s.payload_version, s.payload, s.payload_present, s.actor, s.credential_id, s.accepted_at,
       s.expires_at,
       (SELECT c.revoked_at IS NOT NULL FROM credentials c WHERE c.id = s.credential_id) AS revoked,
       (SELECT c.expires_at FROM credentials c WHERE c.id = s.credential_id) AS credential_expires_at,
       (SELECT a.status FROM credentials c JOIN applications a ON a.id = c.application_id
         WHERE c.id = s.credential_id) AS application_status,
       (SELECT GROUP_CONCAT(q.name SEPARATOR ' ') FROM credential_queue_grants g JOIN queues q ON q.id = g.queue_id
         WHERE g.credential_id = s.credential_id) AS granted,
       (SELECT r.request_digest FROM audit_records r FORCE INDEX (ix_audit_signal)
         WHERE r.signal_id = s.id AND r.instance_id IS NULL AND r.action = 'signal.park'
         ORDER BY r.id LIMIT 1) AS parked_digest
FROM signals s FORCE INDEX (ix_signals_route)
WHERE s.namespace_id = %s AND s.route_hash = %s AND s.status = 'PARKED' AND s.name = %s AND s.payload_version = %s
  AND s.correlation = %s
ORDER BY s.accepted_at, s.id
FOR UPDATE
"""
SELECT_STORED = "SELECT signals_stored AS stored FROM instances WHERE id = %s"
TAKE_PARKED = """
UPDATE signals SET instance_id = %s, target_step_key = %s, target_activation_sequence = %s, status = 'PENDING'
WHERE id = %s AND status = 'PARKED'
"""
REFUSE_PARKED = """
UPDATE signals SET status = 'REJECTED', disposition = %s, settled_at = %s WHERE id = %s AND status = 'PARKED'
"""


def take_parked(
    tx: Tx, instance: dict, wait_id: int, sequence: int, step: dict, correlation: bytes, hashed: int
) -> int:
    """Make the PARKED facts of a new wait's business key PENDING signals of its activation (B4);
    how many were taken. The caller has locked the instance and written the wait; this locks the
    key's route bucket, then the facts. Each keeps its `accepted_at` and `expires_at` (its
    `parked_until`); the wait's first look decides among them as among early signals (S2.2).

    A fact whose credential could not send it here now (revoked, expired, application disabled,
    a queue grant missing) or whose payload does not fit the wait's contract stays PARKED (it
    expires unrouted, B5), noted in the instance's history; so does one whose parking ended before
    the wait opened, whatever the scanner has done yet (the facts' times decide). One the instance has no room for
    (1,024 signals, S1.6) is REJECTED/SIGNAL_LIMIT_REACHED and stays in the namespace."""
    contract = step[definition_rules.CONTRACT_FIELDS[step["type"]]]
    lock_bucket(tx, hashed)
    parked = tx.all(
        LOCK_PARKED,
        (instance["namespace_id"], hashed, contract["name"], contract["payload_version"], correlation),
    )
    if not parked:
        return 0
    document = definitions.document(tx, instance["definition_id"], instance["definition_digest"])
    queues = definition_rules.queues_used(document)
    room = signals.SIGNALS_PER_INSTANCE - tx.one(SELECT_STORED, (instance["id"],))["stored"]
    now = tx.now()
    taken = 0
    refused = []
    for fact in parked:
        if fact["expires_at"] <= now:  # its parking ended before this wait opened: B5 expires it
            continue
        fields = {
            "name": fact["name"],
            "payload_version": fact["payload_version"],
            "target_step_key": step["key"],
            "target_activation_sequence": sequence,
        }
        payload = jsontext.loads(fact["payload"]) if fact["payload_present"] else signal_rules.ABSENT
        sender = rules.Sender(
            revoked=fact["revoked"] is None or bool(fact["revoked"]),
            expires_at=fact["credential_expires_at"],
            application_status=fact["application_status"],
            granted=frozenset((fact["granted"] or "").split()),
        )
        refusal = rules.refusal(sender, queues, signal_rules.contract_problems([step], fields, payload), now)
        signal_id = str(fact["id"])
        if refusal is not None:
            events.append(tx, instance["id"], "SIGNAL_NOT_ROUTED", {"signal_id": signal_id, "reason": refusal})
            continue
        if taken >= room:
            tx.transition(REFUSE_PARKED, ("SIGNAL_LIMIT_REACHED", now, fact["id"]), f"refuse parked signal {signal_id}")
            refused.append(fact["id"])
            events.append(
                tx, instance["id"], "SIGNAL_NOT_ROUTED", {"signal_id": signal_id, "reason": "SIGNAL_LIMIT_REACHED"}
            )
            continue
        tx.transition(
            TAKE_PARKED, (instance["id"], step["key"], sequence, fact["id"]), f"take parked signal {signal_id}"
        )
        instances.count_stored_signal(tx, instance["id"])
        data = {
            "signal_id": signal_id,
            "name": fact["name"],
            "target_step_key": step["key"],
            "target_activation_sequence": sequence,
            "wait_id": str(wait_id),
            "accepted_at": rfc3339(fact["accepted_at"]),
            "actor": fact["actor"],
        }
        events.append(tx, instance["id"], "SIGNAL_ROUTED", data)
        audit.record(
            tx,
            instance["namespace_id"],
            fact["actor"],
            "signal.route",
            data,
            instance_id=instance["id"],
            signal_id=fact["id"],
            credential_id=fact["credential_id"],
            request_digest=fact["parked_digest"],  # the acceptance proof follows the fact (S1.12)
        )
        taken += 1
    signals.notify_settled(tx, instance, refused)  # they left PARKED (N1); they stay in no instance
    return taken


# ---- expiry of unrouted facts (B5: a scanner source) ------------------------------------------------

# A PARKED fact is due at its `parked_until` (`available_at` starts there: `signals.store`, and a
# backoff only moves it later), through the index of the expiry of PENDING signals (S2.7).
DUE_PARKED = """
SELECT id, available_at AS due_at FROM signals FORCE INDEX (ix_signals_next_look)
WHERE status = 'PARKED' AND available_at <= %s
ORDER BY available_at, id
LIMIT %s
"""
COUNT_DUE_PARKED = "SELECT COUNT(*) AS n FROM signals WHERE status = 'PARKED' AND available_at <= %s"
# With the namespace's mask of subscribed event types (N2), read, not locked.
LOCK_PARKED_FACT = (
    "SELECT s.expires_at, s.namespace_id, "
    + notifications.enabled_mask("s.namespace_id")
    + " AS notify_mask FROM signals s WHERE s.id = %s AND s.status = 'PARKED' FOR UPDATE SKIP LOCKED"
)
EXPIRE_PARKED = """
UPDATE signals SET status = 'EXPIRED', disposition = 'EXPIRED_UNROUTED', settled_at = %s
WHERE id = %s AND status = 'PARKED'
"""
PARKED_FAILURES = backoff.Source(
    lock="SELECT attempts, available_at FROM signals WHERE id = %s AND status = 'PARKED' FOR UPDATE",
    record="UPDATE signals SET attempts = attempts + 1, last_error = %s, available_at = %s WHERE id = %s",
)


def listing_parked_expiries(now, limit: int) -> tuple[str, tuple]:
    """The read of the parked facts whose `parked_until` is due at `now`, oldest first."""
    return DUE_PARKED, (now, limit)


def count_parked_expiry_due(tx: Tx) -> int:
    return tx.one(COUNT_DUE_PARKED, (tx.now(),))["n"]


@unit_of_work
def expire_parked(tx: Tx, signal_id: int) -> str | None:
    """A PARKED fact whose `parked_until` has passed ends EXPIRED/EXPIRED_UNROUTED (B5).

    Only the fact's row is locked (SKIP LOCKED: a take or another scanner holding it decides
    first, and the next batch finds it no longer PARKED). A take reads the facts of its key with a
    locking read, which waits for this row: after our COMMIT it finds the fact EXPIRED and leaves
    it. No route bucket is needed: neither side inserts what the other must see, both move one
    existing row out of PARKED under its row lock (on Galera both write that row, and
    certification refuses one). No instance holds the fact: no history event is written."""
    fact = tx.one(LOCK_PARKED_FACT, (signal_id,))
    now = tx.now()
    if fact is None or fact["expires_at"] > now:
        return None
    tx.transition(EXPIRE_PARKED, (now, signal_id), f"expire parked fact {signal_id}")
    signals.notify_settled(tx, fact, [signal_id])
    return "FACT_EXPIRED_UNROUTED"
