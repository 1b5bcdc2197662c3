"""Instance history: append under the instance lock, page oldest first."""

from __future__ import annotations

from weave import jsontext
from weave.db import Tx, read_only

# LAST_INSERT_ID(expr) hands the new value back in the OK packet: no second round trip.
NEXT_EVENT_SEQ = """
UPDATE instances SET last_event_seq = LAST_INSERT_ID(last_event_seq + 1) WHERE id = %s
"""
INSERT_EVENT = """
INSERT INTO events (instance_id, seq, type, at, data) VALUES (%s, %s, %s, %s, %s)
"""


def append(tx: Tx, instance_id: int, event_type: str, data: dict) -> int:
    """Append one event; the caller holds the instance lock, so seq has no gaps or twins."""
    seq = tx.insert(NEXT_EVENT_SEQ, (instance_id,))
    tx.execute(INSERT_EVENT, (instance_id, seq, event_type, tx.now(), jsontext.compact(data)))
    return seq


SELECT_EVENTS_PAGE = """
SELECT e.seq, e.type, e.at, e.data
FROM instances i JOIN events e ON e.instance_id = i.id
WHERE i.namespace_id = %s AND i.workflow_id = %s AND e.seq > %s
ORDER BY e.seq
LIMIT %s
"""
SELECT_INSTANCE_ID = "SELECT id FROM instances WHERE namespace_id = %s AND workflow_id = %s"


@read_only
def list_events(tx: Tx, namespace_id: int, workflow_id: str, after: int, limit: int) -> list[dict] | None:
    """Up to `limit` events with seq > `after`; None when the workflow does not exist."""
    if tx.one(SELECT_INSTANCE_ID, (namespace_id, workflow_id)) is None:
        return None
    return tx.all(SELECT_EVENTS_PAGE, (namespace_id, workflow_id, after, limit))
