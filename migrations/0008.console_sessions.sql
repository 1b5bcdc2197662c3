-- Review console sessions (issue 16): a browser signs in with a token once and then carries a
-- random session id in a cookie. Only the id's SHA-256 is stored, and the credential it came from,
-- which every page checks again (revoked or expired ends the session at once).
-- depends: 0007.audit_signal_id

CREATE TABLE IF NOT EXISTS console_sessions (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  session_sha256 BINARY(32) NOT NULL COMMENT 'SHA-256 of the session id in the browser cookie; the id itself is never stored',
  credential_id BIGINT UNSIGNED NOT NULL COMMENT 'credentials.id signed in with; checked again on every page',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of sign-in',
  expires_at DATETIME(6) NOT NULL COMMENT 'UTC end of the session; sign-out deletes the row before it',
  PRIMARY KEY (id),
  UNIQUE KEY uq_console_sessions_session (session_sha256),
  KEY ix_console_sessions_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='review console sign-ins: short-lived sessions of a credential, stored as hashes';
