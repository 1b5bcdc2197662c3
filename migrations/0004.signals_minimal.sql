-- Signals and waits in their first, minimal shape. A later migration adds signal identity (M3).
-- depends: 0003.pulse

CREATE TABLE IF NOT EXISTS signals (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id the signal was sent to',
  name VARCHAR(64) NOT NULL COMMENT 'signal name',
  correlation VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'correlation key as text',
  payload MEDIUMTEXT NULL COMMENT 'payload JSON text',
  status VARCHAR(16) NOT NULL COMMENT 'PENDING or CONSUMED',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of arrival',
  PRIMARY KEY (id),
  KEY ix_signals_instance_status (instance_id, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='external signals sent to instances';

CREATE TABLE IF NOT EXISTS waits (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  instance_id BIGINT UNSIGNED NOT NULL COMMENT 'instances.id that waits',
  step_key VARCHAR(64) NOT NULL COMMENT 'key of the waiting step',
  name VARCHAR(64) NULL COMMENT 'signal name waited for',
  correlation VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'correlation key waited for',
  status VARCHAR(16) NOT NULL COMMENT 'WAITING, SATISFIED, EXPIRED or CANCELLED',
  deadline_at DATETIME(6) NULL COMMENT 'UTC deadline of the wait',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  PRIMARY KEY (id),
  KEY ix_waits_instance_step (instance_id, step_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='what a SIGNAL or POLL step waits for';
