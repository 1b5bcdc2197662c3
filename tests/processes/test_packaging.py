"""An installed Weave migrates and serves with what its wheel holds; a broken install says so; the
serving path loads no development tooling."""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from yoyo import read_migrations

from weave import __version__ as weave_version
from weave import migrate
from weave.cli import main
from weave.db import connect
from weave.dburl import DatabaseUrl
from weave.devdb import free_port

ROOT = Path(__file__).resolve().parents[2]
# What a build must not see: local state, and earlier builds (setuptools reuses build/ and keeps
# files there that the source no longer has).
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".weave", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"
)
# The installed commands must find nothing of the checkout through the environment.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(*argv, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@dataclass
class Build:
    wheel: Path
    output: str  # what the build printed, stdout and stderr


def build_wheel(folder: Path) -> Build:
    """A wheel of the checkout as it is, built from a copy so that the build writes nothing here."""
    source = folder / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    done = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", folder / "dist", source)
    (wheel,) = (folder / "dist").glob("weave_workflows-*.whl")  # the distribution's name (issue 28, item 15)
    return Build(wheel, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Build:
    return build_wheel(tmp_path_factory.mktemp("build"))


@pytest.mark.slow
def test_issue_28_16_the_wheel_builds_without_warnings_and_holds_its_data_files(built):
    # setuptools warned ("Package would be ignored", twice, about 90 lines) while the console's
    # folders of data were not declared as packages.
    assert "would be ignored" not in built.output and "Warning" not in built.output, built.output
    names = set(zipfile.ZipFile(built.wheel).namelist())
    for folder, files in (
        ("weave/console/templates", (ROOT / "weave/console/templates").glob("*.html")),
        ("weave/console/static", (ROOT / "weave/console/static").glob("*.css")),
        ("weave/migrations", (ROOT / "migrations").glob("*.sql")),
        ("weave/schemas", (ROOT / "weave/schemas").glob("*.json")),
    ):
        expected = {f"{folder}/{path.name}" for path in files}
        assert expected and expected <= names, folder
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    headers = zipfile.ZipFile(built.wheel).read(metadata).decode().split("\n\n", 1)[0].splitlines()
    assert "Name: weave-workflows" in headers
    assert f"Version: {weave_version}" in headers


def install(wheel: Path, venv: Path) -> Path:
    """A fresh virtualenv with the wheel and its dependencies; returns its bin folder. The venv gets
    no pip of its own: this checkout's pip installs into it (`--python`), which saves seconds."""
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", wheel)
    return venv / "bin"


def http_json(port: int, method: str, path: str, body=None, token: str | None = None) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def wait_until_ready(server: subprocess.Popen, port: int, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert server.poll() is None, f"weave serve exited {server.returncode}:\n{log.read_text()}"
        try:
            if http_json(port, "GET", "/readyz")[0] == 200:
                return
        except OSError:  # not listening yet
            pass
        assert time.monotonic() < deadline, f"/readyz did not answer 200 within {timeout}s:\n{log.read_text()}"
        time.sleep(0.1)


@pytest.mark.slow
def test_an_installed_wheel_migrates_and_serves_from_outside_the_checkout(tmp_path, scratch_database, built):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert ROOT not in elsewhere.parents

    wheel = built.wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"weave"}  # no top-level sql
    assert "weave/bench.py" not in names  # development tooling stays in scripts/

    bin_ = install(wheel, tmp_path / "venv")
    url = scratch_database("installed")
    env = {**CLEAN_ENV, "WEAVE_DATABASE_URL": url.yoyo_url()}
    weave = bin_ / "weave"
    assert run(weave, "--version", cwd=elsewhere, env=env).stdout == f"weave {weave_version}\n"

    expected = [m.id for m in read_migrations(str(ROOT / "migrations"))]
    migrated = run(weave, "migrate", cwd=elsewhere, env=env)
    assert migrated.stdout.strip() == f"applied {len(expected)} migration(s): {', '.join(expected)}"
    assert migrate.pending(url) == []  # judged by the checkout: the installed set is the whole set

    no_sql = subprocess.run(
        [bin_ / "python", "-c", "import sql"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert no_sql.returncode != 0 and "No module named 'sql'" in no_sql.stderr
    where = run(
        bin_ / "python", "-c", "import weave.sql.tenancy; print(weave.sql.tenancy.__file__)", cwd=elsewhere, env=env
    )
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv")

    def admin(*argv) -> dict:
        return json.loads(run(weave, "admin", *argv, "--json", cwd=elsewhere, env=env).stdout)

    admin("namespace", "create", "shop")
    admin("queue", "create", "shop", "inventory", "--permits", "2")
    admin("app", "create", "shop", "web")
    token = admin(
        "credential",
        "create",
        "shop",
        "web",
        "--actor",
        "packager",
        "--scope",
        "definitions:write",
        "--queue",
        "inventory",
    )["token"]

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [weave, "serve", "--port", str(port)], cwd=elsewhere, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_until_ready(server, port, log)
        document = {
            "name": "order",
            "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}],
        }
        status, body = http_json(port, "POST", "/v1/namespaces/shop/definitions", document, token)
        assert (status, body["name"], body["version"]) == (201, "order", 1), body
        # The review console's templates and stylesheet are package data of the wheel.
        for path, shows in (("/console/", b"Sign in"), ("/console/style.css", b"--accent")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            answer = conn.getresponse()
            assert answer.status == 200 and shows in answer.read(), path
            conn.close()
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            raise AssertionError(f"weave serve did not stop on SIGTERM:\n{log.read_text()}") from None


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


def test_weave_migrate_without_migrations_exits_non_zero_naming_the_folder(
    no_migrations, scratch_database, monkeypatch, capsys
):
    monkeypatch.setattr(migrate, "migrations_dir", lambda: no_migrations)
    monkeypatch.setenv("WEAVE_DATABASE_URL", scratch_database("unmigrated").yoyo_url())
    assert main(["migrate"]) == 1
    assert f"weave: no migrations found in {no_migrations}" in capsys.readouterr().err
    assert not database_exists(scratch_database("unmigrated"))  # a broken install leaves nothing behind


def database_exists(url: DatabaseUrl) -> bool:
    conn = connect(url, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (url.database,))
            return cur.fetchone() is not None
    finally:
        conn.close()


def test_a_migration_file_yoyo_cannot_read_is_a_clear_error(tmp_path, scratch_database, monkeypatch, capsys):
    (tmp_path / "0001.broken.py").write_text("this is not python\n")
    monkeypatch.setattr(migrate, "migrations_dir", lambda: tmp_path)
    monkeypatch.setenv("WEAVE_DATABASE_URL", scratch_database("broken").yoyo_url())
    assert main(["migrate"]) == 1
    assert f"weave: the migrations in {tmp_path} cannot be read" in capsys.readouterr().err


def test_readyz_is_503_naming_the_folder_when_no_migrations_are_installed(no_migrations, migrated_url, monkeypatch):
    import falcon.testing

    from weave.app import create_app
    from weave.config import Config
    from weave.db import Database

    monkeypatch.setattr(migrate, "migrations_dir", lambda: no_migrations)
    database = Database(migrated_url)
    try:
        result = falcon.testing.TestClient(create_app(Config(migrated_url.yoyo_url()), database)).simulate_get(
            "/readyz"
        )
    finally:
        database.close()
    assert (result.status_code, result.json["code"]) == (503, "UNAVAILABLE")
    assert str(no_migrations) in result.json["detail"]


def test_the_api_server_does_not_import_the_development_database_module():
    # `weave serve` loads weave.cli, which loads weave.server; only `weave dev` needs weave.devdb.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, weave.cli, weave.server; print('weave.devdb' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"
