"""Every log record is one line: values that clients chose cannot forge another (issue 10, item 8)."""

import logging
import os
import subprocess
import sys

import falcon
import falcon.testing
import pytest
from helpers import captured_log

from weave import errors, logs
from weave.http import Authenticate, operation

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
