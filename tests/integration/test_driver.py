"""weave.driver: cached result descriptions give exactly what stock PyMySQL gives."""

from __future__ import annotations

import pymysql
import pytest
from pymysql.constants import CLIENT

from weave import driver
from weave.db import connect

# Shapes that differ only in what the description holds: a type, a length, a character set, a
# name, a table; plus two columns of one name, NULLs, no rows, and a statement without a result.
QUERIES = [
    "SELECT 1 AS a",
    "SELECT 'x' AS a",
    "SELECT CAST('x' AS BINARY) AS a",
    "SELECT 1 AS b",
    "SELECT 1.5 AS a, NULL AS b, CAST('2026-12-01 10:00:00.25' AS DATETIME(6)) AS c, CAST('2026-01-02' AS DATE) AS d",
    "SELECT JSON_OBJECT('k', 1) AS j, _utf8mb4'é' AS e, x'00ff' AS raw",
    "SELECT 1 AS a, 2 AS a",
    "SELECT t.id, t.name, u.name FROM probe t JOIN probe u ON u.id = t.id ORDER BY t.id",
    "SELECT id, name, at, data FROM probe ORDER BY id",
    "SELECT id FROM probe WHERE id < 0",
    "UPDATE probe SET name = name WHERE id = 1",
    "SELECT 1 AS a; SELECT 'two' AS b, 2 AS c",
]


@pytest.fixture
def connections(migrated_url):
    weave_conn = connect(migrated_url)
    stock = pymysql.connect(
        host=migrated_url.host,
        port=migrated_url.port,
        user=migrated_url.user,
        password=migrated_url.password,
        database=migrated_url.database,
        charset="utf8mb4",
        client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,  # as Weave's connections
        cursorclass=pymysql.cursors.DictCursor,
    )
    for conn in (weave_conn, stock):  # a temporary table: each connection has its own
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TEMPORARY TABLE probe (id INT PRIMARY KEY, name VARCHAR(20), at DATETIME(6), data VARBINARY(8))"
            )
            cur.execute("INSERT INTO probe VALUES (1, 'one', '2026-12-01 10:00:00.5', x'01'), (2, NULL, NULL, NULL)")
    yield weave_conn, stock
    weave_conn.close()
    stock.close()


def _answers(conn, sql: str) -> list:
    with conn.cursor() as cur:
        cur.execute(sql)
        answers = [(cur.rowcount, cur.description, cur.fetchall())]
        while cur.nextset():
            answers.append((cur.rowcount, cur.description, cur.fetchall()))
    return answers


def test_every_answer_is_stock_pymysql_s_the_first_time_and_from_the_cache(connections):
    weave_conn, stock = connections
    assert isinstance(weave_conn, driver.Connection)
    seen_before = len(weave_conn.shapes)  # the session's set-up reads one (SHOW VARIABLES)
    for _ in range(3):  # the first round parses, the later ones take the cached descriptions
        for sql in QUERIES:
            assert _answers(weave_conn, sql) == _answers(stock, sql), sql
    # One shape per distinct result set, however often it came: 11 of them (the UPDATE has none,
    # and the first result of the last query is the first query's shape), whatever the query text.
    assert len(weave_conn.shapes) == seen_before + 11


def test_a_cached_description_is_not_parsed_again(connections, monkeypatch):
    weave_conn, _ = connections
    assert _answers(weave_conn, "SELECT id, name FROM probe ORDER BY id")[0][2] == [
        {"id": 1, "name": "one"},
        {"id": 2, "name": None},
    ]

    def refuse(*args):
        raise AssertionError("parsed a description the connection has seen")

    monkeypatch.setattr(pymysql.connections, "FieldDescriptorPacket", refuse)
    rows = _answers(weave_conn, "SELECT id, name FROM probe WHERE id = 2")[0][2]
    assert rows == [{"id": 2, "name": None}]
    with pytest.raises(AssertionError, match="parsed a description"):
        _answers(weave_conn, "SELECT id AS other FROM probe")


def test_the_shapes_a_connection_keeps_are_bounded(connections, monkeypatch):
    weave_conn, stock = connections
    monkeypatch.setattr(driver, "MOST_SHAPES", 5)
    for n in range(12):
        sql = f"SELECT {n} AS c{n}"
        assert _answers(weave_conn, sql) == _answers(stock, sql)
        assert len(weave_conn.shapes) <= 5
