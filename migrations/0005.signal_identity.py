"""Signal identity (M2, M3): contract, generation, evidence, disposition, expiry and check times,
frozen receipt; waits gain their contract, activation and winner.

Upgrades a populated database in place:
- correlation columns become VARBINARY(764), keeping every byte of older values (trailing spaces
  included; an older VARCHAR(191) utf8mb4 value is at most 764 bytes);
- older PENDING signals become REJECTED / LEGACY_UNVERIFIED, payload and times kept; consumed
  history is left as it is;
- older waits keep NULL metadata (no payload version), so they never match a signal: they can only
  expire at their deadline;
- current waits (WAITING, on the ACTIVE activation of a non-terminal instance) get a WAIT checkpoint
  at their original deadline, unless they already have one.

Written in Python rather than SQL so that every step checks `information_schema` first: MySQL has no
`ADD COLUMN IF NOT EXISTS`, and yoyo records a migration only after all its steps, so each step must
be safe to run again after a crash (`weave.migration_steps`).
"""

from yoyo import step

from weave.migration_steps import add_columns, add_indexes, data, modify_columns, run

__depends__ = {"0004.signals_minimal"}

SIGNAL_COLUMNS = [
    ("payload_version", "VARCHAR(32) NULL COMMENT 'contract payload version; NULL for signals older than identity'"),
    ("target_step_key", "VARCHAR(64) NULL COMMENT 'step of the pinned definition the signal is for'"),
    ("target_activation_sequence", "INT UNSIGNED NULL COMMENT 'activation sequence (generation) the signal is for'"),
    (
        "payload_sha256",
        "CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'SHA-256 hex of the stored payload text'",
    ),
    ("payload_present", "TINYINT(1) NOT NULL DEFAULT 1 COMMENT '0 when the request had no payload (absent, not null)'"),
    ("reason", "VARCHAR(1024) NULL COMMENT 'why the sender sent it (required for new signals)'"),
    ("evidence_ref", "VARCHAR(512) NULL COMMENT 'opaque reference to evidence; never fetched by Weave'"),
    ("actor", "VARCHAR(128) NULL COMMENT 'actor of the credential that sent it'"),
    ("credential_id", "BIGINT UNSIGNED NULL COMMENT 'credentials.id that sent it'"),
    (
        "idempotency_key",
        "VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'Idempotency-Key of the first acceptance'",
    ),
    (
        "request_digest",
        "CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'SHA-256 hex of the canonical signal fields'",
    ),
    ("disposition", "VARCHAR(32) NULL COMMENT 'why it is not, or no longer, PENDING'"),
    ("accepted_at", "DATETIME(6) NULL COMMENT 'UTC acceptance time (database clock, read under the instance lock)'"),
    ("expires_at", "DATETIME(6) NULL COMMENT 'UTC instance total deadline at first acceptance; never changes'"),
    ("available_at", "DATETIME(6) NULL COMMENT 'UTC next time the scanner may look at it (backoff only moves this)'"),
    ("attempts", "INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'failed scanner tries on this signal'"),
    ("last_error", "VARCHAR(1024) NULL COMMENT 'error of the last failed scanner try'"),
    ("consumed_wait_id", "BIGINT UNSIGNED NULL COMMENT 'waits.id that took it as its winner'"),
    ("consumed_at", "DATETIME(6) NULL COMMENT 'UTC time a wait took it'"),
    ("settled_at", "DATETIME(6) NULL COMMENT 'UTC time it left PENDING'"),
    (
        "receipt",
        "TEXT NULL COMMENT 'the frozen response body of the first acceptance after its signal_id member (the row key)'",
    ),
]
SIGNAL_MODIFIED = [
    ("name", "VARCHAR(128) NOT NULL COMMENT 'signal name of the contract'"),
    (
        "correlation",
        "VARBINARY(764) NOT NULL COMMENT 'correlation key bytes, compared exactly (new input <= 512 bytes)'",
    ),
    ("payload", "MEDIUMTEXT NULL COMMENT 'payload as compact JSON in original member order; NULL when absent'"),
    ("status", "VARCHAR(16) NOT NULL COMMENT 'PENDING, CONSUMED, REJECTED or EXPIRED'"),
    ("created_at", "DATETIME(6) NOT NULL COMMENT 'UTC time the row was written (= accepted_at for new signals)'"),
]
SIGNAL_INDEXES = [
    ("uq_signals_idempotency", "UNIQUE KEY uq_signals_idempotency (instance_id, idempotency_key)"),
    (
        "ix_signals_matching",
        "KEY ix_signals_matching (instance_id, target_step_key, target_activation_sequence, status)",
    ),
    ("ix_signals_expiry", "KEY ix_signals_expiry (status, expires_at)"),
    ("ix_signals_checks", "KEY ix_signals_checks (status, available_at)"),
]
WAIT_COLUMNS = [
    ("kind", "VARCHAR(8) NULL COMMENT 'SIGNAL or POLL'"),
    (
        "payload_version",
        "VARCHAR(32) NULL COMMENT 'contract payload version; NULL for waits older than identity (they match nothing)'",
    ),
    ("activation_id", "BIGINT UNSIGNED NULL COMMENT 'step_activations.id the wait belongs to'"),
    ("activation_sequence", "INT UNSIGNED NULL COMMENT 'activation sequence (generation) the wait belongs to'"),
    ("winner_signal_id", "BIGINT UNSIGNED NULL COMMENT 'signals.id that satisfied the wait; at most one'"),
    ("settled_at", "DATETIME(6) NULL COMMENT 'UTC time the wait left WAITING'"),
]
WAIT_MODIFIED = [
    ("name", "VARCHAR(128) NULL COMMENT 'signal name waited for (frozen at activation)'"),
    ("correlation", "VARBINARY(764) NULL COMMENT 'correlation key bytes waited for (frozen at activation)'"),
    ("status", "VARCHAR(16) NOT NULL COMMENT 'WAITING, SATISFIED, EXPIRED, CANCELLED or SUPERSEDED'"),
    (
        "deadline_at",
        "DATETIME(6) NULL COMMENT 'UTC deadline: activation time + timeout_seconds; a signal counts only if accepted before it'",
    ),
]
WAIT_INDEXES = [("ix_waits_activation", "KEY ix_waits_activation (activation_id)")]
CHECKPOINT_INDEXES = [("ix_checkpoints_wait", "KEY ix_checkpoints_wait (wait_id)")]

CREATE_QUOTA_WINDOWS = """
CREATE TABLE IF NOT EXISTS signal_quota_windows (
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'applications.id whose quota is counted',
  window_start DATETIME NOT NULL COMMENT 'UTC start of the one-minute window',
  used INT UNSIGNED NOT NULL COMMENT 'signal requests counted in the window',
  PRIMARY KEY (application_id, window_start)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='per-application signal counts per minute (quota)'
"""

# Data: each statement only touches rows it has not touched before, so it can run again.
BACKFILL_ACCEPTED_AT = "UPDATE signals SET accepted_at = created_at WHERE accepted_at IS NULL"
ACCEPTED_AT_NOT_NULL = (
    "accepted_at",
    "DATETIME(6) NOT NULL COMMENT 'UTC acceptance time (database clock, read under the instance lock)'",
)
REJECT_LEGACY_PENDING = """
UPDATE signals SET status = 'REJECTED', disposition = 'LEGACY_UNVERIFIED', settled_at = accepted_at
WHERE status = 'PENDING' AND idempotency_key IS NULL
"""
LINK_CURRENT_WAITS = """
UPDATE waits w
JOIN step_activations a ON a.instance_id = w.instance_id AND a.step_key = w.step_key AND a.status = 'ACTIVE'
SET w.activation_id = a.id, w.activation_sequence = a.activation_sequence, w.kind = 'SIGNAL'
WHERE w.status = 'WAITING' AND w.activation_id IS NULL
"""
CHECKPOINT_CURRENT_WAITS = """
INSERT INTO checkpoints (instance_id, kind, wait_id, due_at, available_at, attempts, created_at)
SELECT w.instance_id, 'WAIT', w.id, w.deadline_at, w.deadline_at, 0, UTC_TIMESTAMP(6)
FROM waits w
JOIN instances i ON i.id = w.instance_id
JOIN step_activations a ON a.id = w.activation_id
WHERE w.status = 'WAITING' AND w.deadline_at IS NOT NULL AND a.status = 'ACTIVE'
  AND i.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
  AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.wait_id = w.id AND c.kind = 'WAIT')
"""

SIGNAL_PREVIOUS = [
    ("name", "VARCHAR(64) NOT NULL COMMENT 'signal name'"),
    (
        "correlation",
        "VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'correlation key as text'",
    ),
    ("payload", "MEDIUMTEXT NULL COMMENT 'payload JSON text'"),
    ("status", "VARCHAR(16) NOT NULL COMMENT 'PENDING or CONSUMED'"),
    ("created_at", "DATETIME(6) NOT NULL COMMENT 'UTC time of arrival'"),
]
WAIT_PREVIOUS = [
    ("name", "VARCHAR(64) NULL COMMENT 'signal name waited for'"),
    ("correlation", "VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'correlation key waited for'"),
    ("status", "VARCHAR(16) NOT NULL COMMENT 'WAITING, SATISFIED, EXPIRED or CANCELLED'"),
    ("deadline_at", "DATETIME(6) NULL COMMENT 'UTC deadline of the wait'"),
]

steps = [
    add_columns("signals", SIGNAL_COLUMNS),
    modify_columns("signals", SIGNAL_MODIFIED, SIGNAL_PREVIOUS),
    data(BACKFILL_ACCEPTED_AT),
    modify_columns(
        "signals",
        [ACCEPTED_AT_NOT_NULL],
        [(ACCEPTED_AT_NOT_NULL[0], ACCEPTED_AT_NOT_NULL[1].replace("NOT NULL", "NULL"))],
    ),
    data(
        REJECT_LEGACY_PENDING,
        "UPDATE signals SET status = 'PENDING', disposition = NULL, settled_at = NULL "
        "WHERE disposition = 'LEGACY_UNVERIFIED'",
    ),
    add_indexes("signals", SIGNAL_INDEXES),
    add_columns("waits", WAIT_COLUMNS),
    modify_columns("waits", WAIT_MODIFIED, WAIT_PREVIOUS),
    add_indexes("waits", WAIT_INDEXES),
    add_indexes("checkpoints", CHECKPOINT_INDEXES),
    data(LINK_CURRENT_WAITS),
    data(CHECKPOINT_CURRENT_WAITS),
    step(
        lambda conn: run(conn, CREATE_QUOTA_WINDOWS),
        lambda conn: run(conn, "DROP TABLE IF EXISTS signal_quota_windows"),
    ),
]
