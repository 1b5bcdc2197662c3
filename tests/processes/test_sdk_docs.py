"""The complete example of docs/sdk.md, run as it is written against a real server and scanner."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import OPERATOR_SCOPES, make_tenant

from weave.cli import DEV_DEFINITION
from weave.scanner import Scanner
from weave.sdk import Client

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def example() -> str:
    """The first python block after the heading `## A complete example`."""
    section = DOC.read_text().split("## A complete example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_complete_example_of_docs_sdk_md_runs(live_url, database, tmp_path):
    demo = make_tenant(database, "demo", {"default": 4})
    client_token = demo.token(*OPERATOR_SCOPES, queues=("default",), actor="demo-client")
    Client(live_url, client_token, "demo").publish_definition(DEV_DEFINITION)
    script = tmp_path / "order_demo.py"
    script.write_text(example())
    env = {
        **os.environ,
        "WEAVE_URL": live_url,
        "WEAVE_NAMESPACE": "demo",
        "WEAVE_TOKEN": client_token,
        "WEAVE_WORKER_TOKEN": demo.token("tasks:work", queues=("default",), actor="demo-worker"),
    }
    stop = threading.Event()
    scanner = threading.Thread(target=Scanner(database, idle_seconds=0.05).run, args=(stop,), daemon=True)
    scanner.start()
    try:
        ran = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=90)
    finally:
        stop.set()
        scanner.join(10)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "started order-7 RUNNING"
    assert "reserve SUCCEEDED {'reservation_id': 'r-o-7'}" in lines
    assert "payment SUCCEEDED {'amount': Decimal('129.90')}" in lines
    assert "ship SUCCEEDED {'tracking_number': 't-r-o-7'}" in lines
    assert lines[-1] == "payment CONSUMED"
