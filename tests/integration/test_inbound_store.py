"""W1, W5: inbound sources, their encrypted secrets and their deliveries in the database
(weave.sql.inbound), on a real database."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from helpers import STRIPE_MAPPING

from weave.db import DatabaseError
from weave.errors import Code, WeaveError
from weave.secretbox import Keyring, new_key
from weave.sql import inbound, tenancy

MAPPING = STRIPE_MAPPING
MAPPING_TEXT = json.dumps(MAPPING, indent=2)


def create(database, source="stripe", namespace="acme", queues=("inventory",), **overrides) -> dict:
    arguments = {
        "application": "app",
        "actor": "stripe-webhooks",
        "scheme": "stripe",
        "mapping_text": MAPPING_TEXT,
        "queues": list(queues),
        "signature_header": None,
    } | overrides
    return inbound.create_source(
        database,
        namespace,
        source,
        arguments["application"],
        arguments["actor"],
        arguments["scheme"],
        arguments["mapping_text"],
        arguments["queues"],
        arguments["signature_header"],
    )


def refused(code: Code, call, *args, **kwargs) -> str:
    with pytest.raises(WeaveError) as caught:
        call(*args, **kwargs)
    assert caught.value.code is code, caught.value.detail
    return caught.value.detail


def audit_rows(database, action_prefix="inbound."):
    return database.run(
        lambda tx: tx.all(
            "SELECT actor, action, details FROM audit_records WHERE action LIKE %s ORDER BY id", (action_prefix + "%",)
        )
    )


def test_W1_a_source_is_created_with_a_credential_of_its_own(tenant, database):
    created = create(database)
    assert created["source"] == "stripe" and created["scheme"] == "stripe" and created["queues"] == ["inventory"]
    assert created["mapping_sha256"] == hashlib.sha256(MAPPING_TEXT.encode()).hexdigest()
    credential = database.run(
        lambda tx: tx.one("SELECT * FROM credentials WHERE id = %s", (int(created["credential_id"]),))
    )
    assert credential["actor"] == "stripe-webhooks" and credential["scopes"] == "workflows:signal"
    assert credential["revoked_at"] is None and credential["expires_at"] is None
    grants = database.run(
        lambda tx: tx.all(
            "SELECT q.name FROM credential_queue_grants g JOIN queues q ON q.id = g.queue_id WHERE g.credential_id = %s",
            (credential["id"],),
        )
    )
    assert [g["name"] for g in grants] == ["inventory"]
    stored = database.run(lambda tx: tx.one("SELECT * FROM inbound_sources"))
    assert stored["mapping"] == MAPPING_TEXT and stored["credential_id"] == credential["id"]
    assert stored["signature_header"] is None
    [listed] = inbound.list_sources(database, "acme")
    assert listed == {
        "source_id": created["source_id"],
        "source": "stripe",
        "application": "app",
        "actor": "stripe-webhooks",
        "scheme": "stripe",
        "signature_header": None,
        "queues": ["inventory"],
        "credential_id": created["credential_id"],
        "mapping_sha256": created["mapping_sha256"],
        "valid_secrets": 0,
        "created_at": created["created_at"],
        "updated_at": created["created_at"],
    }
    actions = [(row["actor"], row["action"]) for row in audit_rows(database, "")]
    assert ("system:admin", "credential.create") in actions and ("system:admin", "inbound.create") in actions
    details = json.loads(audit_rows(database)[0]["details"])
    assert details["mapping_sha256"] == created["mapping_sha256"] and "mapping" not in details


def test_W1_hmac_sha256_source_keeps_its_signature_header_and_several_queues(tenant, database):
    create(database, "shop", scheme="hmac-sha256", signature_header="x-shop-signature", queues=("carrier", "inventory"))
    [listed] = inbound.list_sources(database, "acme")
    assert listed["signature_header"] == "x-shop-signature" and listed["queues"] == ["carrier", "inventory"]
    source = inbound.delivery_source(database, "acme", "shop")
    assert source.signature_header == "x-shop-signature" and source.principal.queues == {"carrier", "inventory"}


def test_W1_unknown_namespace_application_or_queue_and_a_duplicate_name_are_clear_errors(tenant, database):
    assert "namespace 'nowhere' does not exist" in refused(Code.NOT_FOUND, create, database, "s", "nowhere")
    assert "application 'ghost' does not exist" in refused(Code.NOT_FOUND, create, database, "s", application="ghost")
    assert "queue 'ghost' does not exist" in refused(Code.NOT_FOUND, create, database, "s", queues=("ghost",))
    # nothing of a refused create stays: no source, no credential
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbound_sources"))["n"] == 0
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM credentials"))["n"] == 0
    create(database)
    assert "already exists" in refused(Code.INVALID_STATE, create, database)
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM credentials"))["n"] == 1


def test_W1_the_same_name_in_another_namespace_is_another_source(tenant, other_tenant, database):
    mine, theirs = create(database), create(database, namespace="globex")
    assert mine["source_id"] != theirs["source_id"]
    assert [s["source"] for s in inbound.list_sources(database, "globex")] == ["stripe"]
    assert inbound.delivery_source(database, "globex", "stripe").namespace_id != (
        inbound.delivery_source(database, "acme", "stripe").namespace_id
    )


def test_W1_update_replaces_the_mapping_and_audits_both_digests(tenant, database, clock):
    created = create(database)
    clock.advance(5)
    changed = {**MAPPING, "rules": [{**MAPPING["rules"][0], "payload_version": "v2"}]}
    updated = inbound.update_mapping(database, "acme", "stripe", json.dumps(changed))
    assert updated["mapping_sha256"] == hashlib.sha256(json.dumps(changed).encode()).hexdigest()
    assert inbound.delivery_source(database, "acme", "stripe").mapping == changed
    [listed] = inbound.list_sources(database, "acme")
    assert listed["mapping_sha256"] == updated["mapping_sha256"] and listed["updated_at"] > listed["created_at"]
    record = json.loads(audit_rows(database)[-1]["details"])
    assert record == {
        "source": "stripe",
        "mapping_sha256": updated["mapping_sha256"],
        "previous_mapping_sha256": created["mapping_sha256"],
    }
    assert "does not exist" in refused(Code.NOT_FOUND, inbound.update_mapping, database, "acme", "ghost", "{}")


def test_W1_secrets_are_added_listed_and_removed_and_a_third_is_refused(tenant, database, clock):
    create(database)
    ring = Keyring([new_key()])
    first = inbound.add_secret(database, "acme", "stripe", ring.encrypt("whsec_one"))
    clock.advance(1)
    second = inbound.add_secret(database, "acme", "stripe", ring.encrypt("whsec_two"))
    assert inbound.list_secrets(database, "acme", "stripe") == [first, second]
    assert set(first) == {"secret_id", "created_at"}
    detail = refused(Code.INVALID_STATE, inbound.add_secret, database, "acme", "stripe", ring.encrypt("whsec_three"))
    assert "2 valid secrets" in detail and "remove one" in detail
    assert [ring.decrypt(c) for c in inbound.delivery_source(database, "acme", "stripe").ciphertexts] == [
        "whsec_one",
        "whsec_two",
    ]

    removed = inbound.remove_secret(database, "acme", "stripe", int(first["secret_id"]))
    assert removed["removed"] is True and removed["secret_id"] == first["secret_id"]
    assert inbound.list_secrets(database, "acme", "stripe") == [second]
    # removed at once for deliveries, and not kept even encrypted
    assert [ring.decrypt(c) for c in inbound.delivery_source(database, "acme", "stripe").ciphertexts] == ["whsec_two"]
    row = database.run(lambda tx: tx.one("SELECT * FROM inbound_secrets WHERE id = %s", (int(first["secret_id"]),)))
    assert row["ciphertext"] == b"" and row["removed_at"] is not None
    # again: nothing changes, no second record
    assert inbound.remove_secret(database, "acme", "stripe", int(first["secret_id"]))["removed"] is True
    third = inbound.add_secret(database, "acme", "stripe", ring.encrypt("whsec_three"))
    assert inbound.list_secrets(database, "acme", "stripe") == [second, third]
    actions = [row["action"] for row in audit_rows(database)]
    assert actions == ["inbound.create"] + ["inbound.secret.add"] * 2 + ["inbound.secret.remove", "inbound.secret.add"]
    assert inbound.list_sources(database, "acme")[0]["valid_secrets"] == 2


def test_W1_concurrent_adds_leave_at_most_two_valid_secrets(tenant, database):
    create(database)
    start = threading.Barrier(8)

    def add(n: int) -> str:
        start.wait()
        try:
            return inbound.add_secret(database, "acme", "stripe", f"secret-{n}".encode())["secret_id"]
        except WeaveError as exc:
            return exc.code.name

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(add, range(8)))
    added = [answer for answer in answers if answer.isdigit()]
    assert len(added) == 2 and sorted(set(answers) - set(added)) == ["INVALID_STATE"]
    assert [s["secret_id"] for s in inbound.list_secrets(database, "acme", "stripe")] == sorted(added, key=int)
    assert len(inbound.list_secrets(database, "acme", "stripe")) == 2


def test_W1_secret_commands_name_the_missing_source_or_secret(tenant, other_tenant, database):
    create(database)
    create(database, namespace="globex")
    secret = inbound.add_secret(database, "globex", "stripe", b"ciphertext")
    assert "does not exist" in refused(Code.NOT_FOUND, inbound.add_secret, database, "acme", "ghost", b"c")
    assert "does not exist" in refused(Code.NOT_FOUND, inbound.list_secrets, database, "acme", "ghost")
    assert "namespace" in refused(Code.NOT_FOUND, inbound.list_secrets, database, "nowhere", "stripe")
    # another source's secret is no secret of this one
    detail = refused(Code.NOT_FOUND, inbound.remove_secret, database, "acme", "stripe", int(secret["secret_id"]))
    assert f"no secret {secret['secret_id']}" in detail
    assert inbound.list_secrets(database, "globex", "stripe") == [secret]


def test_W1_delete_removes_source_and_secrets_revokes_the_credential_and_keeps_deliveries(tenant, database):
    created = create(database)
    inbound.add_secret(database, "acme", "stripe", b"one")
    source = inbound.delivery_source(database, "acme", "stripe")
    delivery = inbound.record_delivery(database, source, "evt_1", "payment_intent.succeeded", "IGNORED", None, None)
    deleted = inbound.delete_source(database, "acme", "stripe")
    assert deleted == {
        "namespace": "acme",
        "source": "stripe",
        "credential_id": created["credential_id"],
        "secrets_deleted": 1,
        "deleted": True,
    }
    assert inbound.delivery_source(database, "acme", "stripe") is None
    assert inbound.list_sources(database, "acme") == []
    counts = database.run(
        lambda tx: tx.one(
            "SELECT (SELECT COUNT(*) FROM inbound_sources) AS sources, (SELECT COUNT(*) FROM inbound_secrets) AS secrets,"
            " (SELECT COUNT(*) FROM inbound_deliveries) AS deliveries,"
            " (SELECT revoked_at FROM credentials WHERE id = %s) AS revoked_at",
            (int(created["credential_id"]),),
        )
    )
    assert (counts["sources"], counts["secrets"], counts["deliveries"]) == (0, 0, 1) and counts["revoked_at"]
    assert delivery > 0
    actions = [row["action"] for row in audit_rows(database, "")]
    assert actions[-2:] == ["credential.revoke", "inbound.delete"]
    assert "does not exist" in refused(Code.NOT_FOUND, inbound.delete_source, database, "acme", "stripe")
    # the name is free again, for a new source with a new credential
    assert create(database)["credential_id"] != created["credential_id"]


def test_W1_delivery_source_reads_the_source_as_it_is_now(tenant, database, clock):
    created = create(database)
    ring = Keyring([new_key()])
    inbound.add_secret(database, "acme", "stripe", ring.encrypt("whsec_a"))
    source = inbound.delivery_source(database, "acme", "stripe")
    assert (source.name, source.scheme, source.mapping) == ("stripe", "stripe", MAPPING)
    principal = source.principal
    assert principal.credential_id == int(created["credential_id"]) and principal.namespace == "acme"
    assert principal.actor == "stripe-webhooks" and principal.scopes == {"workflows:signal"}
    assert principal.queues == {"inventory"} and principal.application_status == "ACTIVE"
    assert principal.signals_per_minute is None

    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    disabled = inbound.delivery_source(database, "acme", "stripe").principal
    assert disabled.application_status == "DISABLED"
    with pytest.raises(WeaveError) as forbidden:
        disabled.require_writable()
    assert forbidden.value.code is Code.FORBIDDEN
    tenancy.set_application_status(database, "acme", "app", "ACTIVE")
    assert inbound.delivery_source(database, "acme", "stripe").principal.application_status == "ACTIVE"

    tenancy.revoke_credential(database, "acme", int(created["credential_id"]))
    assert inbound.delivery_source(database, "acme", "stripe") is None
    assert inbound.delivery_source(database, "acme", "ghost") is None
    assert inbound.delivery_source(database, "nowhere", "stripe") is None


def test_W1_a_source_whose_credential_expired_is_no_source(tenant, database, clock):
    created = create(database)
    database.run(
        lambda tx: tx.execute(
            "UPDATE credentials SET expires_at = %s WHERE id = %s",
            (clock.now() + timedelta(seconds=10), int(created["credential_id"])),
        )
    )
    assert inbound.delivery_source(database, "acme", "stripe") is not None
    clock.advance(10)
    assert inbound.delivery_source(database, "acme", "stripe") is None


def test_W1_delivery_source_of_another_namespace_is_none(tenant, other_tenant, database):
    create(database, namespace="globex")
    assert inbound.delivery_source(database, "acme", "stripe") is None
    assert inbound.delivery_source(database, "globex", "stripe").principal.namespace == "globex"


def test_W5_deliveries_are_recorded_and_listed_newest_first_by_page_and_outcome(tenant, database, clock):
    create(database)
    source = inbound.delivery_source(database, "acme", "stripe")
    outcomes = ["ROUTED", "PARKED", "IGNORED", "UNMAPPABLE", "AMBIGUOUS"] * 3
    ids = []
    for n, outcome in enumerate(outcomes):
        clock.advance(1)
        signal_id = 1000 + n if outcome in ("ROUTED", "PARKED", "AMBIGUOUS") else None
        error = "/data/object/metadata/order_id: missing" if outcome == "UNMAPPABLE" else None
        ids.append(
            inbound.record_delivery(database, source, f"evt_{n}", "payment_intent.succeeded", outcome, signal_id, error)
        )
    reader = tenant.principal("workflows:read")
    newest = inbound.list_deliveries(database, reader, "stripe", None, None, 4)
    assert [d["delivery_id"] for d in newest] == [str(i) for i in reversed(ids[-4:])]
    assert newest[0] == {
        "delivery_id": str(ids[-1]),
        "received_at": newest[0]["received_at"],
        "event_id": "evt_14",
        "event_type": "payment_intent.succeeded",
        "outcome": "AMBIGUOUS",
        "signal_id": "1014",
        "error": None,
    }
    assert datetime.fromisoformat(newest[0]["received_at"].rstrip("Z")) == clock.now()
    following = inbound.list_deliveries(database, reader, "stripe", None, int(newest[-1]["delivery_id"]), 100)
    assert [d["delivery_id"] for d in following] == [str(i) for i in reversed(ids[:-4])]
    unmappable = inbound.list_deliveries(database, reader, "stripe", "UNMAPPABLE", None, 2)
    assert [d["event_id"] for d in unmappable] == ["evt_13", "evt_8"]
    assert unmappable[0]["error"] == "/data/object/metadata/order_id: missing" and unmappable[0]["signal_id"] is None
    rest = inbound.list_deliveries(database, reader, "stripe", "UNMAPPABLE", int(unmappable[-1]["delivery_id"]), 2)
    assert [d["event_id"] for d in rest] == ["evt_3"]
    assert inbound.list_deliveries(database, reader, "stripe", "ROUTED", ids[0], 10) == []


def test_W5_an_event_id_type_or_error_too_long_for_its_column_is_cut_not_lost(tenant, database):
    create(database)
    source = inbound.delivery_source(database, "acme", "stripe")
    inbound.record_delivery(database, source, "e" * 300, "t" * 300, "UNMAPPABLE", None, "x" * 5000)
    [row] = inbound.list_deliveries(database, tenant.principal("workflows:read"), "stripe", None, None, 10)
    assert row["event_id"] == "e" * 254 + "…" and row["event_type"] == "t" * 254 + "…"
    assert row["error"] == "x" * 1999 + "…"
    assert inbound.record_delivery(database, source, None, None, "UNMAPPABLE", None, "no event id") > 0


def test_W5_the_database_refuses_an_outcome_it_does_not_know(tenant, database):
    create(database)
    source = inbound.delivery_source(database, "acme", "stripe")
    with pytest.raises(DatabaseError):
        inbound.record_delivery(database, source, "evt", "t", "DELIVERED", None, None)


def test_W5_deliveries_of_another_namespaces_source_are_not_found(tenant, other_tenant, database):
    create(database, namespace="globex")
    theirs = inbound.delivery_source(database, "globex", "stripe")
    inbound.record_delivery(database, theirs, "evt_1", "t", "IGNORED", None, None)
    detail = refused(
        Code.NOT_FOUND, inbound.list_deliveries, database, tenant.principal("workflows:read"), "stripe", None, None, 10
    )
    assert "no inbound source 'stripe'" in detail
    create(database)  # the same name in my namespace: only its own deliveries
    assert inbound.list_deliveries(database, tenant.principal("workflows:read"), "stripe", None, None, 10) == []


def secret_forms(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [
        raw,
        raw.hex().encode(),
        raw.hex().upper().encode(),
        base64.b64encode(raw),
        base64.urlsafe_b64encode(raw),
        base64.b64encode(raw).rstrip(b"="),
        base64.b32encode(raw),
    ]


def test_W1_no_table_of_the_database_holds_a_secret_in_plain_text(tenant, database, weave_tables):
    """Dump every table (each value as stored, and as its hex and base64, the way a dump tool or a
    backup would show it) after secrets were added, removed and re-added: no form of a secret is in it."""
    secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "Zm9yIHRoZSBzdGFuZGFyZCB3ZWJob29rcyBzY2hlbWU", "s3cr3t-hmac"]
    ring = Keyring([new_key()])
    create(database)
    create(database, "shop", scheme="hmac-sha256", signature_header="x-signature")
    first = inbound.add_secret(database, "acme", "stripe", ring.encrypt(secrets[0]))
    inbound.add_secret(database, "acme", "stripe", ring.encrypt(secrets[1]))
    inbound.remove_secret(database, "acme", "stripe", int(first["secret_id"]))
    inbound.add_secret(database, "acme", "shop", ring.encrypt(secrets[2]))
    source = inbound.delivery_source(database, "acme", "shop")
    inbound.record_delivery(database, source, "evt_1", "order.paid", "IGNORED", None, None)
    assert {"inbound_sources", "inbound_secrets", "inbound_deliveries", "audit_records"} <= set(weave_tables)

    def as_stored(value) -> bytes:
        return bytes(value) if isinstance(value, (bytes, bytearray)) else str(value).encode()

    def dump(tx):
        text = []
        for table in weave_tables:  # names from information_schema, not input
            for row in tx.all(f"SELECT * FROM `{table}`"):
                text += [as_stored(value) for value in row.values()]
            # as `mysqldump --hex-blob` writes columns: hex literals
            columns = tx.all(
                "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = DATABASE()"
                " AND table_name = %s",
                (table,),
            )
            hexed = ", ".join(f"HEX(`{column['c']}`)" for column in columns)
            for row in tx.all(f"SELECT {hexed} FROM `{table}`"):
                text += [as_stored(value) for value in row.values()]
        return b"\n".join(text)

    dumped = database.run(dump)
    stored = database.run(lambda tx: tx.all("SELECT ciphertext FROM inbound_secrets WHERE removed_at IS NULL"))
    assert len(stored) == 2 and all(bytes(row["ciphertext"]) in dumped for row in stored)
    for secret in secrets:
        for form in secret_forms(secret):
            assert form not in dumped, (secret, form)
            assert form.lower() not in dumped.lower(), (secret, form)
    # and the ciphertexts decrypt to the secrets (what is stored is the secret, encrypted)
    assert sorted(ring.decrypt(bytes(row["ciphertext"])) for row in stored) == sorted(secrets[1:])
