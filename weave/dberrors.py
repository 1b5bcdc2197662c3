"""Database failures as Weave sees them: the one place PyMySQL's exceptions are translated
(`translate`), by MySQL's error numbers. `weave.db` raises them from its units; `weave.tx` raises
`TransitionFailed` when a guarded change matched no row."""

from __future__ import annotations

import pymysql

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
    caller should try again later.

    `unreachable`: its last attempt could not reach the database (the connection was refused or
    lost, or a Galera node was not ready); otherwise the database answered but stayed busy
    (deadlocks, lock wait timeouts). The API says which, so that what it says is true."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable

    @property
    def what(self) -> str:
        """In words, for a client: what kept the unit from running."""
        return "the database is unreachable" if self.unreachable else "the database is busy"


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
