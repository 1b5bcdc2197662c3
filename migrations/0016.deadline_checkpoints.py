"""A ROOT checkpoint at the total deadline of every instance that has not ended (SPEC I6, issue 28
item 7): the look due then closes the gate of a running instance and records DEADLINE_PASSED, so
that the gate shown is the gate in force. Instances started from now on get theirs at start.

Paused instances and instances in review get one as well: a resume or a review may set them
running again before their deadline, and nothing else would look at them at it. A deadline
already past gives a checkpoint due at once. Re-runnable: an instance that has a ROOT checkpoint
at its deadline gets none (checkpoints are few before this version: the NOT EXISTS reads them
without an index on instance_id, once per live instance).
"""

from weave.migration_steps import data

__depends__ = {"0015.status_checks"}

ROOT_AT_DEADLINES = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
SELECT i.id, 'ROOT', NULL, i.deadline_at, i.deadline_at, 0, UTC_TIMESTAMP(6)
FROM instances i
WHERE i.status IN ('RUNNING', 'PAUSED', 'NEEDS_REVIEW')
  AND NOT EXISTS (
    SELECT 1 FROM checkpoints c WHERE c.instance_id = i.id AND c.kind = 'ROOT' AND c.due_at = i.deadline_at
  )
"""

steps = [data(ROOT_AT_DEADLINES)]
