"""Data lifecycle (docs/rules.md#lifecycle, L1 and L3): a retention per namespace, the index that
finds ended instances past it, and the count an unfinished purge has removed so far.

- `namespaces.retention_days`: ended instances (SUCCEEDED, FAILED, CANCELLED) are purged this many
  days after they ended, with every row that belongs to them, and facts of no instance (expired or
  refused, §14) this many days after they settled; NULL keeps them forever (the default).
  `namespaces.audit_retention_days`: audit records go after max(this, retention_days) days; NULL
  keeps them forever. `namespaces.audit_swept_id`: how far (by audit id, which grows with time)
  the namespace's audit sweep has read.
- `ix_instances_ended (namespace_id, status, updated_at)`: `updated_at` is the time of the last
  change of status, gate or deadline, and an ended instance changes none of them again, so on an
  ended instance it is the time it ended. The purge's candidates are the head of one range per
  namespace and ended status, read in order, however many instances the table holds. Building it
  reads the table once (an online, in-place index build: no table copy, writers go on); no column
  is backfilled, so the cost is one index build, not an UPDATE of every row.
- `instances.purge_counts`: the rows removed so far, by table, by the chunks of a purge that has
  not finished (compact JSON); the last chunk writes their sum into the `workflow.purged` audit
  record and deletes the instance row with it (L3: the count survives a crash between chunks).
  An instant ADD COLUMN.

Re-runnable: columns and the index are added only when missing.
"""

from weave.migration_steps import add_columns, add_indexes

__depends__ = {"0021.notifications"}

NAMESPACE_COLUMNS = [
    (
        "retention_days",
        "INT UNSIGNED NULL COMMENT 'days an ended instance (or a settled fact of no instance) is kept before "
        "it is purged (L1); 0 purges at the next pass; NULL keeps them forever'",
    ),
    (
        "audit_retention_days",
        "INT UNSIGNED NULL COMMENT 'days audit records are kept, never fewer than retention_days (L1, L3); "
        "NULL keeps them forever'",
    ),
    (
        "audit_swept_id",
        "BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'audit_records.id up to which the audit sweep has read "
        "the records (ids grow with time)'",
    ),
]
INSTANCE_COLUMNS = [
    (
        "purge_counts",
        "TEXT NULL COMMENT 'rows removed so far by a purge not yet finished, by table, compact JSON (L3); "
        "NULL when no purge has begun'",
    ),
]
INSTANCE_INDEXES = [
    (
        "ix_instances_ended",
        "KEY ix_instances_ended (namespace_id, status, updated_at) "
        "COMMENT 'the ended instances of a namespace, oldest end first (L1 purge)'",
    ),
]

steps = [
    add_columns("namespaces", NAMESPACE_COLUMNS),
    add_columns("instances", INSTANCE_COLUMNS),
    add_indexes("instances", INSTANCE_INDEXES),
]
