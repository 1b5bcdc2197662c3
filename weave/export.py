"""The export document of one instance (L2; its format, field by field: docs/export.md).

`ExportDocument` is the `weave.sql.export.ExportSink` the export unit writes its rows to: it
renders each row as it arrives into a spooled temporary file (memory up to `MEMORY_BYTES`, then
disk), so that neither the rows nor the document are ever held whole, and the response is sent
from that file with its length once the snapshot transaction has ended (docs/decisions.md,
"Export").

A row is its table's columns under their own names, values as stored: stored JSON (an input, a
result, a payload, an event's data, ...) is embedded as its stored text, byte for byte
(`jsontext.Raw`), so numbers keep their digits and members their order; times are RFC 3339 UTC
with microseconds; `BIGINT` keys are decimal strings, like every id of the API; a correlation key
(stored as its UTF-8 bytes) is its text.
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from typing import IO, Iterator

from weave import jsontext
from weave.jsontext import Raw
from weave.times import rfc3339

FORMAT = "weave.export/1"
MEMORY_BYTES = 1024 * 1024  # a document larger than this is spooled to a temporary file

# The columns of each section (and nested row) that hold compact JSON as stored. By section, as
# a name may mean JSON in one table and text in another (`tasks.error`, `notification_attempts.error`).
JSON_COLUMNS = {
    "workflow": frozenset({"input", "definition_document", "purge_counts"}),
    "activations": frozenset({"result"}),
    "signals": frozenset({"payload", "receipt"}),
    "tasks": frozenset({"result", "error"}),
    "inbox_event": frozenset({"result"}),
    "events": frozenset({"data"}),
    "audit": frozenset({"details"}),
    "notifications": frozenset({"body"}),
}
# BIGINT UNSIGNED columns beside the `id` and `*_id` keys (beyond 2**53: not every JSON reader
# reads them exactly as numbers).
BIGINT_COLUMNS = frozenset({"route_hash", "version"})
# Joined rows that nest: the member they become and the prefix of their columns in the statement.
NESTED_ONE = {"tasks": ("inbox_event", "inbox_")}
NESTED_MANY = {"notifications": ("delivery_attempts", "attempt_")}


def _is_bigint(column: str) -> bool:
    return column == "id" or column.endswith("_id") or column in BIGINT_COLUMNS


def _stored_json(column: str, text: str, row: dict):
    """Stored JSON as its text. A signal stored before signal identity (no request digest) kept
    its payload as sent, which need not be JSON: then it is the JSON string of that text."""
    if column == "payload" and row.get("request_digest") is None:
        try:
            jsontext.loads(text)
        except jsontext.JsonRejected:
            return text
    return Raw(text)


def export_row(row: dict, kind: str) -> dict:
    """One stored row of a section (or nested row) `kind` as it appears in the document."""
    json_columns = JSON_COLUMNS.get(kind, frozenset())
    shaped = {}
    for column, value in row.items():
        if value is None:
            shaped[column] = None
        elif column in json_columns:
            shaped[column] = _stored_json(column, value, row)
        elif isinstance(value, datetime):
            shaped[column] = rfc3339(value)
        elif isinstance(value, (bytes, bytearray)):
            shaped[column] = bytes(value).decode("utf-8", "replace")
        elif isinstance(value, int) and _is_bigint(column):
            shaped[column] = str(value)
        else:
            shaped[column] = value
    return shaped


def _split(row: dict, prefix: str) -> tuple[dict, dict | None]:
    """A joined row: its own columns, and those of the row joined under `prefix` (None when the
    outer join found none)."""
    own = {k: v for k, v in row.items() if not k.startswith(prefix)}
    joined = {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}
    return own, (joined if joined["id"] is not None else None)


class ExportDocument:
    """The document being written, in a spooled file; `file()` hands it over, rewound."""

    def __init__(self):
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=MEMORY_BYTES)
        self.counts: dict[str, int] = {}

    def _write(self, text: str) -> None:
        self._file.write(text.encode("utf-8"))

    def begin(self, workflow: dict, exported_at: datetime) -> None:
        self._file.seek(0)
        self._file.truncate()
        self.counts = {}
        head = {"format": FORMAT, "exported_at": rfc3339(exported_at), "workflow": export_row(workflow, "workflow")}
        self._write(jsontext.compact(head)[:-1])  # the object stays open for the sections

    def section(self, name: str, rows: Iterator[dict]) -> None:
        self._write(f',"{name}":[')
        count = 0
        for item in self._items(name, rows):
            self._write(("," if count else "") + jsontext.compact(item))
            count += 1
        self._write("]")
        self.counts[name] = count

    def _items(self, name: str, rows: Iterator[dict]) -> Iterator[dict]:
        if name in NESTED_ONE:
            member, prefix = NESTED_ONE[name]
            for row in rows:
                own, joined = _split(row, prefix)
                yield {**export_row(own, name), member: export_row(joined, member) if joined else None}
        elif name in NESTED_MANY:
            yield from self._grouped(rows, name, *NESTED_MANY[name])
        else:
            for row in rows:
                yield export_row(row, name)

    @staticmethod
    def _grouped(rows: Iterator[dict], name: str, member: str, prefix: str) -> Iterator[dict]:
        """Consecutive rows of one outer row (ordered by its key) become one item with a list."""
        current: dict | None = None
        for row in rows:
            own, joined = _split(row, prefix)
            if current is None or current["id"] != str(own["id"]):
                if current is not None:
                    yield current
                current = {**export_row(own, name), member: []}
            if joined is not None:
                current[member].append(export_row(joined, member))
        if current is not None:
            yield current

    def end(self) -> None:
        self._write("}")

    def size(self) -> int:
        """Bytes written so far (the whole document after `end`)."""
        return self._file.tell()

    def file(self) -> IO[bytes]:
        """The whole document, rewound; the caller closes it (a temporary file goes with it)."""
        self._file.seek(0)
        return self._file

    def close(self) -> None:
        self._file.close()
