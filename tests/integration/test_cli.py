"""The `weave` command: migrate and the pinned admin commands (SPEC §12)."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest

from weave import auth, migrate, schemas
from weave.cli import DEV_DEFINITION, DEV_POLL_DEFINITION, DEV_REVIEW_DEFINITION, main
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
    assert done.stderr == ""  # yoyo's line per step applied stays out (issue 15)
    assert migrate.pending(url) == []
    again = subprocess.run([sys.executable, "-m", "weave.cli", "migrate"], env=env, capture_output=True, text=True)
    assert "none pending" in again.stdout


def test_missing_database_url_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("WEAVE_DATABASE_URL", raising=False)
    assert refused(capsys, "migrate") == "set WEAVE_DATABASE_URL=mysql://user:pass@host:port/db or pass --database-url"


# ---- every argument is checked before anything runs (issue 10, item 10) -------------------------------


def refused(capsys, *argv) -> str:
    """Run a command line that must be refused as a usage error; the reason argparse printed."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: weave") and "Traceback" not in err
    assert "\x1b" not in err and "\r" not in err  # a hostile argument reaches the terminal escaped
    return err.rsplit("error: ", 1)[1].rstrip("\n")


@pytest.fixture
def shop(env_url, capsys, database, weave_tables):
    """A tenant every refused command below would otherwise succeed on, and a way to see that a
    refused command wrote nothing: the row count of every table."""
    run_json(capsys, "admin", "namespace", "create", "shop")
    run_json(capsys, "admin", "queue", "create", "shop", "inventory", "--permits", "2")
    run_json(capsys, "admin", "app", "create", "shop", "web")

    def rows() -> dict:
        def count(tx):
            return {t: tx.one(f"SELECT COUNT(*) AS n FROM `{t}`")["n"] for t in weave_tables}  # names from the schema

        return database.run(count)

    return rows


CREDENTIAL = ("admin", "credential", "create", "shop", "web", "--scope", "workflows:read")


@pytest.mark.parametrize(
    "argv, reason",
    [
        # the three cases of the issue: a datetime overflow, a database error, control characters
        (
            CREDENTIAL + ("--actor", "a", "--expires-in", "99999999999999999999"),
            "argument --expires-in: '99999999999999999999': must be a whole number from 1 to 315360000 seconds (ten years)",
        ),
        (
            CREDENTIAL + ("--actor", "a" * 129),
            "argument --actor: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (129 characters): "
            "must be 1 to 128 characters (got 129)",
        ),
        (CREDENTIAL + ("--actor", ""), "argument --actor: '': must be 1 to 128 characters (got 0)"),
        (
            CREDENTIAL + ("--actor", "alice\nforged audit line"),
            "argument --actor: 'alice\\nforged audit line': must be printable: no control, format or line-separator characters",
        ),
        (
            CREDENTIAL + ("--actor", "\x1b[31malice\x1b[0m"),
            "argument --actor: '\\x1b[31malice\\x1b[0m': must be printable: no control, format or line-separator characters",
        ),
        (
            CREDENTIAL + ("--actor", "\u202eecila"),
            "argument --actor: '\\u202eecila': must be printable: no control, format or line-separator characters",
        ),
        (CREDENTIAL + ("--actor", "alice "), "argument --actor: 'alice ': must not start or end with a space"),
        (
            CREDENTIAL + ("--actor", "system:scanner"),
            "argument --actor: 'system:scanner': 'system:' is reserved for Weave's own actors in audit",
        ),
        # the other numbers
        (
            CREDENTIAL + ("--actor", "a", "--expires-in", "0"),
            "argument --expires-in: '0': must be a whole number from 1 to 315360000 seconds (ten years)",
        ),
        (
            CREDENTIAL + ("--actor", "a", "--expires-in", "315360001"),
            "argument --expires-in: '315360001': must be a whole number from 1 to 315360000 seconds (ten years)",
        ),
        (
            CREDENTIAL + ("--actor", "a", "--expires-in", "1e6"),
            "argument --expires-in: '1e6': must be a whole number from 1 to 315360000 seconds (ten years)",
        ),
        (
            ("admin", "queue", "create", "shop", "q", "--permits", "0"),
            "argument --permits: '0': must be a whole number from 1 to 1000000",
        ),
        (
            ("admin", "queue", "create", "shop", "q", "--permits", "-3"),
            "argument --permits: '-3': must be a whole number from 1 to 1000000",
        ),
        (
            ("admin", "queue", "create", "shop", "q", "--permits", "1000001"),
            "argument --permits: '1000001': must be a whole number from 1 to 1000000",
        ),
        (
            ("admin", "queue", "create", "shop", "q", "--permits", " 7"),
            "argument --permits: ' 7': must be a whole number from 1 to 1000000",
        ),
        (
            ("admin", "queue", "create", "shop", "q", "--permits", "\u0663"),
            "argument --permits: '\u0663': must be a whole number from 1 to 1000000",
        ),
        (
            ("admin", "app", "create", "shop", "mobile", "--signals-per-minute", "4294967296"),
            "argument --signals-per-minute: '4294967296': must be a whole number from 0 to 4294967295",
        ),
        (
            ("admin", "app", "create", "shop", "mobile", "--signals-per-minute", "-1"),
            "argument --signals-per-minute: '-1': must be a whole number from 0 to 4294967295",
        ),
        (
            ("admin", "credential", "revoke", "shop", "0"),
            "argument credential_id: '0': must be a whole number from 1 to 18446744073709551615",
        ),
        (
            ("admin", "credential", "revoke", "shop", "18446744073709551616"),
            "argument credential_id: '18446744073709551616': must be a whole number from 1 to 18446744073709551615",
        ),
        (
            ("admin", "credential", "revoke", "shop", "abc"),
            "argument credential_id: 'abc': must be a whole number from 1 to 18446744073709551615",
        ),
        # names, as the API's: a trailing newline slipped through `^...$` before
        (("admin", "namespace", "create", "shop2\n"), "argument namespace: 'shop2\\n': use 1-64 of A-Z a-z 0-9 _ . -"),
        (("admin", "namespace", "create", ""), "argument namespace: '': use 1-64 of A-Z a-z 0-9 _ . -"),
        (
            ("admin", "namespace", "create", "n" * 65),
            "argument namespace: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn'... (65 characters): use 1-64 of A-Z a-z 0-9 _ . -",
        ),
        (
            ("admin", "queue", "create", "shop", "caf\u00e9", "--permits", "1"),
            "argument queue: 'caf\u00e9': use 1-64 of A-Z a-z 0-9 _ . -",
        ),
        (("admin", "app", "create", "shop", "we b"), "argument app: 'we b': use 1-64 of A-Z a-z 0-9 _ . -"),
        (("admin", "app", "disable", "shop", "web/x"), "argument app: 'web/x': use 1-64 of A-Z a-z 0-9 _ . -"),
        (
            CREDENTIAL + ("--actor", "a", "--queue", "inventory\r"),
            "argument --queue: 'inventory\\r': use 1-64 of A-Z a-z 0-9 _ . -",
        ),
        (
            ("admin", "credential", "create", "shop", "web", "--actor", "a", "--scope", "root:all"),
            "argument --scope: invalid choice: 'root:all' (choose from 'definitions:read', 'definitions:write', "
            "'tasks:work', 'workflows:control', 'workflows:read', 'workflows:review', 'workflows:signal', "
            "'workflows:start')",
        ),
        (
            ("admin", "namespace", "create", "shop2", "--database-url", "postgres://h/db"),
            "argument --database-url: database URL must start with mysql:// (got 'postgres')",
        ),
        (
            ("admin", "namespace", "create", "shop2", "--database-url", "mysql://h:99999/db"),
            "argument --database-url: database URL: '99999' is not a port",
        ),
        (
            ("admin", "namespace", "create", "shop2", "--database-url", "mysql://u:secret@h/"),
            "argument --database-url: database URL must name a database: mysql://user:pass@host:port/db",
        ),
        (
            ("admin", "namespace", "create", "shop2", "--database-url", "mysql://u:secret@h/db`; DROP"),
            "argument --database-url: database name 'db`; DROP': use 1-64 of A-Z a-z 0-9 _ -",
        ),
    ],
)
def test_admin_arguments_are_checked_before_anything_runs(shop, capsys, argv, reason):
    before = shop()
    assert refused(capsys, *argv) == reason
    assert shop() == before


def test_the_database_url_from_the_environment_is_checked_like_the_flag(monkeypatch, capsys):
    monkeypatch.setenv("WEAVE_DATABASE_URL", "mysql://user:secret@host:port/db")
    reason = refused(capsys, "admin", "namespace", "create", "shop")
    assert reason == "WEAVE_DATABASE_URL: database URL: 'port' is not a port"
    assert "secret" not in reason


def test_admin_arguments_at_their_bounds_are_accepted(shop, capsys, database):
    actor = "\u00e9" * 128  # characters, not bytes: the column is VARCHAR(128) in utf8mb4
    created = run_json(capsys, *CREDENTIAL, "--actor", actor, "--expires-in", "315360000", "--queue", "inventory")
    row = database.run(lambda tx: tx.one("SELECT actor, created_at, expires_at FROM credentials"))
    assert row["actor"] == actor and row["expires_at"] - row["created_at"] == timedelta(seconds=315360000)
    assert run_json(capsys, "admin", "queue", "create", "shop", "big", "--permits", "1000000")["max_permits"] == 1000000
    quota = run_json(capsys, "admin", "app", "create", "shop", "flood", "--signals-per-minute", "4294967295")
    assert quota["signals_per_minute"] == 4294967295
    assert (
        run_json(capsys, "admin", "app", "create", "shop", "mute", "--signals-per-minute", "0")["signals_per_minute"]
        == 0
    )
    assert run_json(capsys, "admin", "namespace", "create", "n" * 64)["namespace"] == "n" * 64
    # the largest id is a well-formed id that does not exist: a plain failure, not a usage error
    assert main(["admin", "credential", "revoke", "shop", str(2**64 - 1)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert run_json(capsys, "admin", "credential", "revoke", "shop", created["credential_id"])["revoked"] is True


def test_body_cap_comes_from_the_environment_or_the_default(monkeypatch):
    from weave.config import DEFAULT_MAX_BODY_BYTES, Config

    monkeypatch.delenv("WEAVE_MAX_BODY_BYTES", raising=False)
    assert Config.from_env().max_body_bytes == DEFAULT_MAX_BODY_BYTES == 1024 * 1024
    monkeypatch.setenv("WEAVE_MAX_BODY_BYTES", "4096")
    assert Config.from_env().max_body_bytes == 4096
    for bad in ("0", "-1", "1e6", "lots"):
        monkeypatch.setenv("WEAVE_MAX_BODY_BYTES", bad)
        with pytest.raises(SystemExit, match="WEAVE_MAX_BODY_BYTES"):
            Config.from_env()


@pytest.mark.parametrize(
    "argv, reason",
    [
        (("serve", "--port", "65536"), "argument --port: '65536': must be a whole number from 0 to 65535"),
        (("dev", "--port", "-1"), "argument --port: '-1': must be a whole number from 0 to 65535"),
        (("serve", "--threads", "0"), "argument --threads: '0': must be a whole number from 1 to 2147483647"),
        (
            ("serve", "--metrics-port", "65536"),
            "argument --metrics-port: '65536': must be a whole number from 0 to 65535",
        ),
        (
            ("scan", "--idle-seconds", "nan"),
            "argument --idle-seconds: 'nan': must be a number of seconds from 0 to 3600",
        ),
        (("scan", "--idle-seconds", "-1"), "argument --idle-seconds: '-1': must be a number of seconds from 0 to 3600"),
        (
            ("scan", "--idle-seconds", "1e9"),
            "argument --idle-seconds: '1e9': must be a number of seconds from 0 to 3600",
        ),
        (
            ("scan", "--idle-seconds", "soon"),
            "argument --idle-seconds: 'soon': must be a number of seconds from 0 to 3600",
        ),
        (("scan", "--threads", "0"), "argument --threads: '0': must be a whole number from 1 to 32"),
        (("scan", "--threads", "33"), "argument --threads: '33': must be a whole number from 1 to 32"),
    ],
)
def test_server_and_scanner_numbers_are_checked_too(monkeypatch, capsys, argv, reason):
    monkeypatch.setenv("WEAVE_DATABASE_URL", "mysql://u@127.0.0.1:1/never_reached")
    assert refused(capsys, *argv) == reason


@pytest.mark.parametrize(
    "flag, variable, field, default",
    [
        ("--idle-timeout", "WEAVE_IDLE_TIMEOUT", "idle_timeout_seconds", 10),  # issue 10, item 1
        ("--header-timeout", "WEAVE_HEADER_TIMEOUT", "header_timeout_seconds", 10),  # issue 26, item 5
        ("--min-body-rate", "WEAVE_MIN_BODY_RATE", "min_body_rate", 16 * 1024),
        ("--body-buffer-bytes", "WEAVE_BODY_BUFFER_BYTES", "body_buffer_bytes", 32 * 1024 * 1024),
    ],
)
def test_connection_limits_come_from_the_flag_the_environment_or_the_default(
    monkeypatch, flag, variable, field, default
):
    from weave.cli import _server_config, build_parser
    from weave.db import DatabaseUrl

    def configured(*argv: str) -> int:
        args = build_parser().parse_args(list(argv))
        return getattr(_server_config(args, DatabaseUrl.parse("mysql://u:p@127.0.0.1:3306/db")), field)

    monkeypatch.delenv(variable, raising=False)
    assert configured("serve") == default
    monkeypatch.setenv(variable, "3000000")
    assert configured("serve") == configured("dev") == 3000000
    assert configured("serve", flag, "5000000") == 5000000
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", flag, "0"])
    for bad in ("0", "-1", "1.5", "soon"):
        monkeypatch.setenv(variable, bad)
        with pytest.raises(SystemExit, match=variable):
            configured("serve")


def purge_share(sources) -> float:
    """The share of its time a scanner made with `sources` lets its purge work (L1)."""
    return next(source for source in sources if source.name == "purge").process.share


def test_config_reads_the_environment_once_and_the_flags_go_over_it(monkeypatch):
    """Issue 27 item 4: `Config.from_env()` is where the environment is read; a flag given wins,
    a flag absent (None) leaves the variable or the named default; a scanner reads none of the
    API's variables, so one it does not use cannot stop it."""
    from weave import config as settings
    from weave.cli import build_parser
    from weave.cli.serve import cmd_scan
    from weave.config import Config

    environ = {"WEAVE_IDLE_TIMEOUT": "30", "WEAVE_MAX_WAITING_CLAIMS": "20"}
    read = Config.from_env("mysql://u@h/db", environ=environ, threads=32, idle_timeout_seconds=None)
    assert (read.threads, read.idle_timeout_seconds, read.max_waiting_claims) == (32, 30, 20)
    assert (read.max_body_bytes, read.api_pool_size) == (settings.DEFAULT_MAX_BODY_BYTES, 32 + settings.POOL_SPARE)
    scanning = Config.from_env("mysql://u@h/db", serving=False, environ=environ, scan_threads=3)
    assert (scanning.scan_threads, scanning.scan_idle_seconds, scanning.scan_batch_size, scanning.pool_size) == (
        3,
        settings.DEFAULT_SCAN_IDLE_SECONDS,
        settings.DEFAULT_SCAN_BATCH_SIZE,
        settings.DEFAULT_POOL_SIZE,
    )
    assert scanning.max_waiting_claims == settings.DEFAULT_MAX_WAITING_CLAIMS  # 20 >= 16 threads: no refusal
    wrong = {"WEAVE_IDLE_TIMEOUT": "soon"}
    assert Config.from_env(environ=wrong, idle_timeout_seconds=5).idle_timeout_seconds == 5  # not read under a flag
    with pytest.raises(SystemExit, match="WEAVE_IDLE_TIMEOUT must be a positive integer"):
        Config.from_env(environ=wrong)

    made = {}

    class Recorded:
        def __init__(self, database, **options):
            made.update(options, pool=database._slots._initial_value)

        def run_once(self):
            return type("Report", (), {"line": lambda self: "{}"})()

    monkeypatch.setattr("weave.cli.serve.Scanner", Recorded)
    monkeypatch.setenv("WEAVE_MAX_WAITING_CLAIMS", "lots")  # an API setting: not the scanner's concern
    args = build_parser().parse_args(["scan", "--once", "--database-url", "mysql://u@127.0.0.1:1/db"])
    assert cmd_scan(args) == 0
    deliveries = made.pop("deliveries")
    assert purge_share(made.pop("sources")) == settings.DEFAULT_PURGE_SHARE  # L1: a paced purge
    assert made == {
        "batch_size": settings.DEFAULT_SCAN_BATCH_SIZE,
        "idle_seconds": settings.DEFAULT_SCAN_IDLE_SECONDS,
        "threads": settings.DEFAULT_SCAN_THREADS,
        "pool": settings.DEFAULT_POOL_SIZE + settings.DEFAULT_NOTIFY_DELIVERIES,  # a connection per delivery thread
    }
    assert (deliveries.slots, deliveries.allow_private, deliveries.timeout) == (
        settings.DEFAULT_NOTIFY_DELIVERIES,
        settings.DEFAULT_NOTIFY_ALLOW_PRIVATE,
        settings.DEFAULT_NOTIFY_TIMEOUT_SECONDS,
    )
    deliveries.close()
    # N2: a scanner reads its own variables (the notifications'), and none of the API's
    monkeypatch.setenv("WEAVE_NOTIFY_DELIVERIES", "3")
    monkeypatch.setenv("WEAVE_NOTIFY_ALLOW_PRIVATE", "0")
    assert cmd_scan(args) == 0
    assert (made["deliveries"].slots, made["deliveries"].allow_private, made["pool"]) == (3, False, 35)
    made.pop("deliveries").close()
    monkeypatch.setenv("WEAVE_NOTIFY_ALLOW_PRIVATE", "no")
    with pytest.raises(SystemExit, match="WEAVE_NOTIFY_ALLOW_PRIVATE must be 0 or 1"):
        cmd_scan(args)
    monkeypatch.delenv("WEAVE_NOTIFY_ALLOW_PRIVATE")
    monkeypatch.delenv("WEAVE_NOTIFY_DELIVERIES")
    monkeypatch.setenv("WEAVE_PURGE_SHARE", "1")  # L1: unpaced
    assert cmd_scan(args) == 0
    assert purge_share(made["sources"]) == 1.0
    made.pop("deliveries").close()
    for wrong_share in ("0", "1.5", "half"):
        monkeypatch.setenv("WEAVE_PURGE_SHARE", wrong_share)
        with pytest.raises(SystemExit, match="WEAVE_PURGE_SHARE must be a number above 0 and at most 1"):
            cmd_scan(args)
    monkeypatch.delenv("WEAVE_PURGE_SHARE")
    args = build_parser().parse_args(
        ["scan", "--once", "--threads", "2", "--idle-seconds", "1.5", "--database-url", "mysql://u@127.0.0.1:1/db"]
    )
    cmd_scan(args)
    assert (made["threads"], made["idle_seconds"]) == (2, 1.5)


def test_issue_26_9_the_metrics_port_cannot_be_the_api_port(monkeypatch, capsys):
    monkeypatch.setenv("WEAVE_DATABASE_URL", "mysql://u@127.0.0.1:1/never_reached")
    assert main(["serve", "--port", "8080", "--metrics-port", "8080"]) == 2
    assert capsys.readouterr().err == "weave: --metrics-port 8080 is the API's own port on 127.0.0.1\n"


def test_issue_26_5_the_body_buffer_follows_the_body_cap_and_holds_one_body_at_least(monkeypatch, capsys):
    from weave.cli import _server_config, build_parser
    from weave.db import DatabaseUrl

    monkeypatch.delenv("WEAVE_BODY_BUFFER_BYTES", raising=False)
    args = build_parser().parse_args(["serve", "--max-body-bytes", "4096"])
    assert _server_config(args, DatabaseUrl.parse("mysql://u:p@127.0.0.1:3306/db")).body_buffer_bytes == 32 * 4096
    monkeypatch.setenv("WEAVE_DATABASE_URL", "mysql://u@127.0.0.1:1/never_reached")
    assert main(["serve", "--max-body-bytes", "4096", "--body-buffer-bytes", "4095"]) == 1
    assert capsys.readouterr().err == (
        "weave: the body buffer (4095 bytes) must hold at least one body at the cap (4096 bytes)\n"
    )


@pytest.mark.parametrize(
    "document", [DEV_DEFINITION, DEV_POLL_DEFINITION, DEV_REVIEW_DEFINITION], ids=["order", "shipment", "refund"]
)
def test_weave_dev_definitions_pass_the_checks_of_the_publish_api(document):
    # `weave dev` publishes them without going through the API, so check here what the API checks (D1).
    schemas.validate("definition", document)
    assert definition_rules.problems(document) == []


def test_admin_stats_prints_the_backlog(env_url, capsys, flow, database, clock):
    """`weave admin stats`: due candidates and their lag by source, reviews by namespace (issue 15)."""
    from helpers import task_steps, use_real_time

    use_real_time(database, clock)  # the command reads the database's clock
    flow.publish(task_steps("a"))
    flow.start("w-1")
    stats = run_json(capsys, "admin", "stats")
    assert stats["due"] == {"inbox": 0, "checkpoint": 1, "signal_expiry": 0, "fact_expiry": 0}
    assert stats["lag_seconds"]["checkpoint"] > 0 and stats["lag_seconds"]["inbox"] == 0
    assert stats["needs_review"] == {"acme": 0}
    assert main(["admin", "stats"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "inbox: 0 due, the oldest for 0.0 s"
    assert text[1].startswith("checkpoint: 1 due, the oldest for ")
    assert text[2:4] == ["signal_expiry: 0 due, the oldest for 0.0 s", "fact_expiry: 0 due, the oldest for 0.0 s"]
    assert text[4] == "needs review in acme: 0"


def test_log_format_defaults_json_for_the_services_and_text_for_dev():
    from weave.cli import build_parser

    parser = build_parser()
    assert [parser.parse_args([command]).log_format for command in ("serve", "scan", "dev")] == ["json", "json", "text"]
    assert parser.parse_args(["serve", "--log-format", "text"]).log_format == "text"
    with pytest.raises(SystemExit):
        parser.parse_args(["scan", "--log-format", "xml"])


def test_issue_28_14_version_prints_the_package_version_and_exits_0():
    # The installed `weave` command, as a user runs it: the version is the import package's own
    # (weave.__version__, which setup.cfg reads too), whatever the distribution is called.
    import weave

    done = subprocess.run([sys.executable, "-m", "weave.cli", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"weave {weave.__version__}\n", "")
    assert weave.__version__.count(".") == 2 and all(part.isdigit() for part in weave.__version__.split("."))


@pytest.mark.parametrize("argv", [["admin", "stats"], ["admin", "stats", "--json"]])
def test_issue_34_5_a_reader_that_leaves_ends_the_command_quietly(argv, env_url):
    """`weave … | head`: the reader is gone before the command writes (its end of the pipe is
    closed before the command starts); the command exits as a shell's SIGPIPE does, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "weave.cli", *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_issue_34_5_with_json_an_admin_error_is_a_problem_document(env_url, capsys):
    assert main(["admin", "namespace", "create", "shop"]) == 0
    capsys.readouterr()
    assert main(["admin", "namespace", "create", "shop", "--json"]) == 1
    printed = capsys.readouterr()
    problem = json.loads(printed.err)
    assert printed.out == "" and problem["status"] == 409 and "already exists" in problem["detail"]


def test_issue_28_14_a_bare_weave_prints_the_help_on_stdout_and_exits_0(capsys):
    assert main([]) == 0
    printed = capsys.readouterr()
    assert printed.err == ""
    assert printed.out.startswith("usage: weave ")
    for command in ("migrate", "serve", "scan", "dev", "admin", "workflow", "signal"):
        assert f"\n    {command} " in printed.out, command
    # An unknown command is still argparse's usage error.
    with pytest.raises(SystemExit) as exited:
        main(["frobnicate"])
    assert exited.value.code == 2 and "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_L1_admin_namespace_retention_sets_shows_and_clears_the_retentions(env_url, capsys, tenant, database):
    shown = run_json(capsys, "admin", "namespace", "retention", "acme", "--days", "7", "--audit-days", "3")
    assert shown == {
        "namespace": "acme",
        "retention_days": 7,
        "audit_retention_days": 3,
        "effective_audit_days": 7,  # never fewer than the instances' retention
    }
    assert run_json(capsys, "admin", "namespace", "retention", "acme") == shown  # no option: shows it
    cleared = run_json(capsys, "admin", "namespace", "retention", "acme", "--forever")
    assert (cleared["retention_days"], cleared["audit_retention_days"], cleared["effective_audit_days"]) == (
        None,
        3,
        None,
    )
    assert main(["admin", "namespace", "retention", "acme", "--days", "0", "--audit-forever"]) == 0
    assert capsys.readouterr().out.strip() == "acme: ended instances kept 0 day(s), audit records forever"
    for wrong in (["--days", "-1"], ["--days", "36501"], ["--days", "1", "--forever"], ["--audit-days", "x"]):
        with pytest.raises(SystemExit):
            main(["admin", "namespace", "retention", "acme", *wrong])
    assert main(["admin", "namespace", "retention", "nowhere", "--days", "1"]) == 1
    assert "does not exist" in capsys.readouterr().err
    records = database.run(lambda tx: tx.all("SELECT action FROM audit_records WHERE action = 'namespace.retention'"))
    assert len(records) == 3  # each change, not the show


def test_L1_admin_stats_prints_the_purgeable_backlog(env_url, capsys, flow, database, clock):
    from helpers import task_steps, use_real_time

    from weave.sql import retention

    use_real_time(database, clock)  # the command reads the database's clock
    flow.publish(task_steps("a"))
    flow.start("w-1")
    flow.scan()
    flow.finish_task()
    retention.set_retention(database, "acme", 0)
    stats = run_json(capsys, "admin", "stats")
    assert stats["purgeable"] == {"acme": 1} and stats["purge_lag_seconds"] >= 0
    assert main(["admin", "stats"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert "purgeable in acme: 1" in text
    assert any(line.startswith("purge: the oldest purgeable instance is ") for line in text)
