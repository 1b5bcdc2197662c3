"""The `weave` command: migrate and the pinned admin commands (SPEC §12)."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest

from weave import auth, migrate, schemas
from weave.cli import DEV_DEFINITION, DEV_POLL_DEFINITION, main
from weave.rules import definitions as definition_rules
from weave.sql import tenancy


@pytest.fixture
def env_url(config, database, monkeypatch):
    monkeypatch.setenv("WEAVE_DATABASE_URL", config.database_url)
    return config.database_url


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_admin_commands_create_a_usable_tenant(env_url, capsys, database, client):
    assert run_json(capsys, "admin", "namespace", "create", "shop")["namespace"] == "shop"
    assert run_json(capsys, "admin", "queue", "create", "shop", "inventory", "--permits", "3")["max_permits"] == 3
    app = run_json(capsys, "admin", "app", "create", "shop", "web", "--signals-per-minute", "60")
    assert (app["status"], app["signals_per_minute"]) == ("ACTIVE", 60)
    created = run_json(
        capsys,
        "admin",
        "credential",
        "create",
        "shop",
        "web",
        "--actor",
        "alice",
        "--scope",
        "definitions:write",
        "--scope",
        "workflows:read",
        "--queue",
        "inventory",
    )
    assert set(created) == {"credential_id", "token"} and created["token"].startswith("wv_")
    principal = tenancy.authenticate(database, auth.token_hash(created["token"]))
    assert principal.actor == "alice" and principal.namespace == "shop"
    assert principal.scopes == {"definitions:write", "workflows:read"} and principal.queues == {"inventory"}

    headers = {"Authorization": f"Bearer {created['token']}"}
    assert client.simulate_get("/v1/namespaces/shop/workflows/x", headers=headers).status_code == 404
    revoked = run_json(capsys, "admin", "credential", "revoke", "shop", created["credential_id"])
    assert revoked == {"credential_id": created["credential_id"], "revoked": True}
    assert client.simulate_get("/v1/namespaces/shop/workflows/x", headers=headers).status_code == 401

    assert run_json(capsys, "admin", "app", "disable", "shop", "web")["status"] == "DISABLED"
    assert run_json(capsys, "admin", "app", "enable", "shop", "web")["status"] == "ACTIVE"
    quota = database.run(lambda tx: tx.one("SELECT signals_per_minute FROM applications WHERE name = 'web'"))
    assert quota["signals_per_minute"] == 60


def test_admin_errors_are_clear_and_exit_non_zero(env_url, capsys):
    assert main(["admin", "namespace", "create", "shop"]) == 0
    assert main(["admin", "namespace", "create", "shop"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["admin", "queue", "create", "nowhere", "q", "--permits", "1"]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["admin", "credential", "create", "shop", "app", "--actor", "a", "--scope", "root:all"])
    with pytest.raises(SystemExit):
        main(["admin", "queue", "create", "shop", "bad name", "--permits", "1"])


def test_credential_expiry_is_honoured(env_url, capsys, database, clock):
    run_json(capsys, "admin", "namespace", "create", "shop")
    run_json(capsys, "admin", "app", "create", "shop", "web")
    created = run_json(
        capsys,
        "admin",
        "credential",
        "create",
        "shop",
        "web",
        "--actor",
        "bob",
        "--scope",
        "workflows:read",
        "--expires-in",
        "10",
    )
    hashed = auth.token_hash(created["token"])
    # The CLI stamps times with the database clock; the API's test clock is then set around expiry.
    row = database.run(lambda tx: tx.one("SELECT created_at, expires_at FROM credentials"))
    assert row["expires_at"] - row["created_at"] == timedelta(seconds=10)
    clock.set(row["expires_at"] - timedelta(microseconds=1))
    assert tenancy.authenticate(database, hashed) is not None
    clock.set(row["expires_at"])
    assert tenancy.authenticate(database, hashed) is None


def test_weave_migrate_command_applies_everything(scratch_database):
    url = scratch_database("cli")
    env = {**os.environ, "WEAVE_DATABASE_URL": url.yoyo_url()}
    done = subprocess.run([sys.executable, "-m", "weave.cli", "migrate"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"applied {len(migrate.shipped())} migration(s)" in done.stdout
    assert migrate.pending(url) == []
    again = subprocess.run([sys.executable, "-m", "weave.cli", "migrate"], env=env, capture_output=True, text=True)
    assert "none pending" in again.stdout


def test_missing_database_url_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("WEAVE_DATABASE_URL", raising=False)
    with pytest.raises(SystemExit, match="WEAVE_DATABASE_URL"):
        main(["migrate"])


def test_body_cap_comes_from_the_environment_or_the_default(monkeypatch):
    from weave.config import DEFAULT_MAX_BODY_BYTES, max_body_bytes_from_env

    monkeypatch.delenv("WEAVE_MAX_BODY_BYTES", raising=False)
    assert max_body_bytes_from_env() == DEFAULT_MAX_BODY_BYTES == 1024 * 1024
    monkeypatch.setenv("WEAVE_MAX_BODY_BYTES", "4096")
    assert max_body_bytes_from_env() == 4096
    for bad in ("0", "-1", "1e6", "lots"):
        monkeypatch.setenv("WEAVE_MAX_BODY_BYTES", bad)
        with pytest.raises(SystemExit, match="WEAVE_MAX_BODY_BYTES"):
            max_body_bytes_from_env()


def test_issue_10_1_idle_timeout_comes_from_the_flag_the_environment_or_the_default(monkeypatch):
    from weave.cli import _server_config, build_parser
    from weave.config import DEFAULT_IDLE_TIMEOUT_SECONDS, idle_timeout_from_env
    from weave.db import DatabaseUrl

    def idle_timeout(*argv: str) -> int:
        args = build_parser().parse_args(list(argv))
        return _server_config(args, DatabaseUrl.parse("mysql://u:p@127.0.0.1:3306/db")).idle_timeout_seconds

    monkeypatch.delenv("WEAVE_IDLE_TIMEOUT", raising=False)
    assert idle_timeout("serve") == DEFAULT_IDLE_TIMEOUT_SECONDS == 10
    monkeypatch.setenv("WEAVE_IDLE_TIMEOUT", "3")
    assert idle_timeout("serve") == idle_timeout("dev") == 3
    assert idle_timeout("serve", "--idle-timeout", "5") == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--idle-timeout", "0"])
    for bad in ("0", "-1", "1.5", "soon"):
        monkeypatch.setenv("WEAVE_IDLE_TIMEOUT", bad)
        with pytest.raises(SystemExit, match="WEAVE_IDLE_TIMEOUT"):
            idle_timeout_from_env()


@pytest.mark.parametrize("document", [DEV_DEFINITION, DEV_POLL_DEFINITION], ids=["order", "shipment"])
def test_weave_dev_definitions_pass_the_checks_of_the_publish_api(document):
    # `weave dev` publishes them without going through the API, so check here what the API checks (D1).
    schemas.validate("definition", document)
    assert definition_rules.problems(document) == []
