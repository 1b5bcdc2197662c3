"""Argument checks of the `weave` command: every argument is checked while the command line is
parsed, before any database work."""

from __future__ import annotations

import argparse
import json
import math
import os
import re

from weave.config import DEFAULT_POOL_SIZE
from weave.dburl import DatabaseUrl

# ---- argument checks --------------------------------------------------------------------------------
# Every argument is checked while the command line is parsed, before any database work: a refusal
# is a usage error with argparse's exit status 2 and says which argument and why. The bounds are
# listed in README "Admin commands: what each argument accepts".

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # the API's names (docs/decisions.md), matched whole
DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what `weave migrate` can create
DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() would also take " 7", "7_0" and other scripts' digits
ACTOR_MAX_CHARS = 128  # credentials.actor and audit_records.actor are VARCHAR(128) (characters)
RESERVED_ACTOR_PREFIX = "system:"  # Weave's own actors in audit: system:admin, system:scanner
MAX_PERMITS = 1_000_000  # far above any worker fleet; catches a slipped finger, fits INT UNSIGNED
MAX_SIGNALS_PER_MINUTE = 2**32 - 1  # applications.signals_per_minute is INT UNSIGNED
MAX_EXPIRES_IN_SECONDS = 10 * 365 * 86_400  # ten years; expires_at stays far inside DATETIME
MAX_ID = 2**64 - 1  # BIGINT UNSIGNED keys
MAX_IDLE_SECONDS = 3600
MAX_RETENTION_DAYS = 36_500  # weave.rules.retention.MAX_DAYS: beyond a century, say --forever
SHOWN_CHARS = 40


def _shown(text: str) -> str:
    """An argument as a message quotes it: escaped (no control character reaches the terminal), short."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


def _name(text: str) -> str:
    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: use 1-64 of A-Z a-z 0-9 _ . -")
    return text


def _integer(low: int, high: int, unit: str = ""):
    """An argparse type: a whole number written in ASCII digits, from `low` to `high`."""

    def parse(text: str) -> int:
        if not (DIGITS.fullmatch(text) and len(text) <= len(str(high)) and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: must be a whole number from {low} to {high}{unit}")
        return int(text)

    return parse


_positive = _integer(1, 2**31 - 1)  # serve's counts and sizes: their real limits are the machine's
_non_negative = _integer(0, 2**31 - 1)
_port = _integer(0, 65535)  # 0: the system picks a free port
_scan_threads = _integer(1, DEFAULT_POOL_SIZE)  # each holds one of the pool's connections
# Fewer than 3 Galera nodes cannot tell a dead peer from a cut network: none would keep a quorum.
_cluster_size = _integer(3, 9, " nodes")
_credential_id = _integer(1, MAX_ID)
_permits = _integer(1, MAX_PERMITS)
_signals_per_minute = _integer(0, MAX_SIGNALS_PER_MINUTE)
_expires_in = _integer(1, MAX_EXPIRES_IN_SECONDS, " seconds (ten years)")
_retention_days = _integer(0, MAX_RETENTION_DAYS, " days")


def _idle_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_IDLE_SECONDS:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be a number of seconds from 0 to {MAX_IDLE_SECONDS}")
    return seconds


def _actor(text: str) -> str:
    """The name audit records for every call made with the credential: one printable line."""
    if not 1 <= len(text) <= ACTOR_MAX_CHARS:
        problem = f"must be 1 to {ACTOR_MAX_CHARS} characters (got {len(text)})"
    elif not text.isprintable():  # control (newline, ESC), format (bidi overrides) and separator characters
        problem = "must be printable: no control, format or line-separator characters"
    elif text != text.strip():
        problem = "must not start or end with a space"
    elif text.startswith(RESERVED_ACTOR_PREFIX):
        problem = f"{RESERVED_ACTOR_PREFIX!r} is reserved for Weave's own actors in audit"
    else:
        return text
    raise argparse.ArgumentTypeError(f"{_shown(text)}: {problem}")


def _database_url(text: str) -> DatabaseUrl:
    try:
        url = DatabaseUrl.parse(text)
    except ValueError as exc:  # its messages never repeat the URL, which may hold a password
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not DATABASE_NAME.fullmatch(url.database):
        raise argparse.ArgumentTypeError(f"database name {_shown(url.database)}: use 1-64 of A-Z a-z 0-9 _ -")
    return url


def _resolve_database_url(parser: argparse.ArgumentParser, args) -> None:
    """Fill in `args.database_url` from WEAVE_DATABASE_URL (checked like the flag) when the flag is
    absent; only `dev` may go without, and starts its own server then."""
    if "database_url" not in vars(args) or args.database_url is not None:
        return
    text = os.environ.get("WEAVE_DATABASE_URL")
    if text:
        try:
            args.database_url = _database_url(text)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"WEAVE_DATABASE_URL: {exc}")
    elif args.command != "dev":
        parser.error("set WEAVE_DATABASE_URL=mysql://user:pass@host:port/db or pass --database-url")


def _print(args, result: dict, text: str) -> None:
    print(json.dumps(result) if args.json else text)
