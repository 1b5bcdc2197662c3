"""The log of the `weave` commands: one line per record, whatever the logged values hold.

Two formats (`--log-format`): `json`, one object per line for a log pipeline (the default of
`weave serve` and `weave scan`), and `text` for a person at a terminal (`weave dev`, the other
commands). A record may carry structured `fields` (`log.info("request", extra={"fields": {…}})`):
JSON lines hold them as members, text lines append them as `key=value`. Every record logged while
a request is served carries that request's id (`REQUEST_ID`), whichever logger wrote it.

Log records carry values that clients chose: a URL path, an id, a database error quoting a value.
In text, the handler that `install()` gives the root logger escapes the *rendered* record
(message, fields, traceback), so every record stays on one line and cannot pass for another:
control characters (C0, DEL, C1: CR, LF, NUL, ESC …), line and paragraph separators, format
characters (bidirectional overrides, zero-width), surrogates, private-use and unassigned code
points become `\\r`, `\\n`, `\\t`, `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`; the backslash itself becomes
`\\\\`, so an escape in the log always stands for an escaped character. Escaping the rendered text,
not each call's arguments, covers every logger in the process with one mechanism: Weave's own,
waitress's (which formats the request path into its message itself) and those of the libraries.
In JSON, `json.dumps` escapes the same characters (and every other non-ASCII one) inside strings.

A line has at most `MAX_LINE_CHARS` characters (issue 26, item 4: a RecursionError's traceback made
one line of 152 KB per request): a longer one keeps its start and its end, and says how many
characters were cut between them. The cut is made in the record's text before it is escaped, so
no escape is ever cut in half; in JSON, the longest members are cut until the line fits.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
LOG_FORMATS = ("text", "json")
# A few KB: a traceback of some 40 frames, or a request line with its fields, fits whole.
MAX_LINE_CHARS = 8192
_CUT = " [... {:,} characters cut ...] "

# The id of the request the current thread serves (weave.http.RequestId sets and clears it), so
# that every record logged while serving it carries it, whichever logger wrote it.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_.:/{}@+-]+")

# Printable ASCII but the backslash needs no look; anything else is checked by its category.
_SUSPECT = re.compile(r"[^\x20-\x5b\x5d-\x7e]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_unsafe(char: str) -> bool:
    """Whether `char` could break or disguise text: a control, format, line or paragraph separator,
    surrogate, private-use or unassigned character (what `escape` escapes, the backslash aside)."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape_one(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    if not is_unsafe(char):
        return char  # a letter, a digit, a mark, a symbol or a space of any script
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` with every character that could break or disguise a log line escaped."""
    return _SUSPECT.sub(_escape_one, text)


def cut(text: str, most: int) -> str:
    """`text` if it has at most `most` characters, else its start and its end (a traceback's last
    lines say what failed) with how many characters were cut between them."""
    if len(text) <= most:
        return text
    keep = max(most - len(_CUT.format(len(text))), 0)
    head = keep // 2
    return text[:head] + _CUT.format(len(text) - keep) + text[len(text) - (keep - head) :]


def _text_value(value) -> str:
    """A field's value in a text line: bare when it is one plain word, else as JSON."""
    if isinstance(value, str) and value and _PLAIN_WORD.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


class OneLineFormatter(logging.Formatter):
    """Text: `time LEVEL logger message key=value… request_id=…`, the whole line escaped."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += "".join(f" {name}={_text_value(value)}" for name, value in fields.items() if value is not None)
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line += f" request_id={request_id}"
        escaped, most = escape(line), MAX_LINE_CHARS
        while len(escaped) > MAX_LINE_CHARS:  # escapes lengthen it: cut more, in proportion
            most = min(most - 1, most * MAX_LINE_CHARS // len(escaped))
            escaped = escape(cut(line, most))
        return escaped


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, RFC 3339), level, logger, message, pid, the record's
    `fields` and the request id of the request being served, if any; `exception` holds a traceback.
    `json.dumps` escapes every control and non-ASCII character, so a record is one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        line = json.dumps(entry, default=str)
        while len(line) > MAX_LINE_CHARS:
            # the longest member (a value that is not a string, as its JSON text) is cut
            name = max(
                (name for name in entry if name not in _KEPT), key=lambda name: len(_json(entry[name])), default=None
            )
            if name is None:
                break
            text = entry[name] if isinstance(entry[name], str) else _json(entry[name])
            # in proportion to what is over (escapes may make its JSON much longer than its text)
            shorter = len(text) * MAX_LINE_CHARS // len(line) - len(_CUT) - 8
            if shorter < 64:  # members too many to cut: the longest goes
                del entry[name]
            else:
                entry[name] = cut(text, shorter)
            line = json.dumps(entry, default=str)
        return line


_KEPT = frozenset({"time", "level", "logger", "pid", "request_id"})  # short, and what a pipeline parses


def _json(value) -> str:
    return json.dumps(value, default=str)


class _StampRequestId(logging.Filter):
    """Give every record the id of the request its thread is serving (`REQUEST_ID`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


FORMATTERS = {"text": lambda: OneLineFormatter(FORMAT), "json": JsonFormatter}


def handler(stream: TextIO | None = None, log_format: str = "text") -> logging.Handler:
    """A handler writing each record to `stream` (default stderr) as one line in `log_format`."""
    one_line = logging.StreamHandler(stream)
    one_line.setFormatter(FORMATTERS[log_format]())
    one_line.addFilter(_StampRequestId())
    return one_line


def install(log_format: str = "text", level: int = logging.INFO) -> None:
    """Log every record of the process through `handler()`, unless logging is configured already
    (like `logging.basicConfig`, which it calls): what the `weave` commands do first."""
    logging.basicConfig(level=level, handlers=[handler(log_format=log_format)])
    # Neither format shows the caller's file and line, the thread or the multiprocessing process:
    # a record then costs less than half (the request line is logged on every request).
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    # yoyo logs every step it applies at INFO; `weave migrate` prints what it applied itself.
    logging.getLogger("yoyo").setLevel(logging.WARNING)
