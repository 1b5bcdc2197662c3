"""Outbound notifications without I/O (docs/rules.md#notifications, N2): how a delivery is signed,
when a failed one is tried again, and which addresses an endpoint may have.

- Signing is Standard Webhooks': `webhook-id` (the notification's, the same on every attempt),
  `webhook-timestamp` (seconds, the attempt's), `webhook-signature: v1,<base64>` of the
  HMAC-SHA256 of `{id}.{timestamp}.{body}` under the base64-decoded `whsec_` secret. The
  `standardwebhooks` reference library verifies it in the tests.
- The schedule never gives up: an endpoint down for a week gets its notifications when it answers
  again, a day apart at worst. The first retry comes within `FIRST_RETRY` (a blip costs seconds),
  then each delay doubles up to `RETRY_CAP`; every delay is drawn between half and all of its
  nominal value (jitter), so that the notifications of one endpoint that failed together do not
  come back together.
- An address check: an endpoint must not make Weave's network position a way into a private
  network (SSRF), so loopback, private, link-local, unspecified, multicast and reserved addresses
  are refused unless allowed (`WEAVE_NOTIFY_ALLOW_PRIVATE`), IPv4-mapped IPv6 by its IPv4 address.
- A fair share of the delivery threads: one subscription has at most a quarter of a process's
  threads in flight (one at least), so that a slow endpoint with a backlog leaves the other
  subscriptions threads to start on at once (docs/decisions.md, "Fair delivery between subscriptions").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from weave.rules import subscriptions
from weave.rules.webhooks import standard_key

FIRST_RETRY = timedelta(seconds=5)
RETRY_CAP = timedelta(hours=24)
MAX_DOUBLINGS = 32  # 5 s · 2**15 passes the cap already; bounded so that 2 ** attempts never overflows


# ---- signing -----------------------------------------------------------------------------------------


def new_secret() -> str:
    """A Standard Webhooks signing secret: `whsec_` and the base64 of 32 random bytes."""
    return subscriptions.secret_from(secrets.token_bytes(subscriptions.SECRET_BYTES))


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header's value: `v1,<base64 HMAC-SHA256 of "{id}.{ts}.{body}">`."""
    mac = hmac.new(standard_key(secret), f"{webhook_id}.{timestamp}.".encode("ascii"), hashlib.sha256)
    mac.update(body)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def signed_headers(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: the three Standard Webhooks headers and the content type."""
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, webhook_id, timestamp, body),
    }


# ---- the retry schedule ------------------------------------------------------------------------------


def retry_delay(attempts: int, jitter: float) -> timedelta:
    """The wait before the next attempt after `attempts` (1-based) failed ones: nominally
    FIRST_RETRY · 2**(attempts - 1), at most RETRY_CAP, drawn down to half of it by `jitter`
    (0 <= jitter < 1: 0 is the nominal delay, towards 1 half of it)."""
    doublings = min(max(0, attempts - 1), MAX_DOUBLINGS)
    nominal = min(RETRY_CAP, FIRST_RETRY * 2**doublings)
    return nominal * (1 - jitter / 2)


# ---- the share of the delivery threads ---------------------------------------------------------------


def subscription_share(threads: int) -> int:
    """How many of a process's `threads` delivery threads one subscription may hold at once."""
    return max(1, threads // 4)


# ---- the address check -------------------------------------------------------------------------------


class Refused(ValueError):
    """An endpoint that may not be called; the message says why (it is an attempt's error)."""


def check_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an endpoint URL; Refused unless a subscription could have it
    (`weave.rules.subscriptions.url_problem`: http or https with a host, no credentials)."""
    problem = subscriptions.url_problem(url)
    if problem is not None:
        raise Refused(problem)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80)


def address_refusal(address: str, allow_private: bool) -> str | None:
    """Why a delivery may not connect to `address` (an IPv4 or IPv6 address as a socket gives it),
    or None when it may. An IPv4-mapped IPv6 address is judged by its IPv4 address."""
    if allow_private:
        return None
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) is no part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in ("loopback", "private", "link_local", "unspecified", "multicast", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return f"the endpoint's address {ip} is {kind.replace('_', '-')} (WEAVE_NOTIFY_ALLOW_PRIVATE=0)"
    if not ip.is_global:  # shared (100.64/10), documentation, benchmarking, 6to4 of a private one...
        return f"the endpoint's address {ip} is not global (WEAVE_NOTIFY_ALLOW_PRIVATE=0)"
    return None


def succeeded(http_status: int | None) -> bool:
    """An attempt succeeded when a 2xx answered it; a 3xx is a failure (redirects are not followed)."""
    return http_status is not None and 200 <= http_status < 300
