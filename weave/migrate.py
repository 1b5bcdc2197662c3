"""Schema migrations (yoyo, SQL files in `migrations/` with rollbacks) and the readiness check.

Upgrade procedure (M4): stop old writers, apply every migration, start the new version.
`/readyz` answers 503 while `pending()` is not empty.
"""

from __future__ import annotations

from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import pymysql
from yoyo import get_backend, read_migrations
from yoyo.exceptions import BadMigration

from weave.db import connect, translate
from weave.dburl import DatabaseUrl


class MigrationsMissing(RuntimeError):
    """No usable migration files where they should be: a broken install, never "nothing to do"."""


def migrations_dir() -> Path:
    """The migrations shipped with this Weave: package data `weave/migrations` of an installed
    wheel, or the checkout's top-level `migrations/` (an editable install maps the package there)."""
    shipped = resources.files("weave").joinpath("migrations")
    if shipped.is_dir():
        return Path(str(shipped))
    return Path(__file__).resolve().parent.parent / "migrations"


def shipped(directory: Path | None = None):
    """The migrations of this installation (yoyo's list); `MigrationsMissing` when there are none
    or yoyo cannot read them."""
    directory = directory or migrations_dir()
    try:
        migrations = read_migrations(str(directory)) if directory.is_dir() else []
        for migration in migrations:
            migration.load()  # yoyo reads files lazily: find a broken one before touching a database
    except BadMigration as exc:
        raise MigrationsMissing(
            f"the migrations in {directory} cannot be read ({exc}): this Weave installation is broken"
        ) from None
    if not migrations:
        raise MigrationsMissing(f"no migrations found in {directory}: this Weave installation is incomplete")
    return migrations


def ensure_database(url: DatabaseUrl) -> None:
    """Create the database if it does not exist, always in utf8mb4 (Debian defaults to latin1), on
    the first of the URL's hosts that answers."""
    try:
        conn = connect(url, database=False, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE DATABASE IF NOT EXISTS `{_identifier(url.database)}` "
                    "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                )
        finally:
            conn.close()
    except pymysql.err.MySQLError as exc:
        raise translate(exc) from exc


def _identifier(name: str) -> str:
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"database name {name!r} must be letters, digits, '_' or '-'")
    return name


@contextmanager
def _backend_and_migrations(url: DatabaseUrl, directory: Path):
    """yoyo's backend, closed afterwards: an idle connection left in a transaction would hold
    metadata locks and block the next DDL (a migration, a DROP DATABASE) indefinitely."""
    migrations = shipped(directory)
    backend = get_backend(_answering(url).yoyo_url())
    try:
        yield backend, migrations
    finally:
        backend.connection.close()


def _answering(url: DatabaseUrl) -> DatabaseUrl:
    """`url` with the first of its hosts that answers (and, on a cluster, is ready) listed first:
    yoyo speaks to one host, the first, and a cluster's first node may be the one that is down."""
    if len(url.hosts) == 1:
        return url
    try:
        conn = connect(url, database=False, autocommit=True)
    except pymysql.err.MySQLError as exc:
        raise translate(exc) from exc
    answered = url.index_of(conn)
    conn.close()
    return url.on_host(answered)


def apply(url: DatabaseUrl, directory: Path | None = None, upto: str | None = None) -> list[str]:
    """Apply pending migrations (all, or up to and including `upto`); return their ids."""
    with _backend_and_migrations(url, directory or migrations_dir()) as (backend, migrations), backend.lock():
        todo = backend.to_apply(migrations)
        if upto is not None:
            ids = [m.id for m in migrations]
            todo = todo.filter(lambda m: ids.index(m.id) <= ids.index(upto))
        backend.apply_migrations(todo)
    return [m.id for m in todo]


def rollback(url: DatabaseUrl, directory: Path | None = None) -> list[str]:
    """Roll back every applied migration, newest first; return their ids."""
    with _backend_and_migrations(url, directory or migrations_dir()) as (backend, migrations), backend.lock():
        todo = backend.to_rollback(migrations)
        backend.rollback_migrations(todo)
    return [m.id for m in todo]


def pending(url: DatabaseUrl, directory: Path | None = None) -> list[str]:
    with _backend_and_migrations(url, directory or migrations_dir()) as (backend, migrations):
        return [m.id for m in backend.to_apply(migrations)]
