"""GET /metrics: Prometheus text format, for operations (docs/operations.md)."""

from __future__ import annotations

import falcon
from prometheus_client import CollectorRegistry, generate_latest

from weave.http import operation
from weave.metrics import CONTENT_TYPE


class Metrics:
    def __init__(self, exposed: CollectorRegistry):
        self.exposed = exposed

    @operation(
        "Prometheus metrics: this API's (every process of `weave serve`) and the database's backlog",
        public=True,
        text=CONTENT_TYPE,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = CONTENT_TYPE
        resp.data = generate_latest(self.exposed)
