"""The delivery of notifications (docs/rules.md#notifications, N2): the scanner's "notification"
source claims a due notification in a short unit (`weave.sql.outbox.claim`) and hands its POST to a
bounded pool of delivery threads of its own, so that a slow or hanging endpoint holds one of those
threads for at most the timeout, never a scanner thread, a batch, or the consumption of signals.
When every delivery thread is busy the source lists nothing (`Deliveries.room`): what is due waits
for a later batch, in the database, where a crash cannot lose it. One subscription holds at most its
share of the threads (`weave.rules.notify.subscription_share`): the listing passes over those that
hold it (`Deliveries.listing`), so a slow endpoint with a backlog leaves the other subscriptions'
notifications threads to start on, and what it passes over stays due.

The POST (`post`): http or https only; the host is resolved here and each address is checked
(`weave.rules.notify.address_refusal`) before the connection is made to that very address, so a
name that resolves to a private address (DNS rebinding included) is refused as the address would
be; redirects are not followed (a 3xx is a failed attempt); the whole attempt ends after `timeout`
seconds however slowly the endpoint answers; at most `MAX_ANSWER_BYTES` of the answer are read.
The secret is decrypted for signing only and never logged: an attempt's error names what failed
(the address, the status, the timeout), never a header.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from weave import metrics
from weave.config import DEFAULT_NOTIFY_TIMEOUT_SECONDS
from weave.db import Database
from weave.rules import notify
from weave.secretbox import Keyring
from weave.sql import outbox

log = logging.getLogger("weave.delivery")

MAX_ANSWER_BYTES = 4096  # of the endpoint's answer body: enough for its error message, never more
LEASE_FACTOR = 3  # a claim's lease, in timeouts: an attempt and its record fit well within it
USER_AGENT = "weave-notifications/1"


@dataclass(frozen=True)
class Answer:
    http_status: int | None  # None: no answer came (refused, unreachable, timed out)
    error: str | None  # why the attempt failed; None when a 2xx answered
    duration_ms: int


def _connect(host: str, port: int, allow_private: bool, deadline: float) -> socket.socket:
    """A socket connected to an address of `host` that the check allows (the first that answers);
    Refused when the check allowed none, OSError when none answered."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror}") from None
    refusals, failures = [], []
    for family, kind, proto, _, address in addresses:
        refusal = notify.address_refusal(address[0], allow_private)
        if refusal is not None:
            refusals.append(refusal)
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(address)  # the address that was checked, not the name resolved again
            return sock
        except OSError as exc:
            sock.close()
            failures.append(f"connecting to {address[0]}: {exc}")
    if failures or not refusals:
        raise OSError("; ".join(failures) or f"no address for {host}")
    raise notify.Refused(refusals[0])


def post(url: str, headers: dict[str, str], body: bytes, allow_private: bool, timeout: float) -> Answer:
    """One attempt: POST `body` to `url` with `headers`; its status or why it failed."""
    started = time.monotonic()
    deadline = started + timeout

    def answer(status: int | None, error: str | None) -> Answer:
        return Answer(status, error, int((time.monotonic() - started) * 1000))

    try:
        scheme, host, port = notify.check_url(url)
        connected = [_connect(host, port, allow_private, deadline)]
    except notify.Refused as exc:
        return answer(None, f"refused: {exc}")
    except OSError as exc:
        return answer(None, str(exc))
    # The whole attempt ends at the deadline: a socket timeout alone bounds each read, not an
    # endpoint that answers a byte every few seconds. (`connected` holds the TLS socket once
    # wrapped: wrapping detaches the plain one.)
    cut = threading.Timer(max(0.0, deadline - time.monotonic()), lambda: _shut(connected[-1]))
    cut.daemon = True
    cut.start()
    try:
        if scheme == "https":
            connected.append(ssl.create_default_context().wrap_socket(connected[0], server_hostname=host))
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        connection.sock = connected[-1]  # connected above, to the checked address
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body, {**headers, "user-agent": USER_AGENT})
        response = connection.getresponse()
        response.read(MAX_ANSWER_BYTES)
        status = response.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        late = time.monotonic() >= deadline
        return answer(None, f"timed out after {timeout:g} s" if late else f"{type(exc).__name__}: {exc}")
    finally:
        cut.cancel()
        connected[-1].close()
    if notify.succeeded(status):
        return answer(status, None)
    if 300 <= status < 400:
        return answer(status, f"HTTP {status}: redirects are not followed")
    return answer(status, f"HTTP {status}")


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes the delivery thread blocked on it
    except OSError:
        pass


class Deliveries:
    """The delivery threads of one process (at most `slots` POSTs in flight) and the processing
    of the scanner's "notification" source (`once`, called like a unit's `once`)."""

    def __init__(
        self,
        database: Database,
        keyring: Keyring | None,
        slots: int,
        allow_private: bool,
        timeout: float = DEFAULT_NOTIFY_TIMEOUT_SECONDS,
    ):
        self.database = database
        self.keyring = keyring
        self.slots = slots
        self.allow_private = allow_private
        self.timeout = timeout
        self.lease = timedelta(seconds=timeout * LEASE_FACTOR)
        self._pool = ThreadPoolExecutor(slots, thread_name_prefix="notify")
        self.share = notify.subscription_share(slots)
        self._lock = threading.Condition()
        self._in_flight = 0
        self._by_subscription: Counter[int] = Counter()  # POSTs in flight, of the subscriptions with any

    def room(self) -> int:
        """How many more POSTs may start now."""
        with self._lock:
            return self.slots - self._in_flight

    def listing(self, now: datetime, limit: int) -> tuple[str, tuple]:
        """The scanner's read of due notifications: none of a subscription that holds its share."""
        with self._lock:
            full = tuple(sorted(s for s, n in self._by_subscription.items() if n >= self.share))
        return outbox.listing_due(now, limit, full)

    def _reserve(self, subscription_id: int) -> bool:
        with self._lock:
            if self._in_flight >= self.slots or self._by_subscription[subscription_id] >= self.share:
                return False
            self._in_flight += 1
            self._by_subscription[subscription_id] += 1
            return True

    def _release(self, subscription_id: int) -> None:
        with self._lock:
            self._in_flight -= 1
            self._by_subscription[subscription_id] -= 1
            if not self._by_subscription[subscription_id]:
                del self._by_subscription[subscription_id]
            self._lock.notify_all()

    def once(self, database: Database, notification_id: int, subscription_id: int) -> str | None:
        """Claim a due notification and hand its POST to a delivery thread; the claim's decision
        (`outbox.CLAIMED`, `outbox.DROPPED`), or None when another scanner had it, no delivery
        thread is free or its subscription holds its share already (it stays due: a later batch
        takes it)."""
        if not self._reserve(subscription_id):
            return None
        try:
            claimed = outbox.claim.once(database, notification_id, self.lease)
        except BaseException:
            self._release(subscription_id)
            raise
        if not isinstance(claimed, outbox.Claimed):
            self._release(subscription_id)
            if claimed is None:
                return None
            metrics.NOTIFICATIONS.labels(claimed.event_type, outbox.DROPPED_OUTCOME).inc()
            return outbox.DROPPED
        try:
            self._pool.submit(self._deliver, claimed)
        except RuntimeError:  # the pool was closed (a stop): the lease passes and it is sent again
            self._release(subscription_id)
            return None
        return outbox.CLAIMED

    def _deliver(self, claimed: outbox.Claimed) -> None:
        try:
            answer = self._attempt(claimed)
            outcome = outbox.record_attempt(
                self.database, claimed, answer.http_status, answer.error, answer.duration_ms
            )
            metrics.NOTIFICATIONS.labels(claimed.event_type, outcome).inc()
            if answer.error is not None:
                log.info("notification %d to subscription %d: %s", claimed.id, claimed.subscription_id, answer.error)
        except Exception as exc:  # the record failed: the lease passes and the notification is sent again
            log.warning("notification %d: the attempt was not recorded (%s); it is tried again", claimed.id, exc)
        finally:
            self._release(claimed.subscription_id)

    def _attempt(self, claimed: outbox.Claimed) -> Answer:
        if self.keyring is None:
            return Answer(None, "WEAVE_SECRET_KEY is not set: the secret cannot be decrypted", 0)
        try:
            secret = self.keyring.decrypt(claimed.ciphertext)
        except ValueError as exc:  # its message never holds the secret or the key
            return Answer(None, str(exc), 0)
        body = claimed.body.encode("utf-8")
        headers = notify.signed_headers(secret, claimed.webhook_id, int(time.time()), body)
        return post(claimed.url, headers, body, self.allow_private, self.timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no POST is in flight (tests, a clean stop); False when `timeout` passed first."""
        ends = time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                left = ends - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def close(self) -> None:
        """Stop taking work; POSTs in flight finish (or time out) in their threads."""
        self._pool.shutdown(wait=False)
