"""L2: how the export document renders stored rows (weave/export.py), without a database: stored
JSON kept as its text, keys as decimal strings, times in UTC, a legacy payload that is not JSON,
nested rows, and a document written again from its start after a retry."""

from __future__ import annotations

from datetime import datetime

from weave import export, jsontext

AT = datetime(2026, 12, 2, 11, 0, 0, 123456)


def written(sections: dict[str, list[dict]], workflow: dict | None = None) -> str:
    document = export.ExportDocument()
    document.begin(workflow or {"id": 7, "input": '{"total":1.10}'}, AT)
    for name, rows in sections.items():
        document.section(name, iter(rows))
    document.end()
    size = document.size()
    text = document.file().read().decode("utf-8")
    document.close()
    assert len(text.encode("utf-8")) == size
    return text


def test_L2_stored_json_is_its_text_keys_are_strings_and_times_utc():
    signal = {
        "id": 2**63 + 1,
        "correlation": "o-1 ü".encode(),
        "payload": '{"amount":12345678901234567890123,"fee":1.10,"note":"ü"}',
        "request_digest": "d" * 64,
        "route_hash": 2**64 - 1,
        "attempts": 3,
        "consumed_at": AT,
        "expires_at": None,
    }
    text = written({"signals": [signal]})
    assert text.startswith('{"format":"weave.export/1","exported_at":"2026-12-02T11:00:00.123456Z","workflow":')
    assert '"input":{"total":1.10}' in text
    assert '"payload":{"amount":12345678901234567890123,"fee":1.10,"note":"ü"}' in text
    (item,) = jsontext.loads(text)["signals"]
    assert item["id"] == str(2**63 + 1) and item["route_hash"] == str(2**64 - 1) and item["attempts"] == 3
    assert item["correlation"] == "o-1 ü" and item["consumed_at"] == "2026-12-02T11:00:00.123456Z"
    assert item["expires_at"] is None


def test_L2_a_column_is_json_only_in_the_table_that_stores_json_there():
    task = {"id": 1, "error": '{"message":"x"}', "inbox_id": None}
    notification = {
        "id": 5,
        "body": '{"a":1}',
        "attempt_id": 9,
        "attempt_error": "timeout",
        "attempt_http_status": None,
    }
    text = written({"tasks": [task], "notifications": [notification]})
    document = jsontext.loads(text)
    assert document["tasks"][0]["error"] == {"message": "x"} and document["tasks"][0]["inbox_event"] is None
    (attempt,) = document["notifications"][0]["delivery_attempts"]
    assert attempt == {"id": "9", "error": "timeout", "http_status": None}


def test_L2_a_legacy_payload_that_is_not_json_is_a_string_and_one_that_is_stays_as_stored():
    legacy = [
        {"id": 1, "payload": "not json {", "request_digest": None},
        {"id": 2, "payload": '{"a": 1.10}', "request_digest": None},
    ]
    text = written({"signals": legacy})
    assert '"payload":"not json {"' in text and '"payload":{"a": 1.10}' in text


def test_L2_consecutive_rows_of_one_notification_are_one_item_with_its_attempts():
    rows = [
        {"id": 1, "body": "{}", "attempt_id": 10, "attempt_error": None},
        {"id": 1, "body": "{}", "attempt_id": 11, "attempt_error": "timeout"},
        {"id": 2, "body": "{}", "attempt_id": None, "attempt_error": None},
    ]
    items = jsontext.loads(written({"notifications": rows}))["notifications"]
    assert [(item["id"], [a["id"] for a in item["delivery_attempts"]]) for item in items] == [
        ("1", ["10", "11"]),
        ("2", []),
    ]


def test_L2_begin_starts_the_document_afresh():
    document = export.ExportDocument()
    document.begin({"id": 1}, AT)
    document.section("events", iter([{"id": 1, "data": "{}"}]))
    document.begin({"id": 1}, AT)  # a re-run of the unit
    document.section("events", iter([]))
    document.end()
    text = document.file().read().decode("utf-8")
    document.close()
    assert jsontext.loads(text)["events"] == []
