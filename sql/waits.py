"""Waits: what a SIGNAL step (or a POLL step's final signal) waits for, frozen at activation (S2.2).

A wait belongs to one activation and has at most one winner. Insert, read, lock and the guarded
transitions WAITING -> SATISFIED / EXPIRED / CANCELLED; deciding among signals is the engine's
(`engine.consume_wait`). Lock order: instance -> activation -> wait -> signals.
"""

from __future__ import annotations

from datetime import datetime

from weave.tx import Tx

INSERT_WAIT = """
INSERT INTO waits (instance_id, step_key, kind, name, payload_version, correlation, activation_id, activation_sequence,
                   status, deadline_at, created_at, route_hash)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'WAITING', %s, %s, %s)
"""
LOCK_WAIT = """
SELECT id, instance_id, step_key, kind, name, payload_version, correlation, activation_id, activation_sequence,
       status, deadline_at, winner_signal_id
FROM waits WHERE id = %s FOR UPDATE
"""
LOCK_WAIT_OF_ACTIVATION = """
SELECT id, instance_id, step_key, kind, name, payload_version, correlation, activation_id, activation_sequence,
       status, deadline_at, winner_signal_id
FROM waits WHERE activation_id = %s FOR UPDATE
"""
SELECT_OPEN_FOR_GENERATION = """
SELECT w.id, w.deadline_at FROM waits w JOIN step_activations a ON a.id = w.activation_id
WHERE w.instance_id = %s AND w.step_key = %s AND w.activation_sequence = %s AND w.status = 'WAITING'
  AND a.status = 'ACTIVE'
"""
LOCK_WAITING_OF_INSTANCE = "SELECT id FROM waits WHERE instance_id = %s AND status = 'WAITING' ORDER BY id FOR UPDATE"
SATISFY_WAIT = """
UPDATE waits SET status = 'SATISFIED', winner_signal_id = %s, settled_at = %s
WHERE id = %s AND status = 'WAITING' AND winner_signal_id IS NULL
"""
SETTLE_WAIT = "UPDATE waits SET status = %s, settled_at = %s WHERE id = %s AND status = 'WAITING'"
# A retried step's old wait, whatever became of it; its winner, if any, stays recorded (R2).
SUPERSEDE_WAIT = """
UPDATE waits SET status = 'SUPERSEDED', settled_at = COALESCE(settled_at, %s) WHERE id = %s AND status <> 'SUPERSEDED'
"""


def insert(
    tx: Tx,
    instance_id: int,
    activation: dict,
    step: dict,
    contract: dict,
    correlation: bytes,
    deadline_at: datetime,
    route_hash: int,
) -> int:
    """Freeze the contract, correlation, activation sequence and deadline of a new WAITING wait;
    `route_hash` finds it for a fact sent by its business key (`sql.routing`)."""
    return tx.insert(
        INSERT_WAIT,
        (
            instance_id,
            step["key"],
            step["type"],
            contract["name"],
            contract["payload_version"],
            correlation,
            activation["id"],
            activation["activation_sequence"],
            deadline_at,
            tx.now(),
            route_hash,
        ),
    )


SELECT_WAIT = "SELECT id, step_key, activation_sequence, status, deadline_at FROM waits WHERE id = %s"


def read(tx: Tx, wait_id: int) -> dict | None:
    """A wait's state, not locked (for a unit that holds its instance's lock)."""
    return tx.one(SELECT_WAIT, (wait_id,))


def locking(wait_id: int) -> tuple[str, tuple]:
    """`lock`'s read, for `Tx.all_together`."""
    return LOCK_WAIT, (wait_id,)


def lock_of_activation(tx: Tx, activation_id: int) -> dict | None:
    return tx.one(LOCK_WAIT_OF_ACTIVATION, (activation_id,))


def open_for(tx: Tx, instance_id: int, step_key: str, sequence: int) -> dict | None:
    """The wait of one step generation that can still take a signal (WAITING, its step ACTIVE),
    if any (not locked)."""
    return tx.one(SELECT_OPEN_FOR_GENERATION, (instance_id, step_key, sequence))


def lock_waiting(tx: Tx, instance_id: int) -> list[int]:
    """Ids of the instance's WAITING waits, locked in id order."""
    return [row["id"] for row in tx.all(LOCK_WAITING_OF_INSTANCE, (instance_id,))]


def satisfy(tx: Tx, wait_id: int, winner_signal_id: int | None) -> None:
    """WAITING -> SATISFIED with its one winner (S2.5); a POLL wait won by its query has none (C2.1)."""
    tx.transition(SATISFY_WAIT, (winner_signal_id, tx.now(), wait_id), f"satisfy wait {wait_id}")


def settle(tx: Tx, wait_id: int, status: str) -> None:
    """WAITING -> EXPIRED or CANCELLED."""
    tx.transition(SETTLE_WAIT, (status, tx.now(), wait_id), f"settle wait {wait_id} as {status}")


def supersede(tx: Tx, wait_id: int) -> None:
    tx.transition(SUPERSEDE_WAIT, (tx.now(), wait_id), f"supersede wait {wait_id}")
