"""Notification subscriptions without I/O (docs/rules.md#notifications, N1): what an endpoint URL
and a set of event types must be before a subscription is stored, and the form of its secret.

Only `http` and `https` URLs with a host are accepted: any other scheme (`file:`, `ftp:`,
`javascript:`, ...) is refused before it is stored, so the delivery side never meets one. Whether
a host is private or loopback is decided at delivery time, where the address is resolved
(`weave.rules.notify`). A URL carries no credentials (`user:password@`): the secret signs.
"""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

from weave.statuses import NotifyEvent

SCHEMES = ("http", "https")
URL_MAX_CHARS = 2048  # notify_subscriptions.url VARCHAR(2048)
SECRET_PREFIX = "whsec_"  # Standard Webhooks
SECRET_BYTES = 32  # the Standard Webhooks libraries accept 24-64 random bytes
EVENT_TYPES = tuple(event.value for event in NotifyEvent)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a subscription's endpoint, or None when it can."""
    if len(url) > URL_MAX_CHARS:
        return f"the URL is longer than {URL_MAX_CHARS} characters"
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        return "the URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its check: ValueError on a port that is not a number in range)
    except ValueError as exc:
        return f"the URL does not parse: {exc}"
    if parts.scheme.lower() not in SCHEMES:
        return f"the URL's scheme must be http or https, not {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return "the URL names no host"
    if parts.username is not None or parts.password is not None:
        return "the URL must not carry credentials (user:password@): notifications are signed instead"
    if parts.fragment:
        return "the URL must not have a fragment (#...)"
    return None


def unknown_events(events: list[str]) -> list[str]:
    """The given event types that are not one of N1's, in the order given."""
    return [event for event in events if event not in EVENT_TYPES]


def secret_from(random_bytes: bytes) -> str:
    """The Standard Webhooks secret of `random_bytes` (24 to 64 of them): `whsec_` + base64."""
    if not 24 <= len(random_bytes) <= 64:
        raise ValueError("a Standard Webhooks secret is 24 to 64 random bytes")
    return SECRET_PREFIX + base64.b64encode(random_bytes).decode("ascii")
