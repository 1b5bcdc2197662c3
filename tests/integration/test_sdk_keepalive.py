"""weave.sdk.Client's kept-alive connections (issue 31, item 2) against a real waitress server:
one connection per thread, reused from call to call; a new one after the server closed the old
one (idle, restarted), after `Connection: close`, and after a kept connection lost a request,
which is sent again only where the retry rules allow; one X-Request-Id per call, the same on
every retry; `close()`.

The server counts connections by the client ports it sees: waitress gives each request the port of
the TCP connection that carried it (`REMOTE_PORT`)."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time

import pytest
from helpers import HttpFront, payment, read_message, sdk_client, serving, signal_flow_definition, wait_until

from weave import http as server_http
from weave.app import create_app
from weave.config import Config
from weave.sdk import Client, ConnectionFailed, Unavailable, WorkflowNotFound, request_id
from weave.sdk import client as sdk_client_module
from weave.server import create_server

GENERATED_ID = re.compile(r"[0-9a-f]{32}")
BUSY = b'{"type":"urn:weave:problem:UNAVAILABLE","status":503,"code":"UNAVAILABLE","detail":"busy"}'


class Recorder:
    """WSGI middleware in front of Weave's app: notes the client port, X-Request-Id and path of
    every request, and answers the next `busy` requests 503 itself (with Retry-After: 0, on a
    connection that stays open, as the app's own 503s do)."""

    def __init__(self, app):
        self.app = app
        self.seen: list[tuple[int, str | None, str]] = []
        self.busy = 0
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self._lock:
            self.seen.append((int(environ["REMOTE_PORT"]), environ.get("HTTP_X_REQUEST_ID"), environ["PATH_INFO"]))
            busy, self.busy = self.busy > 0, max(0, self.busy - 1)
        if busy:
            headers = [("Content-Type", "application/problem+json"), ("Retry-After", "0")]
            start_response("503 Service Unavailable", [*headers, ("Content-Length", str(len(BUSY)))])
            return [BUSY]
        return self.app(environ, start_response)

    def ports(self) -> set[int]:
        return {port for port, _, _ in self.seen}

    def ids(self) -> list[str | None]:
        return [sent for _, sent, _ in self.seen]


class Served:
    """Weave on a waitress server of its own, which a test may stop and start again on the same port."""

    def __init__(self, config: Config, database, idle_timeout_seconds: int):
        self.recorder = Recorder(create_app(config, database))
        self.config = Config(config.database_url, threads=8, idle_timeout_seconds=idle_timeout_seconds)
        self.port = 0
        self.server = None
        self._running = contextlib.ExitStack()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: the same port again
        self.port = listener.getsockname()[1]
        self.server = self._running.enter_context(serving(create_server(self.recorder, listener, self.config)))

    def stop(self) -> None:
        self._running.close()

    def open_connections(self) -> int:
        return len(self.server.active_channels)


@pytest.fixture
def serve(config, database):
    """`serve(idle_timeout_seconds=10)`: a started `Served`; stopped at the end."""
    made = []

    def make(idle_timeout_seconds: int = 10) -> Served:
        made.append(Served(config, database, idle_timeout_seconds))
        made[-1].start()
        return made[-1]

    yield make
    for served in made:
        served.stop()


@pytest.fixture
def sdk_of(tenant):
    """`sdk_of(url)`: a Client of a new credential on `url`, closed at the end."""
    made: list[Client] = []

    def make(url: str) -> Client:
        made.append(sdk_client(url, tenant))
        return made[-1]

    yield make
    for client in made:
        client.close()


def started(client: Client, workflow_id: str = "order-1") -> None:
    client.publish_definition(signal_flow_definition())
    client.start_workflow("flow", 1, {"order_id": "o-1"}, 3600, workflow_id=workflow_id)


def no_sleep(client: Client) -> list[float]:
    slept: list[float] = []
    client._sleep = slept.append
    return slept


# ---- reuse --------------------------------------------------------------------------------------


def test_the_calls_of_one_thread_share_one_connection(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)
    receipts = [sdk.send_signal("order-1", **payment()) for _ in range(5)]
    assert sdk.get_workflow("order-1").workflow_id == "order-1"
    assert [s.signal_id for s in sdk.list_signals("order-1")] == [r.signal_id for r in receipts]
    with pytest.raises(WorkflowNotFound):  # an error answer leaves the connection usable too
        sdk.get_workflow("no-such-order")
    assert sdk.get_workflow("order-1").status == "RUNNING"
    assert len(served.recorder.seen) == 11  # publish, start, 5 signals, 2 reads, a list, a 404, a read
    assert len(served.recorder.ports()) == 1
    assert served.open_connections() == 1


def test_P2_claims_answered_204_keep_their_connection(serve, tenant):
    """An empty claim (204, no body), at once or after its long-poll, leaves the connection open:
    waitress alone closed it after every 204, so a worker polling an idle queue paid a connection
    per claim, and a client reusing its connection met a reset (the bench's e2e section)."""
    served = serve()
    worker = sdk_client(served.url, tenant, "tasks:work", actor="worker")
    try:
        assert [worker.claim("inventory", "w1") for _ in range(3)] == [None, None, None]
        assert worker.claim("inventory", "w1", wait_seconds=1) is None
        assert worker.claim("inventory", "w1") is None
    finally:
        worker.close()
    assert [path.rsplit("/", 1)[1] for _, _, path in served.recorder.seen] == ["claim"] * 5
    assert len(served.recorder.ports()) == 1


def test_a_204_still_closes_a_connection_whose_request_asked_for_it(serve, tenant):
    served = serve()
    token = tenant.token("tasks:work", queues=("inventory",))
    body = b'{"worker_id": "w1"}'
    head = (
        f"POST /v1/namespaces/{tenant.namespace}/queues/inventory/claim HTTP/1.1\r\nHost: weave\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as kept:
        for _ in range(2):
            kept.sendall(head.encode() + b"\r\n" + body)
            answer = kept.recv(65536)
            assert answer.startswith(b"HTTP/1.1 204 ") and b"connection:" not in answer.lower()
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as closing:
        closing.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        answer = b"".join(iter(lambda: closing.recv(65536), b""))  # to the end: the server closes it
    assert answer.startswith(b"HTTP/1.1 204 ") and b"\r\nConnection: close\r\n" in answer


def test_each_thread_gets_a_connection_of_its_own_and_every_call_succeeds(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)
    threads, calls = 6, 15
    receipts: dict[int, list] = {i: [] for i in range(threads)}
    failures: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def send(i: int) -> None:
        try:
            barrier.wait(10)
            for n in range(calls):
                with request_id(f"t{i}-{n}"):
                    receipts[i].append(sdk.send_signal("order-1", **payment()))
        except BaseException as exc:  # reported below: an assert in a thread would go unseen
            failures.append(exc)

    running = [threading.Thread(target=send, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(60)
    assert failures == []
    assert all(len(done) == calls and all(r.status == "PENDING" for r in done) for done in receipts.values())
    assert len({r.signal_id for done in receipts.values() for r in done}) == threads * calls
    assert len(list(sdk.list_signals("order-1"))) == threads * calls
    port_of: dict[str, set[int]] = {}
    for port, sent, _ in served.recorder.seen:
        if sent and sent.startswith("t"):
            port_of.setdefault(sent.split("-")[0], set()).add(port)
    assert sorted(port_of) == sorted(f"t{i}" for i in range(threads))
    assert all(len(ports) == 1 for ports in port_of.values())  # one connection per thread...
    main_port = served.recorder.seen[0][0]  # the main thread's (publish)
    assert len(set().union(*port_of.values()) - {main_port}) == threads  # ...of its own


# ---- re-opened ------------------------------------------------------------------------------------


def test_a_connection_the_server_closed_as_idle_is_replaced_before_a_request_is_written(serve, sdk_of):
    served = serve(idle_timeout_seconds=1)
    sdk = sdk_of(served.url)
    slept = no_sleep(sdk)
    started(sdk)
    first_port = served.recorder.seen[-1][0]
    wait_until(lambda: served.open_connections() == 0, timeout=10)  # waitress closed it as idle
    # A call that is never sent twice: it goes out once, on a new connection.
    assert sdk.pause("order-1", "hold").status == "PAUSED"
    assert slept == []
    assert [path.rsplit("/", 1)[1] for _, _, path in served.recorder.seen] == ["definitions", "workflows", "pause"]
    assert served.recorder.seen[-1][0] != first_port


def test_a_connection_idle_longer_than_the_sdk_keeps_one_is_replaced(serve, sdk_of, monkeypatch):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)  # two calls at once: one connection
    assert len(served.recorder.ports()) == 1
    monkeypatch.setattr(sdk_client_module, "KEEP_IDLE_SECONDS", 0.2)
    time.sleep(0.3)
    assert sdk.get_workflow("order-1").status == "RUNNING"
    assert len(served.recorder.ports()) == 2
    wait_until(lambda: served.open_connections() == 1)  # the SDK closed the old one


def test_a_restarted_server_is_reached_on_a_new_connection(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    slept = no_sleep(sdk)
    started(sdk)
    served.stop()
    served.start()  # the same port
    sdk.cancel("order-1", "restarted")  # never sent twice: it went out once, on a new connection
    assert sdk.get_workflow("order-1").status == "CANCELLED"
    assert slept == [] and len(served.recorder.seen) == 4 and len(served.recorder.ports()) == 2


def test_a_call_made_while_the_server_is_down_waits_for_it(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)
    served.stop()
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the server is back during the backoff
        slept.append(seconds)
        served.start()

    sdk._sleep = sleep
    assert sdk.pause("order-1", "hold").status == "PAUSED"  # refused connections sent nothing: tried again
    assert len(slept) == 1 and len(served.recorder.ports()) == 2


class Relay(HttpFront):
    """A keep-alive TCP relay in front of the server: each client connection gets one upstream
    connection, request after request. `plan` says what to do with each request in arrival order
    (then "forward"): "lose" closes the client's connection without forwarding it (a server that
    closes an idle connection just as a request is written never serves it); "close" forwards it
    and adds `Connection: close` to the answer, yet keeps the connection open for more; "fin"
    forwards it, then ends the connection's sending side as a server closing an idle connection
    does, but reads on: a request written after that is noted as "unserved" and dropped."""

    def __init__(self, upstream_port: int, plan: list[str]):
        self.handled: list[tuple[int, str]] = []  # (connection number, what was done)
        self.fin_sent = threading.Event()
        super().__init__(upstream_port, plan)

    def serve_connection(self, conn: socket.socket, number: int) -> None:
        with conn, socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
            finished = False
            while request := read_message(conn):
                behaviour = "unserved" if finished else self.next_behaviour()
                self.handled.append((number, behaviour))
                if behaviour in ("lose", "unserved"):
                    return
                upstream.sendall(request)
                answer = read_message(upstream)
                if behaviour == "close":
                    answer = answer.replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
                conn.sendall(answer)
                if behaviour == "fin":
                    conn.shutdown(socket.SHUT_WR)  # on loopback the FIN is in the client's queue at once
                    finished = True
                    self.fin_sent.set()


@pytest.fixture
def relay(serve):
    made = []

    def make(served: Served, *plan: str) -> Relay:
        made.append(Relay(served.port, list(plan)))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_kept_connection_the_server_has_closed_is_not_written_to(serve, relay, sdk_of):
    served = serve()
    started(sdk_of(served.url))
    closing = relay(served, "fin")
    sdk = sdk_of(closing.url)
    slept = no_sleep(sdk)
    assert sdk.get_workflow("order-1").status == "RUNNING"
    assert closing.fin_sent.wait(10)
    # Written on the closed connection, a control call would be lost, and not sent again.
    assert sdk.pause("order-1", "hold").status == "PAUSED"
    assert closing.handled == [(1, "fin"), (2, "forward")] and slept == []


def test_a_request_lost_on_a_kept_connection_is_sent_again_at_once_where_the_rules_repeat_it(serve, relay, sdk_of):
    served = serve()
    started(sdk_of(served.url))
    lossy = relay(served, "forward", "lose", "forward", "forward", "lose")
    sdk = sdk_of(lossy.url)
    slept = no_sleep(sdk)
    assert sdk.get_workflow("order-1").status == "RUNNING"
    receipt = sdk.send_signal("order-1", **payment())  # lost on the kept connection: sent on a new one
    assert sdk.get_workflow("order-1").status == "RUNNING"  # on that new one
    assert sdk.get_signal("order-1", receipt.signal_id).signal_id == receipt.signal_id  # lost, then on a third
    assert lossy.handled == [(1, "forward"), (1, "lose"), (2, "forward"), (2, "forward"), (2, "lose"), (3, "forward")]
    assert slept == [] and not receipt.replayed  # at once; the server saw it once
    assert len(list(sdk_of(served.url).list_signals("order-1"))) == 1


def test_a_request_lost_on_a_kept_connection_is_not_sent_again_where_the_rules_do_not_repeat_it(serve, relay, sdk_of):
    served = serve()
    direct = sdk_of(served.url)
    started(direct)
    lossy = relay(served, "forward", "lose")
    sdk = sdk_of(lossy.url)
    slept = no_sleep(sdk)
    assert sdk.get_workflow("order-1").status == "RUNNING"
    with pytest.raises(ConnectionFailed) as failed:
        sdk.pause("order-1", "hold")  # the SDK cannot tell a request never served from one served unanswered
    assert lossy.handled == [(1, "forward"), (1, "lose")] and slept == []
    assert failed.value.request_id and GENERATED_ID.fullmatch(failed.value.request_id)
    assert direct.get_workflow("order-1").status == "RUNNING"  # (here it was never served)
    assert sdk.pause("order-1", "hold").status == "PAUSED"  # the next call opens a new connection
    assert lossy.connections == 2


def test_an_answer_with_connection_close_ends_the_connection(serve, relay, sdk_of):
    served = serve()
    started(sdk_of(served.url))
    closing = relay(served, "forward", "close")
    sdk = sdk_of(closing.url)
    for _ in range(4):
        assert sdk.get_workflow("order-1").status == "RUNNING"
    # The relay kept the first connection open after its "close" answer: only the SDK ended it.
    assert closing.handled == [(1, "forward"), (1, "close"), (2, "forward"), (2, "forward")]


# ---- X-Request-Id ---------------------------------------------------------------------------------


def test_one_request_id_per_call_the_same_on_each_of_its_retries(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    slept = no_sleep(sdk)
    started(sdk)
    served.recorder.busy = 2
    receipt = sdk.send_signal("order-1", **payment())
    assert receipt.status == "PENDING" and len(slept) == 2
    busy_id = served.recorder.ids()[-1]
    assert GENERATED_ID.fullmatch(busy_id)
    assert served.recorder.ids()[-3:] == [busy_id] * 3  # the two 503s and the acceptance
    served.recorder.busy = 1
    with pytest.raises(Unavailable) as refused:
        sdk.pause("order-1", "hold")  # a 503 is not repeated for a control call
    assert refused.value.request_id == served.recorder.ids()[-1]
    ids = served.recorder.ids()
    assert all(GENERATED_ID.fullmatch(sent) for sent in ids)
    assert len(set(ids)) == 4  # publish, start, the signal (three times), the pause
    assert len(served.recorder.ports()) == 1  # 503 answers keep the connection


def test_a_callers_own_request_id_is_sent_and_echoed(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)
    with request_id("delivery-42:a.b_c"):
        sdk.get_workflow("order-1")
        with pytest.raises(WorkflowNotFound) as missing:
            sdk.get_workflow("no-such-order")
    assert served.recorder.ids()[-2:] == ["delivery-42:a.b_c"] * 2
    assert missing.value.request_id == "delivery-42:a.b_c"
    sdk.get_workflow("order-1")
    assert GENERATED_ID.fullmatch(served.recorder.ids()[-1])  # outside the block: a new one per call
    for unusable in ("", "has space", "x" * 129, "é"):
        with pytest.raises(ValueError), request_id(unusable):
            pass


def test_the_sdk_keeps_to_the_servers_rule_for_request_ids():
    assert sdk_client_module.REQUEST_ID_RULE.pattern == server_http.RequestId.USABLE.pattern


# ---- close ----------------------------------------------------------------------------------------


def test_close_closes_the_connections_of_every_thread(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    started(sdk)
    parked = threading.Event()
    other = threading.Thread(target=lambda: (sdk.get_workflow("order-1"), parked.wait(10)))
    other.start()
    wait_until(lambda: served.open_connections() == 2)
    sdk.close()  # the other thread is alive and its connection unused
    wait_until(lambda: served.open_connections() == 0)
    parked.set()
    other.join(10)
    assert sdk.get_workflow("order-1").status == "RUNNING"  # a call after close opens a new one
    assert len(served.recorder.ports()) == 3


def test_a_thread_that_ended_leaves_no_connection_open(serve, sdk_of):
    served = serve()
    sdk = sdk_of(served.url)
    for _ in range(3):
        thread = threading.Thread(target=lambda: list(sdk.list_definitions()))
        thread.start()
        thread.join(10)
    # Each ended thread's connection was closed when the next thread opened its own.
    wait_until(lambda: served.open_connections() == 1)
    assert len(served.recorder.ports()) == 3


def test_a_client_used_as_a_context_manager_closes_its_connections(serve, tenant):
    served = serve()
    with sdk_client(served.url, tenant) as sdk:
        started(sdk)
        assert served.open_connections() == 1
    wait_until(lambda: served.open_connections() == 0)


def test_a_client_dropped_without_close_leaves_no_connection_open(serve, tenant):
    served = serve()
    sdk = sdk_client(served.url, tenant)
    started(sdk)
    assert served.open_connections() == 1
    del sdk  # nothing refers to it now: freed at once, its socket closed with it
    wait_until(lambda: served.open_connections() == 0, timeout=5)
