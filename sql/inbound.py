"""Inbound webhook sources, their secrets and their deliveries (docs/rules.md#webhooks, W1, W5).

A source belongs to a namespace and acts through **a credential row of its own** (scope
`workflows:signal`, its queue grants, made by `tenancy.insert_credential` in the source's own
transaction). Its `token_sha256` is the SHA-256 of random bytes that are thrown away: no token
opens it, and only the source's verified deliveries act with it. So routing, quotas, a DISABLED
application and the take's "credential as it is now" (B4) treat a source like any credential,
and deleting a source revokes it.

Secrets arrive here already encrypted (`weave.secretbox`, WEAVE_SECRET_KEY): this module stores
and returns ciphertexts and never sees a secret. At most two are valid at once (rotation): a
third is refused under the source's row lock. A removed secret keeps its row, ciphertext emptied.

Admin units (the `weave admin inbound` commands) are audited as `system:admin`, never with a
secret, and a mapping by its SHA-256. The delivery path reads with `delivery_source` (one round
trip) and writes with `record_delivery` (its own short unit, after the route's). Lock order: an
inbound source's row, then its credential's; nothing else locks either.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from weave import auth, jsontext
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError
from weave.sql import audit, tenancy
from weave.sql.tenancy import ADMIN_ACTOR
from weave.times import rfc3339
from weave.tx import Tx

SOURCE_SCOPES = ["workflows:signal"]  # what a source's deliveries may do: route facts (B1)
VALID_SECRETS = 2  # at once, so that a provider's secret can be rotated without a gap (W1)
NO_CURSOR = 2**64 - 1  # above every BIGINT UNSIGNED id
# inbound_deliveries' columns: what a provider sends there is cut to fit rather than lost (W5).
EVENT_TEXT_CHARS = 255
ERROR_CHARS = 2000


def mapping_digest(mapping_text: str) -> str:
    """What audit records and `list_sources` show of a mapping: the SHA-256 (hex) of its text."""
    return jsontext.sha256_text(mapping_text)


# ---- the operator's units ----------------------------------------------------------------------------

SELECT_SOURCE = "SELECT id, credential_id FROM inbound_sources WHERE namespace_id = %s AND name = %s"
LOCK_SOURCE = """
SELECT id, credential_id, SHA2(mapping, 256) AS mapping_sha256 FROM inbound_sources
WHERE namespace_id = %s AND name = %s FOR UPDATE
"""
INSERT_SOURCE = """
INSERT INTO inbound_sources
  (namespace_id, name, credential_id, scheme, signature_header, mapping, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""
UPDATE_MAPPING = "UPDATE inbound_sources SET mapping = %s, updated_at = %s WHERE id = %s"
DELETE_SOURCE = "DELETE FROM inbound_sources WHERE id = %s"
DELETE_SECRETS = "DELETE FROM inbound_secrets WHERE source_id = %s"


SOURCE = "inbound source"  # what NOT_FOUND calls it


def _lock_source(tx: Tx, namespace: str, source: str) -> tuple[int, dict]:
    return tenancy.lock_named(tx, LOCK_SOURCE, SOURCE, namespace, source)


@unit_of_work(replay_on=("uq_inbound_sources_name",))
def create_source(
    tx: Tx,
    namespace: str,
    source: str,
    application: str,
    actor: str,
    scheme: str,
    mapping_text: str,
    queues: list[str],
    signature_header: str | None,
) -> dict:
    """A source and its own credential, in one transaction (NOT_FOUND for an unknown namespace,
    application or queue; INVALID_STATE for a name in use). The scheme, the signature header and
    the mapping were checked by the caller (`weave.rules.webhooks`)."""
    namespace_id = tenancy.namespace_id_of(tx, namespace)
    # One throw-away token hash per call, kept across its attempts: an attempt that finds the
    # source whose credential carries it knows that an earlier attempt of this call committed it.
    token_sha256 = tx.memo.setdefault("token_sha256", hashlib.sha256(secrets.token_bytes(auth.TOKEN_BYTES)).digest())
    existing = tx.one(SELECT_SOURCE, (namespace_id, source))
    if existing is not None:
        ours = tx.maybe_committed and tenancy.credential_of_token(tx, token_sha256)
        if ours and ours["id"] == existing["credential_id"] and "created" in tx.memo:
            return tx.memo["created"]
        raise WeaveError(Code.INVALID_STATE, f"inbound source {source!r} already exists in {namespace!r}")
    credential = tenancy.insert_credential(tx, namespace, application, actor, SOURCE_SCOPES, queues, token_sha256, None)
    credential_id = int(credential["credential_id"])
    now = tx.now()
    source_id = tx.insert(
        INSERT_SOURCE, (namespace_id, source, credential_id, scheme, signature_header, mapping_text, now, now)
    )
    created = {
        "source_id": str(source_id),
        "namespace": namespace,
        "source": source,
        "application": application,
        "actor": actor,
        "scheme": scheme,
        "signature_header": signature_header,
        "queues": sorted(set(queues)),
        "credential_id": str(credential_id),
        "mapping_sha256": mapping_digest(mapping_text),
        "created_at": rfc3339(now),
    }
    audit.record(
        tx, namespace_id, ADMIN_ACTOR, "inbound.create", {k: v for k, v in created.items() if k != "namespace"}
    )
    tx.memo["created"] = created
    return created


@unit_of_work
def update_mapping(tx: Tx, namespace: str, source: str, mapping_text: str) -> dict:
    """Put a new mapping in place (checked by the caller against the source's scheme)."""
    namespace_id, row = _lock_source(tx, namespace, source)
    now = tx.now()
    tx.transition(UPDATE_MAPPING, (mapping_text, now, row["id"]), f"update the mapping of {source!r}")
    digest = mapping_digest(mapping_text)
    audit.record(
        tx,
        namespace_id,
        ADMIN_ACTOR,
        "inbound.update",
        {"source": source, "mapping_sha256": digest, "previous_mapping_sha256": row["mapping_sha256"]},
    )
    return {"namespace": namespace, "source": source, "mapping_sha256": digest, "updated_at": rfc3339(now)}


@unit_of_work
def delete_source(tx: Tx, namespace: str, source: str) -> dict:
    """Delete the source and its secrets and revoke its credential; its deliveries stay."""
    namespace_id, row = _lock_source(tx, namespace, source)
    removed = tx.execute(DELETE_SECRETS, (row["id"],))
    tx.transition(DELETE_SOURCE, (row["id"],), f"delete inbound source {source!r}")
    tenancy.revoke(tx, namespace_id, row["credential_id"])
    deleted = {"source": source, "credential_id": str(row["credential_id"]), "secrets_deleted": removed}
    audit.record(tx, namespace_id, ADMIN_ACTOR, "inbound.delete", deleted)
    return {"namespace": namespace, **deleted, "deleted": True}


SELECT_SOURCES = """
SELECT s.id, s.name, s.scheme, s.signature_header, SHA2(s.mapping, 256) AS mapping_sha256, s.credential_id,
       s.created_at, s.updated_at, c.actor, a.name AS application,
       (SELECT GROUP_CONCAT(q.name ORDER BY q.name SEPARATOR ' ') FROM credential_queue_grants g
          JOIN queues q ON q.id = g.queue_id WHERE g.credential_id = c.id) AS queues,
       (SELECT COUNT(*) FROM inbound_secrets x WHERE x.source_id = s.id AND x.removed_at IS NULL) AS secrets
FROM inbound_sources s JOIN credentials c ON c.id = s.credential_id JOIN applications a ON a.id = c.application_id
WHERE s.namespace_id = %s
ORDER BY s.name
"""


@read_only
def list_sources(tx: Tx, namespace: str) -> list[dict]:
    """The namespace's sources by name, with how many valid secrets each has (never a secret)."""
    rows = tx.all(SELECT_SOURCES, (tenancy.namespace_id_of(tx, namespace),))
    return [
        {
            "source_id": str(row["id"]),
            "source": row["name"],
            "application": row["application"],
            "actor": row["actor"],
            "scheme": row["scheme"],
            "signature_header": row["signature_header"],
            "queues": (row["queues"] or "").split(),
            "credential_id": str(row["credential_id"]),
            "mapping_sha256": row["mapping_sha256"],
            "valid_secrets": row["secrets"],
            "created_at": rfc3339(row["created_at"]),
            "updated_at": rfc3339(row["updated_at"]),
        }
        for row in rows
    ]


# ---- secrets ---------------------------------------------------------------------------------------

COUNT_VALID_SECRETS = "SELECT COUNT(*) AS valid FROM inbound_secrets WHERE source_id = %s AND removed_at IS NULL"
INSERT_SECRET = "INSERT INTO inbound_secrets (source_id, ciphertext, created_at) VALUES (%s, %s, %s)"
# A re-run after a lost COMMIT finds the secret its earlier attempt added: the ciphertext is unique
# (Fernet puts a random IV in each).
SELECT_ADDED_SECRET = """
SELECT id, created_at FROM inbound_secrets WHERE source_id = %s AND removed_at IS NULL AND ciphertext = %s
"""
SELECT_VALID_SECRETS = """
SELECT id, created_at FROM inbound_secrets WHERE source_id = %s AND removed_at IS NULL ORDER BY id
"""
SELECT_SECRET = "SELECT id, removed_at FROM inbound_secrets WHERE id = %s AND source_id = %s"
# Removed: no longer valid, and not kept even encrypted; the row stays as a record of its times.
REMOVE_SECRET = "UPDATE inbound_secrets SET removed_at = %s, ciphertext = '' WHERE id = %s AND removed_at IS NULL"


@unit_of_work
def add_secret(tx: Tx, namespace: str, source: str, ciphertext: bytes) -> dict:
    """Store an encrypted secret; INVALID_STATE when the source already has two valid ones."""
    namespace_id, row = _lock_source(tx, namespace, source)
    if tx.maybe_committed:
        added = tx.one(SELECT_ADDED_SECRET, (row["id"], ciphertext))
        if added is not None:
            return {"secret_id": str(added["id"]), "created_at": rfc3339(added["created_at"])}
    if tx.one(COUNT_VALID_SECRETS, (row["id"],))["valid"] >= VALID_SECRETS:
        raise WeaveError(
            Code.INVALID_STATE,
            f"inbound source {source!r} already has {VALID_SECRETS} valid secrets: remove one first "
            f"(weave admin inbound secret list|remove {namespace} {source})",
        )
    now = tx.now()
    secret_id = tx.insert(INSERT_SECRET, (row["id"], ciphertext, now))
    audit.record(tx, namespace_id, ADMIN_ACTOR, "inbound.secret.add", {"source": source, "secret_id": str(secret_id)})
    return {"secret_id": str(secret_id), "created_at": rfc3339(now)}


@read_only
def list_secrets(tx: Tx, namespace: str, source: str) -> list[dict]:
    """The source's valid secrets, oldest first: their ids and times, never a secret."""
    row = tx.one(SELECT_SOURCE, (tenancy.namespace_id_of(tx, namespace), source))
    if row is None:
        raise tenancy.no_such(SOURCE, source, namespace)
    return [
        {"secret_id": str(secret["id"]), "created_at": rfc3339(secret["created_at"])}
        for secret in tx.all(SELECT_VALID_SECRETS, (row["id"],))
    ]


@unit_of_work
def remove_secret(tx: Tx, namespace: str, source: str, secret_id: int) -> dict:
    """Retire a secret at once (the next delivery no longer verifies with it); removing a removed
    one changes nothing."""
    namespace_id, row = _lock_source(tx, namespace, source)
    secret = tx.one(SELECT_SECRET, (secret_id, row["id"]))
    if secret is None:
        raise WeaveError(Code.NOT_FOUND, f"inbound source {source!r} in {namespace!r} has no secret {secret_id}")
    if secret["removed_at"] is None:
        tx.transition(REMOVE_SECRET, (tx.now(), secret_id), f"remove secret {secret_id}")
        audit.record(
            tx, namespace_id, ADMIN_ACTOR, "inbound.secret.remove", {"source": source, "secret_id": str(secret_id)}
        )
    return {"namespace": namespace, "source": source, "secret_id": str(secret_id), "removed": True}


# Rotation of WEAVE_SECRET_KEY: every valid secret of every namespace, a page at a time in id
# order, each written again encrypted with the new key unless it changed meanwhile. Secrets first
# (a range of their primary key from the cursor), their sources and namespaces by key after.
SELECT_SECRETS_AFTER = """
SELECT STRAIGHT_JOIN x.id, x.source_id, x.ciphertext, s.namespace_id, n.name AS namespace, s.name
FROM inbound_secrets x JOIN inbound_sources s ON s.id = x.source_id JOIN namespaces n ON n.id = s.namespace_id
WHERE x.id > %s AND x.removed_at IS NULL
ORDER BY x.id
LIMIT %s
"""
REWRITE_SECRET = "UPDATE inbound_secrets SET ciphertext = %s WHERE id = %s AND removed_at IS NULL AND ciphertext = %s"


@read_only
def secrets_after(tx: Tx, after: int, limit: int) -> list[dict]:
    """Up to `limit` valid secrets of every namespace with ids above `after`, in id order, with
    their ciphertexts and where they belong (`secret_id` an int)."""
    return [
        {
            "secret_id": row["id"],
            "source_id": row["source_id"],
            "ciphertext": bytes(row["ciphertext"]),
            "namespace_id": row["namespace_id"],
            "namespace": row["namespace"],
            "source": row["name"],
        }
        for row in tx.all(SELECT_SECRETS_AFTER, (after, limit))
    ]


@unit_of_work
def rewrite_secret(tx: Tx, secret: dict, ciphertext: bytes) -> bool:
    """Store `ciphertext` (the same secret under another key) in place of the one `secrets_after`
    read; False when that secret was removed or rewritten since."""
    if tx.maybe_committed and tx.one(SELECT_ADDED_SECRET, (secret["source_id"], ciphertext)) is not None:
        return True  # an earlier attempt of this call committed it
    if tx.execute(REWRITE_SECRET, (ciphertext, secret["secret_id"], secret["ciphertext"])) != 1:
        return False
    audit.record(
        tx,
        secret["namespace_id"],
        ADMIN_ACTOR,
        "inbound.secret.reencrypt",
        {"source": secret["source"], "secret_id": str(secret["secret_id"])},
    )
    return True


# ---- the delivery path -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliverySource:
    """What a delivery needs of its source, read as it is now."""

    source_id: int
    namespace_id: int
    name: str
    scheme: str
    signature_header: str | None
    mapping: dict  # parsed (weave.jsontext: numbers exact)
    ciphertexts: list[bytes]  # the valid secrets, encrypted, oldest first
    principal: auth.Principal  # the source's credential as it is now (its application's status, quota)


# The source by the URL's names with its credential as `tenancy.SELECT_CURRENT_CREDENTIAL` reads a
# token's (so that `tenancy.principal_of` builds the principal the same way), and its valid secrets:
# both in one round trip. A revoked credential finds no row, like an unknown source.
SELECT_DELIVERY_SOURCE = """
SELECT UTC_TIMESTAMP(6) AS now, s.id AS source_id, s.namespace_id, s.name, s.scheme, s.signature_header, s.mapping,
       c.id, c.token_sha256, c.expires_at, a.status AS application_status, a.signals_per_minute
FROM namespaces n
JOIN inbound_sources s ON s.namespace_id = n.id AND s.name = %s
JOIN credentials c ON c.id = s.credential_id AND c.revoked_at IS NULL
JOIN applications a ON a.id = c.application_id
WHERE n.name = %s
"""
SELECT_DELIVERY_SECRETS = """
SELECT x.ciphertext
FROM namespaces n
JOIN inbound_sources s ON s.namespace_id = n.id AND s.name = %s
JOIN inbound_secrets x ON x.source_id = s.id AND x.removed_at IS NULL
WHERE n.name = %s
ORDER BY x.id
"""


@read_only
def delivery_source(tx: Tx, namespace: str, source: str) -> DeliverySource | None:
    """The source a delivery names, as it is now (no cache: a DISABLED application, a revoked
    credential, a removed secret show at once); None when there is none or its credential is
    revoked or expired, which the route answers like an unknown source."""
    (found, ciphertexts) = tx.all_together(
        (SELECT_DELIVERY_SOURCE, (source, namespace)), (SELECT_DELIVERY_SECRETS, (source, namespace))
    )
    if not found:
        return None
    row = found[0]
    principal = tenancy.principal_of(tx, row["token_sha256"], row)
    if principal is None:
        return None
    return DeliverySource(
        source_id=row["source_id"],
        namespace_id=row["namespace_id"],
        name=row["name"],
        scheme=row["scheme"],
        signature_header=row["signature_header"],
        mapping=jsontext.loads(row["mapping"]),
        ciphertexts=[bytes(secret["ciphertext"]) for secret in ciphertexts],
        principal=principal,
    )


INSERT_DELIVERY = """
INSERT INTO inbound_deliveries
  (namespace_id, source_id, received_at, event_id, event_type, outcome, signal_id, error)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""


def _clipped(text: str | None, chars: int) -> str | None:
    return text if text is None or len(text) <= chars else text[: chars - 1] + "…"


@unit_of_work
def record_delivery(
    tx: Tx,
    source: DeliverySource,
    event_id: str | None,
    event_type: str | None,
    outcome: str,
    signal_id: int | str | None,
    error: str | None,
) -> int:
    """Record one delivery (W5; never its signature or a secret); its delivery id. An event id,
    type or error longer than its column is cut to fit, marked with "…"."""
    return tx.insert(
        INSERT_DELIVERY,
        (
            source.namespace_id,
            source.source_id,
            tx.now(),
            _clipped(event_id, EVENT_TEXT_CHARS),
            _clipped(event_type, EVENT_TEXT_CHARS),
            outcome,
            None if signal_id is None else int(signal_id),
            _clipped(error, ERROR_CHARS),
        ),
    )


# A page is a backward range of one index from the cursor, with the source found by its unique key
# first (a constant of the plan), so no sort.
SELECT_DELIVERY_PAGE = """
SELECT d.id, d.received_at, d.event_id, d.event_type, d.outcome, d.signal_id, d.error
FROM inbound_sources s JOIN inbound_deliveries d FORCE INDEX (ix_inbound_deliveries_source) ON d.source_id = s.id
WHERE s.namespace_id = %(namespace)s AND s.name = %(source)s AND d.id < %(after)s
ORDER BY d.id DESC
LIMIT %(limit)s
"""
SELECT_DELIVERY_PAGE_BY_OUTCOME = """
SELECT d.id, d.received_at, d.event_id, d.event_type, d.outcome, d.signal_id, d.error
FROM inbound_sources s JOIN inbound_deliveries d FORCE INDEX (ix_inbound_deliveries_outcome) ON d.source_id = s.id
WHERE s.namespace_id = %(namespace)s AND s.name = %(source)s AND d.outcome = %(outcome)s AND d.id < %(after)s
ORDER BY d.id DESC
LIMIT %(limit)s
"""


@read_only
def list_deliveries(
    tx: Tx, principal: auth.Principal, source: str, outcome: str | None, after: int | None, limit: int
) -> list[dict]:
    """Up to `limit` deliveries of a source of the principal's namespace, newest first, older than
    the delivery id `after` (None: from the newest), of one outcome or all; NOT_FOUND when the
    namespace has no such source."""
    params = {
        "namespace": principal.namespace_id,
        "source": source,
        "outcome": outcome,
        "after": NO_CURSOR if after is None else after,
        "limit": limit,
    }
    page = SELECT_DELIVERY_PAGE if outcome is None else SELECT_DELIVERY_PAGE_BY_OUTCOME
    found, rows = tx.all_together((SELECT_SOURCE, (principal.namespace_id, source)), (page, params))
    if not found:
        raise WeaveError(Code.NOT_FOUND, f"no inbound source {source!r} in this namespace")
    return [
        {
            "delivery_id": str(row["id"]),
            "received_at": rfc3339(row["received_at"]),
            "event_id": row["event_id"],
            "event_type": row["event_type"],
            "outcome": row["outcome"],
            "signal_id": None if row["signal_id"] is None else str(row["signal_id"]),
            "error": row["error"],
        }
        for row in rows
    ]
