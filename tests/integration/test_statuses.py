"""The statuses (issue 27): the code's enums, the database's CHECK constraints (migration 0015)
and SPEC §1 name the same words."""

from __future__ import annotations

import re
from pathlib import Path

import pymysql
import pytest

from weave.db import connect
from weave.statuses import (
    CHECKS,
    ActivationStatus,
    Disposition,
    Gate,
    InstanceStatus,
    SignalStatus,
    TaskStatus,
    WaitStatus,
)

SPEC = Path(__file__).resolve().parents[3] / "shared" / "SPEC.md"


WORDS = re.compile(r"`([A-Z_]+)`")
# Two lists share one line of SPEC §1: a signal's statuses and dispositions, an instance's statuses and gates.
SECOND_LIST = {"signal": "disposition", "instance": "gate"}


def spec_statuses() -> dict[str, list[str]]:
    """SPEC §1's "Statuses" list: its label (`instance`, `wait`, …) -> the words it names."""
    text = SPEC.read_text()
    start = text.index("Statuses (exact spellings")
    found: dict[str, list[str]] = {}
    for item in re.split(r"\n- ", text[start : text.index("\n---", start)])[1:]:
        label, _, rest = item.partition(":")
        second = SECOND_LIST.get(label)
        first, _, then = rest.partition(second) if second else (rest, "", "")
        found[label] = WORDS.findall(first)
        if second:
            found[second] = WORDS.findall(then)
    return found


@pytest.mark.skipif(not SPEC.exists(), reason="shared/SPEC.md is not beside this checkout")
def test_the_enums_spell_spec_section_1():
    spec = spec_statuses()
    assert [str(s) for s in InstanceStatus] == spec["instance"]
    assert [str(s) for s in Gate] == spec["gate"]
    assert [str(s) for s in ActivationStatus] == spec["step activation"]
    assert [str(s) for s in WaitStatus] == spec["wait"]
    assert [str(s) for s in SignalStatus] == spec["signal"]
    assert [str(s) for s in Disposition] == spec["disposition"]
    assert [str(s) for s in TaskStatus] == spec["task"]


def test_the_database_checks_admit_exactly_the_enums(database, migrated_url):
    conn = connect(migrated_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT t.table_name AS tbl, c.constraint_name AS name, c.check_clause AS clause"
                " FROM information_schema.check_constraints c JOIN information_schema.table_constraints t"
                " ON t.constraint_schema = c.constraint_schema AND t.constraint_name = c.constraint_name"
                " WHERE c.constraint_schema = DATABASE() AND c.constraint_name LIKE 'ck\\\\_%%'"
            )
            found = {row["name"]: (row["tbl"], row["clause"]) for row in cur.fetchall()}
    finally:
        conn.close()
    lists = {name for name, (_, clause) in found.items() if " in (" in clause.lower()}  # not ck_queues_permits
    assert lists == set(CHECKS)
    for name, (table, column, values) in CHECKS.items():
        stored_table, clause = found[name]
        assert stored_table == table and column in clause, (name, clause)
        assert set(re.findall(r"'([A-Z_]+)'", clause)) == {str(v) for v in values}, (name, clause)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE instances SET status = 'RUNING'",
        "UPDATE instances SET gate = 'AJAR'",
        "UPDATE step_activations SET status = 'DONE'",
        "UPDATE signals SET disposition = 'LOST'",
    ],
)
def test_a_status_the_spec_does_not_name_is_refused_by_the_database(flow, migrated_url, statement):
    flow.publish({"name": "flow", "steps": [{"key": "a", "type": "TASK", "queue": "inventory", "timeout_seconds": 60}]})
    flow.start("w-1")
    flow.scan()
    flow.rows(
        "INSERT INTO signals (instance_id, name, payload_version, target_step_key, target_activation_sequence,"
        " correlation, status, accepted_at, expires_at, available_at, created_at, idempotency_key)"
        " SELECT id, 'n', 'v1', 'a', 1, 'c', 'PENDING', NOW(), NOW(), NOW(), NOW(), 'k' FROM instances"
    )
    conn = connect(migrated_url)
    try:
        with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as refused:
            cur.execute(statement)
        assert refused.value.args[0] in (4025, 3819)  # MariaDB, MySQL: CHECK constraint failed
    finally:
        conn.rollback()
        conn.close()
