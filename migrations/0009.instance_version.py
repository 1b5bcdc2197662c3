"""`instances.version`: bumped by every unit that takes an instance's lock (Galera, issue 18).

On one server the instance's row lock (`SELECT … FOR UPDATE`) serialises every decision about an
instance. A Galera cluster does not replicate row locks: two nodes can each hold "the" lock and
decide at once; only rows both transactions *write* conflict at certification, where one of them
is refused (and its unit re-run whole). Writing the instance row under the lock makes every two
decisions about one instance write a common row, wherever they run.

An instant ADD COLUMN (MariaDB 10.3+, MySQL 8.0+): no table copy, re-runnable (`add_columns`).
"""

from weave.migration_steps import add_columns

__depends__ = {"0008.console_sessions"}

INSTANCE_COLUMNS = [
    (
        "version",
        "BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bumped by every unit that locks the instance, so that "
        "concurrent decisions on two Galera nodes conflict at certification'",
    ),
]

steps = [add_columns("instances", INSTANCE_COLUMNS)]
