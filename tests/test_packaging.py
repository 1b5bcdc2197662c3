"""A broken install says so; the serving path loads no development tooling."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from weave import migrate
from weave.cli import main
from weave.db import DatabaseUrl


@pytest.fixture(params=["empty", "absent"])
def no_migrations(request, tmp_path) -> Path:
    """A migrations folder with nothing in it, or none at all: what a broken install looks like."""
    folder = tmp_path / "migrations"
    if request.param == "empty":
        folder.mkdir()
    return folder


def test_applying_no_migrations_is_an_error_naming_the_folder(no_migrations):
    unused = DatabaseUrl.parse("mysql://root@127.0.0.1:1/unused")  # the files are looked for first
    for attempt in (migrate.apply, migrate.pending, migrate.rollback):
        with pytest.raises(migrate.MigrationsMissing, match=re.escape(f"no migrations found in {no_migrations}")):
            attempt(unused, directory=no_migrations)


def test_weave_migrate_without_migrations_exits_non_zero_naming_the_folder(no_migrations, scratch_database,
                                                                            monkeypatch, capsys):
    monkeypatch.setattr(migrate, "migrations_dir", lambda: no_migrations)
    monkeypatch.setenv("WEAVE_DATABASE_URL", scratch_database("unmigrated").yoyo_url())
    assert main(["migrate"]) == 1
    assert f"weave: no migrations found in {no_migrations}" in capsys.readouterr().err


def test_the_api_server_does_not_import_the_development_database_module():
    # `weave serve` loads weave.cli, which loads weave.server; only `weave dev` needs weave.devdb.
    loaded = subprocess.run([sys.executable, "-c", "import sys, weave.cli, weave.server; "
                             "print('weave.devdb' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
