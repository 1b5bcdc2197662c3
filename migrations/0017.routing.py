"""Routing a fact by its business key (docs/rules.md#routing, B1-B4): parked facts in `signals`, a hash of the
business key on signals and waits, and the fixed table of route locks where a fact that finds no
wait and a wait that finds no fact meet (docs/decisions.md, "Routing by business key: the race").

- `signals` keeps one row per fact for life (B3: one signal_id wherever it goes). A fact sent by
  its key carries `namespace_id`, `route_key` (its Idempotency-Key, unique per namespace: B1),
  `park_seconds` and `route_hash`; a parked one has no `instance_id`, step or sequence yet, which
  the wait that takes it fills in. Instance-addressed signals leave the four new columns NULL.
- `route_hash` is the first 64 bits of SHA-256 over (namespace id, name, payload version, key
  bytes) (`weave.sql.routing.route_hash`); `ix_signals_route (namespace_id, route_hash)` and
  `ix_waits_route (route_hash, status)` make the three reads of routing (the candidate waits, the
  parked facts a new wait takes) index lookups of narrow entries, whatever the key's length. The
  WAITING waits of before get their hash here (the SQL below computes the same value).
- `route_locks`: 4,096 rows, one per bucket (`route_hash` mod 4,096), locked by writing them.
- The CHECK lists gain PARKED and the dispositions of §14.

Re-runnable: columns and indexes are added only when missing, the buckets with INSERT IGNORE, the
hashes only where NULL; the checks are dropped and added again.
"""

from yoyo import step

from weave.migration_steps import add_columns, add_indexes, data, modify_columns, replace_checks, run

__depends__ = {"0016.deadline_checkpoints"}

ROUTE_BUCKETS = 4096  # weave.sql.routing.ROUTE_BUCKETS

CREATE_ROUTE_LOCKS = """
CREATE TABLE IF NOT EXISTS route_locks (
  bucket SMALLINT UNSIGNED NOT NULL COMMENT 'route_hash mod 4096',
  version BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'written to take the lock (certified by Galera too)',
  PRIMARY KEY (bucket)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='where a fact routed by its key and a wait opened for it meet (B4): a fixed set of rows'
"""
FILL_ROUTE_LOCKS = "INSERT IGNORE INTO route_locks (bucket, version) VALUES " + ", ".join(
    f"({bucket}, 0)" for bucket in range(ROUTE_BUCKETS)
)

SIGNAL_COLUMNS = [
    ("namespace_id", "BIGINT UNSIGNED NULL COMMENT 'namespaces.id of a fact sent by its business key (B1); else NULL'"),
    (
        "route_key",
        "VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL "
        "COMMENT 'Idempotency-Key of a fact sent by its business key, unique in its namespace (B1)'",
    ),
    ("route_hash", "BIGINT UNSIGNED NULL COMMENT 'hash of (namespace, name, payload version, key) of a routed fact'"),
    ("park_seconds", "INT UNSIGNED NULL COMMENT 'park_seconds of a fact sent by its business key (B2)'"),
]
INSTANCE_NULLABLE = [("instance_id", "BIGINT UNSIGNED NULL COMMENT 'instances.id it belongs to; NULL while PARKED'")]
INSTANCE_REQUIRED = [("instance_id", "BIGINT UNSIGNED NOT NULL COMMENT 'instances.id the signal was sent to'")]
SIGNAL_INDEXES = [
    (
        "uq_signals_route",
        "UNIQUE KEY uq_signals_route (namespace_id, route_key) COMMENT 'idempotency of facts sent by their key (B1)'",
    ),
    (
        "ix_signals_route",
        "KEY ix_signals_route (namespace_id, route_hash) COMMENT 'the parked facts a new wait takes (B4)'",
    ),
]
WAIT_COLUMNS = [
    ("route_hash", "BIGINT UNSIGNED NULL COMMENT 'hash of (namespace, name, payload version, key) (B2)'"),
]
WAIT_INDEXES = [
    ("ix_waits_route", "KEY ix_waits_route (route_hash, status) COMMENT 'the waits a fact sent by its key finds (B2)'")
]
# weave.sql.routing.route_hash, in SQL: SHA-256 of "<namespace id>\0<name>\0<payload version>\0" + key bytes.
HASH_WAITING_WAITS = """
UPDATE waits w JOIN instances i ON i.id = w.instance_id
SET w.route_hash = CAST(CONV(LEFT(SHA2(CONCAT(CAST(i.namespace_id AS CHAR), CHAR(0), w.name, CHAR(0),
                                              w.payload_version, CHAR(0), w.correlation), 256), 16), 16, 10) AS UNSIGNED)
WHERE w.status = 'WAITING' AND w.route_hash IS NULL AND w.name IS NOT NULL AND w.payload_version IS NOT NULL
  AND w.correlation IS NOT NULL
"""


def _one_of(column: str, *values: str) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


SIGNAL_STATUSES = ("PENDING", "CONSUMED", "REJECTED", "EXPIRED")
DISPOSITIONS = (
    "CORRELATION_MISMATCH",
    "STALE_ACTIVATION",
    "STEP_SETTLED",
    "INSTANCE_SETTLED",
    "LATE",
    "WAIT_SETTLED",
    "QUERY_SETTLED",
    "EXPIRED_UNMATCHED",
    "LEGACY_UNVERIFIED",
)
ROUTING_DISPOSITIONS = ("AMBIGUOUS_CORRELATION", "EXPIRED_UNROUTED", "SIGNAL_LIMIT_REACHED")
CHECKS = [
    ("ck_signals_status", _one_of("status", *SIGNAL_STATUSES, "PARKED")),
    ("ck_signals_disposition", _one_of("disposition", *DISPOSITIONS, *ROUTING_DISPOSITIONS)),
]
PREVIOUS_CHECKS = [
    ("ck_signals_status", _one_of("status", *SIGNAL_STATUSES)),
    ("ck_signals_disposition", _one_of("disposition", *DISPOSITIONS)),
]

steps = [
    step(lambda conn: run(conn, CREATE_ROUTE_LOCKS), lambda conn: run(conn, "DROP TABLE IF EXISTS route_locks")),
    data(FILL_ROUTE_LOCKS),
    add_columns("signals", SIGNAL_COLUMNS),
    modify_columns("signals", INSTANCE_NULLABLE, INSTANCE_REQUIRED),
    add_indexes("signals", SIGNAL_INDEXES),
    add_columns("waits", WAIT_COLUMNS),
    add_indexes("waits", WAIT_INDEXES),
    data(HASH_WAITING_WAITS),
    replace_checks("signals", CHECKS, PREVIOUS_CHECKS),
]
