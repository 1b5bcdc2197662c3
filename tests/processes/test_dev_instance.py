"""One `weave dev` per folder (issue 28, items 1 and 2): a second one in the same folder changes
nothing and says who runs there; a port in use is named before any database starts; the private
database keeps its port across restarts, and ./.weave/env holds its URL and the tokens."""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pymysql
import pytest
from helpers import ready, wait_until, weave_dev

from weave.dburl import DatabaseUrl
from weave.devdb import ServerNotFound, find_server_binary, free_port
from weave.secretbox import Keyring

WEAVE = [sys.executable, "-m", "weave.cli"]
# `weave dev` in a folder of its own, starting its own database: nothing from the test run's.
# What ./.weave/env holds beside the banner's exports: what `weave admin`, `weave serve` and `weave scan` read.
SERVER_SETTINGS = ("WEAVE_DATABASE_URL", "WEAVE_SECRET_KEY")
OWN_DATABASE = {
    k: v
    for k, v in os.environ.items()
    if k not in ("WEAVE_DATABASE_URL", "WEAVE_TEST_DATABASE_URL", "WEAVE_SECRET_KEY")
}


def env_file(folder) -> dict[str, str]:
    """./.weave/env read as a shell reads it: every `export NAME=VALUE`."""
    values = {}
    for line in (folder / ".weave" / "env").read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            values.update(word.split("=", 1) for word in words[1:])
    return values


def banner_exports(printed: list[str]) -> dict[str, str]:
    (line,) = [line for line in printed if line.startswith("  export ")]
    return dict(word.split("=", 1) for word in shlex.split(line)[1:])


def credentials(url: DatabaseUrl) -> int:
    conn = pymysql.connect(host=url.host, port=url.port, user=url.user, database=url.database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM credentials")
            return cur.fetchone()[0]
    finally:
        conn.close()


def workflows_answer(exports: dict[str, str]) -> int:
    request = urllib.request.Request(
        f"{exports['WEAVE_URL']}/v1/namespaces/{exports['WEAVE_NAMESPACE']}/workflows",
        headers={"Authorization": f"Bearer {exports['WEAVE_TOKEN']}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def in_folder(folder, *argv: str, shell: str = "") -> subprocess.CompletedProcess:
    """`weave ARGV…` run in `folder` as a person runs it there (after `shell`, a bash prefix)."""
    command = ["bash", "-c", shell + shlex.join([*WEAVE, *argv])]
    return subprocess.run(command, cwd=folder, env=OWN_DATABASE, capture_output=True, text=True, timeout=60)


def stop(process: subprocess.Popen, signum: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(signum)
        process.wait(60)


@pytest.fixture
def private_server_binary():
    try:
        find_server_binary()
    except ServerNotFound as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_issue_28_1_a_second_weave_dev_in_the_folder_touches_nothing_and_the_database_keeps_its_url(
    tmp_path, private_server_binary
):
    port = free_port()
    first, printed = weave_dev(tmp_path, port, OWN_DATABASE)
    try:
        wait_until(lambda: ready(port) == 200, timeout=30)
        exports = banner_exports(printed)
        saved = env_file(tmp_path)
        # ./.weave/env: the server's settings and the banner's exports, readable by its owner only.
        assert {k: v for k, v in saved.items() if k not in SERVER_SETTINGS} == exports
        assert (tmp_path / ".weave" / "env").stat().st_mode & 0o077 == 0
        # W1: the folder's secret key, made once, readable by its owner only, not in the banner.
        key_file = tmp_path / ".weave" / "secret-key"
        assert key_file.read_text().strip() == saved["WEAVE_SECRET_KEY"] and key_file.stat().st_mode & 0o077 == 0
        assert Keyring.from_env(saved) is not None and saved["WEAVE_SECRET_KEY"] not in "".join(printed)
        assert f"`. {tmp_path / '.weave' / 'env'}`" in "".join(printed)
        url = DatabaseUrl.parse(saved["WEAVE_DATABASE_URL"])
        assert f"(database {url.yoyo_url()})" in printed[0]
        minted = credentials(url)

        # A second `weave dev` here, even on another port: refused at once, the first untouched.
        second = in_folder(tmp_path, "dev", "--port", str(free_port()))
        assert (second.returncode, second.stdout) == (1, "")
        assert second.stderr.startswith(
            f"Weave is already running from this folder (pid {first.pid}, {exports['WEAVE_URL']})"
        ), second.stderr
        assert first.poll() is None and ready(port) == 200  # its database still answers
        assert credentials(url) == minted  # no token minted
        assert workflows_answer(exports) == 200  # and the first one's tokens still work
        assert env_file(tmp_path) == saved
    finally:
        # Killed, not stopped: a lock that dies with its process frees the folder all the same.
        stop(first, signal.SIGKILL)

    port = free_port()
    again, printed = weave_dev(tmp_path, port, OWN_DATABASE)
    try:
        wait_until(lambda: ready(port) == 200, timeout=30)
        # The same database URL as before the restart, and new tokens in ./.weave/env.
        renewed = env_file(tmp_path)
        assert renewed["WEAVE_DATABASE_URL"] == saved["WEAVE_DATABASE_URL"]
        assert renewed["WEAVE_SECRET_KEY"] == saved["WEAVE_SECRET_KEY"]  # secrets stored before stay readable
        assert renewed["WEAVE_TOKEN"] != saved["WEAVE_TOKEN"]
        assert {k: v for k, v in renewed.items() if k not in SERVER_SETTINGS} == banner_exports(printed)
        assert credentials(url) == minted + 3  # the data stayed: three more tokens
        # What the README says ./.weave/env is for: an admin command in another shell.
        admin = in_folder(tmp_path, "admin", "stats", "--json", shell=". .weave/env && ")
        assert admin.returncode == 0, admin.stderr
        assert set(json.loads(admin.stdout)) >= {"due", "lag_seconds", "needs_review"}
        # and the secret key with it: an inbound source's secret is stored encrypted with it (W1)
        mapping = tmp_path / "mapping.json"
        rule = {"event": "payment_intent.succeeded", "name": "payment.settled", "payload_version": "v1"}
        rule |= {"correlation_key": "/data/object/metadata/order_id", "reason": "Stripe: payment succeeded"}
        mapping.write_text(json.dumps({"event_type": "/type", "rules": [rule]}))
        source = ("inbound", "create", "demo", "hooks", "--app", "demo-app", "--actor", "hooks", "--scheme", "stripe")
        created = in_folder(tmp_path, "admin", *source, "--mapping", str(mapping), shell=". .weave/env && ")
        assert created.returncode == 0, created.stderr
        add = ("admin", "inbound", "secret", "add", "demo", "hooks")
        added = in_folder(tmp_path, *add, shell=". .weave/env && echo whsec_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH | ")
        assert added.returncode == 0, added.stderr
        conn = pymysql.connect(host=url.host, port=url.port, user=url.user, database=url.database)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT ciphertext FROM inbound_secrets")
                (ciphertext,) = cur.fetchone()
        finally:
            conn.close()
        assert Keyring.from_env(saved).decrypt(ciphertext) == "whsec_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
    finally:
        stop(again)
    assert again.returncode == 0


def test_issue_28_1_a_port_in_use_is_named_and_no_database_is_started(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        refused = in_folder(tmp_path, "dev", "--port", str(port))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"weave: cannot listen on 127.0.0.1:{port}: another program is using that port; stop it, "
        "or choose another with --port\n"
    )
    # The port was checked first: no database folder, no env file.
    assert sorted(path.name for path in (tmp_path / ".weave").iterdir()) == ["dev.lock"]
