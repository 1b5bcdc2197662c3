"""Indexes that serve the workflow list (GET {N}/workflows), newest first: every page is a range
of one index read backwards from the cursor, whichever filters are given.

- no filter: the namespace's instances by id;
- `status`: the namespace's instances of that status by id;
- `definition` (a name): one range per version of it (the versions are merged), by id, with or
  without a status.

Written in Python so that each index is added only when missing (`weave.migration_steps`): a
crash between steps leaves the migration safe to run again.
"""

from weave.migration_steps import add_indexes

__depends__ = {"0005.signal_identity"}

INSTANCE_INDEXES = [
    (
        "ix_instances_namespace_recent",
        "KEY ix_instances_namespace_recent (namespace_id, id) COMMENT 'workflow list, newest first'",
    ),
    (
        "ix_instances_namespace_status",
        "KEY ix_instances_namespace_status (namespace_id, status, id) COMMENT 'workflow list by status, newest first'",
    ),
    (
        "ix_instances_definition_recent",
        "KEY ix_instances_definition_recent (definition_id, id) COMMENT 'workflow list of one definition version'",
    ),
    (
        "ix_instances_definition_status",
        "KEY ix_instances_definition_status (definition_id, status, id) "
        "COMMENT 'workflow list of one definition version by status'",
    ),
]

steps = [add_indexes("instances", INSTANCE_INDEXES)]
