"""Named CHECK constraints for the statuses of docs/rules.md#statuses (issue 27): the database refuses a status
or a disposition that Weave does not know, as the code's enums (`weave.statuses`) spell them. Both
MariaDB (10.2+) and MySQL (8.0.16+) enforce CHECK constraints; adding one reads every row of its
table once (stop writers for `weave migrate`, as for every migration). Re-runnable: a constraint
is added only when missing. The lists are written out here, as they are at this version; a later
status needs a later migration (tests/integration/test_statuses.py compares them with the enums).
"""

from weave.migration_steps import add_checks

__depends__ = {"0014.console_session_limits"}


def _one_of(column: str, *values: str) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


CHECKS = {
    "instances": [
        (
            "ck_instances_status",
            _one_of("status", "RUNNING", "PAUSED", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED"),
        ),
        ("ck_instances_gate", _one_of("gate", "OPEN", "CLOSED")),
    ],
    "step_activations": [
        (
            "ck_step_activations_status",
            _one_of("status", "ACTIVE", "SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED", "SUPERSEDED"),
        ),
    ],
    "waits": [("ck_waits_status", _one_of("status", "WAITING", "SATISFIED", "EXPIRED", "CANCELLED", "SUPERSEDED"))],
    "signals": [
        ("ck_signals_status", _one_of("status", "PENDING", "CONSUMED", "REJECTED", "EXPIRED")),
        (
            "ck_signals_disposition",
            _one_of(
                "disposition",
                "CORRELATION_MISMATCH",
                "STALE_ACTIVATION",
                "STEP_SETTLED",
                "INSTANCE_SETTLED",
                "LATE",
                "WAIT_SETTLED",
                "QUERY_SETTLED",
                "EXPIRED_UNMATCHED",
                "LEGACY_UNVERIFIED",
            ),
        ),
    ],
    "tasks": [
        ("ck_tasks_status", _one_of("status", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "UNKNOWN")),
    ],
    "inbox_events": [
        ("ck_inbox_events_status", _one_of("status", "PENDING", "CONSUMED")),
        ("ck_inbox_events_outcome", _one_of("outcome", "SUCCEEDED", "FAILED", "CANCELLED", "UNKNOWN")),
    ],
}

steps = [add_checks(table, checks) for table, checks in CHECKS.items()]
