-- Tenancy: namespaces, applications, queues, credentials and their queue grants.
-- Every statement is safe to re-run (yoyo records a migration only after all its steps).

CREATE TABLE IF NOT EXISTS namespaces (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  name VARCHAR(64) NOT NULL COMMENT 'namespace name as used in URLs',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  PRIMARY KEY (id),
  UNIQUE KEY uq_namespaces_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='tenant boundary: every object belongs to exactly one namespace';

CREATE TABLE IF NOT EXISTS applications (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the application',
  name VARCHAR(64) NOT NULL COMMENT 'application name, unique in its namespace',
  status VARCHAR(16) NOT NULL COMMENT 'ACTIVE or DISABLED; DISABLED blocks new work of its instances (I3)',
  signals_per_minute INT UNSIGNED NULL COMMENT 'signal quota per minute; NULL means no quota',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  updated_at DATETIME(6) NOT NULL COMMENT 'UTC time of the last status change',
  PRIMARY KEY (id),
  UNIQUE KEY uq_applications_namespace_name (namespace_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='client programs inside a namespace; own credentials and a signal quota';

CREATE TABLE IF NOT EXISTS queues (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the queue',
  name VARCHAR(64) NOT NULL COMMENT 'queue name, unique in its namespace',
  max_permits INT UNSIGNED NOT NULL COMMENT 'budget of concurrently running tasks (P1)',
  permits_in_use INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'permits held by RUNNING tasks; 0..max_permits',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  PRIMARY KEY (id),
  UNIQUE KEY uq_queues_namespace_name (namespace_id, name),
  CONSTRAINT ck_queues_permits CHECK (permits_in_use <= max_permits)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Pulse task queues with a permit budget';

CREATE TABLE IF NOT EXISTS credentials (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as credential_id',
  token_sha256 BINARY(32) NOT NULL COMMENT 'SHA-256 of the bearer token; the token itself is never stored',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id the token is bound to',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'applications.id the token belongs to',
  actor VARCHAR(128) NOT NULL COMMENT 'actor name recorded in audit for every call made with the token',
  scopes VARCHAR(512) NOT NULL COMMENT 'space-separated scopes, e.g. workflows:signal workflows:read',
  expires_at DATETIME(6) NULL COMMENT 'UTC expiry; NULL never expires',
  revoked_at DATETIME(6) NULL COMMENT 'UTC time of revocation; NULL while valid',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  PRIMARY KEY (id),
  UNIQUE KEY uq_credentials_token (token_sha256),
  KEY ix_credentials_namespace (namespace_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='bearer credentials of applications, stored as hashes';

CREATE TABLE IF NOT EXISTS credential_queue_grants (
  credential_id BIGINT UNSIGNED NOT NULL COMMENT 'credentials.id holding the grant',
  queue_id BIGINT UNSIGNED NOT NULL COMMENT 'queues.id the credential may use',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of the grant',
  PRIMARY KEY (credential_id, queue_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='queues a credential may claim from or whose workflows it may signal and read';
