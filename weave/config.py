"""Settings from the environment and command-line flags, with named defaults.

`Config.from_env()` is the one place that reads Weave's settings from the environment (README,
"Configure it"): the command line applies its flags over it (`weave.cli.serve`), and the server,
the scanner and the connection pools are given the result. The defaults are named here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from weave.secretbox import SECRET_KEY_VARIABLE, Keyring

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
# A request's line and headers must have arrived this many seconds after its first byte (blank lines
# before it included), however steadily they trickle in: the idle timeout never cuts a client that
# sends a header line every few seconds (slowloris, issue 26). Clients send their headers in one
# packet; 10 s is far above a slow link's round trips and equal to the idle timeout.
DEFAULT_HEADER_TIMEOUT_SECONDS = 10
# A body must arrive at least this fast (bytes per second, over each window of
# `weave.server.BODY_RATE_WINDOW_SECONDS`): a body at the default cap gets about a minute, a
# 64 kbit/s link passes, and a client holding a buffered body open byte by byte is cut.
DEFAULT_MIN_BODY_RATE = 16 * 1024
# Bodies a process holds at once (waitress buffers each whole before the application runs, in memory
# up to 512 KiB, then in a temporary file), in units of the body cap: 32 MiB of memory and temporary
# disk at the default cap. A body beyond it is answered 503 with Retry-After (weave.server).
BODIES_BUFFERED = 32


def default_body_buffer_bytes(max_body_bytes: int) -> int:
    return BODIES_BUFFERED * max_body_bytes


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

# ---- the scanner (`weave scan`) and the connection pools ----------------------------------------------

DEFAULT_SCAN_BATCH_SIZE = 100  # candidates listed and processed per batch
# `weave scan --threads`: candidates processed at once by one process; a Scanner made in-process
# takes its candidates one by one.
DEFAULT_SCAN_THREADS = 8
# `weave scan --idle-seconds`: the longest sleep between batches, once idle (`weave.scanner.pause_after`).
DEFAULT_SCAN_IDLE_SECONDS = 0.25
# Outbound notifications (N2): POSTs in flight at once per scanner process (`WEAVE_NOTIFY_DELIVERIES`),
# each holding a delivery thread of its own for up to the timeout (`weave.delivery`): 16 hanging
# endpoints take 16 threads and nothing else. Private and loopback endpoints are allowed unless
# `WEAVE_NOTIFY_ALLOW_PRIVATE=0`, which production sets (docs/operations.md): development and the
# tests run their receivers on loopback.
DEFAULT_NOTIFY_DELIVERIES = 16
DEFAULT_NOTIFY_ALLOW_PRIVATE = True
# An attempt with no answer after this many seconds failed (`WEAVE_NOTIFY_TIMEOUT`); a claim's
# lease is three of them (`weave.delivery.LEASE_FACTOR`), the longest a crash delays a notification.
DEFAULT_NOTIFY_TIMEOUT_SECONDS = 10
# `WEAVE_PURGE_SHARE`: the share of a `weave scan` process's wall time its purge of ended instances
# may work (L1; `weave.scanner.PacedPurge`; 1: unpaced). A purge is background work: it must not take
# the CPU acceptance needs (issue 33: acceptance p99 within 10 % while purging), yet remove rows at
# least as fast as they are written (docs/decisions.md, "A paced purge").
DEFAULT_PURGE_SHARE = 0.2
# Connections of one pool: the scanner's (each of its threads holds one) and the admin commands'.
DEFAULT_POOL_SIZE = 32
# An API process's pool holds one connection per thread and these beyond (readiness checks, the
# authenticator, the backlog read for /metrics).
POOL_SPARE = 4


@dataclass(frozen=True)
class Config:
    database_url: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    threads: int = DEFAULT_THREADS
    idle_timeout_seconds: int = DEFAULT_IDLE_TIMEOUT_SECONDS
    max_waiting_claims: int | None = None  # claims long-polling at once per process; None: half of `threads`
    header_timeout_seconds: int = DEFAULT_HEADER_TIMEOUT_SECONDS
    min_body_rate: int = DEFAULT_MIN_BODY_RATE  # bytes per second
    body_buffer_bytes: int | None = (
        None  # request bodies held at once per process; None: BODIES_BUFFERED bodies at the cap
    )
    scan_batch_size: int = DEFAULT_SCAN_BATCH_SIZE
    scan_threads: int = DEFAULT_SCAN_THREADS
    scan_idle_seconds: float = DEFAULT_SCAN_IDLE_SECONDS
    pool_size: int = DEFAULT_POOL_SIZE  # a scanner's or an admin command's; an API process's: `api_pool_size`
    notify_deliveries: int = DEFAULT_NOTIFY_DELIVERIES
    notify_allow_private: bool = DEFAULT_NOTIFY_ALLOW_PRIVATE
    notify_timeout_seconds: int = DEFAULT_NOTIFY_TIMEOUT_SECONDS
    purge_share: float = DEFAULT_PURGE_SHARE
    # The keys that decrypt inbound sources' secrets (W1); None: the inbound route answers 503. Never shown.
    keyring: Keyring | None = field(default=None, repr=False)

    @classmethod
    def from_env(
        cls, database_url: str = "", serving: bool = True, environ: Mapping[str, str] | None = None, **flags: Any
    ) -> Config:
        """The settings of this process: each flag given (not None) first, then its environment
        variable (`ENVIRONMENT`, read here once; not at all under a flag given), then the named
        default. `serving`: the process serves the API and reads the API's variables; a scanner
        reads only its own (`SCANNER_SETTINGS`), and does not refuse to start over an API setting it
        does not use."""
        environ = os.environ if environ is None else environ
        settings = {name: value for name, value in flags.items() if value is not None}
        for name, (variable, parse) in ENVIRONMENT.items():
            if (serving or name in SCANNER_SETTINGS) and name not in settings and variable in environ:
                settings[name] = parse(variable, environ[variable])
        return cls(database_url, **settings)

    @property
    def api_pool_size(self) -> int:
        return self.threads + POOL_SPARE

    def __post_init__(self) -> None:
        if self.max_waiting_claims is None:
            object.__setattr__(self, "max_waiting_claims", default_max_waiting_claims(self.threads))
        if self.body_buffer_bytes is None:
            object.__setattr__(self, "body_buffer_bytes", default_body_buffer_bytes(self.max_body_bytes))
        if self.body_buffer_bytes < self.max_body_bytes:
            raise ValueError(
                f"the body buffer ({self.body_buffer_bytes} bytes) must hold at least one body at the cap "
                f"({self.max_body_bytes} bytes)"
            )
        if not 0 <= self.max_waiting_claims < self.threads:
            raise ValueError(
                f"at most {self.threads - 1} waiting claims with {self.threads} server threads "
                f"(got {self.max_waiting_claims}): waiting claims must leave a thread to every other request"
            )


def _positive(variable: str, raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise SystemExit(f"{variable} must be a positive integer (got {raw!r})")
    return int(raw)


def _non_negative(variable: str, raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()):
        raise SystemExit(f"{variable} must be an integer >= 0 (got {raw!r})")
    return int(raw)


def _flag(variable: str, raw: str) -> bool:
    if raw not in ("0", "1"):
        raise SystemExit(f"{variable} must be 0 or 1 (got {raw!r})")
    return raw == "1"


def _share(variable: str, raw: str) -> float:
    try:
        share = float(raw)
    except ValueError:
        share = 0.0
    if not 0 < share <= 1:
        raise SystemExit(f"{variable} must be a number above 0 and at most 1 (got {raw!r})")
    return share


def _keyring(variable: str, raw: str) -> Keyring | None:
    try:
        return Keyring.from_env({variable: raw})
    except ValueError as exc:  # its message says which key is wrong, never the key
        raise SystemExit(str(exc)) from None


# The settings the environment may give (`weave serve` and `weave dev`), by field: its variable and
# how its text is read (a wrong value stops the command with the variable's name and why).
ENVIRONMENT: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "max_body_bytes": ("WEAVE_MAX_BODY_BYTES", _positive),
    "idle_timeout_seconds": ("WEAVE_IDLE_TIMEOUT", _positive),  # seconds
    "header_timeout_seconds": ("WEAVE_HEADER_TIMEOUT", _positive),  # seconds
    "min_body_rate": ("WEAVE_MIN_BODY_RATE", _positive),  # bytes per second
    "body_buffer_bytes": ("WEAVE_BODY_BUFFER_BYTES", _positive),
    "max_waiting_claims": ("WEAVE_MAX_WAITING_CLAIMS", _non_negative),
    "keyring": (SECRET_KEY_VARIABLE, _keyring),
    "notify_deliveries": ("WEAVE_NOTIFY_DELIVERIES", _positive),
    "notify_allow_private": ("WEAVE_NOTIFY_ALLOW_PRIVATE", _flag),
    "notify_timeout_seconds": ("WEAVE_NOTIFY_TIMEOUT", _positive),  # seconds
    "purge_share": ("WEAVE_PURGE_SHARE", _share),  # of the scanner's wall time
}
# What a scanner (`weave scan`, serving nothing) reads of them: the key that decrypts the
# subscriptions' secrets and the delivery of notifications.
SCANNER_SETTINGS = frozenset(
    {"keyring", "notify_deliveries", "notify_allow_private", "notify_timeout_seconds", "purge_share"}
)
