"""Instance history: append under the instance lock, page oldest first."""

from __future__ import annotations

from weave import jsontext
from weave.tx import Tx

# One statement: the next seq is read from the unique index (instance_id, seq) while inserting.
# The caller holds the instance lock, so no other transaction appends to this history meanwhile;
# under READ COMMITTED the SELECT part is a plain consistent read that also sees our own rows.
APPEND_EVENT = """
INSERT INTO events (instance_id, seq, type, at, data)
SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, %s FROM events WHERE instance_id = %s
"""


def append(tx: Tx, instance_id: int, event_type: str, data: dict) -> None:
    """Append one event to the history of the locked instance: seq has no gaps and no twins.
    Queued: it is sent with the unit's next statement or its COMMIT."""
    tx.later(APPEND_EVENT, (instance_id, event_type, tx.now(), jsontext.compact(data), instance_id))


SELECT_EVENTS_PAGE = """
SELECT seq, type, at, data FROM events WHERE instance_id = %s AND seq > %s ORDER BY seq LIMIT %s
"""


def page(tx: Tx, instance_id: int, after: int, limit: int) -> list[dict]:
    """Up to `limit` events with seq > `after`, oldest first."""
    return tx.all(SELECT_EVENTS_PAGE, (instance_id, after, limit))
