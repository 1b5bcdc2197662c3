"""Every error the service answers is problem+json, also those waitress answers itself before the
application runs (issue 10, item 9): spoken over a real socket to a real waitress server."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from helpers import Answer, read_answer, serving

from weave.app import create_app
from weave.config import Config
from weave.server import MAX_HEADER_BYTES, WAITRESS_BODY_LIMIT_FACTOR, create_server, unquoted

CAP = 4096
DOC = {"name": "order", "steps": [{"key": "reserve", "type": "TASK", "queue": "inventory", "timeout_seconds": 30}]}
PROBLEM_FIELDS = {"type", "title", "status", "detail", "code", "errors"}


@pytest.fixture
def port(config, database):
    """A real waitress server of the Weave app, with a body cap of CAP bytes."""
    app_config = Config(config.database_url, max_body_bytes=CAP, threads=2)
    listener = socket.create_server(("127.0.0.1", 0))
    with serving(create_server(create_app(app_config, database), listener, app_config)):
        yield listener.getsockname()[1]


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def exchange(port: int, request: bytes) -> Answer:
    """Send `request` on a new connection and read the answer. The server may answer and close
    before it has read everything (a refusal from the headers), so a failed send is not an error."""
    with connect(port) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_answer(sock)


def request(method: str, path: str, *headers: str, body: bytes = b"") -> bytes:
    head = "".join(f"{header}\r\n" for header in ("Host: weave", *headers))
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode("latin-1") + body


def assert_problem(answer: Answer, status: int, code: str) -> dict:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/problem+json"
    problem = json.loads(answer.body)
    assert set(problem) == PROBLEM_FIELDS
    assert problem["type"] == f"urn:weave:problem:{code}"
    assert (problem["status"], problem["code"], problem["errors"]) == (status, code, [])
    assert problem["title"] and problem["detail"]
    return problem


def test_a_body_at_the_cap_is_read_and_one_byte_more_is_refused_by_the_application(port, tenant):
    token = tenant.token("definitions:write")
    at_cap = json.dumps(DOC).encode().ljust(CAP, b" ")

    def publish(body: bytes) -> bytes:
        return request(
            "POST",
            "/v1/namespaces/acme/definitions",
            f"Authorization: Bearer {token}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            body=body,
        )

    with connect(port) as sock:
        sock.sendall(publish(at_cap))
        assert read_answer(sock).status == 201
        sock.sendall(publish(at_cap + b" "))
        problem = assert_problem(read_answer(sock), 413, "PAYLOAD_TOO_LARGE")
        assert problem["detail"] == f"the body has {CAP + 1} bytes; the limit is {CAP}"
        # The application answered a body waitress had read whole: the connection goes on.
        sock.sendall(request("GET", "/healthz"))
        assert read_answer(sock).status == 200


@pytest.mark.parametrize("path", ["/healthz", "/v1/openapi.json", "/no/such/route"])
def test_issue_10_9_every_route_refuses_a_declared_body_over_the_cap(port, path):
    """Routes that take no body too: the length is refused before routing or authentication."""
    body = b"x" * (CAP + 1)
    answer = exchange(port, request("GET", path, f"Content-Length: {len(body)}", "Connection: close", body=body))
    assert_problem(answer, 413, "PAYLOAD_TOO_LARGE")


def test_issue_10_9_a_chunked_body_over_the_cap_is_refused_by_the_application(port):
    body = b"x" * (CAP + 1)
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    answer = exchange(
        port, request("POST", "/healthz", "Transfer-Encoding: chunked", "Connection: close", body=chunked)
    )
    assert_problem(answer, 413, "PAYLOAD_TOO_LARGE")


def test_issue_10_9_a_body_over_waitress_limit_is_refused_unread(port):
    """Far over the cap, waitress refuses from the Content-Length alone (no byte of the body is
    sent here) and closes the connection; the answer has the same shape and names the app's cap."""
    declared = WAITRESS_BODY_LIMIT_FACTOR * CAP + 1
    answer = exchange(port, request("POST", "/v1/namespaces/acme/definitions", f"Content-Length: {declared}"))
    problem = assert_problem(answer, 413, "PAYLOAD_TOO_LARGE")
    assert problem["detail"] == f"the body has {declared} bytes; the limit is {CAP}"
    assert answer.headers["connection"] == "close"


def test_issue_10_9_a_chunked_body_over_waitress_limit_is_413(port):
    chunk = b"x" * CAP
    chunks = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * (WAITRESS_BODY_LIMIT_FACTOR + 1)
    answer = exchange(port, request("POST", "/healthz", "Transfer-Encoding: chunked", body=chunks + b"0\r\n\r\n"))
    problem = assert_problem(answer, 413, "PAYLOAD_TOO_LARGE")
    assert problem["detail"] == f"the body is over the limit of {CAP} bytes"


def test_issue_10_9_300_kib_of_headers_is_431(port):
    filler = [f"X-Filler-{i}: {'a' * 1000}" for i in range(300)]  # 300 KiB and more
    problem = assert_problem(exchange(port, request("GET", "/healthz", *filler)), 431, "HEADERS_TOO_LARGE")
    assert problem["detail"] == f"the request line and headers are over the limit of {MAX_HEADER_BYTES} bytes"


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /healthz HTTP/1.1 trailing\r\nHost: weave\r\n\r\n",
        b"G\x00T /healthz HTTP/1.1\r\nHost: weave\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost weave\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: weave\r\nContent-Length: ten\r\n\r\n",
    ],
    ids=["request-line", "request-line-extra", "method", "header-line", "content-length"],
)
def test_issue_10_9_malformed_http_is_400(port, raw):
    problem = assert_problem(exchange(port, raw), 400, "BAD_REQUEST")
    assert problem["detail"].startswith("malformed HTTP request: ")


def test_issue_10_9_a_bad_chunked_body_is_400(port):
    bad = b"zz\r\nabc\r\n0\r\n\r\n"  # "zz" is no chunk size
    answer = exchange(port, request("POST", "/healthz", "Transfer-Encoding: chunked", body=bad))
    problem = assert_problem(answer, 400, "BAD_REQUEST")
    assert problem["detail"] == "malformed HTTP request: Invalid chunk size"


def test_issue_10_9_an_unsupported_transfer_encoding_is_501(port):
    answer = exchange(port, request("POST", "/healthz", "Transfer-Encoding: gzip"))
    assert_problem(answer, 501, "NOT_IMPLEMENTED")


def test_issue_10_9_an_exception_out_of_the_wsgi_app_is_a_500_problem():
    """Falcon's catch-all handler answers the app's own exceptions; this is waitress's last resort."""

    def broken_app(environ, start_response):
        raise RuntimeError("a bug in the WSGI plumbing")

    config = Config("unused", threads=1)
    listener = socket.create_server(("127.0.0.1", 0))
    with serving(create_server(broken_app, listener, config)):
        answer = exchange(listener.getsockname()[1], request("GET", "/healthz"))
    problem = assert_problem(answer, 500, "INTERNAL")
    assert "a bug" not in problem["detail"]


@pytest.mark.parametrize(
    "head",
    [
        "Host: weave\r\nAuthorization: Bearer {token}\n",  # a bare LF: a token read from a file with its newline
        "Host: weave\r\nAuthorization: Bearer {token}\rx",
        " Authorization: Bearer {token}\r\nHost: weave",  # folded onto nothing
    ],
    ids=["bare-lf", "bare-cr", "folded"],
)
def test_a_refused_header_line_is_neither_logged_nor_echoed_with_its_value(port, tenant, caplog, head):
    """Found by the security matrix (issue 14): waitress quotes the header line it refuses, and that
    line went to the log and into the answer, token and all."""
    caplog.set_level(logging.DEBUG)
    token = tenant.token("workflows:read")
    raw = f"GET /v1/namespaces/acme/workflows/w1 HTTP/1.1\r\n{head.format(token=token)}\r\n\r\n"
    problem = assert_problem(exchange(port, raw.encode()), 400, "BAD_REQUEST")
    assert token not in problem["detail"] and token not in caplog.text
    assert '"Authorization: …"' in problem["detail"]
    assert "refused before the application: 400 BAD_REQUEST" in caplog.text


def test_unquoted_keeps_waitress_messages_but_not_what_they_quote():
    assert unquoted('Malformed HTTP method "GETwv_secret"') == 'Malformed HTTP method "…"'
    assert unquoted('Malformed header line " X-Key: wv_secret"') == 'Malformed header line "X-Key: …"'
    assert unquoted('Bare CR or LF found in header line "bad name: v\r"') == 'Bare CR or LF found in header line "…"'
    assert unquoted("Content-Length is invalid") == "Content-Length is invalid"
