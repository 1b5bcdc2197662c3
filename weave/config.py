"""Settings from the environment and command-line flags, with named defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_THREADS = 16  # long-polling workers each hold a thread while they wait
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# A connection with no request in progress is closed once it has sent nothing for this many seconds:
# one that never sends a byte, stalls in the middle of a request, or idles between keep-alive requests.
# Clients send a request at once and reconnect when they find an idle connection closed, so this
# costs them little; a client that opens connections and leaves them idle holds each slot for only
# this long. A request being served (a claim long-polling up to 20 s) is never cut. 10 s is far
# above any network round trip, and short enough that holding every connection slot of a process
# takes hundreds of new connections per second. A proxy in front must drop its idle upstream
# connections sooner (docs/operations.md).
DEFAULT_IDLE_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Config:
    database_url: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    threads: int = DEFAULT_THREADS
    idle_timeout_seconds: int = DEFAULT_IDLE_TIMEOUT_SECONDS


def max_body_bytes_from_env() -> int:
    """WEAVE_MAX_BODY_BYTES, or the default: the request body cap of `weave serve` and `weave dev`."""
    return _positive_from_env("WEAVE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


def idle_timeout_from_env() -> int:
    """WEAVE_IDLE_TIMEOUT (seconds), or the default: when `weave serve` and `weave dev` close idle connections."""
    return _positive_from_env("WEAVE_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT_SECONDS)


def _positive_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise SystemExit(f"{name} must be a positive integer (got {raw!r})")
    return int(raw)
