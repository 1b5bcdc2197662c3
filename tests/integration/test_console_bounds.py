"""What one page of the review console may cost (issue 26, item 1): each stored value is shown
within a budget of bytes and work, with a note naming the API call that answers it exactly; the
signals, query rounds and history are paged, and the page reads only its own rows."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from helpers import payment, signal_flow_definition
from test_console import OPERATOR, PAGE, QUEUES, Console

from weave import jsontext
from weave.console import pages, values

API = "/v1/namespaces/acme/workflows/order-1"
PAGE_BOUND = 200_000  # bytes: what the worst page below must stay under
OPEN_DEFINITION = {
    **signal_flow_definition(),
    "steps": [
        step if step["type"] != "SIGNAL" else {**step, "signal": {**step["signal"], "payload_schema": True}}
        for step in signal_flow_definition()["steps"]
    ],
}


def worst_payload(depth: int = 500, zeros: int = 130_000):
    """500 nested arrays around 130,000 zeros: 260,999 bytes, just under the 256 KiB limit."""
    value: object = [0] * zeros
    for _ in range(depth - 1):
        value = [value]
    return value


def signal_body(payload) -> dict:
    return payment("not-o-1", payload=payload, reason="a wrong key")


@pytest.fixture
def console(client):
    return Console(client)


def order_waiting(flow):
    """order-1 waits for its payment, on a step whose contract takes any payload (also the setup of
    scripts/benchmarks/console_page_cost.py)."""
    flow.publish(OPEN_DEFINITION)
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    return flow


@pytest.fixture
def waiting(flow):
    return order_waiting(flow)


@pytest.fixture
def signal_only(tenant):
    return tenant.headers("workflows:signal", queues=QUEUES, actor="webhook")


def timed_get(console: Console, path: str):
    started = time.process_time()
    page = console.get(path)
    return page, time.process_time() - started


class Text(HTMLParser):
    """Every text node of a page, as a browser reads it (character references resolved)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []

    def handle_data(self, data):
        self.chunks.append(data)


def _text(html: str) -> str:
    parser = Text()
    parser.feed(html)
    return "".join(parser.chunks)


def _link(html: str, label: str) -> str:
    """The path of the link `label`, which a browser asks for (without the #fragment)."""
    return re.search(rf'href="([^"#]+)(#\w+)?" rel="\w+">{label}', html).group(1).replace("&amp;", "&")


def test_the_worst_payload_makes_a_small_page_fast_with_the_size_and_the_exact_values_api_call(
    console, waiting, signal_only, tenant, client
):
    sent = waiting.send("order-1", "worst", signal_body(worst_payload()), headers=signal_only)
    assert sent.status_code == 201 and sent.json["status"] == "REJECTED", sent.text
    assert sent.json["disposition"] == "CORRELATION_MISMATCH"
    signal_id = sent.json["signal_id"]
    (stored,) = waiting.rows("SELECT OCTET_LENGTH(payload) AS n FROM signals")
    assert stored["n"] == 260_999

    console.sign_in(tenant.token("workflows:read", queues=QUEUES))
    page, cpu = timed_get(console, PAGE)
    assert page.status_code == 200
    assert len(page.content) < PAGE_BOUND, len(page.content)
    assert cpu < 0.25, cpu  # it took about a second of CPU, for a page of 131 MB
    exact = f"GET {API}/signals/{signal_id}"
    note = f"… (truncated: 260,999 bytes in all; exact value: {exact})"
    text = re.sub(r"\s+", " ", _text(page.text))
    assert note in text
    row = page.text.split(f'id="signal-{signal_id}"', 1)[1].split("</tr>", 1)[0]
    shown = re.search(r'<pre class="json">(.*?)</pre>', row, re.S).group(1)
    assert len(shown.encode()) <= values.VALUE_BYTES
    lines = shown.split("\n")
    assert max(len(line) - len(line.lstrip(" ")) for line in lines) == 2 * values.DEPTH  # deeper stays on its line
    assert lines[values.DEPTH].lstrip(" ").startswith("[[[[[[") and shown.endswith("…")
    # The call the note names answers the value exactly.
    exactly = client.simulate_get(exact.removeprefix("GET "), headers=tenant.headers("workflows:read", queues=QUEUES))
    assert jsontext.compact(exactly.json["payload"]) == jsontext.compact(worst_payload())


def test_watching_the_worst_payload_costs_no_more_than_a_look(console, waiting, signal_only, operator_token):
    for n in range(4):  # the four: 525 MB and 14.5 s a page
        assert waiting.send("order-1", f"w{n}", signal_body(worst_payload()), headers=signal_only).status_code == 201
    console.sign_in(operator_token)
    page, cpu = timed_get(console, PAGE + "?watch=1")
    assert page.status_code == 200 and 'http-equiv="refresh"' in page.text
    assert len(page.content) < PAGE_BOUND and cpu < 0.25, (len(page.content), cpu)
    assert page.text.count("truncated: 260,999 bytes in all") == 4


@pytest.fixture
def operator_token(tenant):
    return tenant.token(*OPERATOR, queues=QUEUES, actor="ops-alice")


def test_each_value_is_cut_to_its_budget_whatever_its_shape(console, waiting, signal_only, operator_token):
    shapes = [
        ("x" * 200_000, True),  # one huge string
        ({f"k{i}": i for i in range(15_000)}, True),  # many members
        ([[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]], False),  # deep, but small
        (int("9" * 1000), False),  # the longest number Weave keeps: shown whole
        (["\"<&>'" * 25_000], True),  # what HTML escaping makes five times larger
    ]
    for n in range(pages.SIGNALS_PAGE):
        body = signal_body(shapes[n % len(shapes)][0])
        assert waiting.send("order-1", f"s{n}", body, headers=signal_only).status_code == 201
    console.sign_in(operator_token)
    page, cpu = timed_get(console, PAGE)
    assert page.status_code == 200 and cpu < 0.5, cpu
    assert len(page.content) < PAGE_BOUND, len(page.content)
    rows = re.findall(r'<tr id="signal-\d+".*?</tr>', page.text, re.S)
    assert len(rows) == pages.SIGNALS_PAGE
    for n, row in enumerate(rows):
        (shown,) = re.findall(r'<pre class="json">(.*?)</pre>', row, re.S)
        assert len(shown.encode()) <= values.VALUE_BYTES
        assert ("truncated:" in row) == shapes[n % len(shapes)][1], n
    assert "9" * 1000 in page.text and "&#34;&lt;&amp;&gt;&#39;" in page.text


def test_a_pages_values_share_one_budget(console, waiting, signal_only, operator_token, monkeypatch):
    monkeypatch.setattr(values, "PAGE_BYTES", 10 * values.VALUE_BYTES)
    for n in range(pages.SIGNALS_PAGE):
        assert waiting.send("order-1", f"s{n}", signal_body(["x" * 10_000]), headers=signal_only).status_code == 201
    console.sign_in(operator_token)
    page = console.get(PAGE).text
    shown = re.findall(r'<pre class="json">(.*?)</pre>', page, re.S)
    assert sum(len(value.encode()) for value in shown) <= values.PAGE_BYTES
    rows = re.findall(r'<tr id="signal-\d+".*?</tr>', page, re.S)
    assert len(rows) == pages.SIGNALS_PAGE and len(shown) < pages.SIGNALS_PAGE
    assert "<pre" not in rows[-1] and "truncated: 10,004 bytes in all" in rows[-1]  # the note alone


def test_signals_are_paged_and_the_page_reads_only_its_own(console, waiting, signal_only, operator_token):
    ids = []
    for n in range(pages.SIGNALS_PAGE + 5):
        sent = waiting.send("order-1", f"k{n}", signal_body({"n": n}), headers=signal_only)
        ids.append(sent.json["signal_id"])
    console.sign_in(operator_token)
    first = console.get(PAGE).text
    shown = re.findall(r'<tr id="signal-(\d+)"', first)
    assert shown == ids[: pages.SIGNALS_PAGE]
    assert f"{pages.SIGNALS_PAGE + 5} in all" in first and 'rel="prev"' not in first.split('id="signals"')[1]
    assert 'href="/console/ns/acme/workflows/order-1?signals_after=' in first and '#signals" rel="next"' in first
    second = console.get(_link(first, "Later signals")).text
    assert re.findall(r'<tr id="signal-(\d+)"', second) == ids[pages.SIGNALS_PAGE :]
    marks = re.findall(r'<g class="mark mark-\w+"><title>signal (\d+) ', second)
    assert marks == ids[pages.SIGNALS_PAGE :]  # the timeline draws the page's signals
    back = console.get(_link(second, "← Earlier signals")).text
    assert re.findall(r'<tr id="signal-(\d+)"', back) == ids[: pages.SIGNALS_PAGE]


def test_a_step_result_and_a_query_rounds_report_are_cut_with_the_api_resource_that_has_them(
    console, flow, operator_token, clock
):
    from test_poll import INTERVAL, claim_round, final, poll_definition, report

    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    report(flow, claim_round(flow), {"state": "PENDING"})
    flow.scan()
    clock.advance(INTERVAL)
    report(flow, claim_round(flow), final({"status": "delivered", "proof": ["t" * 100] * 2000}))
    flow.scan()
    assert flow.workflow("order-1")["steps"][0]["status"] == "SUCCEEDED"  # with the round's result
    console.sign_in(operator_token)
    page = console.get(PAGE)
    assert page.status_code == 200 and len(page.content) < PAGE_BOUND
    text = re.sub(r"\s+", " ", _text(page.text))
    assert f"exact value: GET {API} (its /steps/0/result)" in text
    assert f"exact value: GET {API}/events (the QUERY_RESULT_RECORDED event of task" in text
    svg = re.search(r"<svg.*</svg>", page.text, re.S).group(0)
    assert len(svg) < 20_000  # a round's report in its tooltip is cut too


def test_query_rounds_and_the_history_are_paged(console, flow, operator_token, clock):
    from test_poll import claim_round, poll_definition, report

    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    report(flow, claim_round(flow), {"state": "PENDING"})
    flow.scan()

    def more(tx):  # rounds and events by the page-full, straight into the tables
        (task,) = tx.all("SELECT * FROM tasks WHERE status = 'SUCCEEDED'")
        for _ in range(pages.ROUNDS_PAGE + 3):
            columns = [c for c in task if c != "id"]
            tx.execute(
                f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                [task[c] for c in columns],
            )
        top = tx.one("SELECT MAX(seq) AS seq, instance_id FROM events GROUP BY instance_id")
        for n in range(pages.EVENTS_PAGE + 7):
            tx.execute(
                "INSERT INTO events (instance_id, seq, type, at, data) VALUES (%s, %s, 'NOTE', %s, %s)",
                (top["instance_id"], top["seq"] + 1 + n, tx.now(), f'{{"n":{n}}}'),
            )

    flow.database.run(more)
    console.sign_in(operator_token)
    first = console.get(PAGE).text
    rounds = first.split('<section id="rounds">', 1)[1].split("</section>", 1)[0]
    assert rounds.count("<tr>") == 1 + pages.ROUNDS_PAGE
    history = first.split('<section id="events">', 1)[1].split("</section>", 1)[0]
    assert history.count("<tr>") == 1 + pages.EVENTS_PAGE
    assert '#events" rel="next">Later events' in history and '#rounds" rel="next">Later rounds' in rounds
    second = console.get(_link(rounds, "Later rounds")).text
    both = console.get(_link(second, "Later events")).text  # the rounds stay where they were
    for page in (second, both):
        rounds = page.split('<section id="rounds">', 1)[1].split("</section>", 1)[0]
        assert 1 < rounds.count("<tr>") < 1 + pages.ROUNDS_PAGE and "← Earlier rounds" in rounds
        assert "query round 29 of #1" in page  # numbered in their activation, not on the page
    history = both.split('<section id="events">', 1)[1].split("</section>", 1)[0]
    assert "NOTE" in history and "← Earlier events" in history
    back = console.get(_link(both, "← Earlier rounds")).text
    rounds = back.split('<section id="rounds">', 1)[1].split("</section>", 1)[0]
    assert rounds.count("<tr>") == 1 + pages.ROUNDS_PAGE and "Earlier rounds" not in rounds


def test_a_page_cursor_that_is_not_a_key_is_refused(console, waiting, operator_token):
    console.sign_in(operator_token)
    for query in ("signals_after=x", "rounds_before=-1", "events_after=" + "9" * 21):
        refused = console.get(f"{PAGE}?{query}")
        assert refused.status_code == 422 and "must be an integer" in refused.text, query
