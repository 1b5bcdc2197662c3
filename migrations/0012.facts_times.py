"""Two facts' times the correctness review asked for (issue 25):

- `tasks.cancel_requested_at`: when a running task was first asked to stop. A lease that ends
  before that time ends in a task the expiry re-queues and the cancellation then finds queued
  (CANCELLED); one that ends after it, in a task asked to stop while it ran (UNKNOWN). Before, the
  outcome depended on which of the two units looked first. Requests stored before this column keep
  NULL and count as made while the lease held (the outcome they were given then).
- Expiry candidates by their next look: a PENDING signal's `available_at` is the first time the
  expiry scanner looks at it, its `expires_at`, and moves later only (a deferral, a backoff). The
  candidates are found, and sorted, through `ix_signals_next_look (status, available_at)`, which
  replaces `ix_signals_expiry (status, expires_at)`: sorted by `expires_at`, deferred signals
  (long past their expiry) came first in every batch, ahead of fresh work. The PENDING signals
  stored before get their `available_at` raised to their `expires_at` (re-runnable: it touches
  only rows below it).
- A wait left `WAITING` under a step in review now expires at its deadline (S2.6); one whose
  deadline look was already spent (it found the step in review and did nothing) gets a WAIT
  checkpoint at its deadline again (re-runnable: only waits that have none).
"""

from weave.migration_steps import add_columns, change_indexes, data

__depends__ = {"0011.leaner_indexes"}

TASK_COLUMNS = [
    (
        "cancel_requested_at",
        "DATETIME(6) NULL COMMENT 'UTC time the task was first asked to stop (P5): when the cancellation happened; "
        "NULL when never asked, or asked before this column existed'",
    ),
]
FIRST_LOOK_AT_EXPIRY = """
UPDATE signals SET available_at = expires_at WHERE status = 'PENDING' AND available_at < expires_at
"""
LOOK_AT_WAITS_UNDER_REVIEW = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
SELECT w.instance_id, 'WAIT', w.id, w.deadline_at, w.deadline_at, 0, UTC_TIMESTAMP(6)
FROM waits w JOIN step_activations a ON a.id = w.activation_id
WHERE w.status = 'WAITING' AND a.status = 'NEEDS_REVIEW' AND w.deadline_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.wait_id = w.id)
"""
ADDED = {
    "signals": [
        (
            "ix_signals_next_look",
            "KEY ix_signals_next_look (status, available_at) "
            "COMMENT 'expiry candidates by their next look (S2.7): available_at starts at expires_at'",
        )
    ],
}
DROPPED = {"signals": [("ix_signals_expiry", "KEY ix_signals_expiry (status, expires_at)")]}

steps = [
    add_columns("tasks", TASK_COLUMNS),
    data(FIRST_LOOK_AT_EXPIRY),
    data(LOOK_AT_WAITS_UNDER_REVIEW),
    change_indexes(ADDED, DROPPED),
]
