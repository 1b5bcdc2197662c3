"""Audit records: append only, written by the unit of work that changes the state."""

from __future__ import annotations

from weave import jsontext
from weave.db import Tx

INSERT_AUDIT = """
INSERT INTO audit_records
  (namespace_id, instance_id, credential_id, actor, action, request_digest, at, details)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
"""


def record(tx: Tx, namespace_id: int, actor: str, action: str, details: dict, *,
           instance_id: int | None = None, credential_id: int | None = None,
           request_digest: str | None = None) -> None:
    tx.execute(INSERT_AUDIT, (namespace_id, instance_id, credential_id, actor, action, request_digest,
                              tx.now(), jsontext.compact(details)))
