"""The private server: start in a fresh folder, answer on TCP, stop cleanly, restart on the same data."""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pymysql
import pytest

from weave import devdb


def test_private_server_starts_answers_stops_and_restarts_on_its_data(tmp_path):
    server = devdb.PrivateServer(tmp_path / "db", fast_and_unsafe=True).start()
    try:
        conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root")
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE kept CHARACTER SET utf8mb4")
            cur.execute("SELECT @@time_zone, @@character_set_server")
            assert cur.fetchone() == ("+00:00", "utf8mb4")
        conn.close()
    finally:
        server.stop()
    assert server.process is None
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=server.port, user="root", connect_timeout=1)

    with devdb.PrivateServer(tmp_path / "db", fast_and_unsafe=True) as again:
        conn = pymysql.connect(host="127.0.0.1", port=again.port, user="root")
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'kept'")
            assert cur.fetchone() == ("kept",)
        conn.close()


def _running(pid: int) -> bool:
    """Whether `pid` runs: it exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="a server of another account is started so only by root")
def test_a_server_of_another_account_dies_with_the_process_that_started_it():
    """A Galera node runs as `mysql` (a server refuses root): started by a process that is then
    SIGKILLed, it stops too, as a server of the same account does (it used to change account
    itself, which cleared its parent-death signal, and outlived a killed test run)."""
    account = devdb._node_account()
    folder = Path(tempfile.mkdtemp(prefix="weave-devdb-"))  # not below pytest's 0700 folders
    os.chmod(folder, 0o755)
    starter = textwrap.dedent(
        f"""
        import time
        from weave import devdb
        server = devdb.PrivateServer({str(folder / "db")!r}, fast_and_unsafe=True, user={account!r}).start()
        print(server.process.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(parent.stdout.readline())
        assert pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name == account
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + devdb.STOP_TIMEOUT_SECONDS
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the server outlived the process that started it"
    finally:
        parent.kill()
        if pid is not None and _running(pid):  # what the test found: not left to the next run
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def test_missing_binary_names_the_package_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(devdb, "EXTRA_SEARCH_PATH", ())
    with pytest.raises(devdb.ServerNotFound, match="apt-get install mariadb-server"):
        devdb.find_server_binary()


def test_issue_28_2_a_folder_keeps_its_ports_while_they_are_free(tmp_path):
    path = tmp_path / "ports"
    first = devdb.remembered_ports(path, 2)
    assert len(set(first)) == 2 and path.read_text() == f"{first[0]} {first[1]}\n"
    assert devdb.remembered_ports(path, 2) == first  # the next start: the same ports
    # One of them taken by another program: fresh ones, remembered for the start after.
    with socket.create_server(("127.0.0.1", first[1])):
        moved = devdb.remembered_ports(path, 2)
    assert moved != first and first[1] not in moved
    assert devdb.remembered_ports(path, 2) == moved
    # Another count (a cluster of another size) or a file that is not a list of ports: fresh ones.
    assert len(devdb.remembered_ports(path, 3)) == 3
    path.write_text("not a port\n")
    assert len(devdb.remembered_ports(path, 1)) == 1 and path.read_text() != "not a port\n"


def test_issue_28_2_the_private_server_starts_on_its_folders_port_again(tmp_path):
    with devdb.PrivateServer(tmp_path / "db", fast_and_unsafe=True) as server:
        port = server.port
    assert (tmp_path / "db" / "port").read_text() == f"{port}\n"
    with devdb.PrivateServer(tmp_path / "db", fast_and_unsafe=True) as again:
        assert again.port == port
        pymysql.connect(host="127.0.0.1", port=port, user="root").close()
