"""GET /metrics: Prometheus text format, for operations (docs/operations.md); on the API's port, or
alone on `weave serve --metrics-port` (`weave.app.create_metrics_app`)."""

from __future__ import annotations

import falcon
from prometheus_client import CollectorRegistry

from weave.http import operation
from weave.metrics import CONTENT_TYPE, Exposition


class Metrics:
    def __init__(self, exposed: CollectorRegistry):
        self.exposition = Exposition(exposed)

    @operation(
        "Prometheus metrics: this API's (every process of `weave serve`) and the database's backlog",
        public=True,
        text=CONTENT_TYPE,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = CONTENT_TYPE
        resp.data = self.exposition.text()
