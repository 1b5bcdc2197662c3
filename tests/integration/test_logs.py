"""Every log record is one line: values that clients chose cannot forge another (issue 10, item 8)."""

import json
import logging
import os
import subprocess
import sys

import falcon
import falcon.testing
import pytest
from helpers import captured_log

from weave import errors, logs
from weave.http import Authenticate, Observe, RequestId, operation

FORGED = "2026-11-30 07:00:00,000 ERROR weave.http forged"


@pytest.fixture
def weave_log():
    """What the `weave` commands log through, on the root logger, writing into a buffer."""
    with captured_log(logging.INFO) as buffer:
        yield buffer


class Undeclared:
    """A responder someone forgot to declare: `Authenticate` logs the refused request's path."""

    @operation("declared", public=True)
    def on_get(self, req, resp, namespace):
        pass

    def on_post(self, req, resp, namespace):
        raise AssertionError("never runs")


def test_a_path_with_control_characters_is_logged_as_one_escaped_line(database, weave_log):
    app = falcon.App(middleware=[Authenticate(database)])
    errors.install(app)
    app.add_route("/v1/namespaces/{namespace}/half", Undeclared())
    path = "/v1/namespaces/a%0D%0A" + FORGED.replace(" ", "%20") + "%00%1B[31m%E2%80%AE%E2%80%A8%5C/half"
    refused = falcon.testing.TestClient(app).simulate_post(path)
    assert (refused.status_code, refused.json["code"]) == (404, "NOT_FOUND")
    lines = weave_log.getvalue().splitlines()  # splitlines also splits at U+2028 and other separators
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "ERROR weave.http refused POST /v1/namespaces/a\\r\\n" + FORGED + "\\x00\\x1b[31m\\u202e\\u2028\\\\/half: "
        "Undeclared.on_post has no @operation"
    )


@pytest.mark.parametrize(
    "raw, logged",
    [
        ("a\r\nb", "a\\r\\nb"),
        ("\t\x00\x07\x1b\x7f", "\\t\\x00\\x07\\x1b\\x7f"),  # C0 and DEL
        ("\x85\x9b", "\\x85\\x9b"),  # C1: NEL and CSI
        ("\u2028\u2029", "\\u2028\\u2029"),  # line and paragraph separators
        ("\u202e\u2066\u200b\ufeff", "\\u202e\\u2066\\u200b\\ufeff"),  # bidi overrides, zero-width
        ("\ud800\ue000\U000e0041", "\\ud800\\ue000\\U000e0041"),  # surrogate, private use, tag
        ("\\n", "\\\\n"),  # a backslash in the value: an escape in the log is always ours
        ("é 日本 ok ~", "é 日本 ok ~"),  # letters of any script and printable ASCII stay as they are
    ],
)
def test_escape(raw, logged):
    assert logs.escape(raw) == logged


def test_the_weave_commands_log_every_record_on_one_line_waitress_and_tracebacks_included():
    """In a fresh process, as `weave serve` runs: `main` installs the handler before anything else."""
    script = (
        "import logging\n"
        "from weave.cli import main\n"
        "try:\n"
        "    main(['migrate'])\n"  # installs the handler, then stops: no database URL
        "except SystemExit:\n"
        "    pass\n"
        # waitress formats the request path into its message itself
        f"logging.getLogger('waitress').info('Client disconnected while serving %s' % '/x\\r\\n{FORGED}')\n"
        "try:\n"
        f"    raise ValueError('bad\\n{FORGED}')\n"
        "except ValueError:\n"
        "    logging.getLogger('weave.errors').exception('unexpected error in %s', 'GET /y\\r\\nz')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "WEAVE_DATABASE_URL"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    usage, lines = done.stderr.splitlines()[:2], done.stderr.splitlines()[2:]
    assert usage[1].startswith("weave: error: set WEAVE_DATABASE_URL"), done.stderr  # argparse's, not a log record
    assert len(lines) == 2, done.stderr
    assert lines[0].endswith(f"INFO waitress Client disconnected while serving /x\\r\\n{FORGED}")
    assert " ERROR weave.errors unexpected error in GET /y\\r\\nz\\nTraceback (most recent call last):\\n" in lines[1]
    assert lines[1].endswith(f"ValueError: bad\\n{FORGED}")


# ---- formats and the request id (issue 15) ------------------------------------------------------------


def record(message="request", fields=None, request_id=None, exc_info=None) -> logging.LogRecord:
    made = logging.LogRecord("weave.access", logging.INFO, __file__, 1, message, (), exc_info)
    if fields is not None:
        made.fields = fields
    made.request_id = request_id
    return made


def test_a_json_line_holds_the_record_its_fields_and_request_id():
    fields = {"method": "POST", "status": 201, "actor": "ops\nINFO forged", "namespace": None}
    line = logs.JsonFormatter().format(record(fields=fields, request_id="trace-1"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["time"].endswith("Z") and entry["pid"] == os.getpid()
    assert {k: entry[k] for k in ("level", "logger", "message", "request_id", "method", "status", "actor")} == {
        "level": "INFO",
        "logger": "weave.access",
        "message": "request",
        "request_id": "trace-1",
        "method": "POST",
        "status": 201,
        "actor": "ops\nINFO forged",
    }


def test_a_json_line_holds_a_traceback_as_one_member():
    try:
        raise ValueError(f"bad\n{FORGED}")
    except ValueError:
        line = logs.JsonFormatter().format(record("failed", exc_info=sys.exc_info()))
    assert len(line.splitlines()) == 1
    assert json.loads(line)["exception"].endswith(f"ValueError: bad\n{FORGED}")


def test_a_text_line_appends_fields_as_key_value_and_escapes_them():
    fields = {"method": "GET", "route": "/v1/namespaces/{namespace}", "status": 200, "actor": "ops team", "none": None}
    line = logs.OneLineFormatter(logs.FORMAT).format(record(fields=fields, request_id="r-1"))
    assert line.endswith(
        ' INFO weave.access request method=GET route=/v1/namespaces/{namespace} status=200 actor="ops team" request_id=r-1'
    )
    forged = logs.OneLineFormatter(logs.FORMAT).format(record(fields={"actor": f"x\n{FORGED}"}))
    assert len(forged.splitlines()) == 1 and forged.endswith(f'actor="x\\\\n{FORGED}"')


@pytest.fixture
def json_log():
    with captured_log(logging.INFO, "json") as buffer:
        yield buffer


def test_every_line_of_a_request_carries_its_request_id_and_none_outlives_it(database, json_log):
    """The refusal logged by `Authenticate` and the request's own line share the client's id."""
    app = falcon.App(middleware=[RequestId(), Observe(), Authenticate(database)])
    errors.install(app)
    app.add_route("/v1/namespaces/{namespace}/half", Undeclared())
    client = falcon.testing.TestClient(app)
    assert client.simulate_post("/v1/namespaces/acme/half", headers={"X-Request-Id": "trace-9"}).status_code == 404
    logging.getLogger("weave.test").info("after the request")
    entries = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert [(e["logger"], e.get("request_id")) for e in entries] == [
        ("weave.http", "trace-9"),
        ("weave.access", "trace-9"),
        ("weave.test", None),
    ]
    assert {k: entries[1][k] for k in ("method", "route", "status", "namespace", "actor")} == {
        "method": "POST",
        "route": "/v1/namespaces/{namespace}/half",
        "status": 404,
        "namespace": "acme",
        "actor": None,
    }


def test_a_namespace_that_breaks_its_rule_is_not_logged(database, json_log):
    app = falcon.App(middleware=[RequestId(), Observe(), Authenticate(database)])
    errors.install(app)
    app.add_route("/v1/namespaces/{namespace}/half", Undeclared())
    falcon.testing.TestClient(app).simulate_get("/v1/namespaces/" + "x" * 65 + "/half")
    (entry,) = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert (entry["status"], entry["namespace"]) == (404, None)


# ---- long records (issue 26, item 4) -----------------------------------------------------------------


def _deep_failure():
    """The exc_info of a RecursionError through three functions in turn, as jsonschema's is (150
    nested `not`s in a payload schema made check_schema log 152 KB on one line): Python folds
    repeated lines of a traceback, not these."""

    def descend(n):
        return apply(n)

    def apply(n):
        return charge(n)

    def charge(n):
        return descend(n + 1)

    try:
        descend(0)
    except RecursionError:
        return sys.exc_info()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_with_a_long_traceback_is_cut_to_a_few_kb_keeping_its_start_and_its_end(log_format):
    line = logs.FORMATTERS[log_format]().format(record("unexpected error in POST /x", exc_info=_deep_failure()))
    assert len(line) <= logs.MAX_LINE_CHARS and len(line.splitlines()) == 1
    text = json.loads(line)["exception"] if log_format == "json" else line
    assert " characters cut ...] " in text
    assert text.endswith("RecursionError: maximum recursion depth exceeded")
    assert "unexpected error in POST /x" in (line if log_format == "text" else json.loads(line)["message"])


def test_a_long_line_is_cut_between_escapes_never_inside_one():
    forged = f"\u2028{FORGED}\n" * 2000  # every character of the separators escaped: \u2028, \n
    line = logs.OneLineFormatter(logs.FORMAT).format(record(forged, fields={"actor": "x" * 10_000}))
    assert len(line) <= logs.MAX_LINE_CHARS
    unescaped = line.replace("\\u2028", "").replace("\\n", "")
    assert "\\" not in unescaped  # nothing left of a cut escape
    entry = logs.JsonFormatter().format(
        record(forged, fields={"actor": "x\n" * 5000, "lines": [1] * 5000, "status": 500})
    )
    assert len(entry) <= logs.MAX_LINE_CHARS and json.loads(entry)["status"] == 500
