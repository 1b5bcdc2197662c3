"""The security matrix (issue 14, item 7): every operation the app serves, on real objects, against
every way a request can be wrong about who may do what, or carry hostile text.

The operations come from the app's router and must equal those of the served OpenAPI document;
`CALLS` says how to make a real, successful request of each (its objects made fresh), and a test
fails when an operation, a declared query parameter or a string field of a request schema has
none. Then, per operation:

- ids of another namespace answer exactly like ids that exist nowhere (status, code, body but the
  id), and change nothing;
- a credential lacking the operation's scope, each other scope alone and all of them together, is
  403 and changes nothing; each declared scope alone succeeds;
- a revoked or expired credential that just worked is 401 from the very next request; unknown
  and malformed tokens are 401;
- a credential of a DISABLED application may only read (§11), from the next request, until the
  application is enabled again;
- every string of the body (values and member names inside free JSON), of the declared query
  parameters and of the Idempotency-Key header, set to SQL metacharacters, NUL, PAD SPACE bait,
  multibyte text, invalid UTF-8 or a lone surrogate, is stored verbatim (read back through the
  API, byte-exact) or refused with a 4xx problem+json that changes nothing; never a 5xx.

Every test of the module runs with the root logger capturing at DEBUG through Weave's own log
handler, and ends by looking for every token minted during the test, in every form it could be
logged (the token, its secret part, its SHA-256 as stored: hex, bytes repr, base64): none may
appear. `test_no_log_line_of_a_real_server_holds_a_token` does the same over real HTTP, with the
malformed requests waitress refuses before the application runs.

tests/integration/test_authorization.py keeps the hand table that proves each declaration right (scopes,
not-found code); tests/integration/test_path_ids.py proves ids that break their character rules; this module
proves the declarations hold on real objects. docs/reliability.md gives the figures.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable
from urllib.parse import quote

import pytest
from helpers import captured_log, make_tenant, payment, signal_flow_definition, weave_serve
from test_authorization import CONFIG, mounted, responders
from test_http_errors import exchange, request

from weave import auth, logs, schemas
from weave.app import create_app
from weave.console.pages import ROOT as CONSOLE_ROOT
from weave.http import Operation
from weave.scanner import Scanner
from weave.secretbox import Keyring, new_key
from weave.sql import inbound, notifications, tenancy

N = "/v1/namespaces/{namespace}"
QUEUES = ("inventory", "carrier")
JSON = "application/json"
SENT: collections.Counter = collections.Counter()  # requests sent, by dimension (docs/reliability.md)


def served_operations() -> dict[tuple[str, str], Operation]:
    """(method, URI template) -> its `@operation`, for every responder of every mounted route of the
    API. The console's pages sign in with a cookie, not a token, and answer in HTML: the same checks
    on them (another namespace, scopes, revocation, CSRF) are in tests/integration/test_console.py."""
    return {
        (name.removeprefix("on_").upper(), path): responder.operation
        for path, resource in mounted(create_app(CONFIG))
        for name, responder in responders(resource).items()
        if not path.startswith(CONSOLE_ROOT)
    }


OPERATIONS = served_operations()
PROTECTED = sorted(op for op, meta in OPERATIONS.items() if not meta.public)


def op_id(op: tuple[str, str]) -> str:
    method, template = op
    return f"{method} {template.removeprefix(N) or '/'}"


by_operation = pytest.mark.parametrize("op", PROTECTED, ids=[op_id(op) for op in PROTECTED])


# ---- a world of real objects in two namespaces --------------------------------------------------------


def definition(name: str, queues: tuple[str, str] = QUEUES) -> dict:
    """TASK -> SIGNAL -> TASK, plus a POLL step, so that a document has every field a step can have,
    and an input schema (D5)."""
    document = signal_flow_definition()
    document["name"] = name
    document["input_schema"] = {"type": "object", "required": ["order_id"], "title": "an order"}
    document["steps"][0]["queue"], document["steps"][2]["queue"] = queues
    document["steps"].append(
        {
            "key": "track",
            "type": "POLL",
            "queue": queues[1],
            "interval_seconds": 60,
            "timeout_seconds": 600,
            "max_attempts": 2,
            "final_signal": {"name": "track.final", "payload_version": "v1", "payload_schema": {"type": "object"}},
            "correlation": "/input/order_id",
        }
    )
    return document


@dataclass
class Call:
    """One request: URL fields, body (None: no body), query, headers, and its status on success."""

    params: dict[str, str]
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    ok: int = 200
    workflow_id: str | None = None  # the workflow it acts on, whose views read back what it stored


class World:
    """acme, where requests are made, with objects made fresh for each call; globex, whose real ids
    are used from acme; and the calls' clients. Every token is minted through `auth.new_token`."""

    def __init__(self, client, database):
        self.client = client
        self.database = database
        self.acme = make_tenant(database, "acme", {"inventory": 1000, "carrier": 1000})
        self.globex = make_tenant(database, "globex", {"inventory": 10, "gqueue": 10})
        self.everything = self.acme.headers(*auth.SCOPES, queues=QUEUES)
        self.scanner = Scanner(database)
        self.serial = itertools.count(1)
        self.post("acme", "/definitions", definition("flow"))
        self.foreign = self._globex_objects()
        self.globex_marks = ['"globex"', '"globex-w1"', '"globex-flow"', self.foreign["lease_token"]]

    # -- requests as the world's own client, which must succeed
    def post(self, namespace: str, path: str, body, headers=None, ok=(200, 201)) -> dict:
        result = self.client.simulate_post(
            f"/v1/namespaces/{namespace}{path}", json=body, headers=headers or self.everything
        )
        assert result.status_code in ok, result.text
        return result.json if result.content else {}

    def scan(self) -> None:
        while self.scanner.run_once().candidates:
            pass

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{next(self.serial)}"

    # -- fresh acme objects
    def started(self) -> str:
        """A new RUNNING workflow whose first task is queued."""
        workflow_id = self.unique("w")
        body = {"definition": "flow", "version": 1, "input": {"order_id": "o-1"}, "deadline_seconds": 86400}
        self.post("acme", "/workflows", {**body, "workflow_id": workflow_id})
        self.scan()
        return workflow_id

    def paused(self) -> str:
        workflow_id = self.started()
        self.post("acme", f"/workflows/{workflow_id}/pause", {"reason": "hold"})
        return workflow_id

    def running_task(self) -> dict:
        """A task leased to us (a new workflow's, or an older one still queued)."""
        self.started()
        return self.post("acme", "/queues/inventory/claim", {"worker_id": "w", "lease_seconds": 600}, ok=(200,))

    def in_review(self) -> str:
        """A workflow in NEEDS_REVIEW: its first task failed for good."""
        task = self.running_task()
        failed = {
            "lease_token": task["lease_token"],
            "outcome": "FAILED",
            "error": {"message": "no", "retryable": False},
        }
        self.post("acme", f"/tasks/{task['task_id']}/complete", failed)
        self.scan()
        return task["workflow_id"]

    def signalled(self) -> tuple[str, str]:
        """(workflow_id, signal_id) of a workflow with one early, PENDING signal."""
        workflow_id = self.started()
        receipt = self.post(
            "acme", f"/workflows/{workflow_id}/signals", payment(), {**self.everything, "Idempotency-Key": "k"}
        )
        return workflow_id, receipt["signal_id"]

    def source(self, namespace: str = "acme", queues: tuple[str, ...] = QUEUES) -> str:
        """A new inbound source (W1), as `weave admin inbound create` makes one."""
        name = self.unique(f"{namespace}-src")
        mapping = {
            "event_type": "/type",
            "rules": [
                {"event": "paid", "name": "payment.settled", "payload_version": "v1", "correlation_key": "/order"}
            ],
        }
        inbound.create_source(
            self.database, namespace, name, "app", "psp", "stripe", json.dumps(mapping), list(queues), None
        )
        return name

    def subscription(self, namespace: str = "acme") -> str:
        """A new notification subscription (N1), as `weave admin notify create` makes one."""
        name = self.unique(f"{namespace}-sub")
        notifications.create_subscription(
            self.database,
            namespace,
            name,
            "https://hooks.example/",
            ["workflow.failed"],
            Keyring([new_key()]).encrypt("s"),
        )
        return name

    def _globex_objects(self) -> dict[str, str]:
        """Real ids of globex: a definition, a workflow with a signal, a task leased with its token."""
        owner = self.globex.headers(*auth.SCOPES, queues=("inventory", "gqueue"))
        self.post("globex", "/definitions", definition("globex-flow", ("inventory", "gqueue")), owner)
        start = {"definition": "globex-flow", "version": 1, "input": {"order_id": "o-1"}, "deadline_seconds": 86400}
        self.post("globex", "/workflows", {**start, "workflow_id": "globex-w1"}, owner)
        self.scan()
        signal = self.post("globex", "/workflows/globex-w1/signals", payment(), {**owner, "Idempotency-Key": "k"})
        task = self.post("globex", "/queues/inventory/claim", {"worker_id": "g", "lease_seconds": 600}, owner)
        return {
            "namespace": "globex",
            "name": "globex-flow",
            "workflow_id": "globex-w1",
            "signal_id": signal["signal_id"],
            "task_id": task["task_id"],
            "lease_token": task["lease_token"],
            "queue": "gqueue",
            "source": self.source("globex", ("inventory",)),
            "subscription": self.subscription("globex"),
        }


# How to make a real, successful request of each operation, its objects made fresh. Every string
# field of the request schema appears in some body (the `document` of a definition covers TASK,
# SIGNAL and POLL steps; `complete` has a body per outcome), and every declared query parameter.
def _signal_call(w: World) -> Call:
    workflow_id = w.started()
    body = payment(evidence_ref="psp:evt/1", payload={"amount": 12.5, "note": "n"})
    return Call({"workflow_id": workflow_id}, body, headers={"Idempotency-Key": w.unique("key")}, ok=201)


def _route_call(w: World) -> Call:
    """A fact by its business key (B1): no wait has its key, so it parks."""
    body = payment(w.unique("o"), evidence_ref="psp:evt/1", payload={"amount": 12.5, "note": "n"})
    body = {k: v for k, v in body.items() if not k.startswith("target_")}
    return Call({}, body, headers={"Idempotency-Key": w.unique("key")}, ok=201)


def _batch_call(single: Callable[[World], Call]) -> Callable[[World], Call]:
    """A batch (B8) of the one item `single` sends alone: its item's result is the batch's verdict
    (`verdict`), so every check of a single send applies to the item."""

    def make(w: World) -> Call:
        call = single(w)
        item = {**call.body, "idempotency_key": call.headers["Idempotency-Key"]}
        if "workflow_id" in call.params:
            item["workflow_id"] = call.params["workflow_id"]
        return Call({}, {"signals": [item]}, workflow_id=call.params.get("workflow_id"))

    return make


def verdict(op, result):
    """The status that decides a call: a batch's one item's, any other call's own."""
    if op[1].endswith("/signal-batches") and result.status_code == 200:
        return result.json["results"][0]["status"]
    return result.status_code


def _complete_call(outcome: str) -> Callable[[World], Call]:
    def make(w: World) -> Call:
        task = w.running_task()
        body = {"lease_token": task["lease_token"], "outcome": outcome}
        if outcome == "SUCCEEDED":
            body["result"] = {"note": "n"}
        else:
            body["error"] = {"message": "m", "retryable": False, "details": {"note": "n"}}
        return Call({"task_id": task["task_id"]}, body, workflow_id=task["workflow_id"])

    return make


def _signal_read_call(w: World) -> Call:
    workflow_id, signal_id = w.signalled()
    return Call(
        {"workflow_id": workflow_id, "signal_id": signal_id}, query={"wait_seconds": "0"}, workflow_id=workflow_id
    )


def _parked(w: World) -> dict:
    """A fact sent by its business key that no wait has (B2): PARKED."""
    call = _route_call(w)
    return w.post("acme", "/signals", call.body, {**w.everything, **call.headers})


def _fact_read_call(w: World) -> Call:
    return Call({"signal_id": _parked(w)["signal_id"]}, query={"wait_seconds": "0"})


def _fact_list_call(w: World) -> Call:
    _parked(w)
    query = {"status": "PARKED", "name": "payment.settled", "correlation_key": "o-1", "after": "0", "limit": "10"}
    return Call({}, query=query)


def _signal_list_call(w: World) -> Call:
    workflow_id, _ = w.signalled()
    return Call({"workflow_id": workflow_id}, query={"status": "PENDING", "after": "0", "limit": "10"})


def _claim_call(w: World) -> Call:
    w.started()
    return Call({"queue": "inventory"}, {"worker_id": "worker-1", "lease_seconds": 60, "wait_seconds": 0})


def _heartbeat_call(w: World) -> Call:
    task = w.running_task()
    return Call({"task_id": task["task_id"]}, {"lease_token": task["lease_token"], "lease_seconds": 60})


def _started_call(body: dict | None = None) -> Callable[[World], Call]:
    def make(w: World) -> Call:
        workflow_id = w.started()
        return Call({"workflow_id": workflow_id}, body, workflow_id=workflow_id)

    return make


CALLS: dict[tuple[str, str], list[Callable[[World], Call]]] = {
    ("GET", "/healthz"): [lambda w: Call({})],
    ("GET", "/readyz"): [lambda w: Call({})],
    ("GET", "/v1/openapi.json"): [lambda w: Call({})],
    ("GET", "/metrics"): [lambda w: Call({})],
    ("POST", f"{N}/definitions"): [lambda w: Call({}, definition(w.unique("def")), ok=201)],
    ("GET", f"{N}/definitions"): [lambda w: Call({}, query={"name": "flow", "after": "a", "limit": "10"})],
    ("GET", f"{N}/definitions/{{name}}/versions/{{version:int(min=1)}}"): [
        lambda w: Call({"name": "flow", "version": "1"})
    ],
    ("POST", f"{N}/workflows"): [
        lambda w: Call(
            {},
            {
                "definition": "flow",
                "version": 1,
                "input": {"order_id": "o-1", "note": "n"},
                "deadline_seconds": 3600,
                "workflow_id": w.unique("new"),
            },
            ok=201,
        )
    ],
    ("GET", f"{N}/workflows"): [
        lambda w: Call({}, query={"status": "RUNNING", "definition": "flow", "after": "0", "limit": "10"}),
        lambda w: Call({}, query={"correlation_key": "o-1", "workflow_id_prefix": "o", "limit": "10"}),
    ],
    ("GET", f"{N}/workflows/{{workflow_id}}"): [_started_call()],
    ("GET", f"{N}/workflows/{{workflow_id}}/events"): [
        lambda w: Call({"workflow_id": w.started()}, query={"after": "0", "limit": "10"})
    ],
    ("GET", f"{N}/workflows/{{workflow_id}}/export"): [_started_call()],
    ("POST", f"{N}/workflows/{{workflow_id}}/pause"): [_started_call({"reason": "r"})],
    ("POST", f"{N}/workflows/{{workflow_id}}/resume"): [
        lambda w: Call({"workflow_id": (wid := w.paused())}, {"reason": "r"}, workflow_id=wid)
    ],
    ("POST", f"{N}/workflows/{{workflow_id}}/cancel"): [_started_call({"reason": "r"})],
    ("POST", f"{N}/workflows/{{workflow_id}}/review"): [
        lambda w: Call(
            {"workflow_id": (wid := w.in_review())},
            {"action": "complete_step", "step_key": "reserve", "result": {"note": "n"}, "reason": "r"},
            workflow_id=wid,
        )
    ],
    ("POST", f"{N}/workflows/{{workflow_id}}/signals"): [_signal_call],
    ("POST", f"{N}/signals"): [_route_call],
    ("POST", f"{N}/signal-batches"): [_batch_call(_signal_call), _batch_call(_route_call)],
    ("GET", f"{N}/workflows/{{workflow_id}}/signals"): [_signal_list_call],
    ("GET", f"{N}/workflows/{{workflow_id}}/signals/{{signal_id}}"): [_signal_read_call],
    ("GET", f"{N}/signals"): [_fact_list_call],
    ("GET", f"{N}/signals/{{signal_id}}"): [_fact_read_call],
    ("POST", f"{N}/queues/{{queue}}/claim"): [_claim_call],
    ("POST", f"{N}/tasks/{{task_id}}/heartbeat"): [_heartbeat_call],
    ("POST", f"{N}/tasks/{{task_id}}/complete"): [_complete_call("SUCCEEDED"), _complete_call("FAILED")],
    ("GET", f"{N}/inbound"): [lambda w: Call({}) if w.source() else None],
    ("GET", f"{N}/inbound/{{source}}/deliveries"): [
        lambda w: Call({"source": w.source()}, query={"outcome": "ROUTED", "after": "0", "limit": "10"})
    ],
    ("GET", f"{N}/notify"): [lambda w: Call({}) if w.subscription() else None],
    ("GET", f"{N}/notify/{{subscription}}/deliveries"): [
        lambda w: Call({"subscription": w.subscription()}, query={"status": "PENDING", "after": "0", "limit": "10"})
    ],
    # Public: a signature authenticates it, not a token; unsigned it is 401 (tests/integration/
    # test_inbound.py signs real deliveries with the providers' own libraries).
    ("POST", "/v1/inbound/{namespace}/{source}"): [lambda w: Call({"source": w.source()}, ok=401)],
}


def url(template: str, params: dict[str, str]) -> str:
    """The template filled in, each field percent-encoded (a workflow id may hold `%`, `?`, `#`)."""
    filled = {"namespace": "acme", **params}

    def value(m: re.Match) -> str:
        raw = filled[m.group(1)]
        return quote(raw if isinstance(raw, bytes) else str(raw), safe="")

    return re.sub(r"{(\w+)(?::[^}]*)?}", value, template)


def send(w: World, op, call: Call, headers: dict | None, dimension: str, raw: bytes | None = None):
    """Make the call; whatever it answers, it is never a 5xx, and every error is problem+json."""
    method, template = op
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in call.query.items())  # v: str or bytes
    kwargs: dict[str, Any] = {"headers": {**(headers if headers is not None else w.everything), **call.headers}}
    if raw is not None:
        kwargs["body"] = raw
        kwargs["headers"]["Content-Type"] = JSON
    elif call.body is not None:
        kwargs["json"] = call.body
    result = w.client.simulate_request(method, url(template, call.params), query_string=query, **kwargs)
    SENT[dimension] += 1
    assert result.status_code < 500, (op, result.status_code, result.text)
    if result.status_code < 300:  # nothing of globex's, however it is asked for
        assert not [mark for mark in w.globex_marks if mark in result.text], (op, result.text)
    if result.status_code >= 400:
        assert result.headers["content-type"] == "application/problem+json", result.text
        assert result.json["status"] == result.status_code
    return result


def snapshot(database, tables: list[str]) -> dict:
    """A checksum of every Weave table: equal before and after means nothing was written."""
    rows = database.read(lambda tx: tx.all("CHECKSUM TABLE " + ", ".join(f"`{t}`" for t in tables)))
    return {row["Table"]: row["Checksum"] for row in rows}


@pytest.fixture(scope="module", autouse=True)
def figures():
    yield
    print(f"\nsecurity matrix: {sum(SENT.values())} requests: {dict(sorted(SENT.items()))}")


# ---- no token in any log line ---------------------------------------------------------------------------


def secret_forms(token: str) -> list[str]:
    """Every form in which a token or its stored hash could reach a log line."""
    digest = hashlib.sha256(token.encode()).digest()
    as_repr = repr(digest)[2:-1]
    return [
        token,
        token.removeprefix(auth.TOKEN_PREFIX),
        digest.hex(),
        digest.hex().upper(),
        as_repr,
        logs.escape(as_repr),
        base64.b64encode(digest).decode(),
        base64.urlsafe_b64encode(digest).decode().rstrip("="),
    ]


@pytest.fixture(autouse=True)
def no_token_in_the_log(monkeypatch):
    """Capture every log record of the test as Weave writes it; afterwards, no token may be in it."""
    minted: list[str] = []
    new_token = auth.new_token

    def minting() -> str:
        minted.append(new_token())
        return minted[-1]

    monkeypatch.setattr(auth, "new_token", minting)
    with captured_log(logging.DEBUG) as buffer:
        yield buffer
    logged = buffer.getvalue()
    SENT["log lines checked"] += len(logged.splitlines())
    leaked = [form for token in minted for form in secret_forms(token) if form in logged]
    assert not leaked, logged


@pytest.fixture
def world(client, database) -> World:
    return World(client, database)


# ---- the matrix covers everything the app serves ------------------------------------------------------


def properties(schema: dict):
    """(name, schema) of every property declared anywhere in a request schema (`if`/`then`
    branches included), a local `$ref` resolved; `true` (declared elsewhere) is left out."""
    defs = schema.get("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and "$ref" in sub:
                    sub = defs[sub["$ref"].rsplit("/", 1)[1]]
                if isinstance(sub, dict):
                    yield name, sub
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    yield from walk(schema)


def free_and_string_fields(schema: dict) -> tuple[set[str], set[str]]:
    """(names of properties taking any JSON, names of properties taking a string) in a request schema.

    A property whose schema is only a description takes any JSON value: its strings and member
    names are the client's; an enum of strings counts as a string field (a wrong one is refused)."""
    free: set[str] = set()
    strings: set[str] = set()
    for name, sub in properties(schema):
        kinds = sub.get("type", [])
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if "string" in kinds or "enum" in sub:
            strings.add(name)
        elif not kinds or "object" in kinds and "properties" not in sub:
            free.add(name)
    return free, strings


def member_names(value) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*map(member_names, value.values()))
    if isinstance(value, list):
        return set().union(*map(member_names, value))
    return set()


def test_every_served_operation_has_a_call_and_the_openapi_document_lists_exactly_them(client):
    missing = sorted(set(OPERATIONS) - set(CALLS))
    assert not missing, f"add to CALLS how to make a real, successful request of {missing}"
    assert set(CALLS) == set(OPERATIONS)
    document = client.simulate_get("/v1/openapi.json").json
    documented = {(method.upper(), path) for path, operations in document["paths"].items() for method in operations}
    assert documented == {(method, re.sub(r"{(\w+):[^}]*}", r"{\1}", template)) for method, template in OPERATIONS}


def test_every_string_field_query_parameter_and_header_of_an_operation_is_in_its_calls(world):
    for op, meta in OPERATIONS.items():
        calls = [make(world) for make in CALLS[op]]
        if meta.request:
            free, strings = free_and_string_fields(schemas.schema(meta.request))
            assert free | strings <= set().union(*(member_names(call.body) for call in calls)), op
            for call in calls:  # every free JSON value has a member name and a string to be hostile with
                for name in free & member_names(call.body):
                    assert any(isinstance(v, str) for v in leaves_of(call.body, name)), (op, name)
        else:
            assert all(call.body is None for call in calls), op
        assert {name for name, _ in meta.query} == set().union(*(call.query for call in calls)), op
        assert {name for name, *_ in meta.headers} == set().union(*(call.headers for call in calls)), op


def leaves_of(value, name: str) -> list:
    """The scalar values inside every member `name` of `value`, at any depth."""
    found = []

    def walk(node, inside):
        if isinstance(node, dict):
            for key, member in node.items():
                walk(member, inside or key == name)
        elif isinstance(node, list):
            for item in node:
                walk(item, inside)
        elif inside:
            found.append(node)

    walk(value, False)
    return found


# ---- another namespace's ids answer like ids that do not exist ----------------------------------------

# An id that exists nowhere, per field. A lease token goes with its task (the foreign call holds
# globex's real one), a definition name also in a start body.
NOWHERE = {
    "namespace": "nowhere",
    "name": "nodef",
    "workflow_id": "no-such-workflow",
    "signal_id": "999999999",
    "task_id": "999999999",
    "queue": "noqueue",
    "source": "nosource",
    "subscription": "nosubscription",
    "lease_token": "0" * 32,
}


def substitutions(op, call: Call, w: World):
    """(label, field, foreign call, missing call) for every id the call names."""
    method, template = op

    def variant(field_name, value):
        params = {**call.params}
        body = json.loads(json.dumps(call.body)) if call.body is not None else None
        query = {**call.query}
        if field_name in params or field_name == "namespace":
            params[field_name] = value
        if field_name == "task_id":
            body["lease_token"] = w.foreign["lease_token"] if value == w.foreign["task_id"] else NOWHERE["lease_token"]
        if field_name == "name" and isinstance(body, dict) and "definition" in body:
            body["definition"] = value
        if field_name == "name" and "definition" in query:
            query["definition"] = value
        return replace(call, params=params, body=body, query=query)

    fields = ["namespace", *call.params]
    if (isinstance(call.body, dict) and "definition" in call.body) or "definition" in call.query:
        fields.append("name")
    for name in dict.fromkeys(fields):
        if name == "version":
            continue  # a number, meaningful only with its name
        yield name, variant(name, w.foreign[name]), variant(name, NOWHERE[name])
    if "signal_id" in call.params:  # a signal of another workflow of the same namespace
        _, other = w.signalled()
        yield "signal of another workflow", variant("signal_id", other), variant("signal_id", NOWHERE["signal_id"])


def masked(result, value: str) -> tuple:
    """The answer with `value` (an id) replaced in its strings: never inside a number such as the
    status 404 when the id is 40."""

    def mask(node):
        if isinstance(node, str):
            return node.replace(value, "<id>")
        if isinstance(node, dict):
            return {key: mask(item) for key, item in node.items()}
        if isinstance(node, list):
            return [mask(item) for item in node]
        return node

    return result.status_code, mask(json.loads(result.text)) if result.text else None


@by_operation
def test_another_namespaces_ids_answer_exactly_like_ids_that_do_not_exist(world, weave_tables, op):
    call = CALLS[op][0](world)
    variants = list(substitutions(op, call, world))
    before = snapshot(world.database, weave_tables)
    for label, foreign, missing in variants:
        foreign_id = foreign.params.get(label) or world.foreign.get(label) or foreign.params["signal_id"]
        missing_id = missing.params.get(label) or NOWHERE.get(label) or missing.params["signal_id"]
        got_foreign = send(world, op, foreign, None, "foreign ids")
        got_missing = send(world, op, missing, None, "foreign ids")
        assert masked(got_foreign, str(foreign_id)) == masked(got_missing, str(missing_id)), (label, got_foreign.text)
        assert got_foreign.status_code in (200, 403, 404), (label, got_foreign.text)
    assert snapshot(world.database, weave_tables) == before


# ---- scopes -------------------------------------------------------------------------------------------------


@by_operation
def test_every_missing_scope_is_403_and_changes_nothing_and_each_declared_scope_alone_succeeds(world, weave_tables, op):
    declared = set(OPERATIONS[op].scopes)
    call = CALLS[op][0](world)
    lacking = [{scope} for scope in sorted(auth.SCOPES - declared)] + [auth.SCOPES - declared]
    credentials = [(held, world.acme.headers(*held, queues=QUEUES)) for held in lacking]
    before = snapshot(world.database, weave_tables)
    for held, headers in credentials:
        refused = send(world, op, call, headers, "scopes")
        assert (refused.status_code, refused.json["code"]) == (403, "FORBIDDEN"), held
    assert snapshot(world.database, weave_tables) == before
    for scope in sorted(declared):
        call = CALLS[op][0](world)
        granted = send(world, op, call, world.acme.headers(scope, queues=QUEUES), "scopes")
        assert granted.status_code == call.ok, (scope, granted.text)


# ---- tokens -------------------------------------------------------------------------------------------------


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@by_operation
@pytest.mark.parametrize("ending", ["revoked", "expired"])
def test_a_credential_that_just_worked_is_401_from_the_very_next_request_once_revoked_or_expired(
    world, database, clock, weave_tables, op, ending
):
    token = world.acme.token(*auth.SCOPES, queues=QUEUES, expires_in=3600)
    call = CALLS[op][0](world)
    assert send(world, op, call, bearer(token), "revoked/expired").status_code == call.ok
    call = CALLS[op][0](world)  # one that would succeed too
    if ending == "revoked":
        credential = tenancy.authenticate(database, auth.token_hash(token))
        tenancy.revoke_credential(database, "acme", credential.credential_id)
    else:
        clock.advance(3600)  # the very microsecond of expiry (tests/integration/test_auth.py proves the one before)
    before = snapshot(database, weave_tables)
    refused = send(world, op, call, bearer(token), "revoked/expired")
    assert (refused.status_code, refused.json["code"]) == (401, "UNAUTHENTICATED")
    assert refused.headers["www-authenticate"] == 'Bearer realm="weave"'
    assert snapshot(database, weave_tables) == before


def unusable_authorizations(token: str) -> list[str | None]:
    """Authorization headers that must not authenticate, made around a real, current token."""
    stored = hashlib.sha256(token.encode()).hexdigest()
    return [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic " + base64.b64encode(f"acme:{token}".encode()).decode(),
        f"Token {token}",
        f"Bearer{token}",
        auth.new_token(),  # no scheme
        f"Bearer {auth.new_token()}",  # well formed, never issued
        f"Bearer {token.removeprefix(auth.TOKEN_PREFIX)}",
        f"Bearer {stored}",  # the hash as stored is no token
        f"Bearer {auth.TOKEN_PREFIX}{stored}",
        f"Bearer {token[:-1]}",
        f"Bearer {token}x",
        f"Bearer {token.swapcase()}",
        f"Bearer {token} {token}",
        f"Bearer {token}\x00",
        f"Bearer {token}é",
        f"Bearer {token}'--",
        f"Bearer {auth.TOKEN_PREFIX}' OR '1'='1",
        f"Bearer {auth.TOKEN_PREFIX}{'A' * 300}",
    ]


@by_operation
def test_unknown_and_malformed_tokens_are_401_and_change_nothing(world, weave_tables, op):
    token = world.acme.token(*auth.SCOPES, queues=QUEUES)
    call = CALLS[op][0](world)
    before = snapshot(world.database, weave_tables)
    for authorization in unusable_authorizations(token):
        headers = {} if authorization is None else {"Authorization": authorization}
        refused = send(world, op, call, headers, "unknown/malformed tokens")
        assert (refused.status_code, refused.json["code"]) == (401, "UNAUTHENTICATED"), authorization
    assert snapshot(world.database, weave_tables) == before
    assert send(world, op, call, bearer(token), "unknown/malformed tokens").status_code == call.ok


# ---- a disabled application ----------------------------------------------------------------------------------


@by_operation
def test_a_disabled_applications_credential_may_only_read_from_the_next_request_until_enabled(
    world, database, weave_tables, op
):
    method, _ = op
    calls = [CALLS[op][0](world) for _ in range(3)]  # made while the application is active
    before_disabling = world.acme.headers(*auth.SCOPES, queues=QUEUES)
    warm = CALLS[("GET", f"{N}/workflows")][0](world)
    assert send(world, ("GET", f"{N}/workflows"), warm, before_disabling, "disabled application").status_code == 200
    tenancy.set_application_status(database, "acme", "app", "DISABLED")
    during = world.acme.headers(*auth.SCOPES, queues=QUEUES)
    for call, headers in zip(calls, (before_disabling, during)):
        before = snapshot(database, weave_tables)
        result = send(world, op, call, headers, "disabled application")
        if method == "GET":
            assert result.status_code == call.ok, result.text
        else:
            assert (result.status_code, result.json["code"]) == (403, "FORBIDDEN")
            assert "may only read" in result.json["detail"]
            assert snapshot(database, weave_tables) == before
    tenancy.set_application_status(database, "acme", "app", "ACTIVE")
    assert send(world, op, calls[2], before_disabling, "disabled application").status_code == calls[2].ok


# ---- hostile text in every string field, query parameter and header -----------------------------------------

HOSTILE = [
    "'; DROP TABLE instances; -- ",
    '" OR ""="',
    "\\'\\\"\\\\\\0\\n\\Z\\%\\_",  # MySQL's string escapes, spelled out
    "100% _wild_ %%",  # LIKE wildcards
    "`; /* */ #",
    "nul\u0000byte",
    "é日本🙂\u202e\u2028",  # multibyte, 4-byte, bidi override, line separator
    "pad ",  # PAD SPACE collations ignore trailing spaces
]
# Bytes no UTF-8 decoder may accept (a stray byte, an overlong '/', an encoded surrogate, a cut
# sequence), and a lone surrogate escape, which is valid JSON syntax but not text.
INVALID_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\\ud800"]
NOT_UTF8 = INVALID_UTF8[:4]  # in a URL (percent-encoded) or a header, where `\ud800` is plain text
MARK = "\ue000mark\ue000"


def escape_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def string_targets(value, free: set[str], pointer: str = "", in_free: bool = False):
    """(pointer, is_member_name) of every string of a body, and every member name inside free JSON."""
    if isinstance(value, str):
        yield pointer, False
    elif isinstance(value, dict):
        for name, member in value.items():
            here = f"{pointer}/{escape_token(name)}"
            if in_free:
                yield here, True
            yield from string_targets(member, free, here, in_free or name in free)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from string_targets(item, free, f"{pointer}/{i}", in_free)


def with_string(body, pointer: str, is_name: bool, text: str):
    """A copy of `body` with the string (or member name) at `pointer` replaced by `text`."""
    body = json.loads(json.dumps(body))
    *path, last = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
    parent = body
    for part in path:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    if is_name:
        renamed = {(text if name == last else name): member for name, member in parent.items()}
        parent.clear()
        parent.update(renamed)
    else:
        parent[int(last) if isinstance(parent, list) else last] = text
    return body


def raw_with(body, pointer: str, is_name: bool, raw: bytes) -> bytes:
    """The body's JSON bytes with `raw` in place of the string (or member name) at `pointer`."""
    text = json.dumps(with_string(body, pointer, is_name, MARK), ensure_ascii=False).encode()
    return text.replace(MARK.encode(), raw)


def strings_in(value) -> set[str]:
    """Every string of a JSON value, member names included."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value).union(*map(strings_in, value.values()))
    if isinstance(value, list):
        return set().union(*map(strings_in, value))
    return set()


def read_back(w: World, op, call: Call, result) -> set[str]:
    """Every string that the API (or, where the API shows none, the task row) reads back after
    `call` succeeded."""
    method, template = op
    views = []

    def get(path: str, query: str = ""):
        answer = w.client.simulate_get(f"/v1/namespaces/acme{path}", headers=w.everything, query_string=query)
        assert answer.status_code == 200, answer.text
        views.append(answer.json)

    def task_row(task_id: str):
        row = w.database.read(lambda tx: tx.one("SELECT worker_id, result, error FROM tasks WHERE id = %s", (task_id,)))
        views.extend([row["worker_id"], *(json.loads(row[c]) for c in ("result", "error") if row[c] is not None)])

    workflow_id = call.workflow_id
    if template.endswith("/definitions"):
        get(f"/definitions/{quote(result.json['name'], safe='')}/versions/{result.json['version']}")
    elif template.endswith("/workflows") and method == "POST":
        workflow_id = result.json["workflow_id"]
    elif template.endswith("/signal-batches"):
        item, (answer,) = call.body["signals"][0], result.json["results"]
        if "workflow_id" in item:
            get(f"/workflows/{quote(item['workflow_id'], safe='')}/signals/{answer['body']['signal_id']}")
        else:
            get(f"/signals/{answer['body']['signal_id']}")
    elif template.endswith("/signals") and method == "POST" and "workflow_id" not in call.params:
        get(f"/signals/{result.json['signal_id']}")  # a parked fact: its namespace-level read (B6)
    elif template.endswith("/signals") and method == "POST":
        get(f"/workflows/{quote(call.params['workflow_id'], safe='')}/signals/{result.json['signal_id']}")
    elif template.endswith("/claim"):
        task_row(result.json["task_id"])
    elif template.endswith("/complete"):
        task_row(call.params["task_id"])
        w.scan()
    if workflow_id is not None:
        path = f"/workflows/{quote(workflow_id, safe='')}"
        get(path)
        get(f"{path}/events", "limit=1000")
    return strings_in(views)


def targets(op, call: Call) -> list[tuple[str, str, bool]]:
    """(where, pointer, is_member_name) of every string the call carries: body, query, headers, path."""
    meta = OPERATIONS[op]
    found = []
    if meta.request:
        free, _ = free_and_string_fields(schemas.schema(meta.request))
        found += [("body", pointer, is_name) for pointer, is_name in string_targets(call.body, free)]
    found += [("query", name, False) for name in call.query]
    found += [("header", name, False) for name in call.headers]
    found += [("path", name, False) for name in call.params if name != "version"]
    return found


def max_lengths(schema: dict) -> dict[str, set[int]]:
    """Property name -> the maxLength its string schemas declare, anywhere in a request schema."""
    found: dict[str, set[int]] = collections.defaultdict(set)
    for name, sub in properties(schema):
        if "maxLength" in sub:
            found[name].add(sub["maxLength"])
    return found


def longest(op, where: str, pointer: str, is_name: bool) -> list[str]:
    """Strings as long as the field's maxLength allows: 4-byte characters (a column sized in
    bytes, or in characters of a 3-byte charset, would refuse or cut them) and quotes."""
    meta = OPERATIONS[op]
    if where != "body" or is_name or not meta.request:
        return []
    name = pointer.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
    return [text * size for size in max_lengths(schemas.schema(meta.request)).get(name, ()) for text in ("🙂", "'")]


def hostile(call: Call, where: str, pointer: str, is_name: bool, text: str | bytes) -> Call:
    """The call with `text` in the string at (where, pointer); bytes go on the wire as they are."""
    if where == "body":
        return replace(call, body=with_string(call.body, pointer, is_name, text))
    if where == "query":
        return replace(call, query={**call.query, pointer: text})
    if where == "header":  # as a WSGI server hands header bytes over: latin-1
        wire = (text if isinstance(text, bytes) else text.encode()).decode("latin-1")
        return replace(call, headers={**call.headers, pointer: wire})
    return replace(call, params={**call.params, pointer: text})


@by_operation
def test_hostile_text_in_every_string_is_stored_verbatim_or_refused_with_4xx_never_5xx(world, weave_tables, op):
    verdicts: collections.Counter = collections.Counter()
    for make in CALLS[op]:
        call = make(world)
        before = snapshot(world.database, weave_tables)
        for where, pointer, is_name in targets(op, call):
            for text in HOSTILE + longest(op, where, pointer, is_name):
                result = send(world, op, hostile(call, where, pointer, is_name, text), None, "hostile text")
                if verdict(op, result) < 300:
                    verdicts["stored"] += 1
                    if where != "query" and OPERATIONS[op].scopes and op[0] == "POST":
                        # HTTP takes the spaces around a header value for framing, not for the value.
                        stored = text.strip(" ") if where == "header" else text
                        assert stored in read_back(world, op, call, result), (where, pointer, text)
                    call = make(world)
                    before = snapshot(world.database, weave_tables)
                else:
                    verdicts["refused"] += 1
                    assert snapshot(world.database, weave_tables) == before, (where, pointer, text, result.text)
            for raw in INVALID_UTF8 if where == "body" else NOT_UTF8:
                if where == "body":
                    result = send(world, op, call, None, "invalid UTF-8", raw_with(call.body, pointer, is_name, raw))
                    assert (result.status_code, result.json["code"]) == (400, "INVALID_JSON"), (pointer, raw)
                else:
                    result = send(world, op, hostile(call, where, pointer, is_name, raw), None, "invalid UTF-8")
                    assert 400 <= result.status_code < 500, (where, pointer, raw, result.text)
                verdicts["refused"] += 1
            assert snapshot(world.database, weave_tables) == before
    print(op_id(op), dict(verdicts))


# ---- the log of a real `weave serve` -----------------------------------------------------------------------


@pytest.mark.slow
def test_no_log_line_of_a_real_server_holds_a_token(world, database, migrated_url, tmp_path):
    """Over real HTTP to a `weave serve` process: current, revoked, expired, unknown tokens and
    the stored hash as a token, each in the Authorization header, the query, the path, an
    Idempotency-Key and a body, and in requests waitress refuses before the application runs (a
    bare CR or LF, a folded first line, NUL, headers over the limit, a bad method, a bad
    Content-Length, a body over the cap). Then the process's log holds none of them."""
    current = world.acme.token(*auth.SCOPES, queues=QUEUES)
    revoked = world.acme.token(*auth.SCOPES, queues=QUEUES)
    tenancy.revoke_credential(database, "acme", tenancy.authenticate(database, auth.token_hash(revoked)).credential_id)
    expired = world.acme.token(*auth.SCOPES, queues=QUEUES, expires_in=1)
    database.run(lambda tx: tx.execute("UPDATE credentials SET expires_at = '2000-01-01' WHERE expires_at IS NOT NULL"))
    tokens = [current, revoked, expired, auth.new_token(), hashlib.sha256(current.encode()).hexdigest()]
    workflow_id = world.started()
    ns = "/v1/namespaces/acme"
    log_path = tmp_path / "serve.log"
    answers = collections.Counter()
    with log_path.open("w") as log_file, weave_serve(migrated_url, "--threads", "2", stderr=log_file) as (_, port):
        for token in tokens:
            auth_line = f"Authorization: Bearer {token}"
            body = json.dumps({**payment(), "reason": token}).encode()
            requests = [
                request("GET", f"{ns}/workflows/{workflow_id}?access_token={token}", auth_line),
                request("GET", f"{ns}/workflows/{token}", auth_line),
                request(
                    "POST",
                    f"{ns}/workflows/{workflow_id}/signals",
                    auth_line,
                    f"Idempotency-Key: {token}",
                    "Content-Type: application/json",
                    f"Content-Length: {len(body)}",
                    body=body,
                ),
                request(
                    "POST",
                    f"{ns}/definitions",
                    auth_line,
                    "Content-Type: application/json",
                    "Content-Length: 9",
                    body=b'{"name": ',
                ),
                request("POST", f"{ns}/definitions", auth_line, f"Content-Length: {10 * 2**20}"),
                request("GET", f"{ns}/workflows", f"{auth_line}\n"),
                request("GET", f"{ns}/workflows", f"{auth_line}\rx"),
                request("GET", f"{ns}/workflows", f"{auth_line}\x00"),
                request("GET", f"{ns}/workflows", auth_line, f"Content-Length: {token}"),
                request("GET", f"{ns}/workflows", auth_line, "X-Pad: " + "a" * 70_000),
                f"GET {ns}/workflows HTTP/1.1\r\n {auth_line}\r\nHost: weave\r\n\r\n".encode(),
                f"G{token} {ns}/workflows HTTP/1.1\r\nHost: weave\r\n\r\n".encode(),
            ]
            for raw in requests:
                answer = exchange(port, raw)
                answers[answer.status] += 1
                assert answer.status < 500, answer
                SENT["real server"] += 1
        # The serving process keeps no credential state: it refuses the token that just got in.
        read = request("GET", f"{ns}/workflows/{workflow_id}", f"Authorization: Bearer {current}")
        assert exchange(port, read).status == 200
        tenancy.revoke_credential(
            database, "acme", tenancy.authenticate(database, auth.token_hash(current)).credential_id
        )
        assert exchange(port, read).status == 401
    logged = log_path.read_text()
    refused_by_waitress = logged.count("refused before the application")
    assert "serving on" in logged and refused_by_waitress >= 7 * len(tokens), logged  # the log was written
    SENT["log lines checked"] += len(logged.splitlines())
    leaked = [form for token in tokens for form in secret_forms(token) if form in logged]
    assert not leaked, logged
    assert answers[201] == 1 and answers[401] >= 4 * 3, answers  # only the current token got in


def test_hostile_text_travels_byte_exact_from_a_definition_and_an_input_through_a_wait_to_its_winner(world):
    """The strings the matrix can only refuse one at a time (a signal name must be the contract's, a
    correlation must resolve) made to work together: a contract named with SQL's special
    characters, a correlation pointer through a member name that needs `~0`/`~1`, a correlation key
    with quotes, a backslash, NUL, 4-byte UTF-8 and a trailing space. Keys that differ from it by
    the trailing space or the NUL alone are other keys (VARBINARY, no PAD SPACE); the exact one wins."""
    name, version = 'it\'s.100%_\\"x";--#', "v'1\\%_"
    member = "k'ey \"%_\\ \u0000 é🙂 /~"
    key = "o'; DROP TABLE waits; -- \\ \u0000 é🙂 "
    contract = {"name": name, "payload_version": version, "payload_schema": {"properties": {member: {"const": key}}}}
    document = {
        "name": "hostile",
        "steps": [
            {"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 300},
            {
                "key": "payment",
                "type": "SIGNAL",
                "timeout_seconds": 3600,
                "correlation": "/input/" + escape_token(member),
                "signal": contract,
            },
        ],
    }
    ns = "/v1/namespaces/acme"
    workflow_id = "w'%_\\\";--#?"
    path = f"/workflows/{quote(workflow_id, safe='')}"
    world.post("acme", "/definitions", document)
    start = {"definition": "hostile", "version": 1, "input": {member: key}, "deadline_seconds": 3600}
    world.post("acme", "/workflows", {**start, "workflow_id": workflow_id})
    world.scan()
    task = world.post("acme", "/queues/inventory/claim", {"worker_id": "w"})
    assert task["workflow_id"] == workflow_id
    world.post(
        "acme",
        f"/tasks/{task['task_id']}/complete",
        {"lease_token": task["lease_token"], "outcome": "SUCCEEDED", "result": {}},
    )
    world.scan()
    signal = {**payment(correlation_key=key, payload={member: key}), "name": name, "payload_version": version}
    sent = {}
    for label, correlation in (
        ("no trailing space", key.rstrip()),
        ("no NUL", key.replace("\u0000", "")),
        ("exact", key),
    ):
        headers = {**world.everything, "Idempotency-Key": label}
        sent[label] = world.post("acme", f"{path}/signals", {**signal, "correlation_key": correlation}, headers)
    assert [receipt["disposition"] for receipt in sent.values()] == [
        "CORRELATION_MISMATCH",
        "CORRELATION_MISMATCH",
        None,
    ]
    world.scan()
    view = world.client.simulate_get(f"{ns}{path}", headers=world.everything).json
    assert view["workflow_id"] == workflow_id and view["input"] == {member: key}
    wait = view["steps"][1]["wait"]
    assert (wait["status"], wait["correlation_key"], wait["winner_signal_id"]) == (
        "SATISFIED",
        key,
        sent["exact"]["signal_id"],
    )
    stored = world.client.simulate_get(f"{ns}{path}/signals/{sent['exact']['signal_id']}", headers=world.everything)
    assert {k: stored.json[k] for k in ("name", "payload_version", "correlation_key", "payload", "status")} == {
        "name": name,
        "payload_version": version,
        "correlation_key": key,
        "payload": {member: key},
        "status": "CONSUMED",
    }
    read = world.client.simulate_get(f"{ns}/definitions/hostile/versions/1", headers=world.everything).json
    assert read["document"] == document
