# placeholder until inbound-rules merges
"""Inbound webhooks' decisions (docs/rules.md#webhooks): only what the `weave admin inbound`
commands need here: the schemes, the check of a secret and of a mapping document. Branch
inbound-rules writes the whole module (verification, the mapping's reading of an event)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from weave.rules.problems import Problem

SCHEMES = ("standard-webhooks", "stripe", "github", "hmac-sha256")
SECRET_MAX_CHARS = 1024
RULE_TEXTS = ("event", "name", "payload_version", "correlation_key")


def check_secret(scheme: str, secret: str) -> None:
    """ValueError(message) when `secret` cannot be the scheme's secret."""
    if not secret or len(secret) > SECRET_MAX_CHARS or not secret.isascii() or not secret.isprintable():
        raise ValueError(f"a secret is 1 to {SECRET_MAX_CHARS} printable ASCII characters")
    if scheme == "standard-webhooks":
        if not secret.startswith("whsec_"):
            raise ValueError("a standard-webhooks secret starts with whsec_")
        try:
            base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except binascii.Error:
            raise ValueError("a standard-webhooks secret is whsec_ followed by base64") from None


def _pointer(value: Any) -> bool:
    return isinstance(value, str) and (value == "" or value.startswith("/"))


def mapping_problems(scheme: str, mapping: Any) -> list[Problem]:
    """What is wrong with a mapping document for the scheme (W3); empty when nothing is."""
    if not isinstance(mapping, dict):
        return [Problem("", "a mapping is a JSON object")]
    problems = []
    if scheme != "github" and not _pointer(mapping.get("event_type")):
        problems.append(Problem("/event_type", "a JSON pointer to the event type is required"))
    if scheme == "hmac-sha256" and not _pointer(mapping.get("idempotency_key")):
        problems.append(Problem("/idempotency_key", "a JSON pointer to the event id is required for hmac-sha256"))
    rules = mapping.get("rules")
    if not isinstance(rules, list):
        return [*problems, Problem("/rules", "a list of rules is required")]
    events = set()
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            problems.append(Problem(f"/rules/{index}", "a rule is a JSON object"))
            continue
        for field in RULE_TEXTS:
            if not isinstance(rule.get(field), str) or not rule[field]:
                problems.append(Problem(f"/rules/{index}/{field}", "a non-empty string is required"))
        if not _pointer(rule.get("correlation_key")):
            problems.append(Problem(f"/rules/{index}/correlation_key", "a JSON pointer is required"))
        event = rule.get("event")
        if isinstance(event, str) and event in events:
            problems.append(Problem(f"/rules/{index}/event", "another rule names this event"))
        events.add(event if isinstance(event, str) else None)
    return problems
