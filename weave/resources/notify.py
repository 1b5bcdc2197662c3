"""GET {N}/notify and GET {N}/notify/{subscription}/deliveries: the namespace's notification
subscriptions and each one's deliveries with their attempts (docs/rules.md#notifications, N1, N3),
for the console and operators. Making, disabling and deleting subscriptions is the operator's
(`weave admin notify`): a secret is never shown here."""

from __future__ import annotations

import falcon

from weave.errors import Code
from weave.http import Resource, operation, query_int, query_text, send_json
from weave.resources.signals import PAGE_DEFAULT, PAGE_MAX
from weave.sql import notifications
from weave.statuses import NotificationStatus

STATUSES = tuple(status.value for status in NotificationStatus)


def subscription_view(row: dict) -> dict:
    """A subscription as a reader of the namespace sees it (never its secret)."""
    return {
        "name": row["name"],
        "url": row["url"],
        "events": row["events"],
        "status": row["status"],
        "failing_since": row["failing_since"],
        "created_at": row["created_at"],
    }


class Subscriptions(Resource):
    """GET {N}/notify (N1)."""

    @operation(
        "List the namespace's notification subscriptions by name (N1): url, events, status, failing since",
        scopes=("workflows:read",),
        not_found=Code.NOT_FOUND,
        response="notify_subscription_list",
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        rows = notifications.list_subscriptions(self.database, req.context.principal.namespace)
        send_json(resp, 200, {"subscriptions": [subscription_view(row) for row in rows]})


class SubscriptionDeliveries(Resource):
    """GET {N}/notify/{subscription}/deliveries (N3)."""

    @operation(
        "List a subscription's notifications (N3), newest first, each with its delivery attempts",
        description="Every notification written for the subscription: its event, webhook-id, status and attempts",
        scopes=("workflows:read",),
        not_found=Code.NOT_FOUND,
        response="notify_delivery_page",
        query=(
            ("status", f"one of {', '.join(STATUSES)}"),
            ("after", "the next_after of the previous page (absent or 0: start at the newest)"),
            ("limit", f"page size 1..{PAGE_MAX} (default {PAGE_DEFAULT})"),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, namespace: str, subscription: str) -> None:
        status = query_text(req, "status", STATUSES.__contains__, f"one of {', '.join(STATUSES)}")
        after = query_int(req, "after", 0, 0, 2**63 - 1) or None  # 0: from the newest, as the other lists
        limit = query_int(req, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        rows = notifications.list_deliveries(
            self.database, req.context.principal.namespace, subscription, status, after, limit + 1
        )
        page = rows[:limit]
        send_json(
            resp,
            200,
            {"deliveries": page, "next_after": page[-1]["notification_id"] if len(rows) > limit else None},
        )
