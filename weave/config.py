"""Settings from the environment and command-line flags, with named defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_THREADS = 16  # long-polling workers each hold a thread while they wait
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Config:
    database_url: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def max_body_bytes_from_env() -> int:
    """WEAVE_MAX_BODY_BYTES, or the default: the request body cap of `weave serve` and `weave dev`."""
    raw = os.environ.get("WEAVE_MAX_BODY_BYTES")
    if raw is None:
        return DEFAULT_MAX_BODY_BYTES
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise SystemExit(f"WEAVE_MAX_BODY_BYTES must be a positive integer (got {raw!r})")
    return int(raw)
