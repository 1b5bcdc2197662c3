"""`weave serve` and `weave scan`: the API processes and the scanner loop."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from prometheus_client import start_http_server

from weave import metrics, server
from weave.config import Config
from weave.db import Database
from weave.dburl import DatabaseUrl
from weave.delivery import Deliveries
from weave.scanner import Scanner, backlog, scanned

log = logging.getLogger("weave.cli")


def _server_config(args, url: DatabaseUrl) -> Config:
    """What `serve` and `dev` give each API process: flags first, then the environment, then defaults."""
    return Config.from_env(
        url.url(),
        threads=args.threads,
        max_body_bytes=args.max_body_bytes,
        idle_timeout_seconds=args.idle_timeout,
        max_waiting_claims=args.max_waiting_claims,
        header_timeout_seconds=args.header_timeout,
        min_body_rate=args.min_body_rate,
        body_buffer_bytes=args.body_buffer_bytes,
    )


def deliveries_of(config: Config, database: Database) -> Deliveries:
    """The delivery threads of a scanner process (N2), as the settings say."""
    return Deliveries(
        database,
        config.keyring,
        config.notify_deliveries,
        config.notify_allow_private,
        timeout=config.notify_timeout_seconds,
    )


def cmd_serve(args) -> int:
    metrics_address = None if args.metrics_port is None else (args.metrics_host, args.metrics_port)
    if metrics_address == (args.host, args.port) and args.port != 0:
        # with --processes N every socket is SO_REUSEPORT: the two would share the port, not refuse it
        print(f"weave: --metrics-port {args.port} is the API's own port on {args.host}", file=sys.stderr)
        return 2
    server.serve(_server_config(args, args.database_url), args.host, args.port, args.processes, metrics_address)
    return 0


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so that `finally` blocks (stopping the private server) run."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _stop_on_signals() -> threading.Event:
    """SIGTERM and SIGINT ask the scanner to stop after its current transaction."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def cmd_scan(args) -> int:
    config = Config.from_env(
        args.database_url.url(), serving=False, scan_threads=args.threads, scan_idle_seconds=args.idle_seconds
    )
    database = Database(args.database_url, pool_size=config.pool_size + config.notify_deliveries)
    scanner = Scanner(
        database,
        sources=scanned(config.purge_share),
        batch_size=config.scan_batch_size,
        idle_seconds=config.scan_idle_seconds,
        threads=config.scan_threads,
        deliveries=deliveries_of(config, database),
    )
    if args.once:
        print(scanner.run_once().line())
        return 0
    if args.metrics_port is not None:
        exposed = metrics.registry(lambda: database.attempt(backlog))
        try:
            http_server, _ = start_http_server(args.metrics_port, args.metrics_host, exposed)
        except OSError as exc:
            print(f"weave: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}", file=sys.stderr)
            return 1
        log.info("metrics on http://%s:%d/metrics", args.metrics_host, http_server.server_port)
    scanner.run(_stop_on_signals())
    return 0
