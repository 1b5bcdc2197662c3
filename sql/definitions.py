"""Definitions: publish (numbered 1, 2, 3… per name), read, and list the newest of each name. A
published version never changes.

Publishers in one namespace queue up on the namespace row (publishing is rare), so each reads
the true latest version before numbering the next: versions have no gaps and no twins. The UNIQUE
key `uq_definitions_name_version` stays as the backstop: a duplicate re-runs the unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from weave import jsontext
from weave.cache import BoundedCache
from weave.db import read_only, unit_of_work
from weave.errors import Code, WeaveError
from weave.rules import definitions as definition_rules
from weave.sql import audit
from weave.tx import Tx


@dataclass(frozen=True)
class Definition:
    id: int
    name: str
    version: int
    digest: str
    created_at: datetime
    document_text: str


LOCK_NAMESPACE = "SELECT id FROM namespaces WHERE id = %s FOR UPDATE"
SELECT_LATEST = """
SELECT id, name, version, digest, created_at, document FROM definitions
WHERE namespace_id = %s AND name = %s ORDER BY version DESC LIMIT 1
"""
SELECT_VERSION = """
SELECT id, name, version, digest, created_at, document FROM definitions
WHERE namespace_id = %s AND name = %s AND version = %s
"""
SELECT_QUEUE_NAMES = "SELECT name FROM queues WHERE namespace_id = %s"
INSERT_DEFINITION = """
INSERT INTO definitions (namespace_id, name, version, digest, document, queues, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
"""


def _definition(row: dict | None) -> Definition | None:
    if row is None:
        return None
    return Definition(row["id"], row["name"], row["version"], row["digest"], row["created_at"], row["document"])


@unit_of_work(replay_on=("uq_definitions_name_version",))
def publish_definition(
    tx: Tx, namespace_id: int, document: dict, credential_id: int, actor: str
) -> tuple[Definition, bool]:
    """Publish `document` (already schema-valid); returns (definition, created)."""
    digest = jsontext.digest(document)
    tx.one(LOCK_NAMESPACE, (namespace_id,))
    latest = _definition(tx.one(SELECT_LATEST, (namespace_id, document["name"])))
    if latest is not None and latest.digest == digest:
        return latest, False
    known_queues = queue_names(tx, namespace_id)
    missing = [
        {"pointer": f"/steps/{i}/queue", "message": f"queue {step['queue']!r} does not exist in this namespace"}
        for i, step in enumerate(document["steps"])
        if "queue" in step and step["queue"] not in known_queues
    ]
    if missing:
        raise WeaveError(Code.VALIDATION_FAILED, f"{missing[0]['pointer']}: {missing[0]['message']}", missing)
    version = latest.version + 1 if latest else 1
    text = jsontext.compact(document)
    now = tx.now()
    used = " ".join(definition_rules.queues_used(document))  # read back by `queues`
    definition_id = tx.insert(INSERT_DEFINITION, (namespace_id, document["name"], version, digest, text, used, now))
    audit.record(
        tx,
        namespace_id,
        actor,
        "definition.publish",
        {"name": document["name"], "version": version, "digest": digest},
        credential_id=credential_id,
        request_digest=digest,
    )
    return Definition(definition_id, document["name"], version, digest, now, text), True


def pinned(tx: Tx, namespace_id: int, name: str, version: int) -> Definition | None:
    """The pinned version of a definition inside the caller's transaction."""
    return _definition(tx.one(SELECT_VERSION, (namespace_id, name, version)))


@read_only
def read_definition(tx: Tx, namespace_id: int, name: str, version: int) -> Definition | None:
    return pinned(tx, namespace_id, name, version)


# The definitions list (D5): the newest version of each name, by name, a page at a time. The
# inner query reads `uq_definitions_name_version` alone, in order from the cursor, grouping as it
# goes and stopping once the page has its names (no sort, no temporary table): the index entries of
# the page's names, every version of each (MariaDB 10.11 takes no loose index scan here, with or
# without the LIMIT; a name's versions are few, as publishing is rare). The page's rows are then read
# by the same key. Names compare as bytes (the column is utf8mb4_bin), as the cursor does.
SELECT_NEWEST_VERSIONS = """
SELECT d.name, d.version, d.digest, d.created_at
FROM (SELECT name, MAX(version) AS version FROM definitions
      WHERE namespace_id = %s AND name > %s GROUP BY name ORDER BY name LIMIT %s) newest
JOIN definitions d ON d.namespace_id = %s AND d.name = newest.name AND d.version = newest.version
ORDER BY d.name
"""
SELECT_NEWEST_VERSION_OF_NAME = """
SELECT name, version, digest, created_at FROM definitions
WHERE namespace_id = %s AND name = %s AND name > %s ORDER BY version DESC LIMIT 1
"""


@read_only
def list_newest(tx: Tx, namespace_id: int, name: str | None, after: str, limit: int) -> tuple[list[dict], str | None]:
    """A page of the namespace's definitions, the newest version of each name, in name order from
    the first name after `after` (`""`: from the start); only `name`'s when given. Returns the rows
    (`name`, `version`, `digest`, `created_at`) and the cursor of the next page (None on the last)."""
    if name is not None:
        return tx.all(SELECT_NEWEST_VERSION_OF_NAME, (namespace_id, name, after)), None
    rows = tx.all(SELECT_NEWEST_VERSIONS, (namespace_id, after, limit + 1, namespace_id))
    page = rows[:limit]
    return page, page[-1]["name"] if len(rows) > limit else None


SELECT_VERSIONS_OF_NAME = "SELECT id, queues FROM definitions WHERE namespace_id = %s AND name = %s"
SELECT_EVERY_VERSION = "SELECT id, queues FROM definitions WHERE namespace_id = %s"


def versions(tx: Tx, namespace_id: int, name: str | None) -> list[dict]:
    """`id` and `queues` of every version of definition `name` in the namespace (of every
    definition when `name` is None)."""
    if name is None:
        return tx.all(SELECT_EVERY_VERSION, (namespace_id,))
    return tx.all(SELECT_VERSIONS_OF_NAME, (namespace_id, name))


def queues(stored: str) -> list[str]:
    """The queues of a definition as its `queues` column holds them (written at publish from
    `definition_rules.queues_used`, migration 0013): read without its document."""
    return stored.split()


def queue_names(tx: Tx, namespace_id: int) -> set[str]:
    """Every queue of the namespace: what any of its definitions can run on (publish refuses others)."""
    return {row["name"] for row in tx.all(SELECT_QUEUE_NAMES, (namespace_id,))}


SELECT_DOCUMENT = "SELECT document FROM definitions WHERE id = %s"

# A published document never changes, and its digest names it: a process may keep the parsed
# form, which spares every instance read from re-reading and re-parsing it. The cache is bounded
# by bytes (issue 26, item 3: 1,024 entries held 228 MB for twenty 1 MB documents): a parsed
# document holds up to 32 bytes per character of its text (measured: 28 for arrays of decimals,
# 24 for arrays of empty objects, 14 for many small subschemas, 4 for typical definitions and 1
# for long strings), so each is counted at 32.
BYTES_PER_DOCUMENT_CHAR = 32
DOCUMENT_CACHE_BYTES = 64 * 1024 * 1024  # the worst documents of 2 MB of text together; typical ones: 500 and more
_documents = BoundedCache(DOCUMENT_CACHE_BYTES)


def document(tx: Tx, definition_id: int, digest: str) -> dict:
    """The parsed document of a definition whose id and digest the caller has already read."""
    found = _documents.get(digest)
    if found is None:
        text = tx.one(SELECT_DOCUMENT, (definition_id,))["document"]
        found = jsontext.loads(text)
        _documents.put(digest, found, BYTES_PER_DOCUMENT_CHAR * len(text))
    return found
