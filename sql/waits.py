"""Waits: what a SIGNAL step (or a POLL step's final signal) waits for, frozen at activation (S2.2).

A wait belongs to one activation; it has at most one winner. Lock order: instance -> activation
-> wait -> signals.
"""

from __future__ import annotations

from datetime import datetime

from weave.sql import audit, checkpoints, events, steps
from weave import jsontext
from weave.db import Tx
from weave.rules import signals as signal_rules
from weave.rules import waits as rules

INSERT_WAIT = """
INSERT INTO waits (instance_id, step_key, kind, name, payload_version, correlation, activation_id, activation_sequence,
                   status, deadline_at, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'WAITING', %s, %s)
"""


def create(tx: Tx, instance_id: int, activation: dict, step: dict, contract: dict, correlation: bytes,
           deadline_at: datetime) -> int:
    """Freeze the contract, correlation, sequence and deadline; a WAIT checkpoint due now scans the
    early signals (S2.1), and one at the deadline expires the wait if nothing came (S2.6)."""
    now = tx.now()
    wait_id = tx.insert(INSERT_WAIT, (instance_id, step["key"], step["type"], contract["name"],
                                      contract["payload_version"], correlation, activation["id"],
                                      activation["activation_sequence"], deadline_at, now))
    checkpoints.schedule_wait(tx, instance_id, wait_id, now)
    checkpoints.schedule_wait(tx, instance_id, wait_id, deadline_at)
    return wait_id


SELECT_WAIT_ACTIVATION = "SELECT activation_id, status FROM waits WHERE id = %s"
LOCK_WAIT = """
SELECT id, instance_id, step_key, kind, name, payload_version, correlation, activation_id, activation_sequence,
       status, deadline_at, winner_signal_id
FROM waits WHERE id = %s FOR UPDATE
"""
LOCK_PENDING_SIGNALS_OF_GENERATION = """
SELECT id, name, payload_version, correlation, payload, payload_present, accepted_at, request_digest, reason,
       evidence_ref, target_step_key, target_activation_sequence
FROM signals
WHERE instance_id = %s AND target_step_key = %s AND target_activation_sequence = %s AND status = 'PENDING'
ORDER BY accepted_at, id
FOR UPDATE
"""
REJECT_SIGNAL = """
UPDATE signals SET status = 'REJECTED', disposition = %s, settled_at = %s WHERE id = %s AND status = 'PENDING'
"""
CONSUME_SIGNAL = """
UPDATE signals SET status = 'CONSUMED', consumed_wait_id = %s, consumed_at = %s, settled_at = %s
WHERE id = %s AND status = 'PENDING'
"""
SATISFY_WAIT = """
UPDATE waits SET status = 'SATISFIED', winner_signal_id = %s, settled_at = %s
WHERE id = %s AND status = 'WAITING' AND winner_signal_id IS NULL
"""
EXPIRE_WAIT = "UPDATE waits SET status = 'EXPIRED', settled_at = %s WHERE id = %s AND status = 'WAITING'"
SELECT_ACCEPTANCE_DIGEST = """
SELECT request_digest FROM audit_records
WHERE instance_id = %s AND action = 'signal.send' AND details LIKE %s
ORDER BY id LIMIT 1
"""


def look(tx: Tx, instance: dict, wait_id: int, actor: str) -> str:
    """A WAIT checkpoint: take the winner, reject what cannot win, or expire at the deadline (S2.2-S2.8).

    The caller holds the instance lock; the activation, the wait and the generation's signals are
    locked here, in that order. Everything below commits together or not at all (S2.8).
    """
    found = tx.one(SELECT_WAIT_ACTIVATION, (wait_id,))
    if found is None or found["status"] != "WAITING":
        return "SETTLED"
    activation = steps.lock_activation(tx, found["activation_id"])
    wait = tx.one(LOCK_WAIT, (wait_id,))
    if wait["status"] != "WAITING":
        return "SETTLED"
    pending = tx.all(LOCK_PENDING_SIGNALS_OF_GENERATION,
                     (instance["id"], wait["step_key"], wait["activation_sequence"]))
    now = tx.now()
    verdict = rules.adjudicate(
        rules.WaitFacts(wait["name"], wait["payload_version"], wait["correlation"], wait["deadline_at"]),
        [rules.PendingSignal(s["id"], s["name"], s["payload_version"], s["correlation"], s["accepted_at"])
         for s in pending], now)
    for signal_id, disposition in verdict.rejected.items():
        tx.execute(REJECT_SIGNAL, (disposition, now, signal_id))
        events.append(tx, instance["id"], "SIGNAL_REJECTED", {"signal_id": str(signal_id), "disposition": disposition})
    if verdict.winner is not None:
        winner = next(s for s in pending if s["id"] == verdict.winner)
        if not _proof_holds(tx, instance, winner):
            steps.settle(tx, instance, activation, "NEEDS_REVIEW", None, "ACCEPTANCE_PROOF_MISMATCH", actor)
            events.append(tx, instance["id"], "SIGNAL_PROOF_MISMATCH", {"signal_id": str(winner["id"])})
            return "PROOF_MISMATCH"
        tx.execute(CONSUME_SIGNAL, (wait_id, now, now, winner["id"]))
        tx.execute(SATISFY_WAIT, (winner["id"], now, wait_id))
        events.append(tx, instance["id"], "SIGNAL_CONSUMED", {"signal_id": str(winner["id"]), "wait_id": str(wait_id)})
        audit.record(tx, instance["namespace_id"], actor, "signal.consume",
                     {"signal_id": str(winner["id"]), "wait_id": str(wait_id), "step": wait["step_key"],
                      "activation_sequence": wait["activation_sequence"]}, instance_id=instance["id"])
        result = winner["payload"] if winner["payload_present"] and winner["payload"] is not None else "null"
        steps.settle(tx, instance, activation, "SUCCEEDED", result, None, actor)
        steps.advance(tx, instance, actor)
        return "CONSUMED"
    if verdict.expire:
        tx.execute(EXPIRE_WAIT, (now, wait_id))
        events.append(tx, instance["id"], "WAIT_EXPIRED", {"wait_id": str(wait_id), "step": wait["step_key"]})
        steps.settle(tx, instance, activation, "NEEDS_REVIEW", None, "WAIT_EXPIRED", actor)
        return "EXPIRED"
    return "WAITING"


def _proof_holds(tx: Tx, instance: dict, signal: dict) -> bool:
    """S1.12: the stored signal still gives the digest recorded in its acceptance audit record."""
    fields = {"name": signal["name"], "payload_version": signal["payload_version"],
              "target_step_key": signal["target_step_key"],
              "target_activation_sequence": signal["target_activation_sequence"],
              "correlation_key": signal["correlation"].decode("utf-8", "surrogateescape"),
              "reason": signal["reason"], "evidence_ref": signal["evidence_ref"]}
    try:
        payload = jsontext.loads(signal["payload"]) if signal["payload_present"] else signal_rules.ABSENT
    except jsontext.JsonRejected:
        return False
    recorded = tx.one(SELECT_ACCEPTANCE_DIGEST, (instance["id"], f'%"signal_id":"{signal["id"]}"%'))
    if recorded is None or recorded["request_digest"] != signal["request_digest"]:
        return False
    return signal_rules.request_digest(fields, payload) == recorded["request_digest"]
