"""L2: `GET {N}/workflows/{id}/export` and `weave workflow export` answer everything Weave holds of
one instance, exact as stored (docs/export.md).

The checks read what the tables hold for each instance and compare it with the document, row by
row and column by column: instances of every step kind (TASK, SIGNAL, POLL), with consumed,
rejected and pending signals, a task of several attempts, query rounds, a review action, a
notification with its delivery attempts; payloads round-trip byte for byte; the document is one
snapshot; a large instance exports whole."""

from __future__ import annotations

import copy
from datetime import datetime

import pymysql
import pytest
from helpers import payment, sdk_client, signal_flow_definition
from test_cli_client import run
from test_poll import INTERVAL, claim_round, final_signal, poll_definition, report

from weave import auth, jsontext
from weave import export as export_document
from weave.sql import export
from weave.sql.signals import receipt_text
from weave.times import rfc3339

N = "/v1/namespaces/acme"
QUEUES = ("inventory", "carrier")
SECTIONS = ("activations", "waits", "signals", "tasks", "events", "audit", "checkpoints", "notifications")
TABLES = {
    "workflow": "instances",
    "activations": "step_activations",
    "waits": "waits",
    "signals": "signals",
    "tasks": "tasks",
    "events": "events",
    "audit": "audit_records",
    "checkpoints": "checkpoints",
    "notifications": "notifications",
}
# A fact parked by its business key (B2) was accepted before it was the instance's: its acceptance
# record has no instance, and is the instance's all the same.
ROWS_OF_INSTANCE = {
    "audit": "SELECT * FROM audit_records WHERE instance_id = %(i)s"
    " OR (instance_id IS NULL AND signal_id IN (SELECT id FROM signals WHERE instance_id = %(i)s))",
}
LEFT_OUT = {"tasks": {"lease_token"}}  # a live lease's secret (sql/export.py)
ADDED = {
    "workflow": {"namespace", "definition", "definition_version", "definition_digest", "definition_document"},
    "tasks": {"queue", "inbox_event"},
    "notifications": {"subscription", "delivery_attempts"},
}
JSON_COLUMNS = {  # by table: `notification_attempts.error` is text, `tasks.error` JSON
    "instances": {"input"},
    "step_activations": {"result"},
    "signals": {"payload", "receipt"},
    "tasks": {"result", "error"},
    "inbox_events": {"result"},
    "events": {"data"},
    "audit_records": {"details"},
    "notifications": {"body"},
}
# Sent as these bytes (compact, which is how Weave stores a payload): digits a float would lose,
# a trailing zero, non-ASCII text, an escape, nesting and member order.
EXACT_PAYLOADS = [
    '{"amount":12345678901234567890123,"fee":1.10}',
    '{"amount":1.1,"fee":1.10,"rate":1.0000000000000000000000000001,"tiny":1E-7,"big":-0.0}',
    '{"amount":3,"note":"naïve café 🎉 \\"quoted\\" \\\\ tab\\t","zh":"付款"}',
    '{"z":1,"amount":2,"a":{"nested":[1,{"deeper":[true,false,null,"x",1.50]}],"empty":{}}}',
]
INPUT = '{"order_id":"o-1","total":12345678901234567890123.10,"note":"ünïcode 💸"}'


def columns(database, table: str) -> set[str]:
    rows = database.read(
        lambda tx: tx.all(
            "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = %s",
            (table,),
        )
    )
    return {row["c"] for row in rows}


def rows_of(database, sql: str, params) -> list[dict]:
    return database.read(lambda tx: tx.all(sql, params))


def exported(client, headers, workflow_id: str):
    answer = client.simulate_get(f"{N}/workflows/{workflow_id}/export", headers=headers)
    assert answer.status_code == 200, answer.text
    assert int(answer.headers["content-length"]) == len(answer.content)
    return answer


def expected_value(table: str, column: str, row: dict):
    """A stored value as the document holds it, parsed exactly (docs/export.md, "Values")."""
    value = row[column]
    if value is None:
        return None
    if column == "receipt":
        return jsontext.loads(receipt_text(row["id"], value))
    if column in JSON_COLUMNS.get(table, ()):
        return jsontext.loads(value)
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, int) and (column == "id" or column.endswith("_id") or column in ("route_hash", "version")):
        return str(value)
    return value


def assert_rows_equal(database, section: str, items: list[dict], rows: list[dict]) -> None:
    """`items` of the document are `rows` of the table, one for one, every column."""
    table = TABLES[section]
    assert sorted(item["id"] for item in items) == sorted(str(row["id"]) for row in rows), section
    wanted = columns(database, table) - LEFT_OUT.get(section, set())
    by_id = {item["id"]: item for item in items}
    for row in rows:
        item = by_id[str(row["id"])]
        assert set(item) == wanted | ADDED.get(section, set()), (section, set(item) ^ wanted)
        for column in wanted:
            assert item[column] == expected_value(table, column, row), (section, row["id"], column)


def assert_export_holds_every_row(database, document: dict) -> dict[str, int]:
    """L2: every row each table holds for the instance is in the document, and nothing else; the
    count of rows per section."""
    instance_id = int(document["workflow"]["id"])
    (instance,) = rows_of(database, "SELECT * FROM instances WHERE id = %s", (instance_id,))
    assert_rows_equal(database, "workflow", [document["workflow"]], [instance])
    counts = {}
    for section in SECTIONS:
        rows = rows_of(
            database,
            ROWS_OF_INSTANCE.get(section, f"SELECT * FROM {TABLES[section]} WHERE instance_id = %(i)s"),
            {"i": instance_id},
        )
        assert_rows_equal(database, section, document[section], rows)
        counts[section] = len(rows)
    inbox = rows_of(database, "SELECT * FROM inbox_events WHERE instance_id = %s", (instance_id,))
    nested = [task["inbox_event"] for task in document["tasks"] if task["inbox_event"] is not None]
    assert_rows_equal(database, "inbox_events", nested, inbox)
    attempts = rows_of(
        database,
        "SELECT a.* FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id"
        " WHERE n.instance_id = %s",
        (instance_id,),
    )
    made = [attempt for item in document["notifications"] for attempt in item["delivery_attempts"]]
    assert_rows_equal(database, "notification_attempts", made, attempts)
    counts.update(inbox_events=len(inbox), notification_attempts=len(attempts))
    return counts


TABLES.update(inbox_events="inbox_events", notification_attempts="notification_attempts")


def add_notification(database, workflow_id: str, attempts: int) -> None:
    """A notification of the instance and its delivery attempts, written as the outbox (N2) would."""

    def write(tx):
        namespace_id, instance_id = tx.one(
            "SELECT namespace_id, id FROM instances WHERE workflow_id = %s", (workflow_id,)
        ).values()
        tx.execute(
            "INSERT INTO notify_subscriptions (namespace_id, name, url, event_mask, status, ciphertext, created_at,"
            " updated_at) VALUES (%s, 'ops', 'https://ops.example/hook', 1, 'ENABLED', 'x', NOW(6), NOW(6))",
            (namespace_id,),
        )
        subscription_id = tx.cursor.lastrowid
        tx.execute(
            "INSERT INTO notifications (subscription_id, namespace_id, instance_id, event_type, webhook_id, occurred_at,"
            " body, status, due_at, attempts) VALUES (%s, %s, %s, 'workflow.completed', 'msg_1', NOW(6),"
            ' \'{"type":"workflow.completed","data":{"amount":1.10}}\', \'PENDING\', NOW(6), %s)',
            (subscription_id, namespace_id, instance_id, attempts),
        )
        notification_id = tx.cursor.lastrowid
        for number in range(attempts):
            tx.execute(
                "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, error, duration_ms)"
                " VALUES (%s, NOW(6), %s, %s, %s)",
                (notification_id, 500 if number == 0 else None, None if number == 0 else "timeout", 10 + number),
            )

    database.run(write)


@pytest.fixture
def histories(flow, tenant, clock):
    """Instances of every kind, each in a state that leaves rows in every table it touches:
    order-1 (TASK, SIGNAL, TASK) ended after a reserve task of two attempts, a signal consumed and
    two rejected, a ship step failed, retried by a review action and done, with a notification
    delivered on the second try; order-3 took a fact sent by its business key that was parked
    before its wait opened; order-2 waits with its signal pending; track-1 (POLL, TASK) ended
    after two query rounds and a final signal."""
    reviewer = tenant.headers("workflows:review", queues=QUEUES)
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    early = flow.send("order-1", "early", payment("o-1"))  # before its wait opens: stored, then consumed
    assert early.status_code == 201, early.text
    first = flow.claim().json
    flow.complete(first, "FAILED", error={"message": "stock service down", "retryable": True})
    clock.advance(60)
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})  # its second attempt
    assert flow.send("order-1", "wrong", payment("o-2")).json["status"] == "REJECTED"
    assert flow.send("order-1", "late", payment("o-1")).json["status"] == "REJECTED"
    ship = flow.claim("carrier").json
    flow.complete(ship, "FAILED", error={"message": "no truck", "retryable": False})
    flow.scan()
    retried = flow.client.simulate_post(
        f"{N}/workflows/order-1/review",
        json={"action": "retry_step", "step_key": "ship", "reason": "a truck came back"},
        headers=reviewer,
    )
    assert retried.status_code == 200, retried.text
    flow.scan()
    flow.finish_task({"tracking": "t-1"}, queue="carrier")
    assert flow.workflow("order-1")["status"] == "SUCCEEDED"
    add_notification(flow.database, "order-1", attempts=2)

    tracking = {**copy.deepcopy(poll_definition()), "name": "tracking"}
    flow.publish(tracking)
    flow.start("track-1", definition="tracking", input={"order_id": "o-9"})
    flow.scan()
    for _ in range(2):
        report(flow, claim_round(flow), {"state": "PENDING"})
        flow.scan()
        clock.advance(INTERVAL)
        flow.scan()
    final = flow.send("track-1", "final", final_signal(key="o-9"))
    assert final.status_code == 201, final.text
    flow.scan()
    flow.finish_task({"notified": True})
    assert flow.workflow("track-1")["status"] == "SUCCEEDED"

    flow.start("order-3", input={"order_id": "o-3"})
    by_key = {k: v for k, v in payment("o-3").items() if not k.startswith("target_")}
    parked = flow.client.simulate_post(f"{N}/signals", json=by_key, headers={**flow.signaller, "Idempotency-Key": "p"})
    assert parked.json["route"] == "PARKED", parked.text
    flow.scan()
    flow.finish_task({"reservation_id": "r-3"})  # the payment wait opens and takes the parked fact

    flow.start("order-2", input={"order_id": "o-2"})
    flow.scan()
    assert flow.send("order-2", "early", payment("o-2")).json["status"] == "PENDING"
    return flow


def test_L2_the_export_of_every_kind_of_instance_holds_every_row_the_tables_hold_for_it(histories, tenant):
    reader = tenant.headers("workflows:read", queues=QUEUES)
    counts, statuses, actions = {}, set(), set()
    for workflow_id in ("order-1", "order-2", "order-3", "track-1"):
        document = jsontext.loads(exported(histories.client, reader, workflow_id).content)
        assert list(document) == ["format", "exported_at", "workflow", *SECTIONS]
        assert document["format"] == "weave.export/1"
        assert document["workflow"]["workflow_id"] == workflow_id
        counts[workflow_id] = assert_export_holds_every_row(histories.database, document)
        statuses |= {signal["status"] for signal in document["signals"]}
        actions |= {record["action"] for record in document["audit"]}
        assert [event["seq"] for event in document["events"]] == list(range(1, len(document["events"]) + 1))
    # The instances really hold what the check is about: it compared rows of every kind.
    assert statuses >= {"CONSUMED", "REJECTED", "PENDING"}
    assert {"workflow.review", "task.claim", "task.complete", "workflow.start"} <= actions
    assert counts["order-1"]["notifications"] == 1 and counts["order-1"]["notification_attempts"] == 2
    assert counts["order-1"]["inbox_events"] >= 3 and counts["track-1"]["tasks"] >= 3  # rounds and notify
    reserve = histories.rows("SELECT MAX(attempt) AS n FROM tasks")[0]["n"]
    assert reserve >= 2
    assert all(counts[w][s] > 0 for w in counts for s in ("activations", "events", "audit", "checkpoints"))
    assert counts["order-2"]["signals"] == 1 and counts["order-2"]["waits"] == 0
    assert "signal.park" in actions  # order-3's fact, accepted before it was the instance's


@pytest.mark.parametrize("payload", EXACT_PAYLOADS)
def test_L2_a_payload_is_exported_byte_for_byte_as_it_was_accepted(flow, tenant, payload):
    flow.publish(signal_flow_definition())
    start = '{"definition":"flow","version":1,"workflow_id":"order-1","deadline_seconds":3600,"input":%s}' % INPUT
    as_json = {"Content-Type": "application/json"}
    started = flow.client.simulate_post(f"{N}/workflows", body=start.encode(), headers={**flow.headers, **as_json})
    assert started.status_code == 201, started.text
    body = jsontext.compact({**payment("o-1"), "payload": jsontext.Raw(payload)})
    sent = flow.client.simulate_post(
        f"{N}/workflows/order-1/signals",
        body=body.encode("utf-8"),
        headers={**flow.signaller, "Idempotency-Key": "k1", "Content-Type": "application/json"},
    )
    assert sent.status_code == 201, sent.text
    stored = flow.rows("SELECT payload FROM signals")[0]["payload"]
    assert stored == payload
    answer = exported(flow.client, tenant.headers("workflows:read", queues=QUEUES), "order-1")
    assert f'"payload":{payload},'.encode("utf-8") in answer.content
    assert f'"input":{INPUT},'.encode("utf-8") in answer.content
    (signal,) = jsontext.loads(answer.content)["signals"]
    assert jsontext.compact(signal["payload"]) == payload


def test_L2_another_namespaces_instance_is_not_found_and_a_reader_needs_the_scope_and_its_grants(
    flow, tenant, other_tenant
):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    outsider = other_tenant.headers(*auth.SCOPES, queues=("inventory",))
    answer = flow.client.simulate_get("/v1/namespaces/globex/workflows/order-1/export", headers=outsider)
    assert (answer.status_code, answer.json["code"]) == (404, "WORKFLOW_NOT_FOUND")
    missing = flow.client.simulate_get(f"{N}/workflows/nobody/export", headers=tenant.headers("workflows:read"))
    assert (missing.status_code, missing.json["code"]) == (404, "WORKFLOW_NOT_FOUND")
    no_scope = tenant.headers(*(auth.SCOPES - {"workflows:read"}), queues=QUEUES)
    answer = flow.client.simulate_get(f"{N}/workflows/order-1/export", headers=no_scope)
    assert (answer.status_code, answer.json["code"]) == (403, "FORBIDDEN")
    one_queue = tenant.headers("workflows:read", queues=("inventory",))  # the flow runs on carrier too
    answer = flow.client.simulate_get(f"{N}/workflows/order-1/export", headers=one_queue)
    assert (answer.status_code, answer.json["code"]) == (403, "FORBIDDEN")


class WriteWhileExporting(export_document.ExportDocument):
    """Commits changes to the instance on another connection while the export is between sections."""

    def __init__(self, database, instance_id: int):
        super().__init__()
        self.database, self.instance_id = database, instance_id

    def section(self, name, rows):
        if name == "signals":
            self.database.run(
                lambda tx: (
                    tx.execute(
                        "INSERT INTO events (instance_id, seq, type, at, data)"
                        " SELECT %s, MAX(seq) + 1, 'LATER', NOW(6), '{}' FROM events WHERE instance_id = %s",
                        (self.instance_id, self.instance_id),
                    ),
                    tx.execute("UPDATE signals SET status = 'EXPIRED' WHERE instance_id = %s", (self.instance_id,)),
                )
            )
        super().section(name, rows)


def test_L2_the_document_is_one_snapshot_a_change_committed_while_it_is_read_is_not_in_it(flow, tenant):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.send("order-1", "k1", payment("o-1"))
    (instance,) = flow.rows("SELECT id FROM instances")
    events_before = flow.rows("SELECT COUNT(*) AS n FROM events")[0]["n"]
    document = WriteWhileExporting(flow.database, instance["id"])
    principal = tenant.principal("workflows:read", queues=QUEUES)
    export.export_workflow(flow.database, principal, "order-1", document)
    read = jsontext.loads(document.file().read())
    document.close()
    assert flow.rows("SELECT COUNT(*) AS n FROM events")[0]["n"] == events_before + 1  # it was committed
    assert len(read["events"]) == events_before and [s["status"] for s in read["signals"]] == ["PENDING"]


def test_L2_a_large_instance_exports_every_row_through_a_spooled_file(flow, tenant, monkeypatch, live_url):
    """2,000 signals and 5,000 events (written straight into the tables: the API stores at most
    1,024 signals per instance, S1.6), over real HTTP, the document spooled to disk past 64 KiB."""
    monkeypatch.setattr(export_document, "MEMORY_BYTES", 64 * 1024)
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    (instance,) = flow.rows("SELECT id FROM instances")
    at = flow.rows("SELECT created_at FROM instances")[0]["created_at"]

    def fill(tx):
        tx.cursor.executemany(
            "INSERT INTO signals (instance_id, name, correlation, payload, status, created_at, accepted_at,"
            " idempotency_key) VALUES (%s, 'payment.settled', 'o-1', %s, 'REJECTED', %s, %s, %s)",
            [(instance["id"], '{"amount":%d.10}' % n, at, at, f"k{n}") for n in range(2000)],
        )
        tx.cursor.executemany(
            "INSERT INTO events (instance_id, seq, type, at, data) VALUES (%s, %s, 'FILLER', %s, %s)",
            [(instance["id"], seq, at, '{"n":%d}' % seq) for seq in range(100, 5100)],
        )
        tx.decided = True

    flow.database.run(fill)
    client = sdk_client(live_url, tenant, "workflows:read")
    document = client.export_workflow("order-1")
    counts = assert_export_holds_every_row(flow.database, document)
    assert counts["signals"] == 2000 and counts["events"] > 5000
    assert str(document["signals"][1999]["payload"]["amount"]) == "1999.10"


def test_L2_weave_workflow_export_writes_the_document_the_api_answers(
    live_url, flow, client, tenant, capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("WEAVE_URL", live_url)
    monkeypatch.setenv("WEAVE_TOKEN", tenant.token("workflows:read", queues=QUEUES, actor="alice"))
    monkeypatch.setenv("WEAVE_NAMESPACE", tenant.namespace)
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1", "note": "ünïcode"})
    flow.scan()
    flow.send("order-1", "k1", payment("o-1", payload={"amount": 12345678901234567890123}))
    target = tmp_path / "order-1.json"
    code, out, err = run(capsys, "workflow", "export", "order-1", "--output", str(target))
    assert (code, out, err) == (0, "", "")
    answer = exported(client, tenant.headers("workflows:read", queues=QUEUES), "order-1")
    assert target.read_bytes() == answer.content
    code, out, _ = run(capsys, "workflow", "export", "order-1")
    assert code == 0 and out.encode("utf-8") == answer.content + b"\n"
    code, _, err = run(capsys, "workflow", "export", "nobody")
    assert code == 1 and "WORKFLOW_NOT_FOUND" in err


def test_L2_an_exported_time_is_utc_with_microseconds(flow, tenant, clock):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    clock.advance(microseconds=123457)
    document = jsontext.loads(exported(flow.client, tenant.headers("workflows:read", queues=QUEUES), "order-1").content)
    assert document["exported_at"] == rfc3339(clock.now()) and document["exported_at"].endswith("Z")


def test_L2_an_export_rerun_after_a_deadlock_answers_the_document_once(flow, tenant, database):
    """A retryable error re-runs the whole unit, which starts the spooled document afresh."""
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.send("order-1", "k1", payment("o-1"))
    failed = []

    def deadlock_once(tx, unit: str) -> None:
        if unit == "export_workflow" and not failed:
            failed.append(unit)
            raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")

    database.before_commit = deadlock_once
    answer = exported(flow.client, tenant.headers("workflows:read", queues=QUEUES), "order-1")
    assert failed == ["export_workflow"]
    document = jsontext.loads(answer.content)  # one document, not two run together
    assert len(document["signals"]) == 1
    assert len(document["events"]) == flow.rows("SELECT COUNT(*) AS n FROM events")[0]["n"]
