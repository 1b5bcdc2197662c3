"""Prometheus metrics of the API and the scanner (docs/rules.md#operating; each is described in docs/operations.md).

Counters, gauges and histograms are recorded where things happen (the HTTP middleware, the
resources, the connection pool, the retry loop, the scanner) into prometheus_client's default
registry. Two kinds of figure are read, not recorded: the scanner's lag and the workflows in
review are properties of the database, not of a process, so `Backlog` reads them from the
database when /metrics is scraped, at most once a second per process. They are right even when
no scanner runs at all, which is exactly when they matter. The API renders its scrapes one at a
time (`Exposition`): /metrics needs no token.

`weave serve` runs its API processes in prometheus_client's multiprocess mode
(`use_multiprocess`): every process writes its values into files of one directory and a scrape,
whichever process answers it, sums them all. The library decides how a value is kept when the
value is created, and a metric without labels creates its value at import, before `weave serve`
has chosen the mode: so every metric that API processes record has labels (`API_METRICS`,
checked by `use_multiprocess`). The scanner is one process and keeps its values in memory.

Hot paths look children up in `Children`, a plain dict, instead of `metric.labels(...)`, which
builds a key and takes the metric's lock on every call.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # the Prometheus text format generate_latest writes

# Up to 25 s: a long-polling claim waits up to 20 s.
LATENCY_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)
BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNROUTED = "unrouted"  # the route label of a request that matched no route or was refused before routing


class Children:
    """The children of a labelled metric by their label values, cached in a dict."""

    def __init__(self, metric):
        self.metric = metric
        self._children: dict[tuple, object] = {}

    def __call__(self, *label_values: str):
        child = self._children.get(label_values)
        if child is None:  # two threads may both get here: `labels` returns the same child to both
            child = self._children[label_values] = self.metric.labels(*label_values)
        return child


def method_label(method: str) -> str:
    """A request's method as a label: the methods of HTTP, else OTHER (a client picks the method)."""
    return method if method in METHODS else "OTHER"


# ---- the API ------------------------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "weave_http_requests_total",
    "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "weave_http_request_duration_seconds",
    "Time from the request's arrival in the application to its answer, by route template and method",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
SIGNAL_REQUESTS = Counter(
    "weave_signal_requests_total",
    "Signal sends by outcome: accepted, replayed (same idempotency key and request), or the problem code refusing it",
    ["outcome"],
)
SIGNALS_ACCEPTED = Counter(
    "weave_signals_accepted_total", "Signals stored, by status and disposition at acceptance", ["status", "disposition"]
)
SIGNALS_ROUTED = Counter(
    "weave_signals_routed_total",
    "Facts sent by their business key and stored, by route: ROUTED, PARKED or AMBIGUOUS (replays not counted)",
    ["route"],
)
INBOUND_DELIVERIES = Counter(
    "weave_inbound_deliveries_total",
    "Inbound webhook deliveries (W4) by outcome: ROUTED, PARKED, AMBIGUOUS, IGNORED, UNMAPPABLE (recorded), or"
    " signature_invalid (401) and refused (403 disabled application, 429 quota: not recorded); a redelivery"
    " counts again with the outcome it is answered",
    ["outcome"],
)
TASK_CLAIMS = Counter(
    "weave_task_claims_total",
    "Claims by result: claimed, empty, turned_away (the long-poll cap was full), or made_room (a waiting claim"
    " ended early, its slot given to another application's claim)",
    ["result"],
)
TASKS_COMPLETED = Counter("weave_tasks_completed_total", "Task outcomes reported by workers", ["outcome"])
CONNECTIONS_CLOSED = Counter(
    "weave_http_connections_closed_total",
    "Connections closed by the server before their request reached the application, by reason: "
    "header_timeout, slow_body, evicted (at the connection limit), body_buffer_full (answered 503)",
    ["reason"],
)
LEASES_LOST = Counter(
    "weave_tasks_leases_lost_total", "Heartbeats and completions refused with LEASE_LOST", ["operation"]
)

# ---- the database (API and scanner) -------------------------------------------------------------------

DB_RETRIES = Counter(
    "weave_db_retries_total", "Units of work re-run, by the MySQL error code that failed them", ["code"]
)
DB_UNAVAILABLE = Counter(
    "weave_db_unavailable_total", "Units of work that ran out of retries (the API answers 503)", ["unit"]
)
POOL_MAX = Gauge(
    "weave_db_pool_max_connections", "Connections a pool may hold", ["database"], multiprocess_mode="livesum"
)
# Open connections change when one is opened or closed, not per unit of work: cheap to keep.
POOL_OPEN = Gauge(
    "weave_db_pool_connections",
    "Connections a pool holds open (idle or in use)",
    ["database"],
    multiprocess_mode="livesum",
)
POOL_WAITS = Counter("weave_db_pool_waits_total", "Checkouts that waited for a free connection", ["database"])
POOL_WAIT_SECONDS = Counter(
    "weave_db_pool_wait_seconds_total", "Time spent waiting for a free connection", ["database"]
)
CONNECTIONS_OPENED = Counter("weave_db_connections_opened_total", "Database connections opened", ["database"])

API_METRICS = (
    HTTP_REQUESTS,
    HTTP_DURATION,
    SIGNAL_REQUESTS,
    SIGNALS_ACCEPTED,
    SIGNALS_ROUTED,
    INBOUND_DELIVERIES,
    TASK_CLAIMS,
    TASKS_COMPLETED,
    LEASES_LOST,
    CONNECTIONS_CLOSED,
    DB_RETRIES,
    DB_UNAVAILABLE,
    POOL_MAX,
    POOL_OPEN,
    POOL_WAITS,
    POOL_WAIT_SECONDS,
    CONNECTIONS_OPENED,
)

# ---- the scanner (one process) --------------------------------------------------------------------------

SCANNER_BATCHES = Counter("weave_scanner_batches_total", "Scanner batches run")
SCANNER_BATCH_SECONDS = Histogram(
    "weave_scanner_batch_duration_seconds", "Time a scanner batch took", buckets=BATCH_BUCKETS
)
SCANNER_CANDIDATES = Counter("weave_scanner_candidates_total", "Candidates taken into batches, by source", ["source"])
SCANNER_DECISIONS = Counter(
    "weave_scanner_decisions_total",
    "What processing a candidate decided, by kind (the unit's answer: CONSUMED, ACTIVATED, SIGNAL_EXPIRED, …)",
    ["kind"],
)
SCANNER_FAILURES = Counter(
    "weave_scanner_failures_total",
    "Candidates whose transaction failed, by source (lease: lease expiry; batch: listing)",
    ["source"],
)
SCANNER_SKIPPED = Counter(
    "weave_scanner_skipped_total",
    "Claims that found their candidate taken by another scanner, or no longer due, by source (wasted claims)",
    ["source"],
)
SCANNER_TAKEN_OVER = Counter(
    "weave_scanner_taken_over_total",
    "Candidates a scanner took from another member's share: the member was stalled, or the candidate waited past the grace",
)
SCANNER_BACKOFFS = Counter(
    "weave_scanner_backoffs_total",
    "Failed candidates backed off (attempts + 1, a later available_at), by source",
    ["source"],
)
LEASES_EXPIRED = Counter(
    "weave_scanner_leases_expired_total", "Expired task leases settled by the scanner, by decision", ["decision"]
)

NOTIFICATIONS = Counter(
    "weave_notifications_total",
    "Outbound notification attempts and drops (N2, N3), by event type and outcome: delivered (a 2xx answered),"
    " failed (tried again later), settled (delivered or dropped meanwhile), dropped (its subscription was"
    " disabled or deleted: not sent)",
    ["event", "outcome"],
)
PURGED_INSTANCES = Counter(
    "weave_purged_instances_total", "Ended instances purged past their namespace's retention, with all their rows (L1)"
)

# ---- read from the database at scrape time --------------------------------------------------------------

LAG = "weave_scanner_lag_seconds"
NEEDS_REVIEW = "weave_workflows_needs_review"
OLDEST_UNDELIVERED = "weave_notifications_oldest_undelivered_seconds"
FAILING_SUBSCRIPTIONS = "weave_notify_subscriptions_failing"
PURGE_LAG = "weave_purge_lag_seconds"
BACKLOG_MAX_AGE_SECONDS = 1.0  # the lag is alerted on after a minute; a second older costs nothing


class Backlog:
    """A collector of the figures read from the database when scraped: the scanner's lag by source
    and the workflows in NEEDS_REVIEW. `read()` returns `{"lag_seconds": {source: seconds},
    "needs_review": {namespace: count}, "notifications": {"oldest_undelivered_seconds": s,
    "failing_subscriptions": n}}` (weave.scanner.backlog). A database that does not answer
    leaves both out of the scrape rather than failing it: the other figures still tell why.

    They are read at most once every BACKLOG_MAX_AGE_SECONDS (issue 26, item 9): /metrics answers
    without a token, and a read per scrape let six scrapers put four queries each on the database
    and slow other tenants' requests. One read at a time: a scrape that comes while one is under
    way waits for its figures; scrapes within the second after it take them as they are. A failed
    read counts as one too (the database that failed is not asked again by every scrape).

    The review count is one total: /metrics answers without a token, and namespace names are the
    tenants' (`weave admin stats` has them by namespace)."""

    def __init__(
        self,
        read: Callable[[], dict],
        max_age: float = BACKLOG_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.read = read
        self.max_age = max_age
        self.clock = clock
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._figures: dict | None = None

    def figures(self) -> dict | None:
        """The figures, read anew when the last read began `max_age` ago or more; None when the
        database did not answer."""
        with self._lock:
            if self.clock() - self._read_at >= self.max_age:
                self._read_at = self.clock()
                try:
                    self._figures = self.read()
                except Exception:  # noqa: BLE001 - the scrape must not fail with the database
                    self._figures = None
            return self._figures

    def collect(self):
        figures = self.figures()
        if figures is None:
            return
        lag = GaugeMetricFamily(
            LAG, "Age of the oldest due scanner candidate, by source (0: none is due)", labels=["source"]
        )
        for source, seconds in figures["lag_seconds"].items():
            lag.add_metric([source], seconds)
        yield lag
        yield GaugeMetricFamily(NEEDS_REVIEW, "Workflows in NEEDS_REVIEW", value=sum(figures["needs_review"].values()))
        if "purge_lag_seconds" in figures:
            yield GaugeMetricFamily(
                PURGE_LAG,
                "Seconds since the retention of the oldest ended instance still stored passed (0: none is past it)",
                value=figures["purge_lag_seconds"],
            )
        notifications = figures.get("notifications")
        if notifications is None:
            return
        yield GaugeMetricFamily(
            OLDEST_UNDELIVERED,
            "Age of the oldest notification not yet delivered (0: none is pending)",
            value=notifications["oldest_undelivered_seconds"],
        )
        yield GaugeMetricFamily(
            FAILING_SUBSCRIPTIONS,
            "Enabled notification subscriptions whose endpoint failed its last attempt",
            value=notifications["failing_subscriptions"],
        )


class Exposition:
    """The text of a registry, rendered for one scrape at a time (issue 26, item 9).

    Rendering is CPU in the process that serves the API (12 ms for 90 KB: HTTP histograms by route),
    and six scrapers at once took most of its GIL. A scrape that arrives while a rendering is under
    way waits for the next one to begin and end, and shares it with every other scrape that waited:
    each still sees everything counted before it arrived, and a flood of scrapes costs one
    rendering at a time. Sequential scrapes each get their own."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self._done = threading.Condition()
        self._rendering = False
        self._finished = 0  # renderings done so far
        self._text = b""

    def text(self) -> bytes:
        with self._done:
            # the first rendering to begin after this call: the next one, or the one after the one under way
            wanted = self._finished + (2 if self._rendering else 1)
            while self._finished < wanted:
                if self._rendering:
                    self._done.wait()
                    continue
                self._rendering = True
                self._done.release()
                try:
                    text = generate_latest(self.registry)
                finally:
                    self._done.acquire()
                    self._rendering = False
                    self._done.notify_all()
                self._text, self._finished = text, self._finished + 1
            return self._text


def registry(read_backlog: Callable[[], dict]) -> CollectorRegistry:
    """What /metrics exposes: this process's recorded metrics (or, in multiprocess mode, those of
    every process) and the backlog read from the database."""
    exposed = CollectorRegistry(auto_describe=False)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    exposed.register(MultiProcessCollector(None, directory) if directory else REGISTRY)
    exposed.register(Backlog(read_backlog))
    return exposed


def use_multiprocess(directory: str) -> None:
    """Keep every metric value of this process and of the processes it forks from now on in
    files in `directory` (an empty directory of their own), summed by every scrape.

    Call it before any API metric records a value, and before forking."""
    unlabelled = [metric._name for metric in API_METRICS if not metric._labelnames]
    if unlabelled:  # its value exists already: it would count in this process only
        raise AssertionError(f"API metrics need labels to be kept across processes: {unlabelled}")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    # The value class the library picks at import from PROMETHEUS_MULTIPROC_DIR; it reads this
    # attribute whenever a value is created (the library's own multiprocess tests set it so).
    values.ValueClass = values.MultiProcessValue()


def process_ended(pid: int) -> None:
    """Forget the live gauges of a process that ended (its counters still count)."""
    mark_process_dead(pid, os.environ["PROMETHEUS_MULTIPROC_DIR"])
