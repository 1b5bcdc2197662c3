"""The scanner loop (K1-K3): five candidate sources (Pulse lease expiry, inbox events, due
checkpoints, expiring signals and expiring parked facts, B5), each candidate in its own short
transaction; and the data lifecycle's (L1, L3), whose purge of ended instances takes a batch's
candidates together and is paced as background work (`PacedPurge`).

One batch: every source lists its oldest due candidates (ids, due times and instances only, no
locks); the merged list, oldest due first, is cut to `batch_size`; each candidate is processed by
its source's unit, which re-reads it under lock with `SKIP LOCKED`, so any number of scanner
processes share the work without waiting on each other. A running scanner (`run`) is a member of
`scanner_processes` and takes only its share of what it lists (`weave.rules.sharing`: the
candidates whose instance hashes to its rank among the live members, those of a member silent for
a few seconds whose backup it is, and any it has seen listed a little longer without anyone taking
it), so that processes do not collide on the same oldest candidates, and nothing waits long for a
member that died. Within a process, `threads` threads take the batch's candidates in that order:
a unit mostly waits for its COMMIT to be made durable, and concurrent commits share one log flush
(group commit), so one thread would spend its time waiting for the disk; the units are the same
as with several processes, instance locks order them.

A candidate that fails (deadlock, lock wait timeout, lost connection, any SQL error, a bug) is
rolled back and backed off on its own row (an expired lease has none: the next batch finds it
again); the batch goes on. The loop goes on at once after a full
batch; otherwise it sleeps, briefly while work keeps arriving and longer the longer it has found
none, up to `idle_seconds` (`pause_after`); background work (the purge, which rests between its
transactions: `CandidateSource.resumes`) does not count as work arriving, and the sleep ends when
its rest does.
It stops after the current transaction on SIGTERM/SIGINT.

It logs one line per batch that did something and records its metrics (`weave.metrics`; served by
`weave scan --metrics-port P`). Its lag, the age of the oldest due candidate of each source, is
read by `backlog` with each source's own candidate query when metrics are scraped, at most once a
second per process (`weave.metrics.Backlog`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from prometheus_client import Counter

from weave import metrics
from weave.config import DEFAULT_SCAN_BATCH_SIZE, DEFAULT_SCAN_IDLE_SECONDS
from weave.db import Database
from weave.delivery import Deliveries
from weave.rules import retention as rules_retention
from weave.rules import sharing
from weave.sql import (
    backoff,
    checkpoints,
    engine,
    inbox,
    instances,
    outbox,
    retention,
    routing,
    scanners,
    signals,
    tasks,
)
from weave.tx import Tx

log = logging.getLogger("weave.scanner")

# The sleep between batches that were not full: BUSY_SECONDS right after a batch that found work,
# growing with the time since (a quarter of it) up to the idle sleep (`Config.scan_idle_seconds`,
# 0.25 s by default). Under steady load a signal is consumed a few milliseconds after its
# acceptance; idle, a look every 250 ms (the time, then four cheap indexed reads in one round trip:
# `Scanner.look`) costs well under 1 % of a core.
BUSY_SECONDS = 0.005
IDLE_GROWTH = 0.25


def pause_after(idle_for: float, longest: float = DEFAULT_SCAN_IDLE_SECONDS) -> float:
    """The sleep after a batch that was not full, `idle_for` seconds after the last one that found work."""
    return min(longest, max(BUSY_SECONDS, idle_for * IDLE_GROWTH))


@dataclass(frozen=True)
class CandidateSource:
    name: str
    # (now, limit) -> the read of the candidates due at `now`, oldest first, no locks: rows of
    # `due_at`, the arguments of `process` (`id` first) and, where it has one, the candidate's
    # `instance_id` (its partition key among scanner processes, not an argument)
    listing: Callable[[datetime, int], tuple[str, tuple]]
    process: Callable  # a @unit_of_work taking those arguments; returns the kind of decision, None if none
    # K2: where a failed candidate is backed off; None: nowhere, the next batch finds it again
    failures: backoff.Source | None
    count_due: Callable[[Tx], int] | None = None
    decisions: Counter = metrics.SCANNER_DECISIONS  # counts its decisions by kind
    # The batch report's field for its decisions: `done` counts them, a dict field by kind.
    tally: str = "done"
    # () -> how many candidates it can take now (its listing's limit); None: as many as the batch
    capacity: Callable[[], int] | None = None
    # Counters of particular decisions, besides `decisions`: (decision, counter) pairs.
    counts: tuple[tuple[str, Counter], ...] = ()
    # A read the listing needs first (in the batch's read, one round trip before the listings):
    # its answer is the listing's third argument.
    prepare: Callable[[Tx], object] | None = None
    # The batch's candidates of this source go to `process` together, in one call with the tuple of
    # their ids (`id` is the listing's only argument), which returns each one's decision by id: many
    # small units in one transaction. It cannot back off one of them: `failures` is None.
    grouped: bool = False
    # Background work (the purge): () -> when it takes candidates again (monotonic seconds; in the
    # past while it does not rest). A batch that found only such candidates does not keep the loop
    # busy (it sleeps as after an idle batch: no listing every few milliseconds for the sake of a
    # purge that rests), but no longer than until that time.
    resumes: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.grouped and self.failures is not None:
            raise ValueError(f"{self.name}: a grouped source has nowhere to back one candidate off")

    def due(self, tx: Tx, limit: int) -> list[dict]:
        """Up to `limit` candidates due now, oldest first."""
        first = (self.prepare(tx),) if self.prepare else ()
        return tx.all(*self.listing(tx.now(), limit, *first))


# P4: a RUNNING task whose lease passed is re-queued or settled. Its row is the task's own, with
# nowhere to back off: a failure is retried by the next batch, as the lease is still expired.
LEASE_EXPIRY = CandidateSource(
    "lease", tasks.listing_expired_leases, tasks.expire_lease, None, decisions=metrics.LEASES_EXPIRED, tally="leases"
)
# The sources of the workflows' own progress: their lag and due counts are what `backlog` reports.
SOURCES = (
    CandidateSource("inbox", inbox.listing_due, engine.consume_inbox_event, inbox.FAILURES, inbox.count_due),
    CandidateSource(
        "checkpoint", checkpoints.listing_due, engine.process_checkpoint, checkpoints.FAILURES, checkpoints.count_due
    ),
    CandidateSource(
        "signal_expiry",
        signals.listing_expiries,
        signals.expire_unmatched_signal,
        signals.FAILURES,
        signals.count_expiry_due,
    ),
    CandidateSource(
        "fact_expiry",
        routing.listing_parked_expiries,
        routing.expire_parked,
        routing.PARKED_FAILURES,
        routing.count_parked_expiry_due,
    ),
)


class PacedPurge:
    """The purge of ended instances as background work (L1; docs/decisions.md, "A paced purge"):
    a batch's candidates purged together (`retention.purge_instances`), those too big for that one
    chunk at a time alone (`retention.purge_instance`), then a rest so that the purge works at most
    `share` of the scanner process's wall time (`weave.rules.retention.rest_after`). While it rests
    its `capacity` is 0: it is not even listed, and takes no slot of a batch."""

    def __init__(self, share: float = 1.0):
        self.share = share
        self.resting_until = 0.0  # monotonic

    def capacity(self) -> int:
        return 0 if time.monotonic() < self.resting_until else retention.PER_BATCH

    def once(self, database: Database, instance_ids: tuple) -> dict[int, str | None]:
        started = time.monotonic()
        try:
            decisions = retention.purge_instances.once(database, instance_ids)
            for instance_id, decision in decisions.items():
                if decision == retention.ALONE:
                    decisions[instance_id] = retention.purge_instance.once(database, instance_id)
            return decisions
        finally:
            now = time.monotonic()
            self.resting_until = now + rules_retention.rest_after(now - started, self.share)


def lifecycle(purge_share: float = 1.0) -> tuple[CandidateSource, ...]:
    """Data lifecycle (L1, L3): what ended and is past its namespace's retention goes; each source
    lists at most `retention.PER_BATCH` candidates a batch, so that a backlog (due days ago, sorted
    first) leaves the batch to the workflows' progress. The purge of instances works at most
    `purge_share` of the process's time (`PacedPurge`; 1: unpaced, as a one-off batch)."""
    purge = PacedPurge(purge_share)
    return (
        CandidateSource(
            "purge",
            retention.listing_purgeable,
            purge,
            None,
            counts=((retention.PURGED, metrics.PURGED_INSTANCES),),
            capacity=purge.capacity,
            prepare=retention.purgeable_ranges,
            grouped=True,
            resumes=lambda: purge.resting_until,
        ),
        CandidateSource("fact_purge", retention.listing_purgeable_facts, retention.purge_facts, None),
        CandidateSource(
            "audit_sweep",
            retention.listing_audit_sweeps,
            retention.sweep_audit,
            None,
            prepare=retention.swept_namespaces,
        ),
    )


def scanned(purge_share: float = 1.0) -> tuple[CandidateSource, ...]:
    """What a scanner lists; an expired lease goes first among equals."""
    return (LEASE_EXPIRY, *SOURCES, *lifecycle(purge_share))


LIFECYCLE = lifecycle()
SCANNED = scanned()


def notification_source(deliveries: Deliveries) -> CandidateSource:
    """N2: due notifications, claimed and handed to `deliveries`' threads; listed only while one
    of those threads is free, so a full pool leaves them for a later batch and takes no slot of it,
    and only of the subscriptions that do not hold their share of those threads already.
    A claim that fails has nowhere to back off: the notification is still due, the next batch finds it."""
    return CandidateSource(
        "notification", deliveries.listing, deliveries, None, outbox.count_due, capacity=deliveries.room
    )


LISTING = "batch"  # the failures label of a batch that could not list its candidates


def backlog(tx: Tx, count_due: bool = False) -> dict:
    """What waits for the scanners, read from the database: `lag_seconds`, the age of each
    source's oldest due candidate (0 when none is due), as the source's own candidate query finds
    it; `needs_review`, the instances waiting for an operator by namespace; with `count_due`, the
    number of due candidates of each source (a count over the index range: for one-off checks);
    `purge_lag_seconds`, how long ago the retention of the oldest instance still stored passed
    (L1), and with `count_due`, `purgeable`, the instances past their retention by namespace."""
    now = tx.now()
    lag = {}
    for source in SOURCES:
        oldest = source.due(tx, 1)
        lag[source.name] = (now - oldest[0]["due_at"]).total_seconds() if oldest else 0.0
    figures = {
        "lag_seconds": lag,
        "needs_review": instances.needs_review_by_namespace(tx),
        "notifications": outbox.health(tx),
        "purge_lag_seconds": retention.purge_lag(tx),
    }
    if count_due:
        figures["due"] = {source.name: source.count_due(tx) for source in SOURCES}
        figures["purgeable"] = retention.purgeable_by_namespace(tx)
    return figures


@dataclass(frozen=True)
class Candidate:
    due_at: datetime
    source: CandidateSource
    id: int
    more: tuple = ()  # the arguments of the source's unit after the id (a task's queue)
    instance_id: int | None = None

    @classmethod
    def listed(cls, source: CandidateSource, row: dict) -> Candidate:
        more = tuple(value for column, value in row.items() if column not in ("id", "due_at", "instance_id"))
        return cls(row["due_at"], source, row["id"], more, row.get("instance_id"))

    @property
    def identity(self) -> tuple[str, int]:
        return self.source.name, self.id

    @property
    def partition_key(self) -> int:
        """Which scanner's share it is: its instance's, so one instance's work stays with one
        process (a parked fact has no instance yet: its own id)."""
        return self.id if self.instance_id is None else self.instance_id


@dataclass
class BatchReport:
    candidates: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    done: int = 0  # decisions, but for lease expiry's
    skipped: int = 0  # another scanner had it, or it was no longer due
    failed: int = 0
    members: int = 1  # the live scanner processes sharing the candidates, this one included
    taken_over: int = 0  # candidates of another member's share: it was stalled, or they waited (`sharing`)
    leases: dict[str, int] = field(default_factory=dict)  # lease expiry's decisions by kind
    millis: float = 0.0

    def fields(self) -> dict:
        return {
            "event": "scan_batch",
            "candidates": self.candidates,
            "by_source": self.by_source,
            "done": self.done,
            "skipped": self.skipped,
            "failed": self.failed,
            "members": self.members,
            "taken_over": self.taken_over,
            "leases": self.leases,
            "ms": round(self.millis, 1),
        }

    def line(self) -> str:
        return json.dumps(self.fields(), sort_keys=True)


class Scanner:
    def __init__(
        self,
        database: Database,
        sources: tuple[CandidateSource, ...] = SCANNED,
        batch_size: int = DEFAULT_SCAN_BATCH_SIZE,
        idle_seconds: float = DEFAULT_SCAN_IDLE_SECONDS,
        threads: int = 1,
        deliveries: Deliveries | None = None,
    ):
        self.database = database
        # N2: with `deliveries`, it delivers notifications too (`weave scan`, `weave dev`)
        self.deliveries = deliveries
        if deliveries is not None:
            sources = (*sources, notification_source(deliveries))
        self.sources = sources
        self.batch_size = batch_size
        self.idle_seconds = idle_seconds
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="scan") if threads > 1 else None
        self.candidates = metrics.Children(metrics.SCANNER_CANDIDATES)
        self.decisions = {source.decisions: metrics.Children(source.decisions) for source in sources}
        self.failures = metrics.Children(metrics.SCANNER_FAILURES)
        self.backoffs = metrics.Children(metrics.SCANNER_BACKOFFS)
        self.skips = metrics.Children(metrics.SCANNER_SKIPPED)
        # Sharing (`weave.rules.sharing`): None until `join` (a one-off batch takes every candidate)
        self.member_id: int | None = None
        self.membership = sharing.ALONE
        self.heartbeat_at: datetime | None = None  # database time of its last heartbeat
        self.beaten = 0.0  # monotonic time of its last heartbeat
        self.waiting_since: dict[tuple[str, int], datetime] = {}  # others' candidates it listed, since when
        self.taken_over = 0  # of the last batch

    def join(self) -> None:
        """Become a member of the scanners that share the candidates (`run` does, first)."""
        self.member_id = scanners.join(self.database, socket.gethostname(), os.getpid())
        self.heartbeat_at = None
        log.info("scanner member %d joined", self.member_id)

    def leave(self) -> None:
        """Stop being a member (a clean stop): the others take the whole share from their next batch."""
        if self.member_id is not None:
            scanners.leave(self.database, self.member_id)
            log.info("scanner member %d left", self.member_id)
            self.member_id = None
            self.membership = sharing.ALONE

    def look(self) -> list[Candidate]:
        """The batch, read in two round trips (the time, then every listing together, with a
        member's heartbeat and its read of the live members): each source's oldest due candidates,
        merged, oldest first; this member's share of them, cut to the batch size."""
        member_id = self.member_id
        limit = sharing.listing_limit(self.batch_size, self.membership.members)

        def read(tx: Tx) -> tuple[datetime, dict[int, datetime] | None, list[Candidate]]:
            now = tx.now()
            members = ()
            if member_id is not None:
                if sharing.heartbeat_due(self.heartbeat_at, now):
                    scanners.heartbeat(tx, member_id, now)
                    self.heartbeat_at, self.beaten = now, time.monotonic()
                members = (scanners.listing_live(now - sharing.LIVE),)
            limits = [limit if source.capacity is None else min(limit, source.capacity()) for source in self.sources]
            listing = [(source, n) for source, n in zip(self.sources, limits) if n > 0]
            prepared = [(source.prepare(tx),) if source.prepare else () for source, _ in listing]
            listings = (source.listing(now, n, *first) for (source, n), first in zip(listing, prepared))
            answers = tx.all_together(*members, *listings)
            live = {row["id"]: row["heartbeat_at"] for row in answers.pop(0)} if members else None
            listed = [Candidate.listed(source, row) for (source, _), rows in zip(listing, answers) for row in rows]
            return now, live, listed

        now, live, merged = self.database.read(read)
        if member_id is not None:
            self.membership = sharing.membership(member_id, live, now)
            if member_id not in live:  # its row was deleted, long silent: join again, the others will count it
                self.join()
        merged.sort(key=lambda c: (c.due_at, self.sources.index(c.source), c.id))
        listed = [(c.identity, c.partition_key) for c in merged]
        mine = sharing.share(listed, self.membership, self.waiting_since, now, self.batch_size)
        self.waiting_since, self.taken_over = mine.waiting, mine.taken_over
        metrics.SCANNER_TAKEN_OVER.inc(mine.taken_over)
        by_identity = {c.identity: c for c in merged}
        return [by_identity[identity] for identity in mine.taken]

    def beat_if_due(self) -> None:
        """A member's heartbeat during a batch that lasts: the others must not take it for stalled
        (`sharing.STALLED`) while it works. A beat that fails is only late."""
        if self.member_id is None or time.monotonic() - self.beaten < sharing.HEARTBEAT_EVERY.total_seconds():
            return
        try:
            self.heartbeat_at = scanners.beat(self.database, self.member_id)
            self.beaten = time.monotonic()
        except Exception as exc:
            log.warning("scanner member %d heartbeat failed: %s", self.member_id, exc)

    def process(self, candidate: Candidate) -> tuple[str, str | None]:
        """Process one candidate: "done" with the kind of decision, "skipped" (another scanner had
        it, or it was no longer due) or "failed" (backed off, where its source backs off)."""
        source = candidate.source
        self.candidates(source.name).inc()
        try:
            decision = source.process.once(self.database, candidate.id, *candidate.more)
        except Exception as exc:  # K2: whatever went wrong, back this candidate off and go on
            self.failures(source.name).inc()
            if source.failures is None:
                log.warning("scan %s %s failed: %s; the next batch tries again", source.name, candidate.id, exc)
                return "failed", None
            again = backoff.record_failure(self.database, source.failures, candidate.id, f"{type(exc).__name__}: {exc}")
            if again:
                self.backoffs(source.name).inc()
            # A try whose COMMIT lost its answer may have done the work: then there is nothing to back off.
            then = f"backed off until {again.isoformat()}" if again else "it was done after all"
            log.warning("scan %s %s failed: %s; %s", source.name, candidate.id, exc, then)
            return "failed", None
        return self.decided(source, decision)

    def process_group(self, source: CandidateSource, candidates: list[Candidate]) -> list[tuple[str, str | None]]:
        """Process a grouped source's candidates in one call; each one's result, as `process`."""
        ids = tuple(candidate.id for candidate in candidates)
        self.candidates(source.name).inc(len(ids))
        try:
            decisions = source.process.once(self.database, ids)
        except Exception as exc:  # K2: the whole group is rolled back; the next batch finds it again
            self.failures(source.name).inc()
            log.warning("scan %s %s failed: %s; the next batch tries again", source.name, list(ids), exc)
            return [("failed", None)] * len(ids)
        return [self.decided(source, decisions.get(candidate_id)) for candidate_id in ids]

    def decided(self, source: CandidateSource, decision: str | None) -> tuple[str, str | None]:
        if decision is None:
            self.skips(source.name).inc()
            return "skipped", None
        self.decisions[source.decisions](decision).inc()
        for kind, counter in source.counts:
            if decision == kind:
                counter.inc()
        return "done", decision

    def run_once(self, stop: threading.Event | None = None) -> BatchReport:
        started = time.monotonic()
        report = BatchReport()
        batch = self.look()
        report.candidates = len(batch)
        report.members, report.taken_over = self.membership.members, self.taken_over
        # The work, in the batch's order: each candidate alone, a grouped source's all together
        # where its first one is.
        work: list[list[Candidate]] = []
        groups: dict[str, list[Candidate]] = {}
        for candidate in batch:
            if not candidate.source.grouped:
                work.append([candidate])
            elif candidate.source.name in groups:
                groups[candidate.source.name].append(candidate)
            else:
                work.append(groups.setdefault(candidate.source.name, [candidate]))

        def process(candidates: list[Candidate]) -> tuple[list[Candidate], list[tuple[str, str | None]] | None]:
            if stop is not None and stop.is_set():
                return candidates, None
            source = candidates[0].source
            if source.grouped:
                return candidates, self.process_group(source, candidates)
            return candidates, [self.process(candidates[0])]

        for candidates, processed in self._pool.map(process, work) if self._pool else map(process, work):
            self.beat_if_due()
            if processed is None:
                continue
            for candidate, (result, decision) in zip(candidates, processed):
                name = candidate.source.name
                report.by_source[name] = report.by_source.get(name, 0) + 1
                if result == "done" and candidate.source.tally != "done":
                    by_kind = getattr(report, candidate.source.tally)
                    by_kind[decision] = by_kind.get(decision, 0) + 1
                else:
                    setattr(report, result, getattr(report, result) + 1)
        seconds = time.monotonic() - started
        report.millis = seconds * 1000
        metrics.SCANNER_BATCHES.inc()
        metrics.SCANNER_BATCH_SECONDS.observe(seconds)
        return report

    def run(self, stop: threading.Event) -> None:
        """Batches until `stop` is set, as a member sharing the candidates; a clean stop leaves."""
        worked_at = time.monotonic()
        background = [source for source in self.sources if source.resumes is not None]
        while not stop.is_set():
            try:
                if self.member_id is None:
                    self.join()
                report = self.run_once(stop)
            except Exception as exc:  # the database is unreachable: wait and try again
                self.failures(LISTING).inc()
                log.warning("scan batch failed: %s", exc)
                stop.wait(self.idle_seconds)
                continue
            # One line per batch; idle batches only at DEBUG, so an idle scanner is quiet.
            log.log(
                logging.INFO if report.candidates else logging.DEBUG,
                "scan batch",
                extra={"fields": report.fields()},
            )
            now = time.monotonic()
            if report.candidates > sum(report.by_source.get(source.name, 0) for source in background):
                worked_at = now
            if report.candidates < self.batch_size:
                pause = pause_after(now - worked_at, self.idle_seconds)
                # a millisecond past the end of the rest: woken a hair early, the batch would not list
                # the purge and the loop would sleep a whole pause again
                resuming = [when - now + 0.001 for source in background if (when := source.resumes()) > now]
                stop.wait(min([pause, *resuming]))
        try:
            self.leave()
        except Exception as exc:  # its heartbeat stops all the same: the others count it out after `sharing.LIVE`
            log.warning("scanner member %s could not leave: %s", self.member_id, exc)
        if self.deliveries is not None:  # POSTs in flight finish or time out; what they leave is due again later
            self.deliveries.close()
