"""Review console sessions: a browser signed in with a token carries a random session id in a cookie.

Only the id's SHA-256 is stored, with the credential it came from. A session never outlives that
credential: `principal` looks the credential up exactly as an API request looks up its bearer
token (`tenancy.current_principal`), so revocation, expiry and the application's status count
from the very next page. A session ends at sign-out (its row is deleted), at `expires_at`, or with
its credential. Signing in and out are audited. No locks beyond the session row itself.

Bounded (issue 26, item 10): a browser holds one session, so signing in again with a session's
cookie ends that session; a credential holds at most `SESSIONS_PER_CREDENTIAL` sessions (one per
browser), and signing in beyond ends its oldest; each sign-in removes up to `EXPIRED_SWEEP`
expired rows. A refused sign-in whose token names a credential is audited in its namespace.
"""

from __future__ import annotations

from datetime import timedelta

from weave.auth import Principal
from weave.db import read_only, unit_of_work
from weave.sql import audit, tenancy
from weave.times import rfc3339
from weave.tx import Tx

LIFETIME = timedelta(hours=1)  # short: a stolen cookie is worth little, and signing in again is one paste
EXPIRED_SWEEP = 100  # expired rows removed per sign-in: the table stays as small as its live sessions
SESSIONS_PER_CREDENTIAL = 5  # browsers signed in with one credential at once; the oldest ends first

INSERT_SESSION = """
INSERT INTO console_sessions (session_sha256, credential_id, created_at, expires_at) VALUES (%s, %s, %s, %s)
"""
DELETE_EXPIRED = "DELETE FROM console_sessions WHERE expires_at <= %s ORDER BY expires_at LIMIT %s"
# The credential's sessions beyond its newest `SESSIONS_PER_CREDENTIAL` (migration 0014's index).
SELECT_BEYOND_CAP = """
SELECT id FROM console_sessions FORCE INDEX (ix_console_sessions_credential)
WHERE credential_id = %s ORDER BY id DESC LIMIT %s, %s
"""
DELETE_SESSIONS = "DELETE FROM console_sessions WHERE id IN %s"


@unit_of_work
def start(tx: Tx, principal: Principal, session_sha256: bytes, replaced_sha256: bytes | None, address: str) -> None:
    """A new session for the credential of `principal`, whose token the browser at `address` just
    presented; the session of the cookie it still sent (`replaced_sha256`) ends, whoever's it was."""
    now = tx.now()
    tx.execute(DELETE_EXPIRED, (now, EXPIRED_SWEEP))
    if replaced_sha256 is not None:
        _end(tx, replaced_sha256, {"replaced": True, "address": address})
    tx.insert(INSERT_SESSION, (session_sha256, principal.credential_id, now, now + LIFETIME))
    beyond = tx.all(SELECT_BEYOND_CAP, (principal.credential_id, SESSIONS_PER_CREDENTIAL, EXPIRED_SWEEP))
    if beyond:
        tx.execute(DELETE_SESSIONS, (tuple(row["id"] for row in beyond),))
    audit.record(
        tx,
        principal.namespace_id,
        principal.actor,
        "console.sign_in",
        {"expires_at": rfc3339(now + LIFETIME), "address": address, "oldest_ended": len(beyond)},
        credential_id=principal.credential_id,
    )


@unit_of_work
def refuse(tx: Tx, token_sha256: bytes, reason: str, address: str) -> bool:
    """Audit a refused sign-in in the namespace of the credential the token names, whatever that
    credential's state (revoked, expired, lacking the scope); False when it names none: then there
    is no namespace to audit it in, and the caller logs it."""
    credential = tenancy.credential_of_token(tx, token_sha256)
    if credential is None:
        return False
    audit.record(
        tx,
        credential["namespace_id"],
        credential["actor"],
        "console.sign_in_refused",
        {"reason": reason, "address": address},
        credential_id=credential["id"],
    )
    return True


# The credential's token hash is what the API's check goes by; the session only leads to it.
SELECT_SESSION_TOKEN = """
SELECT c.token_sha256 FROM console_sessions s JOIN credentials c ON c.id = s.credential_id
WHERE s.session_sha256 = %s AND s.expires_at > %s
"""


@read_only
def principal(tx: Tx, session_sha256: bytes) -> Principal | None:
    """The principal of a live session's credential as it is now, or None (no such session, ended,
    expired, or its credential revoked or expired)."""
    row = tx.one(SELECT_SESSION_TOKEN, (session_sha256, tx.now()))
    return None if row is None else tenancy.current_principal(tx, row["token_sha256"])


LOCK_SESSION = """
SELECT s.id, s.credential_id, c.namespace_id, c.actor
FROM console_sessions s JOIN credentials c ON c.id = s.credential_id
WHERE s.session_sha256 = %s FOR UPDATE
"""
DELETE_SESSION = "DELETE FROM console_sessions WHERE id = %s"


def _end(tx: Tx, session_sha256: bytes, details: dict) -> None:
    row = tx.one(LOCK_SESSION, (session_sha256,))
    if row is None:
        return
    tx.transition(DELETE_SESSION, (row["id"],), "end the console session")
    audit.record(tx, row["namespace_id"], row["actor"], "console.sign_out", details, credential_id=row["credential_id"])


@unit_of_work
def end(tx: Tx, session_sha256: bytes) -> None:
    """Sign-out: the session is gone (nothing happens for one that is gone already)."""
    _end(tx, session_sha256, {})
