"""N1, N3 in the review console: the namespace's notification subscriptions (a failing endpoint
shown as failing) and a subscription's notifications with their attempts, every value escaped."""

from __future__ import annotations

import re

from helpers import task_steps
from test_console import OPERATOR, QUEUES, Console

from weave.secretbox import Keyring, new_key
from weave.sql import notifications

URL = "https://hooks.example/<script>alert(1)</script>"


def subscribe(database, name: str, url: str = URL) -> None:
    notifications.create_subscription(
        database, "acme", name, url, ["workflow.succeeded"], Keyring([new_key()]).encrypt("whsec_x")
    )


def test_N1_N3_the_subscriptions_and_their_notifications_with_attempts_escaped(client, tenant, flow, database):
    subscribe(database, "ops")
    subscribe(database, "quiet", "https://quiet.example/")
    database.run(
        lambda tx: tx.execute(
            "UPDATE notify_subscriptions SET failing_since = '2026-11-30 06:00:00' WHERE name = 'ops'"
        )
    )
    flow.publish(task_steps("work"))
    for n in range(3):
        flow.start(f"wf-<{n}>")
        flow.scan()
        flow.finish_task({})
    newest = database.run(
        lambda tx: tx.one(
            "SELECT MAX(n.id) AS id FROM notifications n JOIN notify_subscriptions s ON s.id = n.subscription_id"
            " WHERE s.name = 'ops'"
        )
    )
    database.run(
        lambda tx: tx.execute(
            "INSERT INTO notification_attempts (notification_id, attempted_at, http_status, error, duration_ms)"
            " SELECT id, occurred_at, 502, '<b>bad gateway</b>', 31 FROM notifications WHERE id = %s",
            (newest["id"],),
        )
    )
    console = Console(client)
    console.sign_in(tenant.token(*OPERATOR, queues=QUEUES, actor="ops-alice"))

    listed = console.get("/console/ns/acme/notify")
    assert listed.status_code == 200
    ops = listed.text.split('id="subscription-ops"', 1)[1].split("</tr>", 1)[0]
    assert '<tr id="subscription-ops" class="subscription failing">' in listed.text
    assert "badge-failing" in ops and "2026-11-30T06:00:00" in ops
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in ops and "<script>alert(1)" not in listed.text
    quiet = listed.text.split('id="subscription-quiet"', 1)[1].split("</tr>", 1)[0]
    assert "badge-failing" not in quiet and "workflow.succeeded" in quiet

    page = console.get("/console/ns/acme/notify/ops/deliveries")
    assert page.status_code == 200
    rows = re.findall(r'id="notification-(\d+)"', page.text)
    assert len(rows) == 3 and rows == sorted(rows, reverse=True)  # newest first
    assert "HTTP 502 in 31 ms: &lt;b&gt;bad gateway&lt;/b&gt;" in page.text and "<b>bad" not in page.text
    assert "wf-&lt;2&gt;" in page.text and "wf-<2>" not in page.text
    assert (
        console.get("/console/ns/acme/notify/ops/deliveries?status=DELIVERED").text.count('class="notification"') == 0
    )
    assert console.get("/console/ns/acme/notify/ops/deliveries?status=LOST").status_code == 422
    assert console.get("/console/ns/acme/notify/nobody/deliveries").status_code == 404


def test_issue_34_3_a_workflows_page_lists_its_notifications_linked_to_their_subscription(
    client, tenant, flow, database
):
    subscribe(database, "<i>ops")
    flow.publish(task_steps("work"))
    flow.start("wf-1")
    flow.scan()
    flow.finish_task({})
    flow.start("wf-2")  # not ended: no notification about it
    console = Console(client)
    console.sign_in(tenant.token(*OPERATOR, queues=QUEUES, actor="ops-alice"))
    page = console.get("/console/ns/acme/workflows/wf-1").text
    section = page[page.index('<section id="notifications">') : page.index('<section id="events">')]
    assert section.count('<tr id="notification-') == 1 and "workflow.succeeded" in section
    assert 'href="/console/ns/acme/notify/%3Ci%3Eops/deliveries">&lt;i&gt;ops</a>' in section
    assert '<section id="notifications">' not in console.get("/console/ns/acme/workflows/wf-2").text
