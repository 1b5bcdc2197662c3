"""The private server: start in a fresh folder, answer on TCP, stop cleanly, restart on the same data."""

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


def test_missing_binary_names_the_package_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(devdb, "EXTRA_SEARCH_PATH", ())
    with pytest.raises(devdb.ServerNotFound, match="apt-get install mariadb-server"):
        devdb.find_server_binary()
