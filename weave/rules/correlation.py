"""D2: a step's correlation key is a JSON Pointer (RFC 6901) into the instance context, resolved
when the step activates; it must give a string of 1-512 UTF-8 bytes."""

from __future__ import annotations

from typing import Any

MAX_BYTES = 512


class Unresolved(ValueError):
    """The pointer does not give a usable correlation key; the message says why."""


def resolve(document: Any, pointer: str) -> Any:
    """The value at `pointer`, or `Unresolved`."""
    if pointer == "":
        return document
    node = document
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            if token not in node:
                raise Unresolved(f"{pointer}: no member {token!r}")
            node = node[token]
        elif isinstance(node, list):
            # RFC 6901 indexes are ASCII digits; str.isdigit() alone also takes '١', '１' and '²'.
            if not (token.isascii() and token.isdigit() and (token == "0" or not token.startswith("0"))) or int(
                token
            ) >= len(node):
                raise Unresolved(f"{pointer}: no element {token!r}")
            node = node[int(token)]
        else:
            raise Unresolved(f"{pointer}: cannot descend into a {type(node).__name__}")
    return node


def correlation_key(context: dict, pointer: str) -> bytes:
    value = resolve(context, pointer)
    if not isinstance(value, str):
        raise Unresolved(f"{pointer}: gives a {type(value).__name__}, not a string")
    key = value.encode("utf-8")
    if not 1 <= len(key) <= MAX_BYTES:
        raise Unresolved(f"{pointer}: gives {len(key)} bytes; a correlation key has 1-{MAX_BYTES}")
    return key
