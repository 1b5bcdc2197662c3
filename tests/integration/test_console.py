"""The review console without a browser (issue 16): sessions, CSRF, headers, escaping,
authorization as the API's, the list, and the actions' answers. tests/processes/test_console_browser.py
drives the same pages in Chromium."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from html.parser import HTMLParser
from urllib.parse import quote, urlencode

import pytest
from helpers import insert_instances, payment, signal_flow_definition, task_steps

from weave import logs
from weave.console import limits, pages
from weave.sql import sessions, tenancy

FORM = "application/x-www-form-urlencoded"
QUEUES = ("inventory", "carrier")
OPERATOR = ("workflows:read", "workflows:control", "workflows:review")
PAGE = "/console/ns/acme/workflows/order-1"


class Console:
    """A browser's part, for the Falcon test client: it keeps cookies and finds the forms' CSRF token."""

    def __init__(self, client):
        self.client = client
        self.cookies: dict[str, str] = {}
        self.last = None

    def _keep(self, result):
        for name, cookie in result.cookies.items():
            if cookie.value:
                self.cookies[name] = cookie.value
            else:
                self.cookies.pop(name, None)  # unset
        self.last = result
        return result

    def get(self, path: str, **kwargs):
        return self._keep(self.client.simulate_get(path, cookies=self.cookies, **kwargs))

    def post(self, path: str, fields: dict, **kwargs):
        headers = {"Content-Type": FORM, **kwargs.pop("headers", {})}
        return self._keep(
            self.client.simulate_post(path, body=urlencode(fields), headers=headers, cookies=self.cookies, **kwargs)
        )

    def csrf(self) -> str:
        return re.search(r'name="csrf" value="([^"]+)"', self.last.text).group(1)

    def sign_in(self, token: str):
        self.get("/console/")
        return self.post("/console/sign-in", {"csrf": self.csrf(), "token": token})

    def act(self, path: str, **fields):
        """Post a form of the workflow page, with the CSRF token of the page as it is now."""
        self.get(PAGE)
        return self.post(f"{PAGE}/{path}", {"csrf": self.csrf(), **fields})


@pytest.fixture
def console(client):
    return Console(client)


@pytest.fixture
def operator(tenant):
    return tenant.token(*OPERATOR, queues=QUEUES, actor="ops-alice")


@pytest.fixture
def in_review(flow, clock):
    """order-1 in review (WAIT_EXPIRED) with a late payment. Returns the late signal's id."""
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    clock.advance(600)
    late = flow.send("order-1", "k1", payment())
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "WAIT_EXPIRED"
    return late.json["signal_id"]


def status_of(flow, workflow_id="order-1") -> str:
    return flow.workflow(workflow_id)["status"]


# ---- sessions --------------------------------------------------------------------------------------


def test_sign_in_sets_an_httponly_strict_session_cookie_and_stores_only_its_hash(console, operator, flow):
    signed_in = console.sign_in(operator)
    assert (signed_in.status_code, signed_in.headers["location"]) == (303, "/console/ns/acme/workflows")
    cookie = signed_in.cookies[pages.SESSION_COOKIE]
    assert cookie.http_only and cookie.same_site == "Strict" and cookie.path == "/console"
    assert cookie.max_age == 3600 and not cookie.secure  # plain http here; see the next test
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie.value)
    (row,) = flow.rows("SELECT session_sha256, expires_at - created_at AS lifetime FROM console_sessions")
    assert row["session_sha256"] == hashlib.sha256(cookie.value.encode()).digest()
    stored = flow.rows("SELECT * FROM console_sessions")[0].values()
    assert not any(cookie.value in str(value) or operator in str(value) for value in stored)
    assert console.get("/console/ns/acme/workflows").status_code == 200
    audit = flow.rows("SELECT actor, action FROM audit_records WHERE action LIKE 'console.%%'")
    assert audit == [{"actor": "ops-alice", "action": "console.sign_in"}]


def test_the_cookies_are_secure_behind_https(console, operator):
    form = console.get("/console/", headers={"X-Forwarded-Proto": "https"})
    assert form.cookies[pages.SIGN_IN_COOKIE].secure
    signed_in = console.post(
        "/console/sign-in", {"csrf": console.csrf(), "token": operator}, headers={"X-Forwarded-Proto": "https"}
    )
    assert signed_in.cookies[pages.SESSION_COOKIE].secure


def test_a_bad_token_is_answered_next_to_the_field_and_makes_no_session(console, tenant, flow):
    refused = console.sign_in("wv_" + "x" * 43)
    assert refused.status_code == 401 and pages.SESSION_COOKIE not in refused.cookies
    assert 'id="token-error"' in refused.text and "unknown, revoked or expired" in refused.text
    worker = tenant.token("tasks:work", queues=QUEUES)
    refused = console.sign_in(worker)
    assert refused.status_code == 403 and "lacks the scope workflows:read" in refused.text
    assert flow.rows("SELECT id FROM console_sessions") == []


def test_a_revoked_credentials_session_is_refused_on_the_next_page_load(console, tenant, in_review, database, flow):
    token = tenant.token(*OPERATOR, queues=QUEUES)
    console.sign_in(token)
    assert console.get(PAGE).status_code == 200
    reason_form = console.csrf()
    (credential,) = flow.rows("SELECT c.id FROM credentials c JOIN console_sessions s ON s.credential_id = c.id")
    tenancy.revoke_credential(database, "acme", credential["id"])

    refused = console.get(PAGE)
    assert (refused.status_code, refused.headers["location"]) == (303, "/console?" + urlencode({"next": PAGE}))
    posted = console.post(f"{PAGE}/cancel", {"csrf": reason_form, "reason": "after revocation"})
    assert posted.status_code == 303 and posted.headers["location"] == "/console"
    assert status_of(flow) == "NEEDS_REVIEW"
    assert console.get("/console/").status_code == 200  # the sign-in form, not a redirect


def test_a_session_ends_at_sign_out_and_at_expiry(console, operator, clock, flow):
    console.sign_in(operator)
    console.get("/console/ns/acme/workflows")
    old = dict(console.cookies)
    signed_out = console.post("/console/sign-out", {"csrf": console.csrf()})
    assert (signed_out.status_code, signed_out.headers["location"]) == (303, "/console")
    assert pages.SESSION_COOKIE not in console.cookies
    assert flow.rows("SELECT id FROM console_sessions") == []
    console.cookies = old  # a copy of the cookie kept after sign-out is worth nothing
    assert console.get("/console/ns/acme/workflows").status_code == 303

    console.cookies = {}
    console.sign_in(operator)
    clock.advance(sessions.LIFETIME.total_seconds() - 1)
    assert console.get("/console/ns/acme/workflows").status_code == 200
    clock.advance(1)
    assert console.get("/console/ns/acme/workflows").status_code == 303
    console.sign_in(operator)  # signing in sweeps expired sessions away
    assert len(flow.rows("SELECT id FROM console_sessions")) == 1


def test_sign_in_returns_to_the_page_asked_for_but_never_elsewhere(console, operator, in_review):
    assert console.get(PAGE).headers["location"] == "/console?" + urlencode({"next": PAGE})
    console.get("/console/?" + urlencode({"next": PAGE}))
    back = console.post("/console/sign-in", {"csrf": console.csrf(), "token": operator, "next": PAGE})
    assert back.headers["location"] == PAGE
    for elsewhere in ("https://evil.example/", "//evil.example/console/ns/x", "/console/ns/../../x", "/v1/x"):
        console.cookies = {}
        console.get("/console/")
        sent = console.post("/console/sign-in", {"csrf": console.csrf(), "token": operator, "next": elsewhere})
        assert sent.headers["location"] == "/console/ns/acme/workflows", elsewhere


# ---- CSRF and headers ---------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_is_403_and_changes_nothing(console, operator, in_review, flow):
    console.sign_in(operator)
    for fields in ({}, {"csrf": ""}, {"csrf": "0" * 64}):
        refused = console.post(f"{PAGE}/cancel", {"reason": "forged", **fields})
        assert refused.status_code == 403 and "CSRF" in refused.text
        refused = console.post(f"{PAGE}/review", {"action": "fail", "reason": "forged", **fields})
        assert refused.status_code == 403
    assert status_of(flow) == "NEEDS_REVIEW"
    assert console.post("/console/sign-out", {}).status_code == 403
    assert console.get("/console/ns/acme/workflows").status_code == 200  # still signed in


def test_sign_in_without_the_forms_csrf_token_is_403(console, operator, flow):
    console.get("/console/")
    assert console.post("/console/sign-in", {"token": operator}).status_code == 403
    console.cookies.pop(pages.SIGN_IN_COOKIE)
    assert console.post("/console/sign-in", {"token": operator, "csrf": "x"}).status_code == 403
    assert flow.rows("SELECT id FROM console_sessions") == []


def test_every_answer_carries_a_strict_content_security_policy(console, operator, in_review):
    answers = [console.get("/console/")]
    console.sign_in(operator)
    answers += [console.last, console.get("/console/ns/acme/workflows"), console.get(PAGE)]
    answers += [console.get("/console/ns/acme/workflows/nope"), console.post(f"{PAGE}/pause", {})]
    for answer in answers:
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src" not in policy and "unsafe" not in policy
        assert "frame-ancestors 'none'" in policy and "form-action 'self'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"
    style = console.get("/console/style.css")
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")


# ---- escaping -------------------------------------------------------------------------------------------


def test_a_script_in_a_workflow_id_and_in_a_payload_is_shown_as_text(console, operator, flow):
    flow.publish(signal_flow_definition())
    workflow_id = "<script>alert(1)"  # workflow ids may hold < > ( ) but no space or slash
    flow.start(workflow_id, input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    note = "</pre><script>alert(2)</script>"
    assert flow.send(workflow_id, "k1", payment(payload={"amount": 1, "note": note})).status_code == 201
    console.sign_in(operator)
    listed = console.get("/console/ns/acme/workflows")
    shown = console.get(f"/console/ns/acme/workflows/{quote(workflow_id, safe='')}")
    assert shown.status_code == 200
    for page in (listed, shown):
        assert "<script" not in page.text
        assert "&lt;script&gt;alert(1)" in page.text
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in shown.text
    assert 'href="/console/ns/acme/workflows/%3Cscript%3Ealert%281%29"' in listed.text


def test_issue_34_1_the_page_shows_the_input_exactly_and_every_key_its_waits_resolved(console, operator, flow):
    """The input as stored (its digits kept), laid out and escaped, shown before any step has run;
    then each wait's correlation key, escaped too, as the waits open."""
    flow.publish(signal_flow_definition())
    stored = '{"order_id":"<script>o-1</script>","total":129.90,"big":12345678901234567890123}'
    body = f'{{"definition":"flow","version":1,"deadline_seconds":3600,"workflow_id":"order-1","input":{stored}}}'
    started = flow.client.simulate_post(
        f"{flow.ns}/workflows", body=body, headers={**flow.headers, "Content-Type": "application/json"}
    )
    assert started.status_code == 201, started.text
    console.sign_in(operator)
    page = console.get(PAGE).text
    shown = page[page.index('<section id="input">') : page.index("<h2>Timeline</h2>")]
    assert "&#34;total&#34;: 129.90" in shown and "&#34;big&#34;: 12345678901234567890123" in shown
    assert "&lt;script&gt;o-1&lt;/script&gt;" in shown and "<script" not in page
    assert "No wait has opened yet" in shown  # nothing has run: the input says what it is about
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    page = console.get(PAGE).text
    shown = page[page.index('<section id="input">') : page.index("<h2>Timeline</h2>")]
    assert 'payment #1</td><td><span class="badge' in shown and "WAITING" in shown
    assert '<code class="key">&lt;script&gt;o-1&lt;/script&gt;</code>' in shown


# ---- authorization: the API's --------------------------------------------------------------------------


def test_another_namespaces_workflow_is_not_found(console, operator, in_review, other_tenant, client):
    other = other_tenant.headers("definitions:write", "workflows:start", queues=("inventory",))
    client.simulate_post("/v1/namespaces/globex/definitions", json=task_steps("a"), headers=other)
    client.simulate_post(
        "/v1/namespaces/globex/workflows",
        json={"definition": "flow", "version": 1, "input": {}, "deadline_seconds": 60, "workflow_id": "g-1"},
        headers=other,
    )
    console.sign_in(operator)
    for path in (
        "/console/ns/globex/workflows/g-1",
        "/console/ns/globex/workflows/order-1",
        "/console/ns/globex/workflows",
    ):
        answer = console.get(path)
        assert answer.status_code == 404 and "WORKFLOW_NOT_FOUND" in answer.text, path
        assert "no such object in this namespace" in answer.text
    # In its own namespace, globex's workflow is as absent as one that never existed.
    assert console.get("/console/ns/acme/workflows/g-1").text == console.get(
        "/console/ns/acme/workflows/g-2"
    ).text.replace("g-2", "g-1")
    assert console.last.status_code == 404
    refused = console.post("/console/ns/globex/workflows/g-1/cancel", {"csrf": console.csrf(), "reason": "r"})
    assert refused.status_code == 404


def test_scopes_and_queue_grants_are_checked_as_the_api_checks_them(console, tenant, in_review, flow):
    console.sign_in(tenant.token("workflows:read", queues=QUEUES))
    assert console.get(PAGE).status_code == 200
    assert 'id="form-' not in console.last.text  # no forms it could not send
    for path, fields in (("cancel", {}), ("review", {"action": "fail"})):
        refused = console.post(f"{PAGE}/{path}", {"csrf": console.csrf(), "reason": "r", **fields})
        assert refused.status_code == 403 and "lacks the scope" in refused.text
    assert status_of(flow) == "NEEDS_REVIEW"

    console.cookies = {}
    console.sign_in(tenant.token(*OPERATOR, queues=("inventory",)))  # not trusted with the carrier queue
    refused = console.get(PAGE)
    assert refused.status_code == 403 and "no grant for queue(s) carrier" in refused.text
    assert "order-1" not in console.get("/console/ns/acme/workflows").text  # left out, as the API's list does


def test_a_disabled_applications_credential_reads_but_cannot_act(console, operator, in_review, database, flow):
    console.sign_in(operator)
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    assert console.get(PAGE).status_code == 200 and "may only read" in console.last.text
    refused = console.act("review", action="fail", reason="r")
    assert refused.status_code == 403 and "disabled" in refused.text
    assert status_of(flow) == "NEEDS_REVIEW"


def test_an_id_that_cannot_exist_is_a_404_page(console, operator):
    console.sign_in(operator)
    for bad in ("%C3%A9", "a%00b", "x" * 129):
        answer = console.get(f"/console/ns/acme/workflows/{bad}")
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")


def test_every_console_page_declares_the_scopes_of_its_api_twin():
    from test_authorization import CONFIG, OPERATIONS, mounted

    from weave.app import create_app

    api = {
        (method, template.removeprefix("/v1/namespaces/{namespace}")): scopes
        for method, template, _, scopes in OPERATIONS
    }
    found = 0
    for path, resource in mounted(create_app(CONFIG)):
        for method in ("GET", "POST"):
            responder = getattr(resource, f"on_{method.lower()}", None)
            if responder is None or not responder.operation.session:
                continue
            page_path = path.removeprefix("/console/ns/{namespace}")
            # the bulk review makes the API's review call once for each workflow picked
            page_path = {"/bulk-review": "/workflows/{workflow_id}/review"}.get(page_path, page_path)
            twin = api[(method if method == "GET" else "POST", page_path)]
            assert set(responder.operation.scopes) <= twin | {"workflows:read"}, path
            assert responder.operation.not_found.name == "WORKFLOW_NOT_FOUND"
            found += 1
    # list, page, pause, resume, cancel, review, parked facts (GET {N}/signals), inbound sources
    # (GET {N}/inbound), a source's deliveries (GET {N}/inbound/{source}/deliveries), the bulk review,
    # the notification subscriptions (GET {N}/notify) and one's notifications (…/{subscription}/deliveries)
    assert found == 12


# ---- the list ------------------------------------------------------------------------------------------


def test_the_list_shows_workflows_in_review_first_with_their_reason_and_filters_and_pages(console, operator, flow):
    flow.publish(signal_flow_definition())
    insert_instances(flow.database, "acme", "flow", 1, [(f"run-{i}", "RUNNING", None) for i in range(60)])
    insert_instances(flow.database, "acme", "flow", 1, [("stuck-1", "NEEDS_REVIEW", "TASK_FAILED")])
    console.sign_in(operator)
    first = console.get("/console/ns/acme/workflows").text
    queue, everything = first.split("review-queue", 1)[1].split("</section>", 1)
    assert "stuck-1" in queue and "TASK_FAILED" in queue and "failed on its last attempt" in queue
    assert "run-" not in queue
    assert everything.index("stuck-1") < everything.index("run-59")  # newest first
    older = re.search(r'href="([^"]+)" rel="next"', everything).group(1).replace("&amp;", "&")
    second = console.get(older).text
    assert "review-queue" not in second and "run-0<" in second and "run-59<" not in second

    only = console.get("/console/ns/acme/workflows?status=NEEDS_REVIEW").text
    assert "stuck-1" in only and "run-" not in only and "review-queue" not in only
    assert "run-" not in console.get("/console/ns/acme/workflows?definition=other").text
    bad = console.get("/console/ns/acme/workflows?status=STUCK")
    assert bad.status_code == 422 and 'id="filter-error"' in bad.text


def test_issue_34_2_the_list_finds_a_workflow_by_its_business_key_and_by_the_start_of_its_id(console, operator, flow):
    flow.publish(signal_flow_definition())
    for n in (41, 42):
        flow.start(f"order-{n}", input={"order_id": f"<b>o-{n}"})
    insert_instances(flow.database, "acme", "flow", 1, [(f"run-{i}", "RUNNING", None) for i in range(30)])
    flow.scan()
    for _ in range(2):
        flow.finish_task({"reservation_id": "r"})
    flow.scan()
    console.sign_in(operator)
    found = console.get("/console/ns/acme/workflows?" + urlencode({"correlation_key": "<b>o-42"})).text
    assert "order-42" in found and "order-41" not in found and "run-" not in found and "review-queue" not in found
    assert 'value="&lt;b&gt;o-42"' in found and "<b>" not in found  # the key stays in its box, escaped
    by_id = console.get("/console/ns/acme/workflows?workflow_id_prefix=order-&status=RUNNING").text
    assert "order-41" in by_id and "order-42" in by_id and "run-" not in by_id
    none = console.get("/console/ns/acme/workflows?" + urlencode({"correlation_key": "<i>x"})).text
    assert 'id="nothing-found"' in none and "&lt;i&gt;x" in none and "<i>x" not in none
    bad = console.get("/console/ns/acme/workflows?workflow_id_prefix=a%2Fb")
    assert bad.status_code == 422 and 'id="filter-error"' in bad.text


# ---- bulk review (issue 34, item 4) -----------------------------------------------------------------


@pytest.fixture
def three_in_review(flow, clock):
    """<i>o-1, o-2 and o-3 in review (WAIT_EXPIRED: nobody paid in time); o-4 still waits."""
    flow.publish(signal_flow_definition(timeout=600))
    for workflow_id in ("<i>o-1", "o-2", "o-3"):
        flow.start(workflow_id, input={"order_id": workflow_id})
    flow.scan()
    for _ in range(3):
        flow.finish_task({"reservation_id": "r"})
    flow.scan()
    clock.advance(600)
    flow.start("o-4", input={"order_id": "o-4"})
    flow.scan()
    assert [status_of(flow, w) for w in ("<i>o-1", "o-2", "o-3", "o-4")] == ["NEEDS_REVIEW"] * 3 + ["RUNNING"]
    return ("<i>o-1", "o-2", "o-3")


def bulk(console, action: str, reason: str, picked, csrf: str | None = None):
    console.get("/console/ns/acme/workflows?status=NEEDS_REVIEW")
    fields = {"csrf": csrf if csrf is not None else console.csrf(), "action": action, "reason": reason}
    return console.post("/console/ns/acme/bulk-review", {**fields, **{f"pick:{w}": "1" for w in picked}})


def test_issue_34_4_bulk_retry_reviews_each_picked_workflow_on_its_own_with_a_result_each(
    console, operator, flow, three_in_review
):
    console.sign_in(operator)
    listed = console.get("/console/ns/acme/workflows?status=NEEDS_REVIEW").text
    assert 'id="bulk-form"' in listed and listed.count('class="pick"') == 3
    assert 'name="pick:&lt;i&gt;o-1"' in listed and "<i>o-1" not in listed
    done = bulk(console, "retry_step", "carrier back, <b>OPS-7</b>", [*three_in_review, "o-4", "no-such"])
    assert done.status_code == 200
    rows = re.findall(r'<tr class="(done|refused)">(.*?)</tr>', done.text, re.S)
    assert [kind for kind, _ in rows] == ["done", "done", "done", "refused", "refused"]
    assert "INVALID_STATE" in rows[3][1] and "WORKFLOW_NOT_FOUND" in rows[4][1]
    assert "&lt;i&gt;o-1" in rows[0][1] and "<i>" not in done.text and "&lt;b&gt;OPS-7&lt;/b&gt;" in done.text
    assert "3 done, 2 refused." in done.text
    for workflow_id in three_in_review:
        workflow = flow.workflow(quote(workflow_id, safe=""))
        assert (workflow["status"], workflow["steps"][1]["activation_sequence"]) == ("RUNNING", 2)
    audit = flow.rows("SELECT instance_id, actor, details FROM audit_records WHERE action = 'workflow.review'")
    assert len({a["instance_id"] for a in audit}) == len(audit) == 3  # a record of its own for each workflow
    said = {(a["actor"], json.loads(a["details"])["reason"]) for a in audit}
    assert said == {("ops-alice", "carrier back, <b>OPS-7</b>")}


def test_issue_34_4_bulk_fail_and_cancel_and_refusals_of_the_form(console, operator, flow, three_in_review):
    console.sign_in(operator)
    assert bulk(console, "fail", "bad batch", three_in_review[:2]).status_code == 200
    assert bulk(console, "cancel", "customer left", three_in_review[2:]).status_code == 200
    assert [status_of(flow, quote(w, safe="")) for w in three_in_review] == ["FAILED", "FAILED", "CANCELLED"]
    for action, reason, picked, pointer in (
        ("complete_step", "x", ["o-4"], "/action"),  # needs a result per workflow: one at a time
        ("retry_step", "", ["o-4"], "/reason"),
        ("retry_step", "x", [], "/pick"),
    ):
        refused = bulk(console, action, reason, picked)
        assert refused.status_code == 422 and pointer in refused.text, (action, refused.text)
    assert status_of(flow, "o-4") == "RUNNING"


def test_issue_34_4_the_bulk_form_needs_its_csrf_token_and_the_review_scope(
    console, operator, flow, three_in_review, tenant
):
    console.sign_in(operator)
    forged = bulk(console, "cancel", "forged", three_in_review, csrf="not-the-token")
    assert forged.status_code == 403
    assert [status_of(flow, quote(w, safe="")) for w in three_in_review] == ["NEEDS_REVIEW"] * 3
    reader = Console(console.client)
    reader.sign_in(tenant.token("workflows:read", queues=QUEUES))
    assert 'id="bulk-form"' not in reader.get("/console/ns/acme/workflows?status=NEEDS_REVIEW").text
    assert bulk(reader, "cancel", "no scope", three_in_review).status_code == 403
    assert [status_of(flow, quote(w, safe="")) for w in three_in_review] == ["NEEDS_REVIEW"] * 3


# ---- actions -------------------------------------------------------------------------------------------


def test_retry_from_the_console_is_the_apis_retry(console, operator, in_review, flow):
    console.sign_in(operator)
    page = console.get(PAGE).text
    assert f'id="signal-{in_review}"' in page and "LATE" in page and "accepted at or after" in page
    done = console.act("review", action="retry_step", step_key="payment", reason="PSP outage, OPS-12")
    assert (done.status_code, done.headers["location"]) == (303, PAGE + "?done=retry_step")
    assert "a new activation started" in console.get(done.headers["location"]).text
    step = {s["key"]: s for s in flow.workflow("order-1")["steps"]}["payment"]
    assert (status_of(flow), step["activation_sequence"]) == ("RUNNING", 2)
    (record,) = flow.rows("SELECT actor, details FROM audit_records WHERE action = 'workflow.review'")
    assert record["actor"] == "ops-alice" and "PSP outage, OPS-12" in record["details"]


def test_a_refused_action_shows_the_problem_next_to_its_field_and_keeps_what_was_typed(console, operator, in_review):
    console.sign_in(operator)
    empty = console.act("review", action="retry_step", step_key="payment", reason="")
    assert empty.status_code == 422
    assert re.search(r'id="retry_step-reason-error">[^<]*(short|empty)', empty.text)

    not_json = console.act("review", action="complete_step", step_key="payment", result="{amount: 1}", reason="r")
    assert not_json.status_code == 422 and 'id="complete_step-result-error">not acceptable JSON' in not_json.text
    assert ">{amount: 1}</textarea>" in not_json.text  # kept, to be corrected

    wrong = console.act("review", action="complete_step", step_key="payment", result='{"amount": "x"}', reason="r")
    assert wrong.status_code == 422 and 'id="complete_step-result-error">/result/amount:' in wrong.text

    in_state = console.act("pause", reason="not now")
    assert in_state.status_code == 409  # a page read before the workflow went to review had the form
    assert re.search(
        r'id="action-error">\s*<strong>Pause was refused:</strong>\s*<p>cannot pause a workflow '
        r"that is NEEDS_REVIEW",
        in_state.text,
    )

    done = console.act("review", action="complete_step", step_key="payment", result='{"amount": 12.50}', reason="r")
    assert done.status_code == 303
    assert "&#34;amount&#34;: 12.50" in console.get(PAGE).text  # the result exactly as typed


def test_R4_extend_deadline_from_the_console_is_the_apis_and_says_what_time_stopped(console, operator, flow, clock):
    flow.publish(task_steps("reserve", "ship"))
    flow.start("order-1", deadline_seconds=100)
    clock.advance(100)
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "DEADLINE_EXCEEDED"  # before its first step
    console.sign_in(operator)
    page = console.get(PAGE).text
    assert 'id="form-extend_deadline"' in page and 'id="form-retry_step"' not in page
    assert "extend the deadline to let it go on" in page and "Only time stopped this workflow" in page

    word = console.act("review", action="extend_deadline", deadline_seconds="soon", reason="OPS-9")
    assert word.status_code == 422
    assert 'id="extend_deadline-deadline_seconds-error">a whole number of seconds' in word.text
    assert 'value="soon"' in word.text  # kept, to be corrected
    too_long = console.act("review", action="extend_deadline", deadline_seconds="31622401", reason="OPS-9")
    assert too_long.status_code == 422 and 'id="extend_deadline-deadline_seconds-error">' in too_long.text
    assert flow.workflow("order-1")["status"] == "NEEDS_REVIEW"

    done = console.act("review", action="extend_deadline", deadline_seconds="600", reason="carrier late, OPS-9")
    assert (done.status_code, done.headers["location"]) == (303, PAGE + "?done=extend_deadline")
    assert "The total deadline was extended." in console.get(done.headers["location"]).text
    workflow = flow.workflow("order-1")
    assert (workflow["status"], workflow["gate"], workflow["steps"][0]["status"]) == ("RUNNING", "OPEN", "ACTIVE")


def test_I6_the_page_of_a_running_workflow_past_its_deadline_says_why_its_gate_is_closed(
    console, operator, flow, clock
):
    flow.publish(task_steps("reserve", "ship", timeout=3600))
    flow.start("order-1", deadline_seconds=100)
    flow.scan()
    flow.claim(lease_seconds=3600)
    console.sign_in(operator)
    assert 'id="gate-reason"' not in console.get(PAGE).text
    clock.advance(100)
    flow.scan()
    page = console.get(PAGE).text
    assert re.search(r'id="workflow-gate">CLOSED<', page) and 'id="gate-reason"' in page
    assert 'id="form-extend_deadline"' in page and "DEADLINE_PASSED" in page  # in the history
    # Issue 34 item 5: the total deadline is drawn, and "now" has its legend entry.
    assert page.count('class="line-total-deadline"') == 1 and "swatch line-total-deadline" in page
    assert 'class="now"' in page and '<span class="swatch now"></span>now</li>' in page


def test_pause_resume_and_cancel(console, operator, flow):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    console.sign_in(operator)
    assert 'id="form-pause"' in console.get(PAGE).text and 'id="form-retry_step"' not in console.last.text
    assert console.act("pause", reason="maintenance").status_code == 303 and status_of(flow) == "PAUSED"
    assert console.act("resume", reason="done").status_code == 303 and status_of(flow) == "RUNNING"
    assert console.act("cancel", reason="customer left").status_code == 303 and status_of(flow) == "CANCELLED"
    ended = console.get(PAGE).text
    assert 'id="form-' not in ended and 'class="now"' not in ended  # no actions, and no "now" on its timeline
    assert "swatch now" not in ended and "beyond the right end" in ended  # its 3,600 s deadline is far off


def test_a_poll_steps_query_rounds_are_shown_with_their_reports(console, operator, flow, clock):
    from test_poll import INTERVAL, claim_round, final, poll_definition, report

    flow.publish(poll_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    report(flow, claim_round(flow), {"state": "PENDING"})
    flow.scan()
    clock.advance(INTERVAL)
    report(flow, claim_round(flow), final())
    flow.scan()
    assert flow.workflow("order-1")["steps"][0]["status"] == "SUCCEEDED"  # track; notify runs now
    console.sign_in(operator)
    shown = console.get(PAGE)
    assert shown.status_code == 200
    rounds = shown.text.split("<h2>Query rounds</h2>", 1)[1].split("</section>", 1)[0]
    assert rounds.count("<tr>") == 3  # the head and two rounds
    assert "&#34;state&#34;: &#34;PENDING&#34;" in rounds and "&#34;state&#34;: &#34;FINAL&#34;" in rounds
    svg = re.search(r"<svg.*</svg>", shown.text, re.S).group(0)
    assert svg.count('class="bar bar-round-succeeded"') == 2


# ---- issue 26, item 10: redirects, sessions, sign-in limits, what text may hold, repeated filters ----------


def test_a_next_page_with_percent_encoded_dots_is_refused(console, operator):
    for dots in (
        "/console/ns/acme/workflows/%2e%2e/%2e%2e/%2e%2e/v1/x",
        "/console/ns/acme/%2E%2E/sign-out",
        "/console/ns/acme/workflows/.%2e/x",
        "/console/ns/acme/workflows/%2e",
    ):
        console.cookies = {}
        console.get("/console/")
        sent = console.post("/console/sign-in", {"csrf": console.csrf(), "token": operator, "next": dots})
        assert sent.headers["location"] == "/console/ns/acme/workflows", dots
        assert console.get("/console/?" + urlencode({"next": dots})).headers["location"] == "/console/ns/acme/workflows"


def test_signing_in_again_in_the_same_browser_ends_the_earlier_session(console, operator, flow):
    console.sign_in(operator)
    earlier = dict(console.cookies)
    # A signed-in browser is sent on from the form; one that kept an earlier form (another tab), or
    # a script, posts it with the session's cookie all the same.
    form = Console(console.client)
    form.get("/console/")
    console.cookies.update(form.cookies)
    assert console.post("/console/sign-in", {"csrf": form.csrf(), "token": operator}).status_code == 303
    assert console.cookies[pages.SESSION_COOKIE] != earlier[pages.SESSION_COOKIE]
    assert console.get("/console/ns/acme/workflows").status_code == 200
    assert len(flow.rows("SELECT id FROM console_sessions")) == 1
    console.cookies = earlier
    assert console.get("/console/ns/acme/workflows").status_code == 303  # ended, not merely forgotten
    actions = flow.rows("SELECT action, details FROM audit_records WHERE action LIKE 'console.%%' ORDER BY id")
    assert [a["action"] for a in actions] == ["console.sign_in", "console.sign_out", "console.sign_in"]
    assert '"replaced":true' in actions[1]["details"]


def test_a_credential_keeps_a_session_in_each_browser_up_to_a_cap_the_oldest_ending_first(client, operator, flow):
    browsers = [Console(client) for _ in range(sessions.SESSIONS_PER_CREDENTIAL + 2)]
    for browser in browsers:
        browser.sign_in(operator)
    answers = [browser.get("/console/ns/acme/workflows").status_code for browser in browsers]
    assert answers == [303, 303] + [200] * sessions.SESSIONS_PER_CREDENTIAL
    assert len(flow.rows("SELECT id FROM console_sessions")) == sessions.SESSIONS_PER_CREDENTIAL


def test_sign_in_is_limited_per_client_address_with_a_429_page(console, tenant, operator, flow):
    for n in range(limits.SIGN_INS_PER_ADDRESS):
        assert console.sign_in("wv_" + "x" * 43).status_code == 401, n
    refused = console.sign_in(operator)  # even with a good token: the address is out of attempts
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "Too many sign-in attempts from this address" in refused.text
    assert refused.headers["content-security-policy"] == pages.CONTENT_SECURITY_POLICY
    assert flow.rows("SELECT id FROM console_sessions") == []
    other = Console(console.client)
    other.get("/console/", remote_addr="10.0.0.9")
    signed_in = other.post("/console/sign-in", {"csrf": other.csrf(), "token": operator}, remote_addr="10.0.0.9")
    assert signed_in.status_code == 303  # another address still may


def test_sign_in_is_limited_per_credential_from_any_address(client, operator, flow):
    for n in range(limits.SIGN_INS_PER_CREDENTIAL + 1):
        browser = Console(client)
        browser.get("/console/", remote_addr=f"10.0.1.{n}")
        answer = browser.post(
            "/console/sign-in", {"csrf": browser.csrf(), "token": operator}, remote_addr=f"10.0.1.{n}"
        )
        assert answer.status_code == (303 if n < limits.SIGN_INS_PER_CREDENTIAL else 429), n
    assert "Too many sign-ins of this credential" in answer.text
    assert len(flow.rows("SELECT id FROM console_sessions")) == sessions.SESSIONS_PER_CREDENTIAL


def test_failed_sign_ins_are_audited_in_the_credentials_namespace_and_unknown_tokens_logged(
    console, tenant, database, flow
):
    from helpers import captured_log

    worker = tenant.token("tasks:work", queues=QUEUES, actor="worker-1")
    revoked = tenant.token(*OPERATOR, queues=QUEUES, actor="ops-bob")
    (credential,) = flow.rows("SELECT id FROM credentials WHERE actor = 'ops-bob'")
    tenancy.revoke_credential(database, "acme", credential["id"])
    assert console.sign_in(worker).status_code == 403
    assert console.sign_in(revoked).status_code == 401
    with captured_log(logging.WARNING) as log:
        assert console.sign_in("wv_" + "y" * 43).status_code == 401
    refused = flow.rows(
        "SELECT actor, credential_id, details FROM audit_records WHERE action = 'console.sign_in_refused' ORDER BY id"
    )
    assert [(r["actor"], json.loads(r["details"])["reason"]) for r in refused] == [
        ("worker-1", "the credential lacks the scope workflows:read"),
        ("ops-bob", "the token is unknown, revoked or expired"),
    ]
    assert all(json.loads(r["details"])["address"] == "127.0.0.1" for r in refused)
    assert "console sign-in refused" in log.getvalue() and "127.0.0.1" in log.getvalue()
    assert "y" * 43 not in log.getvalue()  # a token, even a wrong one, is never logged


class Visible(HTMLParser):
    """What a browser takes from a page: its text and its attribute values."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for _, value in attrs if value]

    def handle_data(self, data):
        self.found.append(data)


def test_bidi_overrides_nul_and_esc_are_shown_escaped_as_the_logs_show_them(console, operator, flow):
    flow.publish(signal_flow_definition())
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    hidden = "pay\u202eexe.txt\x00\x1b[2J\u200b"
    body = payment(correlation_key="o-1" + hidden, payload={"amount": 1, "note": hidden}, reason="r " + hidden)
    assert flow.send("order-1", "k1", body).status_code == 201
    console.sign_in(operator)
    page = console.get(PAGE)
    parser = Visible()
    parser.feed(page.text)
    shown = "".join(parser.found)
    assert not [char for char in shown if logs.is_unsafe(char) and char not in "\n\t"]
    assert "r pay\\u202eexe.txt\\x00\\x1b[2J\\u200b" in shown  # the reason, as a log line shows it
    assert "o-1pay\\u202eexe.txt\\x00\\x1b[2J\\u200b" in shown  # the correlation key
    assert '"pay\\u202eexe.txt\\u0000\\u001b[2J\\u200b"' in shown  # in the payload: JSON's own escapes


def test_the_lists_filters_and_the_pages_cursors_refuse_a_parameter_given_twice(console, operator, in_review):
    console.sign_in(operator)
    for path in (
        "/console/ns/acme/workflows?status=RUNNING&status=NEEDS_REVIEW",
        "/console/ns/acme/workflows?definition=flow&definition=other",
        "/console/ns/acme/workflows?stauts=NEEDS_REVIEW",
        f"{PAGE}?signals_after=1&signals_after=2",
        f"{PAGE}?rows=5",
    ):
        refused = console.get(path)
        assert refused.status_code == 422, path
        assert "given more than once" in refused.text or "unknown query parameter" in refused.text
    assert console.get("/console/ns/acme/workflows?status=NEEDS_REVIEW").status_code == 200
