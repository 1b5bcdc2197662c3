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


def default_max_waiting_claims(threads: int) -> int:
    """Long-polling claims may hold half of the server's threads, never more.

    A waiting claim costs no CPU, connection or transaction, only its thread; the other half serve
    everything else: reads, starts, signals, the completions of the very workers that poll, and
    the immediate 204 of every claim beyond the cap. Half (not "all but a few") because a request
    can hold its thread for seconds too (a lock wait, a 256 KiB payload), and the reserve must
    outlast a burst of those; a worker turned away is asked back after `Retry-After` seconds.
    """
    return threads // 2


DEFAULT_MAX_WAITING_CLAIMS = default_max_waiting_claims(DEFAULT_THREADS)


@dataclass(frozen=True)
class Config:
    database_url: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    threads: int = DEFAULT_THREADS
    idle_timeout_seconds: int = DEFAULT_IDLE_TIMEOUT_SECONDS
    max_waiting_claims: int | None = None  # claims long-polling at once per process; None: half of `threads`

    def __post_init__(self) -> None:
        if self.max_waiting_claims is None:
            object.__setattr__(self, "max_waiting_claims", default_max_waiting_claims(self.threads))
        if not 0 <= self.max_waiting_claims < self.threads:
            raise ValueError(
                f"at most {self.threads - 1} waiting claims with {self.threads} server threads "
                f"(got {self.max_waiting_claims}): waiting claims must leave a thread to every other request"
            )


def max_body_bytes_from_env() -> int:
    """WEAVE_MAX_BODY_BYTES, or the default: the request body cap of `weave serve` and `weave dev`."""
    return _positive_from_env("WEAVE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


def max_waiting_claims_from_env() -> int | None:
    """WEAVE_MAX_WAITING_CLAIMS, or None (half of the threads): the long-poll cap of `weave serve` and `weave dev`."""
    raw = os.environ.get("WEAVE_MAX_WAITING_CLAIMS")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise SystemExit(f"WEAVE_MAX_WAITING_CLAIMS must be an integer >= 0 (got {raw!r})")
    return int(raw)


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
