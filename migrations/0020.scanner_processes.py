"""The scanner processes that share the candidates (issue 31, item 3; docs/decisions.md, "Scanners
that share work"): one row per running `weave scan` process, its heartbeat written with each
batch's listing. A process takes the candidates whose partition key hashes to its rank among the
members whose heartbeat is recent (`weave.rules.sharing`); a clean stop deletes its row, a killed
one is no longer a member once its heartbeat is old, and the next registration deletes rows long
dead. A handful of rows: read whole.

Re-runnable: the table is created only when missing.
"""

from yoyo import step

from weave.migration_steps import run

__depends__ = {"0019.inbound"}

CREATE_SCANNER_PROCESSES = """
CREATE TABLE IF NOT EXISTS scanner_processes (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'the member id; ranks are by it',
  host VARCHAR(255) NOT NULL COMMENT 'host name of the process, for operators',
  pid INT UNSIGNED NOT NULL COMMENT 'process id on that host, for operators',
  started_at DATETIME(6) NOT NULL COMMENT 'UTC time of registration',
  heartbeat_at DATETIME(6) NOT NULL COMMENT 'UTC time of its last batch listing; a member while recent',
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='running scanner processes, which split the candidates between them by a hash'
"""

steps = [
    step(
        lambda conn: run(conn, CREATE_SCANNER_PROCESSES),
        lambda conn: run(conn, "DROP TABLE IF EXISTS scanner_processes"),
    )
]
