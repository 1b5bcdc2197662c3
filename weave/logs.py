"""The log of the `weave` commands: one line per record, whatever the logged values hold.

Log records carry values that clients chose: a URL path, an id, a database error quoting a value.
The handler that `install()` gives the root logger escapes the *rendered* record (message,
arguments, traceback), so every record stays on one line and cannot pass for another: control
characters (C0, DEL, C1: CR, LF, NUL, ESC …), line and paragraph separators, format characters
(bidirectional overrides, zero-width), surrogates, private-use and unassigned code points become
`\\r`, `\\n`, `\\t`, `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`; the backslash itself becomes `\\\\`, so an
escape in the log always stands for an escaped character. Escaping the rendered text, not each
call's arguments, covers every logger in the process with one mechanism: Weave's own, waitress's
(which formats the request path into its message itself) and those of the libraries.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Printable ASCII but the backslash needs no look; anything else is checked by its category.
_SUSPECT = re.compile(r"[^\x20-\x5b\x5d-\x7e]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char  # a letter, a digit, a mark, a symbol or a space of any script
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` with every character that could break or disguise a log line escaped."""
    return _SUSPECT.sub(_escape_one, text)


class OneLineFormatter(logging.Formatter):
    """A `logging.Formatter` whose every record is one line: the rendered record, escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record))


def handler(stream: TextIO | None = None) -> logging.Handler:
    """A handler writing each record to `stream` (default stderr) as one escaped line."""
    one_line = logging.StreamHandler(stream)
    one_line.setFormatter(OneLineFormatter(FORMAT))
    return one_line


def install(level: int = logging.INFO) -> None:
    """Log every record of the process through `handler()`, unless logging is configured already
    (like `logging.basicConfig`, which it calls): what the `weave` commands do first."""
    logging.basicConfig(level=level, handlers=[handler()])
