-- Workflows: definitions, instances, step activations, checkpoints, history events, audit.
-- depends: 0001.tenancy

CREATE TABLE IF NOT EXISTS definitions (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the definition',
  name VARCHAR(128) NOT NULL COMMENT 'definition name',
  version INT UNSIGNED NOT NULL COMMENT 'version number, 1, 2, 3... per name (D1)',
  digest CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 hex of the canonical document',
  document MEDIUMTEXT NOT NULL COMMENT 'the published document, compact JSON; never changes',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of publication',
  PRIMARY KEY (id),
  UNIQUE KEY uq_definitions_name_version (namespace_id, name, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='immutable, versioned workflow definitions';

CREATE TABLE IF NOT EXISTS instances (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key; the instance lock is this row',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the instance',
  workflow_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'client-visible id, unique in the namespace',
  definition_id BIGINT UNSIGNED NOT NULL COMMENT 'definitions.id of the pinned version',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'applications.id that started it; DISABLED blocks its new work',
  input MEDIUMTEXT NOT NULL COMMENT 'the start input, compact JSON in original member order',
  request_digest CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 hex of the canonical start request, for idempotent starts (I1)',
  status VARCHAR(16) NOT NULL COMMENT 'RUNNING, PAUSED, NEEDS_REVIEW, SUCCEEDED, FAILED or CANCELLED',
  gate VARCHAR(8) NOT NULL COMMENT 'OPEN or CLOSED: whether new work may start (I3)',
  review_reason VARCHAR(64) NULL COMMENT 'why the instance needs review, e.g. DEADLINE_EXCEEDED',
  deadline_at DATETIME(6) NOT NULL COMMENT 'UTC total deadline',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of start',
  updated_at DATETIME(6) NOT NULL COMMENT 'UTC time of the last change of status or gate',
  PRIMARY KEY (id),
  UNIQUE KEY uq_instances_workflow (namespace_id, workflow_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='workflow instances: one run of one pinned definition version';

CREATE TABLE IF NOT EXISTS step_activations (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id',
  step_key VARCHAR(64) NOT NULL COMMENT 'key of the step in the pinned definition',
  step_index SMALLINT UNSIGNED NOT NULL COMMENT 'position of the step in the definition, from 0',
  activation_sequence INT UNSIGNED NOT NULL COMMENT 'attempt-generation of the step: 1, then +1 per manual recovery',
  status VARCHAR(16) NOT NULL COMMENT 'ACTIVE, SUCCEEDED, FAILED, NEEDS_REVIEW, CANCELLED or SUPERSEDED',
  result MEDIUMTEXT NULL COMMENT 'step result, compact JSON; NULL until it succeeds',
  review_reason VARCHAR(64) NULL COMMENT 'why the step needs review',
  activated_at DATETIME(6) NOT NULL COMMENT 'UTC time of activation',
  deadline_at DATETIME(6) NULL COMMENT 'UTC step deadline: activation + timeout_seconds',
  settled_at DATETIME(6) NULL COMMENT 'UTC time the activation left ACTIVE',
  PRIMARY KEY (id),
  UNIQUE KEY uq_activations_step_sequence (instance_id, step_key, activation_sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='step activations: one attempt-generation of one step';

CREATE TABLE IF NOT EXISTS checkpoints (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id to look at',
  kind VARCHAR(8) NOT NULL COMMENT 'ROOT (advance the instance) or WAIT (look at one wait)',
  wait_id BIGINT UNSIGNED NULL COMMENT 'waits.id for WAIT checkpoints; NULL for ROOT',
  due_at DATETIME(6) NOT NULL COMMENT 'UTC time at which the look is due; never moved by backoff',
  available_at DATETIME(6) NOT NULL COMMENT 'UTC time of the next try: due_at, or later after a failure',
  attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'failed tries so far',
  last_error VARCHAR(1024) NULL COMMENT 'error of the last failed try',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  PRIMARY KEY (id),
  KEY ix_checkpoints_available (available_at, id),
  KEY ix_checkpoints_instance (instance_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='due times at which the scanner must look at an instance or a wait';

CREATE TABLE IF NOT EXISTS events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id whose history this is',
  seq INT UNSIGNED NOT NULL COMMENT 'position in the instance history, from 1, without gaps',
  type VARCHAR(64) NOT NULL COMMENT 'what happened, e.g. WORKFLOW_STARTED',
  at DATETIME(6) NOT NULL COMMENT 'UTC time it happened (database clock)',
  data MEDIUMTEXT NOT NULL COMMENT 'details, compact JSON object',
  PRIMARY KEY (id),
  UNIQUE KEY uq_events_instance_seq (instance_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='instance history, oldest first';

CREATE TABLE IF NOT EXISTS audit_records (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key; append only',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id the action happened in',
  instance_id BIGINT UNSIGNED NULL COMMENT 'instances.id concerned, if any',
  credential_id BIGINT UNSIGNED NULL COMMENT 'credentials.id used; NULL for the system (scanner, admin CLI)',
  actor VARCHAR(128) NOT NULL COMMENT 'who acted: the credential actor, or system:<component>',
  action VARCHAR(64) NOT NULL COMMENT 'what was done, e.g. workflow.start',
  request_digest CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'SHA-256 hex of the canonical request, when there was one',
  at DATETIME(6) NOT NULL COMMENT 'UTC time of the action (database clock)',
  details MEDIUMTEXT NOT NULL COMMENT 'facts of the action, compact JSON object',
  PRIMARY KEY (id),
  KEY ix_audit_instance (instance_id, id),
  KEY ix_audit_namespace_at (namespace_id, at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='who did what, when, with which request digest; append only';
