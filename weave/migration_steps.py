"""yoyo steps that are safe to run again, for the Python migrations in `migrations/`.

yoyo records a migration only after all its steps have run, and MySQL commits every DDL statement
at once: after a crash between two steps, the next `weave migrate` runs every step of the
migration again. So each step here first looks at `information_schema` (MySQL has no
`ADD COLUMN IF NOT EXISTS`) or touches only rows it has not touched before.
"""

from __future__ import annotations

from yoyo import step


def _has(conn, sql: str, params) -> bool:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0] > 0


def column_exists(conn, table: str, column: str) -> bool:
    return _has(
        conn,
        "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
        "AND table_name = %s AND column_name = %s",
        (table, column),
    )


def index_exists(conn, table: str, index: str) -> bool:
    return _has(
        conn,
        "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
        "AND table_name = %s AND index_name = %s",
        (table, index),
    )


def check_exists(conn, table: str, name: str) -> bool:
    return _has(
        conn,
        "SELECT COUNT(*) FROM information_schema.table_constraints WHERE constraint_schema = DATABASE() "
        "AND table_name = %s AND constraint_name = %s AND constraint_type = 'CHECK'",
        (table, name),
    )


def run(conn, sql: str) -> None:
    with conn.cursor() as cur:
        cur.execute(sql)


def alter(conn, table: str, clauses: list[str]) -> None:
    """One ALTER TABLE of `clauses` (none: nothing is run)."""
    if clauses:
        run(conn, f"ALTER TABLE {table} " + ", ".join(clauses))


def _add_missing(table: str, items, exists, add: str, drop: str):
    """A step adding the (name, spec) items that `exists` does not find; its rollback drops those it finds."""

    def apply(conn):
        alter(conn, table, [add.format(name=n, spec=s) for n, s in items if not exists(conn, table, n)])

    def rollback(conn):
        alter(conn, table, [drop.format(name=n) for n, _ in items if exists(conn, table, n)])

    return step(apply, rollback)


def add_columns(table: str, columns):
    """Add the (name, column spec) columns the table lacks, in one ALTER."""
    return _add_missing(table, columns, column_exists, "ADD COLUMN {name} {spec}", "DROP COLUMN {name}")


def add_indexes(table: str, indexes):
    """Add the (name, `KEY name (...)` spec) indexes the table lacks, in one ALTER."""
    return change_indexes({table: indexes}, {})


def change_indexes(added: dict, dropped: dict):
    """A step adding, per table, the (name, `KEY name (...)` spec) indexes of `added` it lacks and
    dropping those of `dropped` it has, in one ALTER per table; its rollback does the reverse."""

    def change(add: dict, drop: dict):
        def apply(conn):
            for table in sorted({*add, *drop}):
                clauses = [f"ADD {spec}" for name, spec in add.get(table, []) if not index_exists(conn, table, name)]
                clauses += [f"DROP INDEX {name}" for name, _ in drop.get(table, []) if index_exists(conn, table, name)]
                alter(conn, table, clauses)

        return apply

    return step(change(added, dropped), change(dropped, added))


def modify_columns(table: str, columns, previous):
    """MODIFY the columns to their (name, spec); the rollback MODIFYs them back to `previous`."""

    # MODIFY is idempotent: running it again changes nothing.
    def modify(specs):
        return lambda conn: alter(conn, table, [f"MODIFY {n} {s}" for n, s in specs])

    return step(modify(columns), modify(previous))


def add_checks(table: str, checks):
    """Add the (name, CHECK expression) constraints the table lacks, in one ALTER (the server reads
    every row once to check them); the rollback drops those it finds."""
    return _add_missing(table, checks, check_exists, "ADD CONSTRAINT {name} CHECK ({spec})", "DROP CONSTRAINT {name}")


def replace_checks(table: str, checks, previous):
    """Put the (name, CHECK expression) constraints in place of the ones of the same names (a list
    that gains a word): each is dropped when present and added again, so the step can run again;
    the rollback puts `previous` back the same way."""

    def put(specs):
        def apply(conn):
            alter(conn, table, [f"DROP CONSTRAINT {n}" for n, _ in specs if check_exists(conn, table, n)])
            alter(conn, table, [f"ADD CONSTRAINT {n} CHECK ({s})" for n, s in specs])

        return apply

    return step(put(checks), put(previous))


def data(sql: str, rollback_sql: str | None = None):
    """A data statement; it must only touch rows it has not touched before, so that it can run again."""
    return step(lambda conn: run(conn, sql), (lambda conn: run(conn, rollback_sql)) if rollback_sql else None)
