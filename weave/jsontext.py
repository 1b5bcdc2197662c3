"""Exact JSON: parse without losing anything, serialise compactly, digest canonically (S1.11).

- Numbers keep their exact decimal value: integers become `int`, everything else `Decimal`.
- Duplicate object keys, NaN and Infinity are refused (`JsonRejected`), and so is a number of
  more than `MAX_NUMBER_CHARS` characters (`NumberTooLong`): every common parser reads that
  many (Jackson's default limit, well below Python's 4,300 digits for an int), so what Weave
  stores and echoes back, every client can read.
- `compact()` writes members in their original order with no whitespace: this is what is stored.
- `canonical()` sorts object members: this is what request digests are taken over, so that two
  clients sending the same content in another member order get the same digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from typing import Any

_encode_string = json.encoder.encode_basestring  # type: ignore[attr-defined]


class Raw(str):
    """Text that is already compact JSON (read from the database): written out as it is."""


class JsonRejected(ValueError):
    """The text is not JSON that Weave accepts; the message says why."""


class NumberTooLong(JsonRejected):
    """A number longer than `MAX_NUMBER_CHARS`: valid JSON, but not something clients can read back."""


MAX_NUMBER_CHARS = 1000


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise JsonRejected(f"duplicate object key {key!r}")
        obj[key] = value
    return obj


def _no_constants(name: str) -> Any:
    raise JsonRejected(f"{name} is not a JSON number")


def _bounded(number: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise NumberTooLong(f"a number of {len(text)} characters; at most {MAX_NUMBER_CHARS} are accepted")
        return number(text)

    return parse


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_float=_bounded(Decimal),
    parse_int=_bounded(int),
    parse_constant=_no_constants,
    strict=True,
)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any) -> None:
    """A \\uD800 escape without its pair parses to a string that is not Unicode text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRejected("string holds an unpaired UTF-16 surrogate escape") from None
    elif isinstance(value, dict):
        for key, member in value.items():
            _refuse_lone_surrogates(key)
            _refuse_lone_surrogates(member)
    elif isinstance(value, list):
        for item in value:
            _refuse_lone_surrogates(item)


def loads(text: str | bytes) -> Any:
    """Parse one JSON document exactly. Raises `JsonRejected` with a readable reason."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRejected(f"body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = _DECODER.decode(text)
    except JsonRejected:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRejected(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsonRejected("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogates(value)
    return value


def _write(value: Any, out: list[str], sort_keys: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, Raw):
        out.append(value)
    elif isinstance(value, str):
        out.append(_encode_string(value))
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise JsonRejected(f"{value} is not a JSON number")
        out.append(str(value))
    elif isinstance(value, float):
        out.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict):
        out.append("{")
        items = sorted(value.items()) if sort_keys else value.items()
        for i, (key, member) in enumerate(items):
            if i:
                out.append(",")
            out.append(_encode_string(key))
            out.append(":")
            _write(member, out, sort_keys)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, sort_keys)
        out.append("]")
    else:
        raise TypeError(f"cannot serialise {type(value).__name__} as JSON")


def _string(text: str) -> str:
    """A string member, for the C encoder: `Raw` text as it is, any other escaped as `_write` does."""
    return text if type(text) is Raw else _encode_string(text)


def _other(value: Any) -> Raw:
    """What the C encoder cannot write itself: a `Decimal` (exactly, as `_write`); else `_write`'s error."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise JsonRejected(f"{value} is not a JSON number")
        return Raw(str(value))
    raise TypeError(f"cannot serialise {type(value).__name__} as JSON")


# `_write`'s output from the json module's C encoder (issue 31 item 4: `_write` in Python was a tenth
# of a signal's API CPU): the same separators, floats (repr, no NaN), ints (int.__repr__), strings
# (the same escape function, called for every string so that `Raw` text goes out as it is), member
# order and sorting (by key); `Decimal` through `_other`. None where the interpreter has no C encoder.
_C_ENCODERS = (
    {
        sort_keys: json.encoder.c_make_encoder(None, _other, _string, None, ":", ",", sort_keys, False, False)
        for sort_keys in (False, True)
    }
    if json.encoder.c_make_encoder is not None  # type: ignore[attr-defined]
    else None
)


def _written(value: Any, sort_keys: bool) -> str:
    if _C_ENCODERS is not None:
        return "".join(_C_ENCODERS[sort_keys](value, 0))
    out: list[str] = []
    _write(value, out, sort_keys)
    return "".join(out)


def compact(value: Any) -> str:
    """Compact JSON in the original member order, numbers exactly as parsed."""
    return _written(value, sort_keys=False)


def canonical(value: Any) -> str:
    """Compact JSON with object members sorted: the input of every digest."""
    return _written(value, sort_keys=True)


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical form."""
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
