"""Namespaces, applications, queues, credentials and grants; authentication.

Admin units are run by the `weave admin` command and by `weave dev`; `authenticate` runs on every
API request. Admin actions are audited as `system:admin`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import timedelta

from weave import auth
from weave.cache import BoundedCache
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError
from weave.sql import audit
from weave.times import rfc3339
from weave.tx import Tx

ADMIN_ACTOR = "system:admin"

SELECT_NAMESPACE = "SELECT id, name FROM namespaces WHERE name = %s"
INSERT_NAMESPACE = "INSERT INTO namespaces (name, created_at) VALUES (%s, %s)"


def namespace_id_of(tx: Tx, name: str) -> int:
    """The id of a namespace by its name; NOT_FOUND when there is none."""
    row = tx.one(SELECT_NAMESPACE, (name,))
    if row is None:
        raise WeaveError(Code.NOT_FOUND, f"namespace {name!r} does not exist")
    return row["id"]


def no_such(what: str, name: str, namespace: str) -> WeaveError:
    """NOT_FOUND for a named row of a namespace (an inbound source, a notification subscription)."""
    return WeaveError(Code.NOT_FOUND, f"{what} {name!r} does not exist in {namespace!r}")


def lock_named(tx: Tx, lock: str, what: str, namespace: str, name: str) -> tuple[int, dict]:
    """The namespace's id and its row called `name`, read by `lock` (its parameters: the namespace
    id, the name) with the lock it takes; NOT_FOUND for either."""
    namespace_id = namespace_id_of(tx, namespace)
    row = tx.one(lock, (namespace_id, name))
    if row is None:
        raise no_such(what, name, namespace)
    return namespace_id, row


@unit_of_work(replay_on=("uq_namespaces_name",))
def create_namespace(tx: Tx, name: str) -> dict:
    if tx.one(SELECT_NAMESPACE, (name,)) is not None:
        raise WeaveError(Code.INVALID_STATE, f"namespace {name!r} already exists")
    namespace_id = tx.insert(INSERT_NAMESPACE, (name, tx.now()))
    audit.record(tx, namespace_id, ADMIN_ACTOR, "namespace.create", {"namespace": name})
    return {"namespace_id": str(namespace_id), "namespace": name}


SELECT_QUEUE = "SELECT id FROM queues WHERE namespace_id = %s AND name = %s"
INSERT_QUEUE = """
INSERT INTO queues (namespace_id, name, max_permits, permits_in_use, created_at) VALUES (%s, %s, %s, 0, %s)
"""


@unit_of_work(replay_on=("uq_queues_namespace_name",))
def create_queue(tx: Tx, namespace: str, name: str, max_permits: int) -> dict:
    namespace_id = namespace_id_of(tx, namespace)
    if tx.one(SELECT_QUEUE, (namespace_id, name)) is not None:
        raise WeaveError(Code.INVALID_STATE, f"queue {name!r} already exists in {namespace!r}")
    queue_id = tx.insert(INSERT_QUEUE, (namespace_id, name, max_permits, tx.now()))
    audit.record(tx, namespace_id, ADMIN_ACTOR, "queue.create", {"queue": name, "max_permits": max_permits})
    return {"queue_id": str(queue_id), "namespace": namespace, "queue": name, "max_permits": max_permits}


SELECT_APPLICATION = "SELECT id, status FROM applications WHERE namespace_id = %s AND name = %s"
INSERT_APPLICATION = """
INSERT INTO applications (namespace_id, name, status, signals_per_minute, created_at, updated_at)
VALUES (%s, %s, 'ACTIVE', %s, %s, %s)
"""
UPDATE_APPLICATION_STATUS = "UPDATE applications SET status = %s, updated_at = %s WHERE id = %s"


@unit_of_work(replay_on=("uq_applications_namespace_name",))
def create_application(tx: Tx, namespace: str, name: str, signals_per_minute: int | None) -> dict:
    namespace_id = namespace_id_of(tx, namespace)
    if tx.one(SELECT_APPLICATION, (namespace_id, name)) is not None:
        raise WeaveError(Code.INVALID_STATE, f"application {name!r} already exists in {namespace!r}")
    now = tx.now()
    app_id = tx.insert(INSERT_APPLICATION, (namespace_id, name, signals_per_minute, now, now))
    audit.record(
        tx,
        namespace_id,
        ADMIN_ACTOR,
        "application.create",
        {"application": name, "signals_per_minute": signals_per_minute},
    )
    return {
        "application_id": str(app_id),
        "namespace": namespace,
        "application": name,
        "status": "ACTIVE",
        "signals_per_minute": signals_per_minute,
    }


@unit_of_work
def set_application_status(tx: Tx, namespace: str, name: str, status: str) -> dict:
    namespace_id = namespace_id_of(tx, namespace)
    app = tx.one(SELECT_APPLICATION, (namespace_id, name))
    if app is None:
        raise WeaveError(Code.NOT_FOUND, f"application {name!r} does not exist in {namespace!r}")
    tx.transition(UPDATE_APPLICATION_STATUS, (status, tx.now(), app["id"]), f"set application {name!r} {status}")
    audit.record(
        tx, namespace_id, ADMIN_ACTOR, "application.status", {"application": name, "from": app["status"], "to": status}
    )
    return {"namespace": namespace, "application": name, "status": status}


INSERT_CREDENTIAL = """
INSERT INTO credentials (token_sha256, namespace_id, application_id, actor, scopes, expires_at, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
"""
INSERT_GRANT = "INSERT INTO credential_queue_grants (credential_id, queue_id, created_at) VALUES (%s, %s, %s)"


def insert_credential(
    tx: Tx,
    namespace: str,
    application: str,
    actor: str,
    scopes: list[str],
    queues: list[str],
    token_sha256: bytes,
    expires_in_seconds: int | None,
) -> dict:
    """Store a credential for an already generated token (only its hash reaches the database), in
    an open unit: `create_credential`'s own, or one that does more (an inbound source's)."""
    unknown = sorted(set(scopes) - auth.SCOPES)
    if unknown:
        raise WeaveError(
            Code.VALIDATION_FAILED, f"unknown scope(s): {', '.join(unknown)}; known: {', '.join(sorted(auth.SCOPES))}"
        )
    namespace_id = namespace_id_of(tx, namespace)
    app = tx.one(SELECT_APPLICATION, (namespace_id, application))
    if app is None:
        raise WeaveError(Code.NOT_FOUND, f"application {application!r} does not exist in {namespace!r}")
    queue_ids = []
    for queue in sorted(set(queues)):
        row = tx.one(SELECT_QUEUE, (namespace_id, queue))
        if row is None:
            raise WeaveError(Code.NOT_FOUND, f"queue {queue!r} does not exist in {namespace!r}")
        queue_ids.append(row["id"])
    now = tx.now()
    expires_at = now + timedelta(seconds=expires_in_seconds) if expires_in_seconds is not None else None
    credential_id = tx.insert(
        INSERT_CREDENTIAL,
        (token_sha256, namespace_id, app["id"], actor, " ".join(sorted(set(scopes))), expires_at, now),
    )
    tx.executemany(INSERT_GRANT, [(credential_id, queue_id, now) for queue_id in queue_ids])
    audit.record(
        tx,
        namespace_id,
        ADMIN_ACTOR,
        "credential.create",
        {
            "credential_id": str(credential_id),
            "application": application,
            "actor": actor,
            "scopes": sorted(set(scopes)),
            "queues": sorted(set(queues)),
            "expires_at": rfc3339(expires_at),
        },
    )
    return {"credential_id": str(credential_id)}


create_credential = unit_of_work(insert_credential)

SELECT_CREDENTIAL_IN_NAMESPACE = "SELECT id, revoked_at FROM credentials WHERE id = %s AND namespace_id = %s FOR UPDATE"
REVOKE_CREDENTIAL = "UPDATE credentials SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL"


@unit_of_work
def revoke_credential(tx: Tx, namespace: str, credential_id: int) -> dict:
    namespace_id = namespace_id_of(tx, namespace)
    if not revoke(tx, namespace_id, credential_id):
        raise WeaveError(Code.NOT_FOUND, f"credential {credential_id} does not exist in {namespace!r}")
    return {"credential_id": str(credential_id), "revoked": True}


def revoke(tx: Tx, namespace_id: int, credential_id: int) -> bool:
    """Revoke a credential of the namespace (audited; nothing changes when it already is);
    False when the namespace has no such credential."""
    row = tx.one(SELECT_CREDENTIAL_IN_NAMESPACE, (credential_id, namespace_id))
    if row is None:
        return False
    if row["revoked_at"] is None:
        tx.transition(REVOKE_CREDENTIAL, (tx.now(), credential_id), f"revoke credential {credential_id}")
        audit.record(tx, namespace_id, ADMIN_ACTOR, "credential.revoke", {"credential_id": str(credential_id)})
    return True


# A credential's identity (namespace, application, actor, scopes, queue grants) is fixed when it
# is created; only revocation, expiry and its application's status and quota change afterwards. So
# every request reads just those, by the token's hash, and a process keeps identities it has seen.
# The lookup is by the SHA-256 of a 256-bit secret (unique key): a timing difference in the index
# compare could at most reveal a prefix of a hash, which does not help to find a token.
# A credential whatever its state (revoked, expired): what a refused console sign-in is audited as.
SELECT_CREDENTIAL_OF_TOKEN = "SELECT id, namespace_id, actor FROM credentials WHERE token_sha256 = %s"


def credential_of_token(tx: Tx, token_sha256: bytes) -> dict | None:
    """`id`, `namespace_id` and `actor` of the credential of a token, current or not; None if none."""
    return tx.one(SELECT_CREDENTIAL_OF_TOKEN, (token_sha256,))


SELECT_CURRENT_CREDENTIAL = """
SELECT UTC_TIMESTAMP(6) AS now, c.id, c.expires_at, a.status AS application_status, a.signals_per_minute
FROM credentials c JOIN applications a ON a.id = c.application_id
WHERE c.token_sha256 = %s AND c.revoked_at IS NULL
"""
# The grants come along as a space-separated list (queue names have no spaces; the connection
# raises group_concat_max_len far above any grant list).
SELECT_IDENTITY = """
SELECT c.namespace_id, n.name AS namespace, c.application_id, c.actor, c.scopes,
       (SELECT GROUP_CONCAT(q.name SEPARATOR ' ') FROM credential_queue_grants g JOIN queues q ON q.id = g.queue_id
         WHERE g.credential_id = c.id) AS queues
FROM credentials c JOIN namespaces n ON n.id = c.namespace_id
WHERE c.id = %s
"""


# By token hash; only their identity is reused. Bounded by bytes (issue 26, item 3): a
# credential's grants name up to every queue of its namespace.
PRINCIPAL_CACHE_BYTES = 16 * 1024 * 1024
_principals = BoundedCache(PRINCIPAL_CACHE_BYTES)


def _principal_bytes(principal: auth.Principal) -> int:
    """What a kept principal holds: the object, its strings and its two sets (CPython's sizes)."""
    texts = (principal.namespace, principal.actor, *principal.scopes, *principal.queues)
    return (
        sys.getsizeof(principal)
        + sys.getsizeof(principal.scopes)
        + sys.getsizeof(principal.queues)
        + sum(sys.getsizeof(text) for text in texts)
    )


def _known_principal(tx: Tx, presented_sha256: bytes, current: dict) -> auth.Principal:
    """The principal of a current credential: its identity from this process's memory (or read
    once), its application's status and quota as `current` read them."""
    known = _principals.get(presented_sha256)
    if known is None or known.credential_id != current["id"]:  # a restored database may renumber
        row = tx.one(SELECT_IDENTITY, (current["id"],))
        known = auth.Principal(
            credential_id=current["id"],
            namespace_id=row["namespace_id"],
            namespace=row["namespace"],
            application_id=row["application_id"],
            application_status=current["application_status"],
            signals_per_minute=current["signals_per_minute"],
            actor=row["actor"],
            scopes=frozenset(row["scopes"].split()),
            queues=frozenset((row["queues"] or "").split()),
        )
        _principals.put(presented_sha256, known, _principal_bytes(known))
    return replace(
        known, application_status=current["application_status"], signals_per_minute=current["signals_per_minute"]
    )


def current_principal(tx: Tx, presented_sha256: bytes) -> auth.Principal | None:
    """The principal of a current credential, or None (unknown, revoked or expired): the check of
    every API request, and of every console page for the credential its session came from."""
    return principal_of(tx, presented_sha256, tx.one(SELECT_CURRENT_CREDENTIAL, (presented_sha256,)))


def principal_of(tx: Tx, presented_sha256: bytes, current: dict | None) -> auth.Principal | None:
    """`current_principal` from the row of SELECT_CURRENT_CREDENTIAL that a unit read itself (None:
    no such row), in the same round trip as its own statements."""
    if current is None:
        return None
    if current["expires_at"] is not None and current["expires_at"] <= tx.now_read_with(current["now"]):
        return None  # the time came along with the row: no round trip more
    return _known_principal(tx, presented_sha256, current)


authenticate = read_only(current_principal)


@read_only
def authenticate_reading(
    tx: Tx, presented_sha256: bytes, *reads: tuple[str, tuple]
) -> tuple[auth.Principal | None, list[list[dict]]]:
    """`authenticate`, with reads that an operation needs first sent in the same round trip (the
    single send's target, issue 31): the principal, and the rows of each read, which are the
    caller's to use only once that principal is found current and authorized. The reads take no
    lock, so reading them before those checks decides nothing early."""
    credential, *found = tx.all_together((SELECT_CURRENT_CREDENTIAL, (presented_sha256,)), *reads)
    return principal_of(tx, presented_sha256, credential[0] if credential else None), found
