"""Exact JSON for the SDK: what is read keeps every digit and member order; what is written is
compact, numbers as they are.

- `loads` reads numbers with a fraction or an exponent as `Decimal` (never `float`), integers as
  `int`, and keeps objects' member order (plain `dict`s, which keep insertion order).
- `dumps` writes compact JSON (no whitespace, non-ASCII characters as they are) in the members'
  order, `Decimal` as `str(d)` without quotes, `float` as Python's shortest repr. NaN and
  infinities are refused (`ValueError`): JSON has no such numbers.

So `dumps(loads(text)) == text` for every compact JSON text, which is how Weave stores and echoes
payloads, inputs and results.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

_DECODER = json.JSONDecoder(parse_float=Decimal, object_pairs_hook=dict)
_encode_string = json.encoder.encode_basestring  # type: ignore[attr-defined]  # keeps non-ASCII as is


class _Absent:
    """The type of `ABSENT`: a member that is not sent at all (unlike `None`, which is JSON null)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self):
        return (_Absent, ())


ABSENT: Any = _Absent()


def loads(text: str | bytes) -> Any:
    """Parse one JSON document exactly (see the module docstring)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    return _DECODER.decode(text)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_string(value))
    elif isinstance(value, int):
        out.append(int.__repr__(value))  # not the repr of an int subclass (an IntEnum, say)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        out.append(str(value))
    elif isinstance(value, float):
        out.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, member) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys are strings, not {type(key).__name__} ({key!r})")
            if i:
                out.append(",")
            out.append(_encode_string(key))
            out.append(":")
            _write(member, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any) -> str:
    """Compact JSON text of `value`, members in their order, decimals exactly."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)
