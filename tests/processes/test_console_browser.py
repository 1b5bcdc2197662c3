"""The review console in a real browser (issue 16): headless Chromium driven by Selenium.

An operator signs in with a token, finds the workflow in review, reads on its page why the payment
did not count (it came late), retries the step with a reason; the new payment is sent through the
API and the page, watched, shows the workflow succeeded.

Needs Debian's `chromium` and `chromium-driver` (scripts/bootstrap installs them). The page's
screenshot is written to $WEAVE_CONSOLE_SCREENSHOT when set; docs/console.png is made that way:
`WEAVE_CONSOLE_SCREENSHOT=docs/console.png scripts/test tests/processes/test_console_browser.py`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import payment, signal_flow_definition

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# As the issue asks: no sandbox (tests run as root), and nothing that reaches the network by itself.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
    "--hide-scrollbars",
)
OPERATOR = ("workflows:read", "workflows:control", "workflows:review")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
        reason="chromium and chromium-driver are not installed (scripts/bootstrap installs them)",
    ),
]


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def late_payment(flow, clock):
    """order-1 in review: its payment came 30 s after the wait's deadline (LATE), then the wait
    expired (WAIT_EXPIRED). Returns the late signal's id."""
    flow.publish(signal_flow_definition(timeout=600))
    flow.start("order-1", input={"order_id": "o-1"})
    flow.scan()
    clock.advance(25)
    flow.finish_task({"reservation_id": "r-1"})
    clock.advance(630)
    late = send_exactly(flow, "psp-1", 1)
    assert late.json["disposition"] == "LATE", late.text
    flow.scan()
    assert flow.workflow("order-1")["review_reason"] == "WAIT_EXPIRED"
    return late.json["signal_id"]


def send_exactly(flow, key: str, sequence: int):
    """The payment of order-1 for an activation, its amount written `129.90` (JSON text, not a float)."""
    body = json.dumps(payment(sequence=sequence, payload={"amount": "AMOUNT", "currency": "EUR"}))
    return flow.client.simulate_post(
        f"{flow.ns}/workflows/order-1/signals",
        body=body.replace('"AMOUNT"', "129.90"),
        headers={**flow.signaller, "Idempotency-Key": key, "Content-Type": "application/json"},
    )


def wait_for(driver, condition, timeout: float = 20):
    """`condition` true within `timeout`. A watched page reloads itself every 2 s: an element found
    just before a reload is stale when read, and the condition is simply asked again. (Chromium
    reports some of those reads as an "unknown error": its node "does not belong to the document".)"""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def asked_again_after_a_reload(d):
        try:
            return condition(d)
        except WebDriverException as exc:
            if "does not belong to the document" in (exc.msg or ""):
                return False
            raise

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=ignored).until(
        asked_again_after_a_reload
    )


def text_of(driver, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def test_an_operator_repairs_a_late_payment_in_the_browser(
    browser, live_url, flow, tenant, clock, late_payment, tmp_path
):
    from selenium.webdriver.common.by import By

    token = tenant.token(*OPERATOR, queues=("inventory", "carrier"), actor="ops-alice")

    # Sign in once with the token.
    browser.get(f"{live_url}/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(browser, lambda d: d.current_url.endswith("/console/ns/acme/workflows"))

    # The workflow in review is first, with its reason.
    queue = browser.find_element(By.CSS_SELECTOR, ".review-queue table")
    assert "WAIT_EXPIRED" in queue.text
    queue.find_element(By.LINK_TEXT, "order-1").click()
    wait_for(browser, lambda d: d.current_url.endswith("/workflows/order-1"))
    assert text_of(browser, "#workflow-status") == "NEEDS_REVIEW"

    # Why the payment did not count: its disposition, in words, and its mark on the timeline.
    row = f"#signal-{late_payment}"
    assert text_of(browser, f"{row} .disposition") == "LATE"
    assert "accepted at or after the wait's deadline" in text_of(browser, f"{row} .words")
    assert '"amount": 129.90' in text_of(browser, f"{row} .payload")  # exact, as sent
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark-late")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline .line-deadline")) == 1

    # Retry the step with a reason: the updated page says so.
    clock.advance(45)
    browser.find_element(By.ID, "retry_step-reason").send_keys("PSP outage, OPS-12")
    browser.find_element(By.CSS_SELECTOR, "#form-retry_step button").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "notice"))
    assert text_of(browser, "#workflow-status") == "RUNNING"
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline .line-deadline")) == 2  # a new wait

    # Watch the page while the new payment arrives through the API and the shipment is done.
    browser.find_element(By.ID, "watch").click()
    clock.advance(40)
    paid = send_exactly(flow, "psp-2", 2)
    assert paid.json["status"] == "PENDING", paid.text
    flow.scan()
    clock.advance(20)
    flow.finish_task({"tracking": "TRK-1"}, queue="carrier")
    wait_for(browser, lambda d: text_of(d, "#workflow-status") == "SUCCEEDED")
    winner = browser.find_element(By.CSS_SELECTOR, f"#signal-{paid.json['signal_id']}")
    assert "CONSUMED" in winner.text and "winner" in winner.text
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark-winner")

    # The picture for docs/console.png: from the top down to the history.
    history = browser.find_element(By.XPATH, "//h2[text()='History']")
    browser.set_window_size(1280, history.location["y"] + 120)
    shot = Path(os.environ.get("WEAVE_CONSOLE_SCREENSHOT") or tmp_path / "console.png")
    browser.save_screenshot(str(tmp_path / "page.png"))
    shutil.copyfile(tmp_path / "page.png", shot)


def shoot(browser, name: str, tmp_path: Path) -> None:
    """A screenshot of the page as it is, into $WEAVE_CONSOLE_SCREENSHOTS/<name> when set (docs/ has
    them: `WEAVE_CONSOLE_SCREENSHOTS=docs scripts/test tests/processes/test_console_browser.py`)."""
    folder = Path(os.environ.get("WEAVE_CONSOLE_SCREENSHOTS") or tmp_path)
    browser.save_screenshot(str(tmp_path / "shot.png"))
    shutil.copyfile(tmp_path / "shot.png", folder / name)


def test_issue_34_an_operator_finds_a_workflow_by_its_key_reads_its_input_and_bulk_retries_three(
    browser, live_url, flow, tenant, clock, tmp_path
):
    """Issue 34's browser test: find a workflow by its correlation key, read its input, bulk-retry
    three reviewed workflows and see each result; every value escaped on the way."""
    from selenium.webdriver.common.by import By

    flow.publish(signal_flow_definition(timeout=600))
    orders = {"order-1": "o-41", "order-2": "o-42", "<script>order-3": "o-43"}
    for workflow_id, key in orders.items():
        body = (
            f'{{"definition": "flow", "version": 1, "deadline_seconds": 86400, "workflow_id": {json.dumps(workflow_id)},'
            f' "input": {{"order_id": {json.dumps(key)}, "total": 129.90, "note": "<script>alert(1)</script>"}}}}'
        )
        started = flow.client.simulate_post(
            f"{flow.ns}/workflows", body=body, headers={**flow.headers, "Content-Type": "application/json"}
        )
        assert started.status_code == 201, started.text
    flow.scan()
    for _ in orders:
        flow.finish_task({"reservation_id": "r"})
    flow.scan()
    clock.advance(600)
    flow.scan()  # nobody paid: all three in review (WAIT_EXPIRED)
    token = tenant.token(*OPERATOR, queues=("inventory", "carrier"), actor="ops-alice")
    browser.get(f"{live_url}/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(browser, lambda d: d.current_url.endswith("/console/ns/acme/workflows"))

    # "Where is o-42?": the business key in the search box finds order-2 alone.
    browser.find_element(By.ID, "correlation_key").send_keys("o-42")
    browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    wait_for(browser, lambda d: "correlation_key=o-42" in d.current_url)
    found = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "table.list a.wid")]
    assert found == ["order-2"]
    shoot(browser, "console-search.png", tmp_path)
    browser.find_element(By.LINK_TEXT, "order-2").click()
    wait_for(browser, lambda d: d.current_url.endswith("/workflows/order-2"))
    shown = text_of(browser, "#input")
    assert '"total": 129.90' in shown and '"order_id": "o-42"' in shown  # exact, as started
    assert '"note": "<script>alert(1)</script>"' in shown  # shown as text: the page ran no script
    assert "o-42" in text_of(browser, "#input table")  # the key its payment wait resolved

    # The workflows in review, three picked, retried with one reason: a result for each.
    browser.get(f"{live_url}/console/ns/acme/workflows?status=NEEDS_REVIEW")
    picks = browser.find_elements(By.CSS_SELECTOR, "#bulk-form input.pick")
    assert len(picks) == 3
    for pick in picks:
        pick.click()
    browser.find_element(By.ID, "bulk-reason").send_keys("PSP outage over, OPS-12")
    shoot(browser, "console-list.png", tmp_path)
    browser.find_element(By.ID, "bulk-submit").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "bulk-results"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#bulk-results tbody tr")
    assert sorted(row.find_element(By.CSS_SELECTOR, "a.wid").text for row in rows) == sorted(orders)
    assert all(row.get_attribute("class") == "done" and "now RUNNING" in row.text for row in rows)
    shoot(browser, "console-bulk.png", tmp_path)
    for workflow_id in orders:
        workflow = flow.workflow(quote(workflow_id, safe=""))
        assert (workflow["status"], workflow["steps"][1]["activation_sequence"]) == ("RUNNING", 2)
