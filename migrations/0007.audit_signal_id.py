"""The acceptance record of a signal, found by key (S1.12): `audit_records.signal_id`, indexed.

The consumer re-checks a signal against the digest its `signal.send` audit record holds. That
record used to be found by searching the instance's records' details text for the signal id; it is
now found through this column. Records written before it get it from their details.

Re-runnable after a crash between steps (`weave.migration_steps`): the column and the index are
added only when missing, and the fill touches only `signal.send` records that have no signal_id
yet. The index is built after the fill, once, instead of being kept up to date by it.
"""

from weave.migration_steps import add_columns, add_indexes, data

__depends__ = {"0006.workflow_listing"}

AUDIT_COLUMNS = [
    (
        "signal_id",
        "BIGINT UNSIGNED NULL COMMENT 'signals.id the action concerns: the signal a signal.send record accepted; "
        "NULL for other actions'",
    ),
]
AUDIT_INDEXES = [
    (
        "ix_audit_signal",
        "KEY ix_audit_signal (signal_id, instance_id) COMMENT 'the acceptance record of a signal (S1.12)'",
    ),
]
# details is the compact JSON object the acceptance wrote, with "signal_id" as a decimal string.
FILL_SIGNAL_IDS = """
UPDATE audit_records
SET signal_id = CAST(JSON_UNQUOTE(JSON_EXTRACT(details, '$.signal_id')) AS UNSIGNED)
WHERE action = 'signal.send' AND signal_id IS NULL AND JSON_EXTRACT(details, '$.signal_id') IS NOT NULL
"""

steps = [
    add_columns("audit_records", AUDIT_COLUMNS),
    data(FILL_SIGNAL_IDS),
    add_indexes("audit_records", AUDIT_INDEXES),
]
