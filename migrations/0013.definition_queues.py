"""`definitions.queues`: the queues a definition's steps run on, as stored text (issue 26, item 6).

The workflow list decides which versions a credential may read from their queues (every queue of
the pinned definition must be granted). It parsed each version's document for that: with 1,000
versions, 1,000 documents read and parsed for every page. A published document never changes, so
its queues are written beside it once, at publish: sorted names separated by one space (queue
names are `[A-Za-z0-9_.-]`), empty for a definition without TASK or POLL steps.

The column is added NULL, filled from the documents of the rows that have none (re-runnable: a fill
touches only NULL rows), then made NOT NULL. Processes of an earlier version publish without it:
stop them for `weave migrate`, as for every migration.
"""

import json

from yoyo import step

from weave.migration_steps import add_columns, modify_columns

__depends__ = {"0012.facts_times"}

COMMENT = "COMMENT 'queues the steps run on, sorted, separated by a space (issue 26): written at publish'"
DEFINITION_COLUMNS = [("queues", f"TEXT CHARACTER SET ascii COLLATE ascii_bin NULL {COMMENT}")]
FILLED = [("queues", f"TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL {COMMENT}")]
UNFILLED = "SELECT id, document FROM definitions WHERE queues IS NULL AND id > %s ORDER BY id LIMIT 200"
FILL = "UPDATE definitions SET queues = %s WHERE id = %s AND queues IS NULL"


def queues_of(document_text: str) -> str:
    """The rule of `weave.rules.definitions.queues_used` as it stood at this migration (numbers are
    not converted: a document may hold more digits than Python's int() reads)."""
    document = json.loads(document_text, parse_int=str, parse_float=str, parse_constant=str)
    return " ".join(sorted({item["queue"] for item in document["steps"] if "queue" in item}))


def fill(conn) -> None:
    last = 0
    with conn.cursor() as cur:
        while True:
            cur.execute(UNFILLED, (last,))
            rows = cur.fetchall()
            if not rows:
                return
            cur.executemany(FILL, [(queues_of(document), definition_id) for definition_id, document in rows])
            last = rows[-1][0]


steps = [
    add_columns("definitions", DEFINITION_COLUMNS),
    step(fill),
    modify_columns("definitions", FILLED, DEFINITION_COLUMNS),
]
