"""Fewer and narrower secondary indexes on the two tables every signal writes (issue 17).

Every secondary index costs each INSERT an index insert, and each change of an indexed column (a
signal's `status`: consumed, rejected, expired) a delete and an insert. Kept are the indexes that
Weave's own queries use; the others go:

- `ix_signals_checks (status, available_at)`: no query uses it (expiry candidates are found through
  `ix_signals_expiry (status, expires_at)`).
- `ix_signals_instance_status (instance_id, status)`: one instance holds at most 1,024 signals
  (S1.6), so reading them by `uq_signals_idempotency (instance_id, …)` and filtering the status
  is bounded; the signal list names that index.
- `ix_signals_matching (instance_id, target_step_key, target_activation_sequence, status)` becomes
  `ix_signals_generation` without `status`: a generation's PENDING signals are found through it all
  the same, and settling a signal no longer rewrites it.
- `ix_audit_namespace_at (namespace_id, at)`: nothing reads audit records by namespace and time
  (ids grow with time: a time range is an id range of the primary key).

Index changes are in place (no table copy) and re-runnable (`weave.migration_steps`): each index is
added or dropped only when it is missing or present; the rollback puts the old ones back.
"""

from weave.migration_steps import change_indexes

__depends__ = {"0010.instance_signal_count"}

DROPPED = {
    "signals": [
        ("ix_signals_checks", "KEY ix_signals_checks (status, available_at)"),
        ("ix_signals_instance_status", "KEY ix_signals_instance_status (instance_id, status)"),
        (
            "ix_signals_matching",
            "KEY ix_signals_matching (instance_id, target_step_key, target_activation_sequence, status)",
        ),
    ],
    "audit_records": [("ix_audit_namespace_at", "KEY ix_audit_namespace_at (namespace_id, at)")],
}
ADDED = {
    "signals": [
        (
            "ix_signals_generation",
            "KEY ix_signals_generation (instance_id, target_step_key, target_activation_sequence) "
            "COMMENT 'the signals aimed at one step generation (S2.2)'",
        )
    ],
}


steps = [change_indexes(ADDED, DROPPED)]
