"""Console sessions found by their credential (issue 26, item 10): signing in ends the credential's
sessions beyond its newest few (`sql.sessions.SESSIONS_PER_CREDENTIAL`), found through
`ix_console_sessions_credential (credential_id, id)`, newest first, rather than by reading the table.

In place, re-runnable (`weave.migration_steps`); the rollback drops the index.
"""

from weave.migration_steps import change_indexes

__depends__ = {"0013.definition_queues"}

ADDED = {
    "console_sessions": [
        (
            "ix_console_sessions_credential",
            "KEY ix_console_sessions_credential (credential_id, id) COMMENT 'the sessions of one credential, oldest first'",
        )
    ],
}

steps = [change_indexes(ADDED, {})]
