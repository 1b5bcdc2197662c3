"""weave.sdk.Client against a real waitress server and database: every method, exact JSON, typed
errors, safe retries (a cut connection after the commit, a 503, a 429), and an import of the SDK
that loads nothing but the standard library."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from decimal import Decimal

import pytest
from helpers import Flow, HttpFront, payment, read_message, sdk_client, signal_flow_definition, task_steps

import weave.sdk
from weave import errors as server_errors
from weave.sdk import (
    ABSENT,
    Client,
    ConnectionFailed,
    ContractMismatch,
    DefinitionNotFound,
    Forbidden,
    IdempotencyConflict,
    InvalidState,
    LeaseLost,
    NotFound,
    QuotaExceeded,
    SignalNotFound,
    Unauthenticated,
    Unavailable,
    ValidationFailed,
    WeaveError,
    WorkflowExists,
    WorkflowNotFound,
    dumps,
    error_class,
    loads,
)
from weave.sdk import errors as sdk_errors
from weave.sql import tenancy

# A payload with a trailing zero, a 30-digit decimal, a huge exponent, non-ASCII text and a member
# order that is not sorted: what Weave stores and echoes must be these very bytes.
EXACT = (
    '{"zeta":1.10,"amount":123456789012345678901.234567890,"huge":1E+400,'
    '"nested":{"b":[1,2.50,null,true],"a":"caf\u00e9 \\"quoted\\""},"neg":-0.000}'
)
OPEN_CONTRACT = {
    "name": "open",
    "steps": [
        {
            "key": "note",
            "type": "SIGNAL",
            "timeout_seconds": 3600,
            "correlation": "/input/order_id",
            "signal": {"name": "note.added", "payload_version": "v1", "payload_schema": {}},
        }
    ],
}


@pytest.fixture
def sdk(live_url, tenant) -> Client:
    return sdk_client(live_url, tenant)


@pytest.fixture
def worker_sdk(live_url, tenant) -> Client:
    return sdk_client(live_url, tenant, "tasks:work", actor="worker")


def count(flow: Flow, table: str) -> int:
    return flow.rows(f"SELECT COUNT(*) AS n FROM `{table}`")[0]["n"]


def note(workflow_id: str = "n-1", **overrides) -> dict:
    return {
        "name": "note.added",
        "payload_version": "v1",
        "target_step_key": "note",
        "target_activation_sequence": 1,
        "correlation_key": "o-1",
        "reason": "an operator's note",
        **overrides,
    }


# ---- definitions and workflows ----------------------------------------------------------------------


def test_publish_and_read_a_definition(sdk):
    document = signal_flow_definition()
    published = sdk.publish_definition(document)
    assert (published.name, published.version, published.document) == ("flow", 1, None)
    assert published.created_at.tzinfo is not None and len(published.digest) == 64
    assert published.created
    again = sdk.publish_definition(document)
    assert (again.version, again.created) == (1, False)  # identical: the same version (D1)
    read = sdk.get_definition("flow", 1)
    assert (read.version, read.digest) == (1, published.digest)
    assert dumps(read.document) == json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(DefinitionNotFound) as refused:
        sdk.get_definition("flow", 9)
    assert (refused.value.code, refused.value.status) == ("DEFINITION_NOT_FOUND", 404)
    assert isinstance(refused.value, NotFound)


def test_D5_list_definitions_pages_through_the_newest_of_each_name(sdk):
    for name, versions in (("c", 1), ("a", 2), ("b", 3)):
        for timeout in range(1, versions + 1):
            sdk.publish_definition({**signal_flow_definition(timeout), "name": name})
    listed = list(sdk.list_definitions(page_size=2))  # two pages
    assert [(d.name, d.version, d.document) for d in listed] == [("a", 2, None), ("b", 3, None), ("c", 1, None)]
    assert listed[1].digest == sdk.get_definition("b", 3).digest
    assert [d.version for d in sdk.list_definitions(name="b")] == [3]
    assert list(sdk.list_definitions(name="z")) == []


def test_start_read_and_replay_a_workflow(sdk, flow):
    sdk.publish_definition(signal_flow_definition())
    started = sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    assert (started.workflow_id, started.status, started.gate, started.version) == ("order-1", "RUNNING", "OPEN", 1)
    assert [(s.key, s.type, s.status, s.activation_sequence) for s in started.steps] == [
        ("reserve", "TASK", "NOT_STARTED", None),
        ("payment", "SIGNAL", "NOT_STARTED", None),
        ("ship", "TASK", "NOT_STARTED", None),
    ]
    again = sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    assert again.raw == started.raw  # the same request answers the same instance (I1)
    with pytest.raises(WorkflowExists):
        sdk.start_workflow("flow", 1, {"order_id": "o-2"}, 3600, workflow_id="order-1")
    generated = sdk.start_workflow("flow", 1, {"order_id": "o-3"}, 3600)
    assert generated.workflow_id.startswith("wf_") and len(generated.workflow_id) == 35
    flow.scan()
    read = sdk.get_workflow("order-1")
    reserve = read.step("reserve")
    assert (reserve.status, reserve.task.status, reserve.task.attempt) == ("ACTIVE", "QUEUED", 0)
    assert read.steps[0] is reserve and read.input == {"order_id": "o-1"}
    with pytest.raises(WorkflowNotFound):
        sdk.get_workflow("no-such-order")


def test_workflow_ids_with_url_characters_are_quoted(sdk):
    sdk.publish_definition(signal_flow_definition())
    odd = "order?#%;=1"
    assert sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id=odd).workflow_id == odd
    assert sdk.get_workflow(odd).workflow_id == odd


def test_list_workflows_pages_and_filters(sdk, flow):
    sdk.publish_definition(signal_flow_definition())
    for i in range(5):
        sdk.start_workflow("flow", 1, {"order_id": f"o-{i}"}, 3600, workflow_id=f"order-{i}")
    sdk.pause("order-3", "hold")
    listed = list(sdk.list_workflows(page_size=2))  # three pages
    assert sorted(w.workflow_id for w in listed) == [f"order-{i}" for i in range(5)]
    assert [w.raw for w in listed] == [w.raw for w in sdk.list_workflows(page_size=100)]
    paused = next(w for w in listed if w.workflow_id == "order-3")
    assert (paused.status, paused.gate, paused.definition, paused.version) == ("PAUSED", "CLOSED", "flow", 1)
    assert [w.workflow_id for w in sdk.list_workflows(status="PAUSED")] == ["order-3"]
    assert len(list(sdk.list_workflows(definition="flow"))) == 5
    assert list(sdk.list_workflows(definition="other")) == []


def test_events_page_by_themselves_oldest_first(sdk, flow):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    everything = list(sdk.events("order-1", page_size=1000))
    assert len(everything) >= 4
    paged = list(sdk.events("order-1", page_size=2))
    assert [e.raw for e in paged] == [e.raw for e in everything]
    assert [e.seq for e in paged] == sorted(e.seq for e in paged)
    assert [e.type for e in paged] == flow.events("order-1")
    assert paged[0].at.tzinfo is not None
    assert [e.seq for e in sdk.events("order-1", after=paged[1].seq)] == [e.seq for e in paged[2:]]
    with pytest.raises(WorkflowNotFound):
        next(sdk.events("nope"))


def test_pause_resume_cancel(sdk):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    assert (sdk.pause("order-1", "customer asked").status, sdk.get_workflow("order-1").gate) == ("PAUSED", "CLOSED")
    with pytest.raises(InvalidState):
        sdk.pause("order-1", "again")
    assert sdk.resume("order-1", "go on").status == "RUNNING"
    cancelled = sdk.cancel("order-1", "duplicate order")
    assert (cancelled.status, cancelled.gate) == ("CANCELLED", "CLOSED")
    with pytest.raises(ValidationFailed) as refused:
        sdk.pause("order-1", "")
    assert refused.value.errors and refused.value.errors[0]["pointer"] == "/reason"


def test_review_completes_the_step_under_review(sdk, worker_sdk, flow):
    sdk.publish_definition(task_steps("reserve", "ship", max_attempts=1))
    sdk.start_workflow("flow", 1, {}, 3600, workflow_id="order-1")
    flow.scan()
    task = worker_sdk.claim("inventory", "w1")
    worker_sdk.complete(task, "FAILED", error={"message": "no stock", "retryable": False})
    flow.scan()
    assert sdk.get_workflow("order-1").status == "NEEDS_REVIEW"
    with pytest.raises(ValidationFailed):
        sdk.review("order-1", "complete_step", "stock found", step_key="reserve")  # no result
    repaired = sdk.review(
        "order-1", "complete_step", "stock found", step_key="reserve", result={"reservation": Decimal("1.10")}
    )
    assert repaired.status == "RUNNING"
    assert dumps(repaired.step("reserve").result) == '{"reservation":1.10}'
    with pytest.raises(InvalidState):
        sdk.review("order-1", "fail", "too late")


def test_review_retry_step_and_fail(sdk, worker_sdk, flow):
    sdk.publish_definition(task_steps("reserve", max_attempts=1))
    for workflow_id in ("order-1", "order-2"):
        sdk.start_workflow("flow", 1, {}, 3600, workflow_id=workflow_id)
    flow.scan()
    for _ in range(2):
        worker_sdk.complete(worker_sdk.claim("inventory", "w1"), "FAILED", error="down")
    flow.scan()
    retried = sdk.review("order-1", "retry_step", "try again", step_key="reserve")
    assert (retried.step("reserve").activation_sequence, retried.step("reserve").status) == (2, "ACTIVE")
    assert sdk.review("order-2", "fail", "give up").status == "FAILED"


# ---- signals ------------------------------------------------------------------------------------------


def test_send_get_and_list_signals(sdk, flow):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    fields = {k: v for k, v in payment().items() if k != "payload"}
    first = sdk.send_signal("order-1", **fields, payload={"amount": Decimal("12.50")}, idempotency_key="psp-1")
    assert (first.status, first.disposition, first.idempotency_key, first.replayed) == (
        "PENDING",
        None,
        "psp-1",
        False,
    )
    again = sdk.send_signal("order-1", **fields, payload={"amount": Decimal("12.50")}, idempotency_key="psp-1")
    assert (again.raw, again.replayed) == (first.raw, True)
    with pytest.raises(IdempotencyConflict):
        sdk.send_signal("order-1", **fields, payload={"amount": 13}, idempotency_key="psp-1")
    other = sdk.send_signal(
        "order-1", **{**fields, "correlation_key": "o-2"}, payload={"amount": 1}, evidence_ref="psp:evt/2"
    )
    assert other.idempotency_key.startswith("sdk-") and other.signal_id != first.signal_id
    flow.scan()
    flow.finish_task({"reservation_id": "r-1"})
    state = sdk.get_signal("order-1", first.signal_id)
    assert (state.status, state.actor, state.target_step_key, state.consumed_at is not None) == (
        "CONSUMED",
        "ops",
        "payment",
        True,
    )
    assert dumps(state.payload) == '{"amount":12.50}'
    rejected = sdk.get_signal("order-1", other.signal_id)
    assert (rejected.status, rejected.disposition, rejected.evidence_ref) == (
        "REJECTED",
        "CORRELATION_MISMATCH",
        "psp:evt/2",
    )
    assert [s.signal_id for s in sdk.list_signals("order-1", page_size=1)] == [first.signal_id, other.signal_id]
    assert [s.signal_id for s in sdk.list_signals("order-1", status="REJECTED")] == [other.signal_id]
    with pytest.raises(SignalNotFound):
        sdk.get_signal("order-1", "999999")
    with pytest.raises(ContractMismatch) as refused:
        sdk.send_signal("order-1", **{**fields, "name": "payment.other"}, payload={"amount": 1})
    assert refused.value.errors[0]["pointer"] == "/name"


def test_absent_payload_differs_from_null(sdk):
    sdk.publish_definition(OPEN_CONTRACT)
    sdk.start_workflow("open", 1, {"order_id": "o-1"}, 3600, workflow_id="n-1")
    absent = sdk.send_signal("n-1", **note())
    null = sdk.send_signal("n-1", **note(), payload=None)
    assert absent.request_digest != null.request_digest
    assert sdk.get_signal("n-1", absent.signal_id).payload is ABSENT
    assert "payload" not in sdk.get_signal("n-1", absent.signal_id).raw
    read_null = sdk.get_signal("n-1", null.signal_id)
    assert read_null.payload is None and read_null.raw["payload"] is None


def test_exact_json_round_trips_byte_for_byte(sdk, worker_sdk, flow):
    payload = loads(EXACT)
    assert isinstance(payload["zeta"], Decimal) and list(payload) == ["zeta", "amount", "huge", "nested", "neg"]
    assert dumps(payload) == EXACT
    sdk.publish_definition(OPEN_CONTRACT)
    sdk.start_workflow("open", 1, {"order_id": "o-1", "exact": payload}, 3600, workflow_id="n-1")
    receipt = sdk.send_signal("n-1", **note(), payload=payload)
    assert flow.rows("SELECT payload FROM signals")[0]["payload"] == EXACT  # stored as sent
    assert dumps(sdk.get_signal("n-1", receipt.signal_id).payload) == EXACT
    assert dumps(next(sdk.list_signals("n-1")).payload) == EXACT
    assert dumps(sdk.get_workflow("n-1").input["exact"]) == EXACT
    # A result reported by a worker comes back exactly too.
    sdk.publish_definition(task_steps("reserve"))
    sdk.start_workflow("flow", 1, {"exact": payload}, 3600, workflow_id="t-1")
    flow.scan()
    task = worker_sdk.claim("inventory", "w1")
    assert dumps(task.input["input"]["exact"]) == EXACT
    worker_sdk.complete(task, "SUCCEEDED", result=payload)
    flow.scan()
    assert dumps(sdk.get_workflow("t-1").step("reserve").result) == EXACT


# ---- tasks --------------------------------------------------------------------------------------------


def test_claim_heartbeat_complete(sdk, worker_sdk, flow):
    sdk.publish_definition(task_steps("reserve"))
    assert worker_sdk.claim("inventory", "w1") is None
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    flow.scan()
    task = worker_sdk.claim("inventory", "w1", lease_seconds=60, wait_seconds=1)
    assert (task.kind, task.workflow_id, task.step_key, task.attempt, task.max_attempts) == (
        "TASK",
        "order-1",
        "reserve",
        1,
        3,
    )
    assert task.input == {"workflow_id": "order-1", "input": {"order_id": "o-1"}, "steps": {}}
    assert "lease_token" not in repr(task)
    beat = worker_sdk.heartbeat(task, lease_seconds=120)
    assert beat.cancel_requested is False and beat.lease_expires_at > task.lease_expires_at
    done = worker_sdk.complete(task, "SUCCEEDED", result={"reservation_id": "r-1"})
    assert (done.task_id, done.status, done.attempt) == (task.task_id, "SUCCEEDED", 1)
    with pytest.raises(LeaseLost):
        worker_sdk.heartbeat(task)
    with pytest.raises(LeaseLost):
        worker_sdk.complete(task, "CANCELLED")
    with pytest.raises(Forbidden):
        worker_sdk.claim("no-such-queue", "w1")  # no grant for it


def test_a_claim_long_polls_until_a_task_appears(sdk, worker_sdk, flow):
    sdk.publish_definition(task_steps("reserve"))
    sdk.start_workflow("flow", 1, {}, 3600, workflow_id="order-1")
    threading.Timer(0.5, flow.scan).start()
    task = worker_sdk.claim("inventory", "w1", wait_seconds=5)
    assert task is not None and task.workflow_id == "order-1"


# ---- errors ------------------------------------------------------------------------------------------


def test_every_problem_code_of_the_server_has_its_class():
    renamed = {"NOT_IMPLEMENTED": "Unimplemented"}  # NotImplemented would shadow Python's constant
    for code in server_errors.Code:
        cls = error_class(code.name)
        assert cls is not WeaveError and cls.code == code.name, code
        camel = "".join(part.capitalize() for part in code.name.split("_"))
        assert cls.__name__ == renamed.get(code.name, camel)
        assert getattr(weave.sdk, cls.__name__) is cls


def test_authentication_and_authorization_errors(live_url, tenant, sdk):
    sdk.publish_definition(signal_flow_definition())
    with pytest.raises(Unauthenticated) as refused:
        Client(live_url, "wv_not_a_token", tenant.namespace).get_workflow("order-1")
    assert (refused.value.status, refused.value.code) == (401, "UNAUTHENTICATED")
    reader = sdk_client(live_url, tenant, "workflows:read")
    with pytest.raises(Forbidden):
        reader.start_workflow("flow", 1, {}, 3600)
    with pytest.raises(ValidationFailed) as invalid:
        sdk.start_workflow("flow", 1, {}, 0)
    assert invalid.value.errors[0]["pointer"] == "/deadline_seconds"
    assert "deadline_seconds" in str(invalid.value)


def test_a_server_that_does_not_answer_is_a_connection_failure():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", "wv_x", "acme", timeout=2, retries=2)
    slept = []
    client._sleep = slept.append
    with pytest.raises(ConnectionFailed) as failed:
        client.pause("order-1", "x")  # never sent, so even a control call is tried again
    assert failed.value.status is None and failed.value.code == "CONNECTION_FAILED"
    assert len(slept) == 2


# ---- safe retries ---------------------------------------------------------------------------------


def busy_answer() -> bytes:
    body = b'{"type":"urn:weave:problem:UNAVAILABLE","status":503,"code":"UNAVAILABLE","detail":"busy"}'
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: 0\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Proxy(HttpFront):
    """A TCP proxy in front of the server that misbehaves on chosen connections, in order:
    "drop" forwards the request, waits for the server's whole answer (so the server has committed)
    and closes the client's connection without it; "busy" answers 503 itself; then it forwards.
    One request per connection."""

    def __init__(self, upstream_port: int, plan: list[str]):
        self.seen: list[str] = []
        self.dropped: list[bytes] = []
        super().__init__(upstream_port, plan)

    def serve_connection(self, conn: socket.socket, number: int) -> None:
        behaviour = self.next_behaviour()
        self.seen.append(behaviour)
        with conn:
            request = read_message(conn)
            if behaviour == "busy":
                conn.sendall(busy_answer())
                return
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
                upstream.sendall(request)
                answer = read_message(upstream)
            if behaviour == "drop":
                self.dropped.append(answer)
                return
            conn.sendall(answer)


@pytest.fixture
def proxy(live_url):
    made = []

    def make(*plan: str) -> Proxy:
        made.append(Proxy(int(live_url.rsplit(":", 1)[1]), list(plan)))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_a_signal_whose_answer_was_cut_after_the_commit_is_sent_again_with_its_key(sdk, live_url, tenant, flow, proxy):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    cut = proxy("drop")
    client = sdk_client(cut.url, tenant)
    client._sleep = lambda seconds: None
    receipt = client.send_signal("order-1", **payment())
    assert cut.seen == ["drop", "forward"]
    first_answer = cut.dropped[0].split(b"\r\n\r\n", 1)[1]
    assert b" 201 " in cut.dropped[0].split(b"\r\n", 1)[0]  # the server had accepted and committed
    assert receipt.raw == json.loads(first_answer) and receipt.replayed is True  # the very same receipt
    rows = flow.rows("SELECT id, idempotency_key FROM signals")
    assert [(str(r["id"]), r["idempotency_key"]) for r in rows] == [(receipt.signal_id, receipt.idempotency_key)]


def test_a_503_is_retried_for_signals_and_reads_but_not_for_control_calls(sdk, tenant, flow, proxy):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    busy = proxy("busy", "busy", "busy")
    client = sdk_client(busy.url, tenant)
    client._sleep = lambda seconds: None
    receipt = client.send_signal("order-1", **payment())
    assert (receipt.status, receipt.replayed) == ("PENDING", False)
    assert busy.seen == ["busy", "busy", "busy", "forward"]
    assert count(flow, "signals") == 1
    busy.plan[:] = ["busy"]
    assert client.get_workflow("order-1").workflow_id == "order-1"
    busy.plan[:] = ["busy"]
    with pytest.raises(Unavailable) as refused:
        client.pause("order-1", "hold")
    assert refused.value.retry_after == 0 and sdk.get_workflow("order-1").status == "RUNNING"


def test_a_control_call_whose_answer_was_cut_is_not_sent_again(sdk, tenant, proxy):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    cut = proxy("drop")
    client = sdk_client(cut.url, tenant)
    with pytest.raises(ConnectionFailed):
        client.pause("order-1", "hold")
    assert cut.seen == ["drop"]  # one request: the SDK does not know whether it acted
    assert sdk.get_workflow("order-1").status == "PAUSED"  # (it had)


def test_a_start_whose_answer_was_cut_finds_the_same_workflow(sdk, tenant, flow, proxy):
    sdk.publish_definition(signal_flow_definition())
    cut = proxy("drop")
    client = sdk_client(cut.url, tenant)
    client._sleep = lambda seconds: None
    started = client.start_workflow("flow", 1, {"order_id": "o-1"}, 3600)  # the id is generated here
    assert cut.seen == ["drop", "forward"] and count(flow, "instances") == 1
    assert flow.rows("SELECT workflow_id FROM instances")[0]["workflow_id"] == started.workflow_id


def test_a_used_up_quota_is_waited_for_as_retry_after_says(live_url, tenant, database, clock, sdk):
    sdk.publish_definition(signal_flow_definition())
    sdk.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id="order-1")
    tenancy.create_application(database, tenant.namespace, "limited", 1)
    token = tenant.token("workflows:signal", queues=("inventory", "carrier"), application="limited")
    client = Client(live_url, token, tenant.namespace, timeout=10)
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)  # the server's quota window runs on the test clock

    client._sleep = sleep
    client.send_signal("order-1", **payment(), idempotency_key="a")
    second = client.send_signal("order-1", **payment(), idempotency_key="b")
    assert second.status == "PENDING" and len(slept) == 1 and 60 <= slept[0] <= 61
    impatient = Client(live_url, token, tenant.namespace, timeout=10, retries=0)
    with pytest.raises(QuotaExceeded) as refused:
        impatient.send_signal("order-1", **payment(), idempotency_key="c")
    assert (refused.value.status, refused.value.retry_after) == (429, 60)


# ---- what importing the SDK loads ------------------------------------------------------------------


def test_importing_the_sdk_loads_only_the_standard_library_and_itself():
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import weave.sdk\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    ours = [m for m in loaded if m.split(".")[0] == "weave"]
    others = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "weave"]
    assert others == []
    assert ours and all(m == "weave" or m == "weave.sdk" or m.startswith("weave.sdk.") for m in ours), ours
    for server_side in ("weave.sql", "weave.db", "weave.app", "falcon", "pymysql", "jsonschema", "waitress"):
        assert server_side not in loaded


def test_the_sdk_source_imports_nothing_of_weave_outside_it():
    import ast
    from pathlib import Path

    import weave.sdk

    for path in Path(weave.sdk.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert not name.startswith("weave") or name.startswith("weave.sdk"), (path.name, name)
    assert sdk_errors.QuotaExceeded.code == "QUOTA_EXCEEDED"
