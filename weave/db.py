"""The pool of connections and the unit of work's retry policy.

Beside it (issue 27): `weave.dburl` parses the URL, `weave.tx` is the open transaction a unit
works in (`Tx`, with the clock seam), and `weave.dberrors` is the only module that translates
PyMySQL's exceptions (`weave.devdb` only waits for its own server to accept a connection); the
errors are raised from here and importable from here. A unit run with retries (`Database.run`, `Database.read`,
`Database.snapshot`, `@unit_of_work`, `@read_only`, `@snapshot_read`) ends in success, `DuplicateKey` (a UNIQUE key it does not replay on
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
from typing import Any, Callable, TypeVar

import pymysql
from pymysql.constants import CLIENT

from weave import driver, metrics
from weave.config import DEFAULT_POOL_SIZE
from weave.dberrors import (  # noqa: F401  (re-exported: callers catch them as weave.db's)
    CONNECTION_CODES,
    DUP_ENTRY,
    NODE_NOT_READY,
    DatabaseError,
    DuplicateKey,
    InvalidValue,
    Retryable,
    TransitionFailed,
    Unavailable,
    translate,
)
from weave.dburl import DatabaseUrl
from weave.tx import DatabaseClock, Tx

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 6
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


# Every connection's session, before its first unit (also the drivers bench's mysqlclient ones).
SESSION_SETTINGS: tuple[tuple[str, tuple], ...] = (
    ("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", ()),
    ("SET time_zone = '+00:00'", ()),
    ("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'", ()),
    ("SET SESSION innodb_lock_wait_timeout = %s", (LOCK_WAIT_TIMEOUT_SECONDS,)),
    # Metadata locks (DDL) default to a year: fail instead of hanging behind a forgotten session.
    ("SET SESSION lock_wait_timeout = %s", (METADATA_LOCK_WAIT_SECONDS,)),
    # Authentication reads a credential's queue grants with GROUP_CONCAT (MySQL's default cap: 1 KiB).
    ("SET SESSION group_concat_max_len = 1048576", ()),
)


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
            for statement, params in SESSION_SETTINGS:
                cur.execute(statement, params or None)
            conn.commit_alone = _join_cluster_session(cur, read_only=autocommit)
        conn.commit()
    except BaseException:
        _close_quietly(conn)
        raise
    return conn


def _join_cluster_session(cur, read_only: bool) -> bool:
    """On a Galera node (one round trip tells, once per connection): refuse the node unless it is ready (a joining or cut-off node takes
    connections but answers statements with 1047), and make read-only units causal. Whether the
    server is a Galera node: there a unit's COMMIT goes in a round trip of its own (`Tx.commit`).

    A node applies the other nodes' commits a moment after they are acknowledged. A write unit
    needs nothing more: what it decides on it reads under a lock, and a decision against a stale
    row loses at certification and is re-run. A read-only unit (a GET, authentication) would see
    the cluster as it was before a write the client was already told about, e.g. a credential
    revoked through another node: `wsrep_sync_wait = 1` makes each of its reads wait until this
    node has applied every commit the cluster had when the read began."""
    cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
    found = cur.fetchone()
    if not found or found["Value"] != "ON":
        return False  # one server, or a server that is not a Galera node
    cur.execute("SHOW STATUS LIKE 'wsrep_ready'")
    ready = cur.fetchone()
    if not ready or ready["Value"] != "ON":
        raise pymysql.err.OperationalError(NODE_NOT_READY, "WSREP has not yet prepared node for application use")
    if read_only:
        cur.execute("SET SESSION wsrep_sync_wait = 1")
    return True


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

    def snapshot(self, unit: Callable[..., T], *args, **kwargs) -> T:
        """Run a unit that only reads (no locks, no writes) in one consistent snapshot: a
        REPEATABLE READ, READ ONLY transaction whose every statement sees the database as the
        first one did. For a document that must hold together across many statements (an
        export, L2); it takes no lock, so what it costs the writers is the undo history kept
        while it runs, and it must be short (docs/decisions.md, "Export"). It runs on a
        read-only unit's connection (autocommit, causal on a Galera node: the snapshot is taken
        by the first read, after the node caught up) and is re-run whole on retryable errors."""
        return self._retrying(unit, lambda maybe_committed: self._run_once(_in_snapshot(unit), args, kwargs, True))

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
                    raise Unavailable(
                        f"{unit.__name__} failed {attempt} times; last error: {exc}",
                        unreachable=getattr(exc, "connection_lost", False),
                    ) from exc
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
                tx = Tx(cursor, self.clock, memo, maybe_committed, commit_alone=conn.commit_alone)
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


# The isolation level applies to the next transaction only: the connection keeps READ COMMITTED.
BEGIN_SNAPSHOT = ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION READ ONLY")


def _in_snapshot(unit: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(unit)
    def run(tx: Tx, *args: Any, **kwargs: Any) -> T:
        for statement in BEGIN_SNAPSHOT:
            tx.cursor.execute(statement)
        result = unit(tx, *args, **kwargs)
        tx.cursor.execute("COMMIT")  # nothing to commit: ends the transaction and its read view
        return result

    return run


def snapshot_read(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn `fn(tx, ...)`, which only reads without locks, into `fn(db, ...)` run by `Database.snapshot`."""

    @functools.wraps(fn)
    def run(db: Database, *args: Any, **kwargs: Any) -> T:
        return db.snapshot(fn, *args, **kwargs)

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
