"""The review console's view of facts sent by their business key (issue 29, item 6): the namespace's
parked facts (B6: PARKED, EXPIRED unrouted, REJECTED) and the route on a workflow's signals (B3)."""

from __future__ import annotations

import re

import pytest
import test_routing as routing_test
from helpers import payment, signal_flow_definition
from test_console import QUEUES, Console
from test_routing import fact, open_payment_wait

from weave.console import pages

FACTS = "/console/ns/acme/signals"


def route(flow, key: str, body: dict) -> dict:
    answer = routing_test.route(flow, key, body)
    assert answer.status_code == 201, answer.text
    return answer.json


def fact_ids(text: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="fact-(\d+)"', text)]


@pytest.fixture
def signed_in(client, tenant, flow):
    flow.publish(signal_flow_definition())
    console = Console(client)
    console.sign_in(tenant.token("workflows:read", queues=QUEUES, actor="ops-alice"))
    return console


def test_B6_the_parked_facts_list_shows_the_facts_with_no_instance_newest_first(signed_in, flow):
    open_payment_wait(flow, "w-1", "o-1")
    open_payment_wait(flow, "w-2", "o-2")
    open_payment_wait(flow, "w-3", "o-2")
    routed = route(flow, "r-1", fact("o-1"))
    parked = route(flow, "p-1", fact("o-9"))
    ambiguous = route(flow, "a-1", fact("o-2"))
    assert (routed["route"], parked["route"], ambiguous["route"]) == ("ROUTED", "PARKED", "AMBIGUOUS")
    page = signed_in.get(FACTS)
    assert page.status_code == 200
    api = flow.client.simulate_get(f"{flow.ns}/signals", headers=flow.signaller).json
    assert fact_ids(page.text) == [int(s["signal_id"]) for s in api["signals"]]  # the API's read, B6
    assert fact_ids(page.text) == [int(ambiguous["signal_id"]), int(parked["signal_id"])]
    assert '<code class="route">AMBIGUOUS</code>' in page.text and '<code class="route">PARKED</code>' in page.text
    assert "AMBIGUOUS_CORRELATION" in page.text
    only_parked = signed_in.get(FACTS, query_string="status=PARKED")
    assert fact_ids(only_parked.text) == [int(parked["signal_id"])]
    refused = signed_in.get(FACTS, query_string="status=CONSUMED")
    assert refused.status_code == 422 and fact_ids(refused.text) == [
        int(ambiguous["signal_id"]),
        int(parked["signal_id"]),
    ]


def test_B6_the_parked_facts_list_is_linked_from_every_page(signed_in, flow):
    open_payment_wait(flow, "w-1", "o-1")
    for path in ("/console/ns/acme/workflows", "/console/ns/acme/workflows/w-1", FACTS):
        assert f'href="{FACTS}">Parked facts</a>' in signed_in.get(path).text, path


def test_B6_the_parked_facts_list_is_paged_by_id(signed_in, flow, monkeypatch):
    monkeypatch.setattr(pages, "LIST_PAGE", 2)
    ids = [int(route(flow, f"p-{i}", fact(f"o-{i}"))["signal_id"]) for i in range(5)]
    seen, path, query = [], FACTS, ""
    for _ in range(5):
        page = signed_in.get(path, query_string=query)
        assert page.status_code == 200 and len(fact_ids(page.text)) <= 2
        seen += fact_ids(page.text)
        older = re.search(r'<a href="([^"?]+)\?([^"]+)" rel="next">', page.text)
        if older is None:
            break
        path, query = older.group(1), older.group(2).replace("&amp;", "&")
    assert seen == sorted(ids, reverse=True)


def test_B6_another_namespaces_facts_are_not_listed(signed_in, flow, other_tenant):
    route(flow, "p-1", fact("o-1"))
    assert signed_in.get("/console/ns/globex/signals").status_code == 404


def test_B3_a_script_in_a_correlation_key_and_a_route_key_is_shown_as_text(signed_in, flow):
    key = "<script>alert(1)</script>"
    open_payment_wait(flow, "w-1", key)
    routed = route(flow, "<script>alert(2)</script>", fact(key))
    parked = route(flow, "<script>alert(3)</script>", fact("<script>alert(4)</script>"))
    assert (routed["route"], parked["route"]) == ("ROUTED", "PARKED")
    listed = signed_in.get(FACTS)
    shown = signed_in.get("/console/ns/acme/workflows/w-1")
    for page in (listed, shown):
        assert page.status_code == 200 and "<script" not in page.text
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in listed.text
    assert "&lt;script&gt;alert(4)&lt;/script&gt;" in listed.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown.text
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in shown.text


def test_B3_every_signal_row_of_a_workflow_shows_its_route_or_none(signed_in, flow):
    open_payment_wait(flow, "w-1", "o-1")
    routed = route(flow, "r-1", fact("o-1"))
    by_id = flow.send("w-1", "k-2", payment(sequence=1)).json
    page = signed_in.get("/console/ns/acme/workflows/w-1").text
    rows = dict(re.findall(r'<tr id="signal-(\d+)"(.*?)</tr>', page, re.S))
    assert '<code class="route">ROUTED</code>' in rows[routed["signal_id"]]
    assert "r-1" in rows[routed["signal_id"]]  # its route key, the Idempotency-Key it was sent with
    assert 'class="route"' not in rows[by_id["signal_id"]]


def test_B6_a_page_of_parked_facts_stays_bounded(signed_in, flow, monkeypatch):
    """As the console's other lists (test_console_bounds): a page holds LIST_PAGE facts at most,
    each of them at its largest, and the page's size follows."""
    monkeypatch.setattr(pages, "LIST_PAGE", 3)
    for i in range(4):
        route(flow, f"p-{i}-" + "k" * 120, fact(f"{i}" + "x" * 511, reason="r" * 1024))
    page = signed_in.get(FACTS)
    assert len(fact_ids(page.text)) == 3 and 'rel="next"' in page.text
    assert len(page.text.encode()) < 3 * (512 + 1024 + 128 + 1500) + 8_000
