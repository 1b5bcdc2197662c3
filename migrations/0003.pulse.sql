-- Pulse: tasks and the inbox of their final outcomes.
-- depends: 0002.workflows

CREATE TABLE IF NOT EXISTS tasks (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as task_id',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the task',
  queue_id BIGINT UNSIGNED NOT NULL COMMENT 'queues.id the task runs on',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id the task works for',
  activation_id BIGINT UNSIGNED NOT NULL COMMENT 'step_activations.id the task works for',
  kind VARCHAR(8) NOT NULL COMMENT 'TASK (a TASK step) or QUERY (one POLL round)',
  status VARCHAR(16) NOT NULL COMMENT 'QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or UNKNOWN',
  attempt INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'attempts started so far',
  max_attempts INT UNSIGNED NOT NULL COMMENT 'attempt budget',
  available_at DATETIME(6) NOT NULL COMMENT 'UTC time from which a QUEUED task may be claimed (backoff)',
  lease_token CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'token of the current lease; NULL unless RUNNING',
  lease_expires_at DATETIME(6) NULL COMMENT 'UTC end of the current lease',
  worker_id VARCHAR(128) NULL COMMENT 'worker holding the current lease',
  cancel_requested TINYINT(1) NOT NULL DEFAULT 0 COMMENT '1 once cancellation was requested (P5)',
  deadline_at DATETIME(6) NOT NULL COMMENT 'UTC deadline of the work',
  result MEDIUMTEXT NULL COMMENT 'result of a SUCCEEDED task, compact JSON',
  error MEDIUMTEXT NULL COMMENT 'last reported error, compact JSON',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  completed_at DATETIME(6) NULL COMMENT 'UTC time of the final outcome',
  PRIMARY KEY (id),
  KEY ix_tasks_claim (queue_id, status, available_at, id),
  KEY ix_tasks_lease (status, lease_expires_at),
  KEY ix_tasks_activation (activation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='units of Pulse work with lease, attempts and permit';

CREATE TABLE IF NOT EXISTS inbox_events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  task_id BIGINT UNSIGNED NOT NULL COMMENT 'tasks.id whose final outcome this is; one per task',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id to deliver to',
  outcome VARCHAR(16) NOT NULL COMMENT 'SUCCEEDED, FAILED, CANCELLED or UNKNOWN',
  result MEDIUMTEXT NULL COMMENT 'task result or error, compact JSON',
  completed_at DATETIME(6) NOT NULL COMMENT 'UTC database time of the completion',
  status VARCHAR(16) NOT NULL COMMENT 'PENDING until the workflow side consumed it, then CONSUMED',
  available_at DATETIME(6) NOT NULL COMMENT 'UTC time of the next try to consume it',
  attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'failed consumption tries',
  last_error VARCHAR(1024) NULL COMMENT 'error of the last failed try',
  consumed_at DATETIME(6) NULL COMMENT 'UTC time of consumption',
  PRIMARY KEY (id),
  UNIQUE KEY uq_inbox_task (task_id),
  KEY ix_inbox_available (status, available_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='final task outcomes reported by Pulse, consumed by the workflow side (P6)';
