"""Instance history: append under the instance lock, page oldest first."""

from __future__ import annotations

from weave import jsontext
from weave.db import Tx, read_only

# One statement: the next seq is read from the unique index (instance_id, seq) while inserting.
# The caller holds the instance lock, so no other transaction appends to this history meanwhile;
# under READ COMMITTED the SELECT part is a plain consistent read that also sees our own rows.
APPEND_EVENT = """
INSERT INTO events (instance_id, seq, type, at, data)
SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, %s FROM events WHERE instance_id = %s
"""


def append(tx: Tx, instance_id: int, event_type: str, data: dict) -> None:
    """Append one event to the history of the locked instance: seq has no gaps and no twins."""
    tx.execute(APPEND_EVENT, (instance_id, event_type, tx.now(), jsontext.compact(data), instance_id))


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
