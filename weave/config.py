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

    @classmethod
    def from_env(cls, database_url: str | None = None, **overrides) -> "Config":
        url = database_url or os.environ.get("WEAVE_DATABASE_URL")
        if not url:
            raise SystemExit("set WEAVE_DATABASE_URL=mysql://user:pass@host:port/db or pass --database-url")
        body = int(os.environ.get("WEAVE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))
        return cls(database_url=url, max_body_bytes=overrides.get("max_body_bytes") or body)
