"""Bearer tokens, principals and permission checks.

A token is `wv_` + 43 URL-safe characters (256 random bits). Only its SHA-256 is stored and the
lookup goes by that hash (`sql.tenancy.authenticate`). A principal is what a
valid, current credential says: namespace, application, actor, scopes and queue grants.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from weave.errors import Code, WeaveError

TOKEN_PREFIX = "wv_"
TOKEN_BYTES = 32

SCOPES = frozenset(
    {
        "definitions:write",
        "definitions:read",
        "workflows:start",
        "workflows:read",
        "workflows:signal",
        "workflows:control",
        "workflows:review",
        "tasks:work",
    }
)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class Principal:
    credential_id: int
    namespace_id: int
    namespace: str
    application_id: int
    application_status: str
    signals_per_minute: int | None
    actor: str
    scopes: frozenset[str]
    queues: frozenset[str]

    def require(self, namespace: str | None, not_found: Code, *any_of_scopes: str) -> None:
        """Refuse unless the request is in our namespace (else 404) and holds one of the scopes (else 403).

        Another namespace is answered exactly like a missing object, so nothing leaks across tenants.
        `weave.http.Authenticate` calls it for every operation, from the operation's declaration.
        """
        if namespace != self.namespace:
            raise WeaveError(not_found, "no such object in this namespace")
        if not self.scopes.intersection(any_of_scopes):
            raise WeaveError(Code.FORBIDDEN, f"this credential lacks the scope {' or '.join(any_of_scopes)}")

    def holds_queues(self, queues) -> bool:
        """Whether every one of `queues` is granted."""
        return self.queues.issuperset(queues)

    def require_writable(self) -> None:
        """Refuse with 403 unless the credential's application is ACTIVE: a disabled application is a
        kill switch for its credentials, which may then only read, from the very next request (its
        status is read on every request). Its instances still collect what they wait for (S2.4)."""
        if self.application_status != "ACTIVE":
            raise WeaveError(Code.FORBIDDEN, "the application of this credential is disabled: it may only read")

    def require_queues(self, queues) -> None:
        """Refuse with 403 unless every one of `queues` is granted (S1.1: all queues of an instance's
        pinned definition; P2: the queue claimed from). The object is not hidden: it is in our namespace."""
        missing = sorted(set(queues) - self.queues)
        if missing:
            raise WeaveError(Code.FORBIDDEN, f"this credential has no grant for queue(s) {', '.join(missing)}")


NOT_CURRENT = "the token is unknown, revoked or expired"


def unauthenticated(detail: str) -> WeaveError:
    """The 401, with the challenge that every 401 carries (RFC 9110 §11.6.1): how to authenticate."""
    return WeaveError(Code.UNAUTHENTICATED, detail, headers={"WWW-Authenticate": 'Bearer realm="weave"'})


def bearer_token(header: str | None) -> str:
    if not header:
        raise unauthenticated("send Authorization: Bearer <token>")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        raise unauthenticated("the Authorization header must be 'Bearer wv_...'")
    return token
