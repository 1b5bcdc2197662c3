"""W1: `weave admin inbound …` and `weave admin secret-key`, the operator's commands."""

from __future__ import annotations

import base64
import io
import json

import pytest
from helpers import STRIPE_MAPPING

from weave.cli import main
from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key
from weave.sql import inbound

MAPPING = STRIPE_MAPPING
SECRET = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()
SECRET_KEY = new_key()


@pytest.fixture
def operator(config, tenant, monkeypatch, tmp_path):
    """The environment of an operator's shell: the database, the key; a mapping file."""
    monkeypatch.setenv("WEAVE_DATABASE_URL", config.database_url)
    monkeypatch.setenv(SECRET_KEY_VARIABLE, SECRET_KEY)
    path = tmp_path / "mapping.json"
    path.write_text(json.dumps(MAPPING, indent=2))
    return path


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def fails(capsys, *argv) -> str:
    assert main(list(argv)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def with_stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def create(capsys, mapping, *extra):
    return run_json(capsys, *create_argv(mapping, "--queue", "inventory", *extra))


def test_W1_create_list_update_and_delete_a_source(operator, capsys, database, tmp_path):
    created = create(capsys, operator)
    assert created["source"] == "stripe" and created["queues"] == ["inventory"] and created["actor"] == "stripe-hooks"
    stored = database.run(lambda tx: tx.one("SELECT mapping, scheme FROM inbound_sources"))
    assert json.loads(stored["mapping"]) == MAPPING and stored["scheme"] == "stripe"
    listed = run_json(capsys, "admin", "inbound", "list", "acme")
    assert [s["source"] for s in listed["sources"]] == ["stripe"] and listed["sources"][0]["valid_secrets"] == 0
    assert main(["admin", "inbound", "list", "acme"]) == 0
    assert "stripe: stripe, application app, actor stripe-hooks, queues inventory" in capsys.readouterr().out

    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**MAPPING, "rules": [{**MAPPING["rules"][0], "payload_version": "v2"}]}))
    updated = run_json(capsys, "admin", "inbound", "update", "acme", "stripe", "--mapping", str(changed))
    assert updated["mapping_sha256"] != created["mapping_sha256"]
    assert inbound.delivery_source(database, "acme", "stripe").mapping["rules"][0]["payload_version"] == "v2"

    deleted = run_json(capsys, "admin", "inbound", "delete", "acme", "stripe")
    assert deleted["deleted"] is True and deleted["credential_id"] == created["credential_id"]
    assert inbound.delivery_source(database, "acme", "stripe") is None
    assert main(["admin", "inbound", "list", "acme"]) == 0
    assert "no inbound source in acme" in capsys.readouterr().out
    assert "does not exist" in fails(capsys, "admin", "inbound", "delete", "acme", "stripe")


def test_W1_a_mapping_that_is_not_json_or_does_not_fit_is_refused_and_nothing_is_stored(
    operator, capsys, database, tmp_path
):
    not_json, not_an_object = tmp_path / "a.json", tmp_path / "b.json"
    not_json.write_text("{rules: ")
    not_an_object.write_text("[]")
    assert "is not JSON" in fails(capsys, *create_argv(not_json))
    assert f"the mapping {not_an_object} does not fit stripe: /: " in fails(capsys, *create_argv(not_an_object))
    assert "cannot read the mapping" in fails(capsys, *create_argv(tmp_path / "missing.json"))
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbound_sources"))["n"] == 0
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM credentials"))["n"] == 0
    create(capsys, operator)
    assert "does not fit stripe" in fails(
        capsys, "admin", "inbound", "update", "acme", "stripe", "--mapping", str(not_an_object)
    )
    assert "does not exist" in fails(capsys, "admin", "inbound", "update", "acme", "ghost", "--mapping", str(operator))
    assert json.loads(database.run(lambda tx: tx.one("SELECT mapping FROM inbound_sources"))["mapping"]) == MAPPING


def create_argv(mapping, *extra, scheme="stripe"):
    return [
        "admin",
        "inbound",
        "create",
        "acme",
        "stripe",
        "--app",
        "app",
        "--actor",
        "stripe-hooks",
        "--scheme",
        scheme,
        "--mapping",
        str(mapping),
        *extra,
    ]


def test_W1_unknown_application_queue_or_a_duplicate_are_clear_errors(operator, capsys):
    argv = create_argv(operator)
    argv[argv.index("--app") + 1] = "ghost"
    assert "application 'ghost' does not exist in 'acme'" in fails(capsys, *argv)
    assert "queue 'ghost' does not exist in 'acme'" in fails(capsys, *create_argv(operator, "--queue", "ghost"))
    create(capsys, operator)
    assert "inbound source 'stripe' already exists in 'acme'" in fails(capsys, *create_argv(operator))


def test_W1_the_signature_header_goes_with_hmac_sha256_only(operator, capsys, tmp_path):
    hmac_mapping = tmp_path / "hmac.json"
    hmac_mapping.write_text(json.dumps(MAPPING))
    assert "--signature-header is required" in fails(capsys, *create_argv(hmac_mapping, scheme="hmac-sha256"))
    assert "--signature-header is required" in fails(
        capsys, *create_argv(operator, "--signature-header", "X-Signature")
    )
    with pytest.raises(SystemExit):
        main(create_argv(hmac_mapping, "--signature-header", "X Signature", scheme="hmac-sha256"))
    capsys.readouterr()
    created = run_json(
        capsys, *create_argv(hmac_mapping, "--signature-header", "X-Shop-Signature", scheme="hmac-sha256")
    )
    assert created["signature_header"] == "x-shop-signature"  # compared with lower-cased header names


def test_W1_secrets_are_read_from_standard_input_stored_encrypted_listed_and_removed(
    operator, capsys, database, monkeypatch
):
    create(capsys, operator)
    with_stdin(monkeypatch, SECRET + "\n")
    first = run_json(capsys, "admin", "inbound", "secret", "add", "acme", "stripe")
    assert set(first) == {"secret_id", "created_at"}
    with_stdin(monkeypatch, "whsec_second\r\n")
    assert main(["admin", "inbound", "secret", "add", "acme", "stripe"]) == 0
    printed = capsys.readouterr()
    assert "added secret" in printed.out and "whsec_second" not in printed.out + printed.err
    ring = Keyring.from_env({SECRET_KEY_VARIABLE: SECRET_KEY})
    assert [ring.decrypt(c) for c in inbound.delivery_source(database, "acme", "stripe").ciphertexts] == [
        SECRET,
        "whsec_second",
    ]

    listed = run_json(capsys, "admin", "inbound", "secret", "list", "acme", "stripe")
    assert listed["secrets"][0] == first and set(listed) == {"secrets"} and len(listed["secrets"]) == 2
    with_stdin(monkeypatch, "whsec_third\n")
    err = fails(capsys, "admin", "inbound", "secret", "add", "acme", "stripe")
    assert "already has 2 valid secrets: remove one" in err and "whsec_third" not in err

    removed = run_json(capsys, "admin", "inbound", "secret", "remove", "acme", "stripe", first["secret_id"])
    assert removed["removed"] is True
    assert [
        s["secret_id"] for s in run_json(capsys, "admin", "inbound", "secret", "list", "acme", "stripe")["secrets"]
    ] == [str(int(first["secret_id"]) + 1)]
    assert "has no secret 999" in fails(capsys, "admin", "inbound", "secret", "remove", "acme", "stripe", "999")


@pytest.mark.parametrize(
    "stdin, refusal",
    [
        ("", "no secret on standard input"),
        ("\n", "no secret on standard input"),
        ("whsec_one\nwhsec_two\n", "must be one line"),
        ("x" * 2000, "longer than 1024 bytes"),
    ],
)
def test_W1_an_empty_or_multi_line_secret_is_refused(operator, capsys, database, monkeypatch, stdin, refusal):
    create(capsys, operator)
    with_stdin(monkeypatch, stdin)
    assert refusal in fails(capsys, "admin", "inbound", "secret", "add", "acme", "stripe")
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbound_secrets"))["n"] == 0


def test_W1_a_malformed_secret_for_the_scheme_is_refused_without_showing_it(
    operator, capsys, database, monkeypatch, tmp_path
):
    mapping = tmp_path / "sw.json"
    mapping.write_text(json.dumps(MAPPING))
    argv = create_argv(mapping, scheme="standard-webhooks")
    argv[4] = "svix"
    run_json(capsys, *argv)
    with_stdin(monkeypatch, "not a whsec secret!\n")
    err = fails(capsys, "admin", "inbound", "secret", "add", "acme", "svix")
    assert "not a standard-webhooks secret" in err and "not a whsec secret!" not in err
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbound_secrets"))["n"] == 0


def test_W1_a_secret_is_never_an_argument(operator, capsys):
    create(capsys, operator)
    with pytest.raises(SystemExit):
        main(["admin", "inbound", "secret", "add", "acme", "stripe", SECRET])
    assert SECRET not in capsys.readouterr().out


def test_W1_without_the_secret_key_secret_add_refuses_and_names_the_variable(operator, capsys, database, monkeypatch):
    create(capsys, operator)
    monkeypatch.delenv(SECRET_KEY_VARIABLE)
    with_stdin(monkeypatch, SECRET + "\n")
    err = fails(capsys, "admin", "inbound", "secret", "add", "acme", "stripe")
    assert f"{SECRET_KEY_VARIABLE} is not set" in err and "weave admin secret-key" in err
    monkeypatch.setenv(SECRET_KEY_VARIABLE, "not-a-key")
    err = fails(capsys, "admin", "inbound", "secret", "add", "acme", "stripe")
    assert f"{SECRET_KEY_VARIABLE}: key 1 of 1 is not a Fernet key" in err and "not-a-key" not in err
    assert database.run(lambda tx: tx.one("SELECT COUNT(*) AS n FROM inbound_secrets"))["n"] == 0


def test_W1_secret_key_prints_a_new_key_without_a_database(monkeypatch, capsys):
    monkeypatch.delenv("WEAVE_DATABASE_URL", raising=False)
    assert main(["admin", "secret-key"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["admin", "secret-key"]) == 0
    second = capsys.readouterr().out.strip()
    assert first != second and len(base64.urlsafe_b64decode(first)) == 32
    ring = Keyring.from_env({SECRET_KEY_VARIABLE: f"{first},{second}"})
    assert Keyring([first]).decrypt(ring.encrypt("s")) == "s"  # the first key encrypts


def test_W1_rotation_reencrypt_moves_every_secret_to_the_first_key_and_names_one_no_key_opens(
    operator, other_tenant, capsys, database, monkeypatch
):
    create(capsys, operator)
    argv = create_argv(operator)
    argv[3] = "globex"
    run_json(capsys, *argv)
    old = Keyring.from_env({SECRET_KEY_VARIABLE: SECRET_KEY})
    inbound.add_secret(database, "acme", "stripe", old.encrypt("whsec_acme_1"))
    inbound.add_secret(database, "globex", "stripe", old.encrypt("whsec_globex_1"))
    lost = inbound.add_secret(database, "globex", "stripe", Keyring([new_key()]).encrypt("whsec_lost"))
    removed = inbound.add_secret(database, "acme", "stripe", old.encrypt("whsec_removed"))
    inbound.remove_secret(database, "acme", "stripe", int(removed["secret_id"]))

    new = new_key()
    monkeypatch.setenv(SECRET_KEY_VARIABLE, f"{new},{SECRET_KEY}")
    assert main(["admin", "inbound", "secret", "reencrypt", "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer == {
        "reencrypted": 2,
        "unreadable": [{"namespace": "globex", "source": "stripe", "secret_id": lost["secret_id"]}],
    }
    only_new = Keyring([new])
    for namespace, expected in (("acme", ["whsec_acme_1"]), ("globex", ["whsec_globex_1"])):
        stored = inbound.delivery_source(database, namespace, "stripe").ciphertexts
        assert [only_new.decrypt(c) for c in stored[: len(expected)]] == expected
    actions = database.run(
        lambda tx: tx.all("SELECT details FROM audit_records WHERE action = 'inbound.secret.reencrypt'")
    )
    assert sorted(json.loads(row["details"])["secret_id"] for row in actions) == sorted(
        [str(int(lost["secret_id"]) - 2), str(int(lost["secret_id"]) - 1)]
    )
    # once the lost one is replaced, it finishes with status 0 and can run again
    inbound.remove_secret(database, "globex", "stripe", int(lost["secret_id"]))
    assert main(["admin", "inbound", "secret", "reencrypt"]) == 0
    assert "encrypted 2 secret(s) again" in capsys.readouterr().out
    monkeypatch.delenv(SECRET_KEY_VARIABLE)
    assert f"{SECRET_KEY_VARIABLE} is not set" in fails(capsys, "admin", "inbound", "secret", "reencrypt")
