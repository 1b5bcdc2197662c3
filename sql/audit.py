"""Audit records: append only, written by the unit of work that changes the state; and the one
read of them that a decision needs (the digest an acceptance recorded, S1.12)."""

from __future__ import annotations

from weave import jsontext
from weave.tx import Tx

# The statement without its rows: `INSERT_AUDIT` adds one, `record_of_instances` several.
INSERT_AUDIT_INTO = """
INSERT INTO audit_records
  (namespace_id, instance_id, signal_id, credential_id, actor, action, request_digest, at, details)
VALUES """
INSERT_AUDIT = INSERT_AUDIT_INTO + "(%s, %s, %s, %s, %s, %s, %s, %s, %s)\n"


def record(
    tx: Tx,
    namespace_id: int,
    actor: str,
    action: str,
    details: dict,
    *,
    instance_id: int | None = None,
    signal_id: int | None = None,
    credential_id: int | None = None,
    request_digest: str | None = None,
) -> None:
    """Queued: the record is sent with the unit's next statement or its COMMIT."""
    tx.later(
        INSERT_AUDIT,
        (
            namespace_id,
            instance_id,
            signal_id,
            credential_id,
            actor,
            action,
            request_digest,
            tx.now(),
            jsontext.compact(details),
        ),
    )


AUDIT_VALUES = "(%s, %s, %s, NULL, %s, %s, NULL, %s, %s)"  # no credential, no request digest


def record_of_instances(tx: Tx, actor: str, action: str, records: list[tuple[int, int, dict]]) -> None:
    """Queued like `record`: one record per (namespace_id, instance_id, details) of `records`, in
    one INSERT (a purge's `workflow.purged` records, one per instance it removed)."""
    if not records:
        return
    now = tx.now()
    params = tuple(
        value
        for namespace_id, instance_id, details in records
        for value in (namespace_id, instance_id, None, actor, action, now, jsontext.compact(details))
    )
    tx.later(INSERT_AUDIT_INTO + ", ".join([AUDIT_VALUES] * len(records)), params)


# By the signal's key (index ix_audit_signal); the instance and the action are checked as well, so
# that only the signal's own acceptance record, written by the same unit as the signal, counts. The
# index is named: as a dependent subquery the planner may prefer ix_audit_instance for its id order,
# which reads every record of the instance; ix_audit_signal's entries are in id order too. A fact
# parked by its business key (docs/rules.md#routing) was accepted by no instance: the record of the take that
# routed it there (`signal.route`) carries the digest of its acceptance record (`signal.park`).
SELECT_ACCEPTANCE_DIGEST = """SELECT request_digest FROM audit_records FORCE INDEX (ix_audit_signal)
WHERE signal_id = %s AND instance_id = %s AND action IN ('signal.send', 'signal.route')
ORDER BY id LIMIT 1"""
# The same, as a column of a read of signal rows `s` (a subquery in the select list: read, not locked).
ACCEPTANCE_DIGEST_OF_SIGNAL_ROW = """(SELECT request_digest FROM audit_records FORCE INDEX (ix_audit_signal)
WHERE signal_id = s.id AND instance_id = s.instance_id AND action IN ('signal.send', 'signal.route')
ORDER BY id LIMIT 1)"""


def acceptance_digest(tx: Tx, instance_id: int, signal_id: int) -> str | None:
    """The request digest recorded when `signal_id` was accepted, or None when no record says so."""
    row = tx.one(SELECT_ACCEPTANCE_DIGEST, (signal_id, instance_id))
    return None if row is None else row["request_digest"]
