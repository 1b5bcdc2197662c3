"""Stored JSON values on a console page, shown within a budget of bytes and of work (issue 26, item 1).

A signal payload, a step result, a query round's report and an event's data are stored as compact
JSON text of up to 256 KiB. Laid out for people, one item per line, each line indented two spaces
per level, one such value of 500 nested arrays around 130,000 zeros became a page of 131 MB. Here:

- **A value shows at most `VALUE_BYTES` bytes of HTML**, then "…" and a note that says how large
  the whole value is and which API call answers it exactly (the template writes the note).
- **Levels deeper than `DEPTH` are not laid out**: they continue on their line, compactly, so no
  line is indented by more than 2 × `DEPTH` spaces whatever the nesting.
- **The work is bounded by the output, not by the value**: the text is read one character at a
  time and the reading stops when the budget is spent. Each character read writes at least one
  byte, so no more than `budget` characters are ever read: the caller needs only that many from
  the database (`LEFT(payload, n)`, with `OCTET_LENGTH` for the note), never the whole value.
- **A page's values share `PAGE_BYTES`** (`Budget`): once it is spent, the remaining values show
  only their note. A page of 25 signals of 256 KiB each is then as small as one of 25 short ones.
- **What could disguise text is escaped**: inside strings a control, format (bidirectional
  override, zero-width), separator, surrogate, private-use or unassigned character becomes its
  JSON escape (`\\u202e`), which is the same JSON value; the output is HTML-escaped as Jinja
  escapes (`&#34;` for a quote). The result is `Markup`: the template's own escaping leaves it be.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from weave import logs

INDENT = "  "
DEPTH = 8  # levels laid out one item per line; deeper levels stay on their line
VALUE_BYTES = 4096  # HTML bytes of one laid-out value (a payload, a result, a report)
DATA_BYTES = 512  # HTML bytes of an event's data in the history, compact on one line
PAGE_BYTES = 128 * 1024  # HTML bytes of all the values of one page together
ELLIPSIS = "…"
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"}


@dataclass(frozen=True)
class Shown:
    html: Markup  # the value as far as it is shown, laid out and escaped
    cut: bool  # the value goes on beyond what is shown
    total_bytes: int  # the whole value, serialised


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # a JSON escape names UTF-16 units: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _piece(char: str) -> str:
    """One character of the value as it is written to HTML."""
    if char in _HTML:
        return _HTML[char]
    if " " <= char <= "~" or not logs.is_unsafe(char):
        return char
    return _json_escape(char)


def show(head: str, total_bytes: int, budget: int, laid_out: bool = True) -> Shown:
    """`head`, the first characters of a compact JSON text of `total_bytes` bytes, as HTML of at
    most `budget` bytes: laid out one item per line down to `DEPTH` levels (`laid_out`), or
    compact. Any text is accepted (a stored value that is not JSON is shown as it is, escaped)."""
    room = budget - len(ELLIPSIS.encode())
    if room <= 0:  # nothing of it fits: the note alone says what it is
        return Shown(Markup(""), True, total_bytes)
    head = head[: room + 1]  # every character read writes at least one byte
    out: list[str] = []
    used = 0
    depth = 0
    in_string = escaped = False
    cut = False
    for i, char in enumerate(head):
        if in_string:
            piece = _piece(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            piece = _HTML[char]
        elif not laid_out:
            piece = _piece(char)
        elif char in "{[":
            depth += 1
            following = head[i + 1 : i + 2]
            # An empty object or array stays on its line, and so does every level below DEPTH.
            piece = char if following in ("}", "]") or depth > DEPTH else char + "\n" + INDENT * depth
        elif char in "}]":
            opened = i > 0 and head[i - 1] in "{["
            piece = char if opened or depth > DEPTH else "\n" + INDENT * (depth - 1) + char
            depth -= 1
        elif char == ",":
            piece = "," if depth > DEPTH else ",\n" + INDENT * depth
        elif char == ":":
            piece = ":" if depth > DEPTH else ": "
        else:
            piece = _piece(char)
        cost = len(piece) if piece.isascii() else len(piece.encode())
        if used + cost > room:
            cut = True
            break
        out.append(piece)
        used += cost
    else:
        cut = len(head.encode()) < total_bytes
    if cut:
        out.append(ELLIPSIS)
    return Shown(Markup("".join(out)), cut, total_bytes)


class Budget:
    """What is left of one page's `PAGE_BYTES` for its values, spent in the order they are shown."""

    def __init__(self, total: int):
        self.left = total

    def show(self, head: str | None, total_bytes: int, limit: int = VALUE_BYTES, laid_out: bool = True) -> Shown:
        if head is None:  # no value (a NULL column): nothing to show, nothing spent
            return Shown(Markup(""), False, 0)
        shown = show(head, total_bytes, min(limit, self.left), laid_out)
        self.left -= len(shown.html.encode())
        return shown


def clip(text: str, length: int) -> str:
    """The first `length` characters of `text`, with "…" when there were more (plain text)."""
    return text if len(text) <= length else text[:length] + ELLIPSIS
