"""One open transaction of a unit of work (`Tx`): statements, queued writes that travel with the
next statement or COMMIT, guarded state changes, the transaction's `now` (the clock seam), and
whether the unit decided anything. `weave.db` opens, commits, rolls back and retries it."""

from __future__ import annotations

from datetime import datetime
from typing import Iterator

import pymysql

from weave.dberrors import SUBQUERY_RETURNS_ROWS, TransitionFailed

# Follows a guarded change in its batch (`Tx.later`): it fails with SUBQUERY_RETURNS_ROWS unless
# the change matched exactly one row. ROW_COUNT() is the previous statement's count, of matched
# rows with CLIENT.FOUND_ROWS (an UPDATE that sets a row to what it holds still counts).
MATCHED_ONE_ROW = "SET @matched_one_row = (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> 1)"


def _guarded(text: str, what: str | None) -> list[tuple[str, str | None]]:
    """A statement of a batch, followed by its guard when it must match one row (`what`)."""
    return [(text, None), (MATCHED_ONE_ROW, what)] if what is not None else [(text, None)]


SELECT_NOW = "SELECT UTC_TIMESTAMP(6) AS now"
# What `Tx.insert_all` sends in one round trip at most (a row larger than this goes alone): well
# below the max_allowed_packet of any server (MariaDB's default is 16 MiB, 4 MiB before 10.2.4),
# with room for rows of payloads at the 1 MiB body cap, escaped.
ROUND_TRIP_BYTES = 1024 * 1024


class DatabaseClock:
    """Production time: the database's UTC clock, so every node agrees (I5)."""

    def now(self, tx: "Tx") -> datetime:
        return tx.one(SELECT_NOW)["now"]


class Tx:
    """One open transaction: thin helpers over a DictCursor plus the transaction's `now`.

    Round trips are what a unit of work mostly costs, on both sides of the connection. A write
    whose answer the unit does not read (an event, an audit record, a guarded state change) is
    queued with `later` and travels in one round trip with the next statement the unit sends, or
    with COMMIT: the server runs them in the order they were issued, so locks are taken in the same
    order as before, and a failing write stops the batch before what follows it runs.

    `memo` is shared by every attempt of one call of the unit, and `maybe_committed` says that an
    earlier attempt of this call lost its connection during COMMIT, so that what it left in
    `memo` may be committed (see the module docstring).

    A unit that decides nothing writes nothing (K): `decided` turns true with the first write
    other than a statement sent only for its locks (`lock`) and the bookkeeping of `afterwards`.
    A unit that ends undecided is rolled back instead of committed, and its bookkeeping is applied
    alone after the rollback, in the same round trip (COMMIT apart on a Galera node: `_end`)."""

    def __init__(
        self, cursor, clock, memo: dict | None = None, maybe_committed: bool = False, commit_alone: bool = False
    ):
        self.cursor = cursor
        self.commit_alone = commit_alone
        self._clock = clock
        self._now: datetime | None = None
        self._queued: list[tuple[str, str | None]] = []  # (statement as sent, `what` when it must match one row)
        self._afterwards: list[tuple[str, str | None]] = []
        self.decided = False
        self.sent = False  # whether any statement went to the connection: only then can a transaction be open
        self.memo = {} if memo is None else memo
        self.maybe_committed = maybe_committed

    def now(self) -> datetime:
        """Read once per transaction, on first use: call it only after taking the instance lock."""
        if self._now is None:
            self._now = self._clock.now(self)
        return self._now

    def now_read_with(self, database_now: datetime) -> datetime:
        """`now()` for a unit whose statement read `UTC_TIMESTAMP(6)` itself, after taking the
        instance lock, to spare a round trip: the database clock adopts that value; a test clock
        keeps its own."""
        if self._now is None:
            self._now = database_now if isinstance(self._clock, DatabaseClock) else self._clock.now(self)
        return self._now

    def lock(self, sql: str, params: tuple | dict = ()) -> None:
        """Queue a statement sent only for the row locks it takes: a locking read, or a write that
        every unit locking that row makes (on Galera a lock is certified only by a write:
        `instances.mark_deciding`). It decides nothing, so a unit that sends nothing else (every
        item of a batch refused under its lock) is rolled back."""
        self._queued.append((self.cursor.mogrify(sql, params), None))

    def afterwards(self, sql: str, params: tuple | dict = (), expect_one: str | None = None) -> None:
        """Bookkeeping that stands whether or not the unit decides (a look that was done, the next
        time to look): sent with COMMIT when the unit decided something (guarded by `expect_one`
        like `later`), else alone after its rollback (unguarded: the rows it held are free then).
        It must need none of the unit's locks to be right on its own."""
        self._afterwards.append((self.cursor.mogrify(sql, params), expect_one))

    def one(self, sql: str, params: tuple | dict | None = ()) -> dict | None:
        self._note_write(sql)
        self._send(sql, params)
        return self.cursor.fetchone()

    def all(self, sql: str, params: tuple | dict | None = ()) -> list[dict]:
        self._note_write(sql)
        self._send(sql, params)
        return list(self.cursor.fetchall())

    def _note_write(self, sql: str) -> None:
        """A statement sent for its rows is a read, unless it is not (a test's UPDATE, ANALYZE…)."""
        if not self.decided and sql.lstrip()[:6].upper() not in ("SELECT", "(SELEC"):
            self.decided = True

    def stream(self, sql: str, params: tuple | dict = ()) -> Iterator[dict]:
        """The rows of a read, one at a time from an unbuffered cursor: the memory of one row
        however many the statement answers (an export, `weave.sql.export`). Nothing else may be
        sent on the connection until the rows are read to the end."""
        self.flush()
        self.sent = True
        with self.cursor.connection.cursor(pymysql.cursors.SSDictCursor) as cursor:
            cursor.execute(sql, params)
            yield from iter(cursor.fetchone, None)

    def execute(self, sql: str, params: tuple | dict = ()) -> int:
        """Run a write and return the matched row count."""
        self.decided = True
        return self._send(sql, params)

    def all_together(self, *reads: tuple[str, tuple | dict]) -> list[list[dict]]:
        """Run several (sql, params) reads in order in one round trip (after the queued writes);
        the rows of each. For locking reads that follow the global lock order, whose later
        statements need nothing from the earlier ones' answers but their locks."""
        statements = self._take_queued()
        first = len(statements)
        statements += [(self.cursor.mogrify(sql, params), None) for sql, params in reads]
        rows: list[list[dict]] = []
        for index in self._answers(statements):
            if index >= first:
                rows.append(list(self.cursor.fetchall()))
        return rows

    def execute_together(self, *writes: tuple[str, tuple | dict]) -> list[int]:
        """Run several (sql, params) writes in order in one round trip (after the queued writes);
        the matched row count of each. For writes whose counts the unit reads but whose
        parameters need nothing from one another's answers (a purge's deletes)."""
        self.decided = True
        statements = self._take_queued()
        first = len(statements)
        statements += [(self.cursor.mogrify(sql, params), None) for sql, params in writes]
        return [self.cursor.rowcount for index in self._answers(statements) if index >= first]

    def all_of_each(self, sql: str, each: list[tuple | dict]) -> list[list[dict]]:
        """The rows of the read `sql` (one SELECT) for each parameters of `each`, in one statement
        (`(SELECT 0 AS of_each, …) UNION ALL (SELECT 1 AS of_each, …)`) sent after the queued
        writes: one result set, where `all_together` would read one per parameters, each with its
        column descriptions (PyMySQL's parsing of those was a third of a batch's API CPU)."""
        keyword, rest = sql.lstrip().split(None, 1)
        if keyword.upper() != "SELECT":
            raise ValueError("all_of_each takes one SELECT")
        rows: list[list[dict]] = [[] for _ in each]
        if not each:
            return rows
        union = " UNION ALL ".join(
            f"(SELECT {index} AS of_each, {self.cursor.mogrify(rest, params)})" for index, params in enumerate(each)
        )
        for row in self.all(union, None):
            rows[row.pop("of_each")].append(row)
        return rows

    def transition(self, sql: str, params: tuple | dict, what: str) -> None:
        """Queue a guarded single-row state change that must match exactly one row, else
        `TransitionFailed` naming `what` is raised when its answer arrives, with the next statement
        or COMMIT, and the server has run nothing after it (see `later`): nothing that follows it
        (events, audit) may commit for a change that did not happen. The unit holds the row's lock
        and read its state, so this is a bug."""
        self.later(sql, params, expect_one=what)

    def insert(self, sql: str, params: tuple | dict = ()) -> int:
        """Run an INSERT and return the new AUTO_INCREMENT id."""
        self.decided = True
        self._send(sql, params)
        return self.cursor.lastrowid

    def insert_all(self, sql: str, rows: list[tuple | dict]) -> list[int]:
        """Run an INSERT once per row, after the queued writes, in as few round trips as
        `ROUND_TRIP_BYTES` allows (one, for rows of ordinary size); the new AUTO_INCREMENT id of
        each, in order. Each row is its own statement, so that each id is the server's own answer
        (a multi-row INSERT's ids need not be consecutive: Galera's auto_increment_increment, or
        innodb_autoinc_lock_mode 2). No rows: nothing is sent, nothing is decided."""
        if not rows:
            return []
        self.decided = True
        ids: list[int] = []
        statements = self._take_queued()
        first = len(statements)
        size = sum(len(text) for text, _ in statements)
        for row in rows:
            text = self.cursor.mogrify(sql, row)
            if len(statements) > first and size + len(text) > ROUND_TRIP_BYTES:
                ids += self._inserted(statements, first)
                statements, first, size = [], 0, 0
            statements.append((text, None))
            size += len(text)
        if len(statements) > first:
            ids += self._inserted(statements, first)
        return ids

    def _inserted(self, statements: list[tuple[str, str | None]], first: int) -> list[int]:
        """The insert ids of `statements[first:]` (INSERTs), sent with those before them in one round trip."""
        return [self.cursor.lastrowid for index in self._answers(statements) if index >= first]

    def executemany(self, sql: str, rows: list) -> int:
        self.decided = True
        self.flush()
        self.sent = True
        return self.cursor.executemany(sql, rows) if rows else 0

    def later(self, sql: str, params: tuple | dict = (), expect_one: str | None = None) -> None:
        """Queue a write whose answer the unit does not read; it is sent with the next statement or
        with COMMIT. With `expect_one`, it is a guarded state change like `transition`'s: matching
        any number of rows but one raises `TransitionFailed` before anything after it commits.

        The guard is checked by the server: `MATCHED_ONE_ROW` follows the change in its batch and
        fails unless the change matched one row, and a server runs no statement of a batch after
        one that failed. So a guarded change can travel with COMMIT itself."""
        self.decided = True
        self._queued += _guarded(self.cursor.mogrify(sql, params), expect_one)

    def flush(self) -> None:
        """Send the queued writes now (one round trip; none when nothing is queued)."""
        if self._queued:
            self._round_trip(self._take_queued())

    def commit(self) -> None:
        """Commit, with the queued writes and the bookkeeping in the same round trip (COMMIT apart
        on a Galera node: `_end`)."""
        guarded = [item for text, what in self._afterwards for item in _guarded(text, what)]
        self._end([*self._take_queued(), *guarded])

    def _end(self, statements: list[tuple[str, str | None]]) -> None:
        """Send `statements`, then COMMIT: in one round trip, or in two on a Galera node.

        There, another node's write that conflicts with this transaction aborts it (a brute-force
        abort) wherever it stands. Inside a multi-statement round trip the server rolls back what
        ran, runs the statements left in a new transaction, COMMIT included, and reports the
        deadlock only after them: the tail of the unit (a checkpoint's DELETE, an event) commits
        without its head. With COMMIT alone, an abort before it is reported by the statements'
        round trip and what ran after it is rolled back with the unit."""
        if self.commit_alone:
            if statements:
                self._round_trip(statements)
            self._round_trip([("COMMIT", None)])
        else:
            self._round_trip([*statements, ("COMMIT", None)])

    @property
    def has_bookkeeping(self) -> bool:
        return bool(self._afterwards)

    def roll_back(self) -> None:
        """End an undecided unit: roll back (queued writes are dropped), then apply the bookkeeping
        alone; one round trip (two on a Galera node: `_end`), none when the unit sent nothing (a
        single send's replay whose receipt came with its authentication).

        Whether a transaction is open is known from what this unit sent, not from the server's
        status flags: with autocommit off a plain SELECT opens one (its snapshot, its metadata
        locks), and PyMySQL updates `server_status` from OK packets only, never from a result
        set's end, so after reads it still says what the previous unit's COMMIT left."""
        self._queued = []
        afterwards = [(text, None) for text, _ in self._afterwards]
        if afterwards:
            self._end([("ROLLBACK", None), *afterwards])
        elif self.sent:
            self._round_trip([("ROLLBACK", None)])

    def _send(self, sql: str, params: tuple | dict | None) -> int:
        """Run one statement after the queued writes, in one round trip; its matched row count (its
        rows, its insert id) are the cursor's afterwards."""
        if not self._queued:
            self.sent = True
            return self.cursor.execute(sql, params)
        return self._round_trip([*self._take_queued(), (self.cursor.mogrify(sql, params), None)])

    def _take_queued(self) -> list[tuple[str, str | None]]:
        queued, self._queued = self._queued, []
        return queued

    def _round_trip(self, statements: list[tuple[str, str | None]]) -> int:
        """Send `statements` as one multi-statement query and read every answer in order; the
        cursor is left on the last one."""
        for _ in self._answers(statements):
            pass
        return self.cursor.rowcount

    def _answers(self, statements: list[tuple[str, str | None]]):
        """Send `statements` (already interpolated: no parameters) as one multi-statement query;
        yield the index of each as the cursor reaches its answer; a failed guard raises
        `TransitionFailed` (the statements after it did not run)."""
        self.sent = True
        self.cursor.execute(";\n".join(text for text, _ in statements))
        for index, (_, what) in enumerate(statements):
            if index:
                try:
                    self.cursor.nextset()
                except pymysql.err.MySQLError as exc:
                    if what is not None and exc.args[0] == SUBQUERY_RETURNS_ROWS:
                        raise TransitionFailed(f"{what}: expected to change one row, matched none or several") from None
                    raise
            yield index
