"""create_app(): the only wiring of the HTTP API."""

from __future__ import annotations

import falcon

from weave import errors, metrics, openapi, scanner
from weave.config import Config
from weave.console import pages as console
from weave.db import Database
from weave.http import Authenticate, BodyCap, Observe, RequestId
from weave.resources import (
    batches,
    definitions,
    health,
    inbound,
    notify,
    review,
    signals,
    tasks,
    waiting,
    workflows,
)
from weave.resources.metrics import Metrics
from weave.resources.openapi import OpenApiDocument

N = "/v1/namespaces/{namespace}"


def routes(database: Database, config: Config, metrics_route: bool = True) -> list[tuple[str, object]]:
    limit = config.max_body_bytes
    slots = waiting.WaitingClaims(config.max_waiting_claims)  # one cap for claims and signal reads (B6)
    return [
        ("/healthz", health.Health()),
        ("/readyz", health.Ready(database)),
        *([("/metrics", _metrics(database))] if metrics_route else []),
        (f"{N}/definitions", definitions.DefinitionCollection(database, limit)),
        (f"{N}/definitions/{{name}}/versions/{{version:int(min=1)}}", definitions.DefinitionVersion(database)),
        (f"{N}/workflows", workflows.WorkflowCollection(database, limit)),
        (f"{N}/workflows/{{workflow_id}}", workflows.Workflow(database)),
        (f"{N}/workflows/{{workflow_id}}/events", workflows.WorkflowEvents(database)),
        (f"{N}/workflows/{{workflow_id}}/export", workflows.WorkflowExport(database)),
        *[
            (f"{N}/workflows/{{workflow_id}}/{action}", workflows.WorkflowControl(database, limit, action))
            for action in ("pause", "resume", "cancel")
        ],
        (f"{N}/workflows/{{workflow_id}}/review", review.WorkflowReview(database, limit)),
        (f"{N}/signals", signals.NamespaceSignals(database, limit)),
        (f"{N}/signals/{{signal_id}}", signals.NamespaceSignal(database, slots=slots)),
        (f"{N}/signal-batches", batches.SignalBatches(database, limit)),
        (f"{N}/workflows/{{workflow_id}}/signals", signals.WorkflowSignals(database, limit)),
        (f"{N}/workflows/{{workflow_id}}/signals/{{signal_id}}", signals.WorkflowSignal(database, slots=slots)),
        (f"{N}/queues/{{queue}}/claim", tasks.QueueClaim(database, limit, slots)),
        (f"{N}/tasks/{{task_id}}/heartbeat", tasks.TaskHeartbeat(database, limit)),
        (f"{N}/tasks/{{task_id}}/complete", tasks.TaskComplete(database, limit)),
        ("/v1/inbound/{namespace}/{source}", inbound.InboundDelivery(database, limit, config.keyring)),
        (f"{N}/inbound", inbound.Sources(database)),
        (f"{N}/inbound/{{source}}/deliveries", inbound.SourceDeliveries(database)),
        (f"{N}/notify", notify.Subscriptions(database)),
        (f"{N}/notify/{{subscription}}/deliveries", notify.SubscriptionDeliveries(database)),
    ]


def _metrics(database: Database) -> Metrics:
    return Metrics(metrics.registry(lambda: database.attempt(scanner.backlog)))


def create_app(config: Config, database: Database | None = None, metrics_route: bool = True) -> falcon.App:
    """The API; without `metrics_route` it serves no /metrics (`weave serve --metrics-port` serves
    it on a port of its own, `create_metrics_app`)."""
    database = database or Database(config.database_url)
    app = falcon.App(middleware=[RequestId(), Observe(), BodyCap(config.max_body_bytes), Authenticate(database)])
    app.req_options.strip_url_path_trailing_slash = True
    document = OpenApiDocument()
    served = routes(database, config, metrics_route) + [("/v1/openapi.json", document)]
    for path, resource in served + console.routes(database, config):  # the console is HTML, not in the document
        app.add_route(path, resource)
    document.document = openapi.build(served)
    errors.install(app)
    return app


def create_metrics_app(database: Database) -> falcon.App:
    """GET /metrics alone, for `weave serve --metrics-port`: the same figures as the API's /metrics,
    counted and logged like any request; every other path is 404."""
    app = falcon.App(middleware=[RequestId(), Observe()])
    app.add_route("/metrics", _metrics(database))
    errors.install(app)
    return app
