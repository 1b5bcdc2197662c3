"""Connections, the unit-of-work transaction, the clock seam and driver-error translation.

This is the only module that translates PyMySQL's exceptions (`weave.devdb` only waits for its
own server to accept a connection). A unit run with retries (`Database.run`, `Database.read`,
`@unit_of_work`, `@read_only`) ends in success, `DuplicateKey` (a UNIQUE key it does not replay on
fired), `TransitionFailed` (a guarded state change matched no row), `InvalidValue` (the database
refused a value for its characters or length), `Unavailable` (it kept failing with a retryable
error or a replayed duplicate) or `DatabaseError` (anything else); a unit run
once (`Database.attempt`, `fn.once`: the scanner, which has its own failure policy) may also end
in `Retryable`, or in `DuplicateKey` on any key.

A unit of work is a function `fn(tx, *args)` decorated with `@unit_of_work`; callers pass the
`Database` instead of `tx`. The decorator opens a READ COMMITTED transaction, runs the function,
commits, and re-runs the *whole* function on deadlock (1213), lock wait timeout (1205), MariaDB's
"record changed" (1020) or a lost or refused connection (2006/2013/2003). A duplicate key is re-run
only when the unit names that key in `@unit_of_work(replay_on=(...))`: that is how concurrent
inserts of the same identity converge (the unit looks up its identity before inserting, so the
second run finds the winner's row and replays it). A duplicate on any other key is a bug and
surfaces at once.

Several hosts in the URL (`mysql://u@h1:3306,h2:3306/db`) are the nodes of one Galera cluster: a
pool connects to one (the first that answers and is ready), and a lost connection or a node that
says it is not ready (1047) sends new connections to the next. Certification conflicts arrive as
deadlocks and are re-run like them. On a Galera node, read-only units read causally
(`wsrep_sync_wait`), so that a read through one node sees what another node acknowledged.

Faults between Weave and the database (docs/decisions.md, "Transactions"):
- No statement waits for an answer longer than `READ_TIMEOUT_SECONDS` (a stalled server or
  network), and no new attempt starts once `RETRY_BUDGET_SECONDS` have passed since the first: a
  unit ends in `Unavailable` (503) well before a client's 30 s timeout, however the database fails.
- A lost connection drops every idle connection of the pool (after a restart or a network cut
  they are all dead), so the next attempt connects afresh instead of trying them one by one.
- A connection lost while COMMIT is in flight leaves the outcome unknown: the attempt may have
  committed. The unit is re-run all the same, and every unit is written so that a re-run after
  its own commit gives the answer the first run would have (it looks up its identity first, or
  re-checks state under lock). Where neither tells, the re-run sees `tx.maybe_committed` and
  recognises what the earlier attempt wrote from what that attempt left in `tx.memo`, a dict
  that every attempt of one call shares (a claim's lease token, a completion's answer).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, TypeVar
from urllib.parse import unquote, urlsplit

import pymysql
from pymysql.constants import CLIENT

from weave import driver, metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
RECORD_CHANGED = 1020  # MariaDB: "Record has changed since last read"
DUP_ENTRY = 1062
SUBQUERY_RETURNS_ROWS = 1242  # "Subquery returns more than 1 row": how a failed guard stops its batch
SERVER_GONE = 2006
CONNECTION_LOST = 2013
CANNOT_CONNECT = 2003
RETRYABLE_CODES = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT, RECORD_CHANGED})
# The server refused a value, not the statement: illegal mix of collations for 2, 3 or n operands
# (a string that is not ASCII compared with an ASCII column: 1267, 1270, 1271), an invalid
# character string (1300), an incorrect value for a column (1366), data too long (1406).
INVALID_VALUE_CODES = frozenset({1267, 1270, 1271, 1300, 1366, 1406})
# A Galera node that is not part of the primary component (cut off, or still joining) answers every
# statement with 1047 "WSREP has not yet prepared node for application use": like a lost
# connection, the pool leaves it for another node.
NODE_NOT_READY = 1047
CONNECTION_CODES = frozenset({SERVER_GONE, CONNECTION_LOST, CANNOT_CONNECT, NODE_NOT_READY, 0})

DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_POOL_SIZE = 32
LOCK_WAIT_TIMEOUT_SECONDS = 10
METADATA_LOCK_WAIT_SECONDS = 60
CONNECT_TIMEOUT_SECONDS = 5
# The longest a statement of a unit may legitimately wait is a row lock wait (the server ends it at
# LOCK_WAIT_TIMEOUT_SECONDS); an answer later than this means the server or the network is stuck.
READ_TIMEOUT_SECONDS = LOCK_WAIT_TIMEOUT_SECONDS + 5
WRITE_TIMEOUT_SECONDS = READ_TIMEOUT_SECONDS
# No new attempt of a unit starts this long after its first: with one more attempt of at most
# READ_TIMEOUT_SECONDS, an API call answers (503 at worst) within 25 s, before a client's 30 s.
RETRY_BUDGET_SECONDS = 10


class DatabaseError(Exception):
    """Every translated database failure; raised as itself, one that retrying will not fix (an SQL
    error, a constraint, a bug)."""


class DuplicateKey(DatabaseError):
    """A UNIQUE key rejected an insert; `key` names it."""

    def __init__(self, message: str, key: str | None):
        super().__init__(message)
        self.key = key


class TransitionFailed(DatabaseError):
    """A guarded state change (`UPDATE … WHERE id = %s AND status = %s`) matched no row: the unit
    holds the row's lock and read its state, so this is a bug, never a race. The unit rolls back."""


class InvalidValue(DatabaseError):
    """The database refused a value for its characters or its length (`INVALID_VALUE_CODES`).

    Only a request can bring such a value this far (the API checks ids and bodies first, so this
    is the safety net): the API answers 422, never 500. Retrying changes nothing."""


class Retryable(DatabaseError):
    """Deadlock, lock wait timeout, record changed or a lost connection: re-run the unit.

    `code`: MySQL's error number (0: the driver lost or never had the connection).
    `connection_lost`: the connection is gone (or could not be opened). `commit_unknown`: it was
    lost while COMMIT was in flight, so the attempt may have committed."""

    def __init__(self, message: str, code: int, connection_lost: bool = False, commit_unknown: bool = False):
        super().__init__(message)
        self.code = code
        self.connection_lost = connection_lost
        self.commit_unknown = commit_unknown


class Unavailable(DatabaseError):
    """A unit of work kept failing with retryable errors (or duplicates of a key it replays on); the
    caller should try again later."""


def translate(exc: pymysql.err.MySQLError) -> DatabaseError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if code == DUP_ENTRY:
        key = message.rsplit("for key ", 1)[-1].strip("'` ").split(".")[-1] if "for key" in message else None
        return DuplicateKey(message, key)
    if code in INVALID_VALUE_CODES:
        return InvalidValue(f"{code}: {message}")
    if code in RETRYABLE_CODES:
        return Retryable(f"{code}: {message}", code)
    if code in CONNECTION_CODES or isinstance(exc, pymysql.err.InterfaceError):
        return Retryable(f"{code}: {message}", code or 0, connection_lost=True)
    return DatabaseError(f"{code}: {message}")


@dataclass(frozen=True)
class DatabaseUrl:
    """`mysql://user:password@host:port/database`; several hosts (`h1:3306,h2:3306`) name the nodes
    of one cluster: connections go to the first that answers, and move on when it is lost."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)  # a URL in a log line or a traceback must not carry it
    database: str = ""
    more_hosts: tuple[tuple[str, int], ...] = ()

    @property
    def hosts(self) -> tuple[tuple[str, int], ...]:
        return ((self.host, self.port), *self.more_hosts)

    @classmethod
    def parse(cls, url: str) -> "DatabaseUrl":
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mysql+pymysql", "mariadb"):
            raise ValueError(f"database URL must start with mysql:// (got {parts.scheme!r})")
        database = parts.path.lstrip("/")
        if not database:
            raise ValueError("database URL must name a database: mysql://user:pass@host:port/db")
        credentials, _, host_list = parts.netloc.rpartition("@")
        user, _, password = credentials.partition(":")
        hosts = [_host_and_port(item) for item in host_list.split(",")] if host_list else [("127.0.0.1", 3306)]
        return cls(
            host=hosts[0][0],
            port=hosts[0][1],
            user=unquote(user or "root"),
            password=unquote(password),
            database=database,
            more_hosts=tuple(hosts[1:]),
        )

    def index_of(self, conn) -> int:
        """The position in `hosts` of the host connection `conn` went to (0 when none of them)."""
        hosts = self.hosts
        return hosts.index((conn.host, conn.port)) if (conn.host, conn.port) in hosts else 0

    def with_database(self, database: str) -> "DatabaseUrl":
        return replace(self, database=database)

    def on_host(self, index: int) -> "DatabaseUrl":
        """The same URL with its hosts listed from the `index`th on (then the ones before it)."""
        hosts = self.hosts[index:] + self.hosts[:index]
        return replace(self, host=hosts[0][0], port=hosts[0][1], more_hosts=hosts[1:])

    def url(self) -> str:
        """The URL again, every host listed (the password too: for a process's environment, not a log)."""
        from urllib.parse import quote

        auth = quote(self.user, safe="") + (":" + quote(self.password, safe="") if self.password else "")
        hosts = ",".join(f"{_netloc_host(host)}:{port}" for host, port in self.hosts)
        return f"mysql://{auth}@{hosts}/{self.database}"

    def yoyo_url(self) -> str:
        """For yoyo, which knows one host: the first."""
        return replace(self, more_hosts=()).url()


def _host_and_port(item: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` of a URL's host list."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = item.partition(":")
    if not host:
        raise ValueError(f"database URL: an empty host in {item!r}")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"database URL: {port!r} is not a port")
    return host, int(port) if port else 3306


def _netloc_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def connect(url: DatabaseUrl, database: bool = True, autocommit: bool = False) -> pymysql.connections.Connection:
    """A connection in Weave's session settings (UTC, READ COMMITTED, strict, FOUND_ROWS) to the
    first of the URL's hosts that answers and is ready; the last failure when none is."""
    failure: pymysql.err.MySQLError | None = None
    for host, port in url.hosts:
        try:
            return _connect_to(url, host, port, database, autocommit)
        except pymysql.err.MySQLError as exc:
            if not isinstance(translate(exc), Retryable) or len(url.hosts) == 1:
                raise  # a wrong password or an unknown database is wrong on every node
            failure = exc
    raise failure


def _connect_to(url: DatabaseUrl, host: str, port: int, database: bool, autocommit: bool):
    conn = driver.Connection(
        host=host,
        port=port,
        user=url.user,
        password=url.password,
        database=url.database if database else None,
        charset="utf8mb4",
        autocommit=autocommit,
        # Matched rows, not changed rows: a guarded UPDATE that sets a value to itself still counts.
        # Several statements per round trip: `Tx.later` sends queued writes with the next statement.
        client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
        cursorclass=driver.DictCursor,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        write_timeout=WRITE_TIMEOUT_SECONDS,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'")
            cur.execute("SET SESSION innodb_lock_wait_timeout = %s", (LOCK_WAIT_TIMEOUT_SECONDS,))
            # Metadata locks (DDL) default to a year: fail instead of hanging behind a forgotten session.
            cur.execute("SET SESSION lock_wait_timeout = %s", (METADATA_LOCK_WAIT_SECONDS,))
            # Authentication reads a credential's queue grants with GROUP_CONCAT (MySQL's default cap: 1 KiB).
            cur.execute("SET SESSION group_concat_max_len = 1048576")
            _join_cluster_session(cur, read_only=autocommit)
        conn.commit()
    except BaseException:
        _close_quietly(conn)
        raise
    return conn


def _join_cluster_session(cur, read_only: bool) -> None:
    """On a Galera node (one round trip tells, once per connection): refuse the node unless it is ready (a joining or cut-off node takes
    connections but answers statements with 1047), and make read-only units causal.

    A node applies the other nodes' commits a moment after they are acknowledged. A write unit
    needs nothing more: what it decides on it reads under a lock, and a decision against a stale
    row loses at certification and is re-run. A read-only unit (a GET, authentication) would see
    the cluster as it was before a write the client was already told about, e.g. a credential
    revoked through another node: `wsrep_sync_wait = 1` makes each of its reads wait until this
    node has applied every commit the cluster had when the read began."""
    cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
    found = cur.fetchone()
    if not found or found["Value"] != "ON":
        return  # one server, or a server that is not a Galera node
    cur.execute("SHOW STATUS LIKE 'wsrep_ready'")
    ready = cur.fetchone()
    if not ready or ready["Value"] != "ON":
        raise pymysql.err.OperationalError(NODE_NOT_READY, "WSREP has not yet prepared node for application use")
    if read_only:
        cur.execute("SET SESSION wsrep_sync_wait = 1")


# Follows a guarded change in its batch (`Tx.later`): it fails with SUBQUERY_RETURNS_ROWS unless
# the change matched exactly one row. ROW_COUNT() is the previous statement's count, of matched
# rows with CLIENT.FOUND_ROWS (an UPDATE that sets a row to what it holds still counts).
MATCHED_ONE_ROW = "SET @matched_one_row = (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> 1)"


def _guarded(text: str, what: str | None) -> list[tuple[str, str | None]]:
    """A statement of a batch, followed by its guard when it must match one row (`what`)."""
    return [(text, None), (MATCHED_ONE_ROW, what)] if what is not None else [(text, None)]


class DatabaseClock:
    """Production time: the database's UTC clock, so every node agrees (I5)."""

    def now(self, tx: "Tx") -> datetime:
        return tx.one("SELECT UTC_TIMESTAMP(6) AS now")["now"]


class ControlledClock:
    """Test time: starts at a fixed instant and moves only when told to."""

    def __init__(self, start: datetime = datetime(2026, 11, 30, 7, 0, 0)):
        self._now = start
        self._lock = threading.Lock()

    def now(self, tx=None) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when

    def advance(self, seconds: float = 0, **kwargs) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds, **kwargs)
            return self._now


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
    other than a lock taken by writing (`lock_by_writing`) and the bookkeeping of `afterwards`.
    A unit that ends undecided is rolled back instead of committed, and its bookkeeping is applied
    alone after the rollback, in the same round trip."""

    def __init__(self, cursor, clock, memo: dict | None = None, maybe_committed: bool = False):
        self.cursor = cursor
        self._clock = clock
        self._now: datetime | None = None
        self._queued: list[tuple[str, str | None]] = []  # (statement as sent, `what` when it must match one row)
        self._afterwards: list[tuple[str, str | None]] = []
        self.decided = False
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

    def lock_by_writing(self, sql: str, params: tuple | dict = ()) -> None:
        """Queue a write whose only purpose is the row lock it takes (and, on Galera, a row that
        every unit locking it writes: `instances.mark_deciding`); it decides nothing, so a unit
        that writes nothing else is rolled back."""
        self._queued.append((self.cursor.mogrify(sql, params), None))

    def afterwards(self, sql: str, params: tuple | dict = (), expect_one: str | None = None) -> None:
        """Bookkeeping that stands whether or not the unit decides (a look that was done, the next
        time to look): sent with COMMIT when the unit decided something (guarded by `expect_one`
        like `later`), else alone after its rollback (unguarded: the rows it held are free then).
        It must need none of the unit's locks to be right on its own."""
        self._afterwards.append((self.cursor.mogrify(sql, params), expect_one))

    def one(self, sql: str, params: tuple | dict = ()) -> dict | None:
        self._note_write(sql)
        self._send(sql, params)
        return self.cursor.fetchone()

    def all(self, sql: str, params: tuple | dict = ()) -> list[dict]:
        self._note_write(sql)
        self._send(sql, params)
        return list(self.cursor.fetchall())

    def _note_write(self, sql: str) -> None:
        """A statement sent for its rows is a read, unless it is not (a test's UPDATE, ANALYZE…)."""
        if not self.decided and sql.lstrip()[:6].upper() not in ("SELECT", "(SELEC"):
            self.decided = True

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

    def executemany(self, sql: str, rows: list) -> int:
        self.decided = True
        self.flush()
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
        """Commit, with the queued writes and the bookkeeping in the same round trip."""
        guarded = [item for text, what in self._afterwards for item in _guarded(text, what)]
        self._round_trip([*self._take_queued(), *guarded, ("COMMIT", None)])

    @property
    def has_bookkeeping(self) -> bool:
        return bool(self._afterwards)

    def roll_back(self) -> None:
        """End an undecided unit: roll back (queued writes are dropped), then apply the bookkeeping
        alone; one round trip."""
        self._queued = []
        afterwards = [(text, None) for text, _ in self._afterwards]
        self._round_trip([("ROLLBACK", None), *afterwards, ("COMMIT", None)] if afterwards else [("ROLLBACK", None)])

    def _send(self, sql: str, params: tuple | dict) -> int:
        """Run one statement after the queued writes, in one round trip; its matched row count (its
        rows, its insert id) are the cursor's afterwards."""
        if not self._queued:
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


class Database:
    """A pool of connections to one database plus the clock seam and the retry policy."""

    def __init__(
        self,
        url: str | DatabaseUrl,
        clock=None,
        pool_size: int = DEFAULT_POOL_SIZE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ):
        self.url = DatabaseUrl.parse(url) if isinstance(url, str) else url
        self.clock = clock or DatabaseClock()
        self.max_attempts = max_attempts
        # Idle connections by autocommit mode: transactional units use False, read-only units True.
        self._idle: dict[bool, list] = {False: [], True: []}  # most recently used last
        self._idle_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(pool_size)
        # Of the URL's hosts, the one new connections try first: the last that answered, or the
        # one after a host whose connection was lost.
        self._first_host = 0
        name = self.url.database
        metrics.POOL_MAX.labels(name).inc(pool_size)
        self._open = metrics.POOL_OPEN.labels(name)
        self._waits = metrics.POOL_WAITS.labels(name)
        self._wait_seconds = metrics.POOL_WAIT_SECONDS.labels(name)
        self._opened = metrics.CONNECTIONS_OPENED.labels(name)
        # Test seam: called with (tx, unit name) before COMMIT, to cut a transaction short.
        self.before_commit: Callable[[Tx, str], None] | None = None

    def _checkout(self, autocommit: bool) -> pymysql.connections.Connection:
        if not self._slots.acquire(blocking=False):
            self._waits.inc()
            started = time.monotonic()
            self._slots.acquire()
            self._wait_seconds.inc(time.monotonic() - started)
        with self._idle_lock:
            idle = self._idle[autocommit]
            if idle:
                return idle.pop()
        try:
            conn = connect(self.url.on_host(self._first_host), autocommit=autocommit)
        except BaseException:
            self._slots.release()
            raise
        self._first_host = self.url.index_of(conn)
        self._opened.inc()
        self._open.inc()
        return conn

    def _checkin(self, conn, reusable: bool) -> None:
        if reusable:
            with self._idle_lock:
                self._idle[conn.get_autocommit()].append(conn)
        else:
            self._close(conn)
        self._slots.release()

    def _close(self, conn) -> None:
        _close_quietly(conn)
        self._open.dec()

    def run(self, unit: Callable[..., T], *args, **kwargs) -> T:
        """Run `unit(tx, *args, **kwargs)` as one transaction, re-running it on retryable errors."""
        memo: dict = {}
        return self._retrying(
            unit, lambda maybe_committed: self._run_once(unit, args, kwargs, memo=memo, maybe_committed=maybe_committed)
        )

    def read(self, unit: Callable[..., T], *args, **kwargs) -> T:
        """Run a unit that only reads (no locks, no writes) with each statement in autocommit mode.

        Under READ COMMITTED a transaction gives every statement a fresh snapshot anyway, so the
        reader sees exactly what it would inside one, and the COMMIT round trip is spared.
        """
        return self._retrying(unit, lambda maybe_committed: self._run_once(unit, args, kwargs, autocommit=True))

    def _retrying(self, unit: Callable, once: Callable[[bool], T]) -> T:
        replay_on = getattr(unit, "replay_on", frozenset())
        budget_ends = time.monotonic() + RETRY_BUDGET_SECONDS
        maybe_committed = False
        for attempt in range(1, self.max_attempts + 1):
            try:
                return once(maybe_committed)
            except (Retryable, DuplicateKey) as exc:
                if isinstance(exc, DuplicateKey) and exc.key not in replay_on:
                    raise
                if attempt == self.max_attempts or time.monotonic() >= budget_ends:
                    metrics.DB_UNAVAILABLE.labels(unit.__name__).inc()
                    raise Unavailable(f"{unit.__name__} failed {attempt} times; last error: {exc}") from exc
                maybe_committed = maybe_committed or getattr(exc, "commit_unknown", False)
                metrics.DB_RETRIES.labels(exc.code if isinstance(exc, Retryable) else DUP_ENTRY).inc()
                log.info("retrying %s after %s (attempt %d)", unit.__name__, exc, attempt)
                time.sleep(random.uniform(0.002, 0.01) * (2**attempt))
        raise AssertionError("unreachable")

    def _run_once(self, unit, args, kwargs, autocommit: bool = False, memo=None, maybe_committed: bool = False):
        try:
            conn = self._checkout(autocommit)
        except pymysql.err.MySQLError as exc:
            error = translate(exc)
            self._forget_idle_if_lost(error)
            raise error from exc
        reusable = False
        committing = False
        try:
            # No BEGIN round trip: with autocommit off, the first statement opens the transaction.
            with conn.cursor() as cursor:
                tx = Tx(cursor, self.clock, memo, maybe_committed)
                result = unit(tx, *args, **kwargs)
                if self.before_commit is not None:
                    self.before_commit(tx, unit.__name__)
                if autocommit:
                    tx.flush()
                elif tx.decided:
                    committing = True
                    tx.commit()
                else:
                    committing = tx.has_bookkeeping
                    tx.roll_back()
            reusable = True
            return result
        except pymysql.err.MySQLError as exc:
            # 1205 leaves the transaction open: always roll back before anything else.
            error = translate(exc)
            if committing and isinstance(error, Retryable) and error.connection_lost:
                error.commit_unknown = True
            reusable = _rollback_quietly(conn) and not isinstance(error, Retryable)
            self._forget_idle_if_lost(error, conn)
            raise error from exc
        except BaseException:
            reusable = _rollback_quietly(conn)
            raise
        finally:
            self._checkin(conn, reusable)

    def _forget_idle_if_lost(self, error: DatabaseError, conn=None) -> None:
        """A lost connection: the idle ones most likely went with it (a restarted server, a cut
        network), so they are closed rather than handed to the next attempts one dead one at a time;
        with several hosts, new connections try the next one first (a cluster's node went away)."""
        if isinstance(error, Retryable) and error.connection_lost:
            if conn is not None and len(self.url.hosts) > 1:
                self._first_host = (self.url.index_of(conn) + 1) % len(self.url.hosts)
            self.close()

    def attempt(self, unit: Callable[..., T], *args, **kwargs) -> T:
        """Run `unit(tx, ...)` once, without retries: for callers with their own failure policy (K2).

        A `Retryable` with `commit_unknown` may have committed: the caller's policy must hold either way."""
        return self._run_once(unit, args, kwargs)

    def ping(self) -> None:
        """Raise `DatabaseError` unless the database answers."""
        self.read(_select_one)

    def close(self) -> None:
        with self._idle_lock:
            idle = [conn for connections in self._idle.values() for conn in connections]
            for connections in self._idle.values():
                connections.clear()
        for conn in idle:
            self._close(conn)


def unit_of_work(fn: Callable[..., T] | None = None, *, replay_on: tuple[str, ...] = ()):
    """Turn `fn(tx, ...)` into `fn(db, ...)` that runs as one retried transaction.

    `@unit_of_work(replay_on=("uq_…",))` also re-runs the unit when one of those UNIQUE keys
    fires: the unit declares that such a duplicate means "a concurrent twin won, replay it".
    `fn.once(db, ...)` runs it as one transaction without retries.
    """
    if fn is None:
        return lambda f: unit_of_work(f, replay_on=replay_on)
    fn.replay_on = frozenset(replay_on)

    @functools.wraps(fn)
    def run(db: Database, *args: Any, **kwargs: Any) -> T:
        return db.run(fn, *args, **kwargs)

    run.once = lambda db, *args, **kwargs: db.attempt(fn, *args, **kwargs)
    return run


def read_only(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn `fn(tx, ...)`, which only reads without locks, into `fn(db, ...)` run by `Database.read`."""

    @functools.wraps(fn)
    def run(db: Database, *args: Any, **kwargs: Any) -> T:
        return db.read(fn, *args, **kwargs)

    return run


def _select_one(tx: Tx) -> None:
    tx.one("SELECT 1")


def _rollback_quietly(conn) -> bool:
    """Roll back; False when the connection is gone (the pool then discards it)."""
    try:
        conn.rollback()
        return True
    except Exception:
        return False


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:
        pass
