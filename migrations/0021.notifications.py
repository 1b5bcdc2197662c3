"""Outbound notifications (docs/rules.md#notifications, N1-N3): subscriptions, the outbox and the
record of every delivery attempt.

- `notify_subscriptions`: one per (namespace, name). `event_mask` is a bit per event type
  (`weave.statuses.NotifyEvent`, bit i for the i-th type in declaration order), so that the unit
  that makes a change writes its notifications with one `INSERT ... SELECT` over
  `ix_notify_subscriptions_namespace (namespace_id, status)` and `event_mask & %s`. The secret is
  a Fernet token (weave.secretbox, WEAVE_SECRET_KEY) of the Standard Webhooks `whsec_...` secret,
  never plain text. `failing_since` is set by the first failed attempt after a success and cleared
  by the next success (an endpoint that keeps failing is shown as failing).
- `notifications`: the outbox, one row per (change, matching subscription), written in the
  transaction of the change (N2). `body` is the JSON document delivered, rendered in that
  transaction; `webhook_id` is its Standard Webhooks id, the same on every attempt. `due_at` is
  the next attempt's time while PENDING and NULL once DELIVERED or DROPPED (a disabled or deleted
  subscription sends nothing more, N3), so `ix_notifications_due (due_at)` holds only what is
  still to be sent. `instance_id` is the workflow it concerns (the scanners' partition key and the
  workflow page's link), NULL for a fact that never had one.
- `notification_attempts`: every attempt, with the HTTP status or the error (never the secret or
  a header), listed per notification (N3).

Re-runnable: tables are created only when missing; the rollback drops them.
"""

from yoyo import step

from weave.migration_steps import run

__depends__ = {"0020.scanner_processes"}

CREATE_SUBSCRIPTIONS = """
CREATE TABLE IF NOT EXISTS notify_subscriptions (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as subscription_id',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id whose events it receives',
  name VARCHAR(64) NOT NULL COMMENT 'subscription name, unique in its namespace',
  url VARCHAR(2048) NOT NULL COMMENT 'http or https endpoint the notifications are POSTed to',
  event_mask INT UNSIGNED NOT NULL COMMENT 'a bit per subscribed event type (weave.statuses.NotifyEvent order)',
  status VARCHAR(16) NOT NULL COMMENT 'ENABLED or DISABLED',
  ciphertext VARBINARY(4096) NOT NULL COMMENT 'Fernet token of the whsec_ signing secret (WEAVE_SECRET_KEY)',
  failing_since DATETIME(6) NULL COMMENT 'UTC time of the first failed attempt since the last success; NULL when healthy',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  updated_at DATETIME(6) NOT NULL COMMENT 'UTC time of the last change of status or health',
  PRIMARY KEY (id),
  UNIQUE KEY uq_notify_subscriptions_name (namespace_id, name),
  KEY ix_notify_subscriptions_namespace (namespace_id, status) COMMENT 'the enabled subscriptions of a namespace',
  CONSTRAINT ck_notify_subscriptions_status CHECK (status IN ('ENABLED', 'DISABLED'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='endpoints subscribed to a namespace''s events (N1)'
"""
CREATE_NOTIFICATIONS = """
CREATE TABLE IF NOT EXISTS notifications (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as notification_id; the list''s cursor',
  subscription_id BIGINT UNSIGNED NOT NULL COMMENT 'notify_subscriptions.id it is for',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id of the change',
  instance_id BIGINT UNSIGNED NULL COMMENT 'instances.id it concerns; NULL for a fact without one',
  event_type VARCHAR(32) NOT NULL COMMENT 'workflow.needs_review, workflow.succeeded, ... (N1)',
  webhook_id VARCHAR(64) NOT NULL COMMENT 'the Standard Webhooks webhook-id, the same on every attempt',
  occurred_at DATETIME(6) NOT NULL COMMENT 'UTC time of the change (the body''s timestamp)',
  body MEDIUMTEXT NOT NULL COMMENT 'the JSON document delivered, rendered in the change''s transaction',
  status VARCHAR(16) NOT NULL COMMENT 'PENDING, DELIVERED or DROPPED',
  due_at DATETIME(6) NULL COMMENT 'UTC time of the next attempt while PENDING; NULL once settled',
  attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'attempts made so far',
  delivered_at DATETIME(6) NULL COMMENT 'UTC time of the attempt a 2xx answered',
  last_error VARCHAR(1024) NULL COMMENT 'the last failed attempt''s status or error',
  PRIMARY KEY (id),
  KEY ix_notifications_due (due_at) COMMENT 'what is still to be sent, oldest due first',
  KEY ix_notifications_subscription (subscription_id, id) COMMENT 'a subscription''s deliveries, newest first (N3)',
  KEY ix_notifications_instance (instance_id) COMMENT 'the notifications of one workflow',
  CONSTRAINT ck_notifications_status CHECK (status IN ('PENDING', 'DELIVERED', 'DROPPED'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='the outbox of notifications, written with the change they report (N2)'
"""
CREATE_ATTEMPTS = """
CREATE TABLE IF NOT EXISTS notification_attempts (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key',
  notification_id BIGINT UNSIGNED NOT NULL COMMENT 'notifications.id attempted',
  attempted_at DATETIME(6) NOT NULL COMMENT 'UTC time the attempt started',
  http_status SMALLINT UNSIGNED NULL COMMENT 'the endpoint''s HTTP status; NULL when none came',
  error VARCHAR(1024) NULL COMMENT 'why it failed (timeout, refused, a redirect, ...); never a secret',
  duration_ms INT UNSIGNED NOT NULL COMMENT 'how long the attempt took',
  PRIMARY KEY (id),
  KEY ix_notification_attempts_notification (notification_id, id) COMMENT 'a notification''s attempts (N3)'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='every delivery attempt of a notification (N3)'
"""


def table(create: str, name: str):
    return step(lambda conn: run(conn, create), lambda conn: run(conn, f"DROP TABLE IF EXISTS {name}"))


steps = [
    table(CREATE_SUBSCRIPTIONS, "notify_subscriptions"),
    table(CREATE_NOTIFICATIONS, "notifications"),
    table(CREATE_ATTEMPTS, "notification_attempts"),
]
