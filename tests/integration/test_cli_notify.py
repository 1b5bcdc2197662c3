"""N1, N3: `weave admin notify …`, the operator's commands for outbound notifications."""

from __future__ import annotations

import contextlib
import json

import pytest
from helpers import task_steps

from weave.cli import main
from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key

SECRET_KEY = new_key()


@pytest.fixture
def operator(config, tenant, monkeypatch):
    monkeypatch.setenv("WEAVE_DATABASE_URL", config.database_url)
    monkeypatch.setenv(SECRET_KEY_VARIABLE, SECRET_KEY)


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def fails(capsys, *argv, code: int = 1) -> str:
    """The error text of a refused command: 1 for a refusal, 2 (argparse's exit) for a bad argument."""
    with pytest.raises(SystemExit) if code == 2 else contextlib.nullcontext():
        assert main(list(argv)) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


CREATE = ("admin", "notify", "create", "acme", "ops", "--url", "https://hooks.example/weave")


def test_N1_create_prints_the_secret_once_and_stores_it_encrypted(operator, capsys, database):
    created = run_json(capsys, *CREATE, "--event", "workflow.failed", "--event", "signal.settled")
    assert list(created) == ["subscription_id", "secret"] and created["secret"].startswith("whsec_")
    stored = database.run(lambda tx: tx.one("SELECT * FROM notify_subscriptions"))
    assert str(stored["id"]) == created["subscription_id"]
    assert Keyring([SECRET_KEY]).decrypt(stored["ciphertext"]) == created["secret"]
    dump = repr(
        database.run(lambda tx: [tx.all("SELECT * FROM notify_subscriptions"), tx.all("SELECT * FROM audit_records")])
    )
    assert created["secret"] not in dump and created["secret"].removeprefix("whsec_") not in dump
    listed = run_json(capsys, "admin", "notify", "list", "acme")["subscriptions"]
    assert [(s["name"], s["events"], s["status"]) for s in listed] == [
        ("ops", ["workflow.failed", "signal.settled"], "ENABLED")
    ]
    assert created["secret"] not in json.dumps(listed)
    assert (
        main(
            ["admin", "notify", "create", "acme", "other", "--url", "https://h.example/", "--event", "workflow.failed"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "shown only now" in text and "whsec_" in text


def test_N1_refuses_a_url_that_is_not_http_an_unknown_event_a_used_name_and_a_missing_key(
    operator, capsys, database, monkeypatch
):
    err = fails(
        capsys,
        "admin",
        "notify",
        "create",
        "acme",
        "ops",
        "--url",
        "file:///etc/passwd",
        "--event",
        "workflow.failed",
        code=2,
    )
    assert "http or https" in err
    err = fails(capsys, *CREATE, "--event", "workflow.started", code=2)
    assert "not an event type" in err and "workflow.needs_review" in err
    run_json(capsys, *CREATE, "--event", "workflow.failed")
    assert "already exists" in fails(capsys, *CREATE, "--event", "workflow.failed")
    assert "does not exist" in fails(
        capsys, "admin", "notify", "create", "nowhere", "x", "--url", "https://h.example/", "--event", "workflow.failed"
    )
    monkeypatch.delenv(SECRET_KEY_VARIABLE)
    assert SECRET_KEY_VARIABLE in fails(
        capsys, "admin", "notify", "create", "acme", "y", "--url", "https://h.example/", "--event", "workflow.failed"
    )
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM notify_subscriptions"))["n"] == 1


def test_N3_disable_delete_and_deliveries_with_their_attempts(operator, capsys, database, flow):
    run_json(capsys, *CREATE, "--event", "workflow.succeeded")
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    flow.finish_task({})
    (delivery,) = run_json(capsys, "admin", "notify", "deliveries", "acme", "ops")["deliveries"]
    assert (delivery["event_type"], delivery["status"], delivery["workflow_id"]) == (
        "workflow.succeeded",
        "PENDING",
        "wf-1",
    )
    database.run(
        lambda tx: tx.execute(
            "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, error, duration_ms) "
            "VALUES (%s, UTC_TIMESTAMP(6), NULL, 'timed out after 10 s', 10000)",
            (int(delivery["notification_id"]),),
        )
    )
    assert main(["admin", "notify", "deliveries", "acme", "ops", "--limit", "5"]) == 0
    text = capsys.readouterr().out
    assert "workflow.succeeded PENDING" in text and "no answer in 10000 ms: timed out after 10 s" in text
    assert run_json(capsys, "admin", "notify", "deliveries", "acme", "ops", "--status", "DELIVERED")["deliveries"] == []
    disabled = run_json(capsys, "admin", "notify", "disable", "acme", "ops")
    assert disabled["dropped"] == 1
    (delivery,) = run_json(capsys, "admin", "notify", "deliveries", "acme", "ops")["deliveries"]
    assert (delivery["status"], delivery["due_at"]) == ("DROPPED", None) and len(delivery["attempts"]) == 1
    assert run_json(capsys, "admin", "notify", "delete", "acme", "ops")["notifications_deleted"] == 1
    assert "does not exist" in fails(capsys, "admin", "notify", "deliveries", "acme", "ops")
    assert run_json(capsys, "admin", "notify", "list", "acme")["subscriptions"] == []
    actions = database.run(
        lambda tx: tx.all("SELECT action FROM audit_records WHERE action LIKE 'notify.%%' ORDER BY id")
    )
    assert [a["action"] for a in actions] == ["notify.create", "notify.disable", "notify.delete"]


def test_N1_secret_reencrypt_rewrites_the_subscriptions_secrets_too(operator, capsys, database, monkeypatch):
    created = run_json(capsys, *CREATE, "--event", "workflow.failed")
    newer = new_key()
    monkeypatch.setenv(SECRET_KEY_VARIABLE, f"{newer},{SECRET_KEY}")
    assert run_json(capsys, "admin", "inbound", "secret", "reencrypt") == {"reencrypted": 1, "unreadable": []}
    stored = database.run(lambda tx: tx.one("SELECT ciphertext FROM notify_subscriptions"))["ciphertext"]
    assert Keyring([newer]).decrypt(stored) == created["secret"]
    monkeypatch.setenv(SECRET_KEY_VARIABLE, new_key())  # a key that opens nothing
    assert main(["admin", "inbound", "secret", "reencrypt", "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["unreadable"] == [{"namespace": "acme", "subscription": "ops"}]
