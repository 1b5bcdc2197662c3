"""PyMySQL, with the description of a result set parsed once per shape instead of once per result.

Every result set the server sends starts with one packet per column describing it (catalog,
table, name, type, character set, ...). PyMySQL parses each of them in Python, field by field,
for every result: on signal acceptance that was about a fifth of the API's CPU per request
(27 columns), more than the rows themselves. Weave runs a fixed set of statements, so the same
packets arrive again and again: here they are still read from the wire in full, but when a
result's packets are byte for byte those of an earlier result on the connection, it takes that
result's parsed description. The packets are the key, so another shape (another statement, a
column of another type or length) is parsed afresh, by PyMySQL's own code; nothing depends on
the query text.

This leans on PyMySQL internals (`Connection._read_query_result` makes a `MySQLResult`, whose
`_get_descriptions` reads the packets), so the version is pinned in setup.cfg, and
tests/integration/test_driver.py compares the answers with stock PyMySQL's.
"""

from __future__ import annotations

from pymysql import connections, cursors

# Distinct shapes are bounded by the statements in the code plus admin and test queries; the
# bound only guards against a caller that builds column lists on the fly.
MOST_SHAPES = 1024


class Connection(connections.Connection):
    """A PyMySQL connection that remembers the descriptions of the result shapes it has seen."""

    commit_alone = False  # set by `weave.db.connect`: a Galera node's units send COMMIT alone

    def __init__(self, *args, **kwargs):
        # Per connection: a description depends on the connection's encoding and decoders too.
        self.shapes: dict[tuple[bytes, ...], tuple[list, list, tuple, list[str]]] = {}
        super().__init__(*args, **kwargs)

    def _read_query_result(self, unbuffered: bool = False) -> int:
        if unbuffered:
            return super()._read_query_result(unbuffered)
        self._result = None
        result = _Result(self)
        result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows


class _Result(connections.MySQLResult):
    keys: list[str]  # the keys of DictCursor's rows

    def _get_descriptions(self) -> None:
        connection = self.connection
        packets = tuple(connection._read_packet().get_all_data() for _ in range(self.field_count))
        eof = connection._read_packet()
        assert eof.is_eof_packet(), "Protocol error, expecting EOF"
        shape = connection.shapes.get(packets)
        if shape is None:
            shape = self._parse(connection, packets, eof)
            if len(connection.shapes) >= MOST_SHAPES:
                connection.shapes.clear()
            connection.shapes[packets] = shape
        self.fields, self.converters, self.description, self.keys = shape

    def _parse(self, connection: Connection, packets: tuple[bytes, ...], eof) -> tuple:
        """PyMySQL's own `_get_descriptions`, reading these packets again instead of the wire."""
        self.connection = _Replay(connection, packets, eof)
        try:
            super()._get_descriptions()
        finally:
            self.connection = connection
        keys: list[str] = []
        for field in self.fields:  # DictCursor's rule for a second column of the same name
            keys.append(field.name if field.name not in keys else f"{field.table_name}.{field.name}")
        return self.fields, self.converters, self.description, keys


class _Replay:
    """What `MySQLResult._get_descriptions` reads from a connection, with packets already read."""

    def __init__(self, connection: Connection, packets: tuple[bytes, ...], eof):
        self.use_unicode = connection.use_unicode
        self.encoding = connection.encoding
        self.decoders = connection.decoders
        self._packets = iter(packets)
        self._eof = eof

    def _read_packet(self, packet_type=connections.MysqlPacket):
        data = next(self._packets, None)
        return self._eof if data is None else packet_type(data, self.encoding)


class DictCursor(cursors.DictCursor):
    """PyMySQL's DictCursor, with the keys of the rows taken from the result's cached description."""

    def _do_get_result(self) -> None:
        cursors.Cursor._do_get_result(self)
        if self.description:
            self._fields = keys = self._result.keys
            if self._rows:
                self._rows = [dict(zip(keys, row)) for row in self._rows]
