"""`weave admin inbound …` and `weave admin secret-key`: the operator's side of inbound webhooks
(docs/rules.md#webhooks, W1).

A mapping is read from a file and checked against the source's scheme before anything is stored.
A secret is read from standard input only (never an argument, which other users of the machine
and the shell's history may see), checked against the scheme, encrypted with WEAVE_SECRET_KEY
and only then sent to the database; it is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import re
import sys

from weave import jsontext
from weave.cli.args import _actor, _integer, _name, _print, _shown
from weave.db import Database
from weave.errors import Code, WeaveError
from weave.rules import webhooks
from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key
from weave.sql import inbound, notifications

MAPPING_MAX_BYTES = 256 * 1024  # a mapping is a few rules; this catches a wrong file
# Providers' secrets are tens of characters; the bound keeps the ciphertext inside its column
# (inbound_secrets.ciphertext VARBINARY(4096): Fernet makes about 1.4 bytes of each byte).
SECRET_MAX_BYTES = 1024
# An HTTP field name (RFC 9110 §5.1: a token), kept lower-case as the delivery path compares them.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_secret_id = _integer(1, 2**64 - 1)
REENCRYPT_PAGE = 100  # secrets read per round trip by `secret reencrypt`


def _header_name(text: str) -> str:
    if not HEADER_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: an HTTP header name, 1-64 characters")
    return text.lower()


def add_commands(objects, leaf: list[argparse.ArgumentParser]) -> None:
    """`inbound …` and `secret-key` under `weave admin`."""
    sources = objects.add_parser("inbound", help="sources of signed webhooks (W1)").add_subparsers(
        dest="action", required=True
    )
    p = sources.add_parser("create", parents=leaf, help="a source, acting as a credential of its own")
    _source_arguments(p)
    p.add_argument("--app", type=_name, required=True, help="the application the source belongs to")
    p.add_argument("--actor", type=_actor, required=True, help="name recorded in audit for the source's facts")
    p.add_argument("--scheme", required=True, choices=webhooks.SCHEMES)
    p.add_argument("--mapping", required=True, metavar="FILE", help="the mapping document (JSON)")
    p.add_argument("--queue", action="append", type=_name, help="queue grant (repeatable)")
    p.add_argument(
        "--signature-header", type=_header_name, default=None, help="the header of the hex HMAC (hmac-sha256 only)"
    )
    p.set_defaults(run=cmd_inbound_create)
    p = sources.add_parser("update", parents=leaf, help="replace a source's mapping")
    _source_arguments(p)
    p.add_argument("--mapping", required=True, metavar="FILE", help="the mapping document (JSON)")
    p.set_defaults(run=cmd_inbound_update)
    p = sources.add_parser("list", parents=leaf, help="the namespace's sources (never a secret)")
    p.add_argument("namespace", type=_name)
    p.set_defaults(run=cmd_inbound_list)
    p = sources.add_parser("delete", parents=leaf, help="delete a source and its secrets, revoke its credential")
    _source_arguments(p)
    p.set_defaults(run=cmd_inbound_delete)

    secret = sources.add_parser("secret", help="a source's secrets (at most two valid)").add_subparsers(
        dest="secret_action", required=True
    )
    p = secret.add_parser("add", parents=leaf, help="add a secret, read from standard input (one line)")
    _source_arguments(p)
    p.set_defaults(run=cmd_secret_add)
    p = secret.add_parser("list", parents=leaf, help="the valid secrets' ids and times")
    _source_arguments(p)
    p.set_defaults(run=cmd_secret_list)
    p = secret.add_parser(
        "reencrypt", parents=leaf, help=f"encrypt every stored secret again with the first key of {SECRET_KEY_VARIABLE}"
    )
    p.set_defaults(run=cmd_secret_reencrypt)
    p = secret.add_parser("remove", parents=leaf, help="retire a secret at once")
    _source_arguments(p)
    p.add_argument("secret_id", type=_secret_id)
    p.set_defaults(run=cmd_secret_remove)

    # No database: it only prints a key (leaf's --database-url is left out on purpose).
    p = objects.add_parser("secret-key", help=f"print a new key for {SECRET_KEY_VARIABLE}")
    p.set_defaults(run=cmd_secret_key)


def _source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", type=_name)
    p.add_argument("source", type=_name)


def _read_mapping(path: str, scheme: str) -> str:
    """The file's text once it parses and fits the scheme; WeaveError listing what does not."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAPPING_MAX_BYTES + 1)
    except OSError as exc:
        raise WeaveError(Code.VALIDATION_FAILED, f"cannot read the mapping {path}: {exc.strerror}") from None
    if len(data) > MAPPING_MAX_BYTES:
        raise WeaveError(Code.VALIDATION_FAILED, f"the mapping {path} is larger than {MAPPING_MAX_BYTES} bytes")
    try:
        mapping = jsontext.loads(data)
    except jsontext.JsonRejected as exc:
        raise WeaveError(Code.VALIDATION_FAILED, f"the mapping {path} is not JSON: {exc}") from None
    problems = webhooks.mapping_problems(scheme, mapping)
    if problems:
        listed = "; ".join(f"{problem.pointer or '/'}: {problem.message}" for problem in problems)
        raise WeaveError(Code.VALIDATION_FAILED, f"the mapping {path} does not fit {scheme}: {listed}")
    return data.decode("utf-8")


def cmd_inbound_create(args) -> int:
    if (args.scheme == "hmac-sha256") != (args.signature_header is not None):
        raise WeaveError(
            Code.VALIDATION_FAILED, "--signature-header is required with --scheme hmac-sha256, and only there"
        )
    created = inbound.create_source(
        Database(args.database_url),
        args.namespace,
        args.source,
        args.app,
        args.actor,
        args.scheme,
        _read_mapping(args.mapping, args.scheme),
        args.queue or [],
        args.signature_header,
    )
    _print(
        args,
        created,
        f"created inbound source {args.source} in {args.namespace} ({args.scheme}, credential "
        f"{created['credential_id']}); its URL: /v1/inbound/{args.namespace}/{args.source}\n"
        f"add its secret with: weave admin inbound secret add {args.namespace} {args.source} < FILE",
    )
    return 0


def _scheme(database: Database, namespace: str, source: str) -> str:
    """The scheme of a source, which never changes (another scheme needs delete and create)."""
    for listed in inbound.list_sources(database, namespace):
        if listed["source"] == source:
            return listed["scheme"]
    raise WeaveError(Code.NOT_FOUND, f"inbound source {source!r} does not exist in {namespace!r}")


def cmd_inbound_update(args) -> int:
    database = Database(args.database_url)
    scheme = _scheme(database, args.namespace, args.source)
    updated = inbound.update_mapping(database, args.namespace, args.source, _read_mapping(args.mapping, scheme))
    _print(
        args, updated, f"updated the mapping of {args.source} in {args.namespace} (sha256 {updated['mapping_sha256']})"
    )
    return 0


def cmd_inbound_list(args) -> int:
    sources = inbound.list_sources(Database(args.database_url), args.namespace)
    lines = [
        f"{s['source']}: {s['scheme']}, application {s['application']}, actor {s['actor']}, "
        f"queues {' '.join(s['queues']) or '-'}, {s['valid_secrets']} valid secret(s), "
        f"mapping sha256 {s['mapping_sha256']}"
        for s in sources
    ]
    _print(args, {"sources": sources}, "\n".join(lines) or f"no inbound source in {args.namespace}")
    return 0


def cmd_inbound_delete(args) -> int:
    deleted = inbound.delete_source(Database(args.database_url), args.namespace, args.source)
    _print(
        args,
        deleted,
        f"deleted inbound source {args.source} in {args.namespace}: credential {deleted['credential_id']} "
        f"revoked, {deleted['secrets_deleted']} secret(s) deleted, its deliveries kept",
    )
    return 0


def keyring() -> Keyring:
    """The ring of WEAVE_SECRET_KEY; a clear refusal when it is unset."""
    ring = Keyring.from_env()
    if ring is None:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"{SECRET_KEY_VARIABLE} is not set: secrets are stored encrypted with it. Make one with "
            f"`weave admin secret-key` and give the same value to every `weave serve`",
        )
    return ring


def read_secret(stdin=None) -> str:
    """One line of standard input without its line end; a terminal is asked without echo."""
    stdin = stdin or sys.stdin
    if stdin.isatty():
        text = getpass.getpass("secret (not shown): ")
    else:
        text = stdin.read(SECRET_MAX_BYTES + 3)
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            text = text[: -len(end)]
            break
    if not text:
        raise WeaveError(Code.VALIDATION_FAILED, "no secret on standard input: send it as one line, e.g. `< FILE`")
    if "\n" in text or "\r" in text:
        raise WeaveError(Code.VALIDATION_FAILED, "the secret on standard input must be one line")
    if len(text.encode("utf-8")) > SECRET_MAX_BYTES:
        raise WeaveError(Code.VALIDATION_FAILED, f"the secret is longer than {SECRET_MAX_BYTES} bytes")
    return text


def cmd_secret_add(args) -> int:
    ring = keyring()
    database = Database(args.database_url)
    scheme = _scheme(database, args.namespace, args.source)
    secret = read_secret()
    try:
        webhooks.check_secret(scheme, secret)
    except ValueError as exc:  # its message describes the secret's form, never the secret
        raise WeaveError(Code.VALIDATION_FAILED, f"not a {scheme} secret: {exc}") from None
    added = inbound.add_secret(database, args.namespace, args.source, ring.encrypt(secret))
    _print(args, added, f"added secret {added['secret_id']} to {args.source} in {args.namespace}")
    return 0


def cmd_secret_list(args) -> int:
    listed = inbound.list_secrets(Database(args.database_url), args.namespace, args.source)
    lines = [f"secret {s['secret_id']}, added {s['created_at']}" for s in listed]
    _print(args, {"secrets": listed}, "\n".join(lines) or f"{args.source} has no valid secret")
    return 0


def cmd_secret_remove(args) -> int:
    removed = inbound.remove_secret(Database(args.database_url), args.namespace, args.source, args.secret_id)
    _print(args, removed, f"removed secret {args.secret_id} of {args.source} in {args.namespace}")
    return 0


def cmd_secret_reencrypt(args) -> int:
    """Rotation's second step (docs/operations.md): every valid secret of every namespace (the
    inbound sources' and the notification subscriptions'), read with whichever key opens it,
    written again with the first; a secret no key opens is named (and the command exits 1)
    without stopping the others."""
    ring = keyring()
    database = Database(args.database_url)
    inbound_done, inbound_unreadable = _reencrypt(
        ring, database, inbound.secrets_after, inbound.rewrite_secret, "secret_id"
    )
    notify_done, notify_unreadable = _reencrypt(
        ring, database, notifications.secrets_after, notifications.rewrite_secret, "subscription_id"
    )
    unreadable = [
        {"namespace": s["namespace"], "source": s["source"], "secret_id": str(s["secret_id"])}
        for s in inbound_unreadable
    ]
    unreadable += [{"namespace": s["namespace"], "subscription": s["name"]} for s in notify_unreadable]
    reencrypted = inbound_done + notify_done
    lines = [f"encrypted {reencrypted} secret(s) again with the first key of {SECRET_KEY_VARIABLE}"]
    lines += [
        f"no key opens secret {u['secret_id']} of {u['source']} in {u['namespace']}: add it again, then remove it"
        if "source" in u
        else f"no key opens the secret of subscription {u['subscription']} in {u['namespace']}: delete and create it"
        for u in unreadable
    ]
    _print(args, {"reencrypted": reencrypted, "unreadable": unreadable}, "\n".join(lines))
    return 1 if unreadable else 0


def _reencrypt(ring: Keyring, database: Database, page_after, rewrite, id_key: str) -> tuple[int, list[dict]]:
    """Every row `page_after(database, after, limit)` lists, a page at a time in id order, its
    `ciphertext` encrypted again with the ring's first key by `rewrite(database, row, ciphertext)`:
    (how many were, the rows no key opens)."""
    after, reencrypted, unreadable = 0, 0, []
    while page := page_after(database, after, REENCRYPT_PAGE):
        for row in page:
            try:
                ciphertext = ring.rotate(row["ciphertext"])
            except ValueError:
                unreadable.append(row)
                continue
            reencrypted += rewrite(database, row, ciphertext)
        after = page[-1][id_key]
    return reencrypted, unreadable


def cmd_secret_key(args) -> int:
    print(new_key())
    return 0
