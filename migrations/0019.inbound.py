"""Inbound webhooks (docs/rules.md#webhooks, W1-W5): sources, their encrypted secrets, and the
record of every delivery.

- `inbound_sources`: one per (namespace, name), the name in `POST /v1/inbound/{ns}/{source}`. A
  source acts through a credential row of its own (`credential_id`: scope `workflows:signal`, its
  queue grants, the SHA-256 of random bytes that were thrown away, so no token opens it), so that
  routing, quotas, a DISABLED application and the take's "credential as it is now" (B4) hold for
  it unchanged. The delivery path finds a source by `uq_inbound_sources_name` after the namespace
  by its name.
- `inbound_secrets`: Fernet ciphertexts (weave.secretbox, WEAVE_SECRET_KEY), never a secret in
  plain text. A removed secret keeps its row (id and times) with its ciphertext emptied; at most
  two rows of a source have `removed_at` NULL (`weave.sql.inbound.add_secret` under the source's
  lock). `ix_inbound_secrets_source (source_id, removed_at)`: a source's valid secrets.
- `inbound_deliveries`: every delivery a source's signature let in, kept after the source is
  deleted. The list (W5) is newest first per source, optionally of one outcome, paged by id: a
  backward range of `ix_inbound_deliveries_source (source_id, id)` or of
  `ix_inbound_deliveries_outcome (source_id, outcome, id)` from the cursor, without a sort.
  `ck_inbound_deliveries_outcome` names the outcomes (`weave.statuses.DeliveryOutcome`).

Re-runnable: tables are created only when missing; the rollback drops them.
"""

from yoyo import step

from weave.migration_steps import run

__depends__ = {"0018.unrouted_facts"}

CREATE_SOURCES = """
CREATE TABLE IF NOT EXISTS inbound_sources (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as source_id',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id owning the source',
  name VARCHAR(64) NOT NULL COMMENT 'source name, unique in its namespace; the last part of its inbound URL',
  credential_id BIGINT UNSIGNED NOT NULL COMMENT 'credentials.id the source acts as (no token exists for it)',
  scheme VARCHAR(32) NOT NULL COMMENT 'signature scheme: standard-webhooks, stripe, github or hmac-sha256',
  signature_header VARCHAR(64) NULL COMMENT 'lower-cased header of the hex HMAC (hmac-sha256); else NULL',
  mapping MEDIUMTEXT NOT NULL COMMENT 'the mapping document (W3) as the operator gave it',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time of creation',
  updated_at DATETIME(6) NOT NULL COMMENT 'UTC time of the last mapping change',
  PRIMARY KEY (id),
  UNIQUE KEY uq_inbound_sources_name (namespace_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='senders of signed webhooks (W1): a namespace, a credential of their own and a mapping'
"""
CREATE_SECRETS = """
CREATE TABLE IF NOT EXISTS inbound_secrets (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as secret_id',
  source_id BIGINT UNSIGNED NOT NULL COMMENT 'inbound_sources.id the secret signs for',
  ciphertext VARBINARY(4096) NOT NULL COMMENT 'Fernet token of the secret (WEAVE_SECRET_KEY); empty once removed',
  created_at DATETIME(6) NOT NULL COMMENT 'UTC time it was added',
  removed_at DATETIME(6) NULL COMMENT 'UTC time it was removed; NULL while valid (at most two per source)',
  PRIMARY KEY (id),
  KEY ix_inbound_secrets_source (source_id, removed_at) COMMENT 'the valid secrets of a source'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='secrets of inbound sources, encrypted; never stored in plain text (W1)'
"""
OUTCOMES = ("ROUTED", "PARKED", "AMBIGUOUS", "IGNORED", "UNMAPPABLE")  # weave.statuses.DeliveryOutcome
CREATE_DELIVERIES = f"""
CREATE TABLE IF NOT EXISTS inbound_deliveries (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'surrogate key, shown as delivery_id; the list''s cursor',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'namespaces.id of the source',
  source_id BIGINT UNSIGNED NOT NULL COMMENT 'inbound_sources.id it came to (the row may be gone since)',
  received_at DATETIME(6) NOT NULL COMMENT 'UTC time it was recorded',
  event_id VARCHAR(255) NULL COMMENT 'the provider''s event id; NULL when the event had none',
  event_type VARCHAR(255) NULL COMMENT 'the event type; NULL when the event had none',
  outcome VARCHAR(16) NOT NULL COMMENT 'ROUTED, PARKED, AMBIGUOUS, IGNORED or UNMAPPABLE (W4)',
  signal_id BIGINT UNSIGNED NULL COMMENT 'signals.id of the fact it became; NULL when IGNORED or UNMAPPABLE',
  error TEXT NULL COMMENT 'why it is UNMAPPABLE; never a signature or a secret',
  PRIMARY KEY (id),
  KEY ix_inbound_deliveries_source (source_id, id) COMMENT 'a source''s deliveries, newest first (W5)',
  KEY ix_inbound_deliveries_outcome (source_id, outcome, id) COMMENT 'a source''s deliveries of one outcome (W5)',
  CONSTRAINT ck_inbound_deliveries_outcome CHECK (outcome IN ({", ".join(repr(o) for o in OUTCOMES)}))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='every delivery to an inbound source that passed its signature (W5)'
"""


def table(create: str, name: str):
    return step(lambda conn: run(conn, create), lambda conn: run(conn, f"DROP TABLE IF EXISTS {name}"))


steps = [
    table(CREATE_SOURCES, "inbound_sources"),
    table(CREATE_SECRETS, "inbound_secrets"),
    table(CREATE_DELIVERIES, "inbound_deliveries"),
]
