"""The HTTP stack floor of a single signal (issue 31, target 3): what Falcon on waitress costs
for a request shaped like Weave's, with none of Weave's own work.

A Falcon app on waitress, with the threads and processes `weave serve` has in the same run, that
for `POST /v1/namespaces/{ns}/workflows/{id}/signals` reads the body, parses it as Weave does
(`weave.jsontext.loads`), validates it against the same request schema (`weave.schemas.validate`,
"signal"), checks the bearer token's SHA-256 against the one it was given (in memory, constant
time) and answers 201 with a receipt-sized body. `POST .../workflows` answers 201 with nothing
done, and `GET /healthz` 200, so that the bench's signal runs (`workload.signal_run`) start their "instances" here as they
do on Weave. Started by the `stack` section (`stack.run`) as

    python scripts/benchmarks/stack_floor.py PORT THREADS PROCESSES TOKEN_SHA256_HEX
"""

from __future__ import annotations

import hmac
import os
import sys

import falcon
import waitress.server

from weave import auth, jsontext, schemas
from weave.processes import die_with_parent
from weave.server import listen

# The size of a Weave receipt for the bench's signal (about 330 bytes): a frozen text, as Weave's is.
RECEIPT = (
    '{"signal_id":"1234567","workflow_id":"s1-123","status":"PENDING","disposition":null,'
    '"accepted_at":"2026-12-02T12:00:00.000000Z","expires_at":"2026-12-03T12:00:00.000000Z",'
    '"idempotency_key":"c1-123","request_digest":"' + "0" * 64 + '"}'
)


class Signals:
    def __init__(self, token_sha256: bytes):
        self.token_sha256 = token_sha256

    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str, workflow_id: str) -> None:
        scheme, _, token = (req.get_header("Authorization") or "").partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(auth.token_hash(token), self.token_sha256):
            raise falcon.HTTPUnauthorized()
        if not req.get_header("Idempotency-Key"):
            raise falcon.HTTPUnprocessableEntity()
        body = jsontext.loads(req.bounded_stream.read())
        schemas.validate("signal", body)
        resp.status = 201
        resp.content_type = "application/json"
        resp.text = RECEIPT


class Health:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.text = "ok"


class Workflows:
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        req.bounded_stream.read()
        resp.status = 201
        resp.content_type = "application/json"
        resp.text = "{}"


def app(token_sha256: bytes) -> falcon.App:
    floor = falcon.App()
    floor.add_route("/v1/namespaces/{namespace}/workflows/{workflow_id}/signals", Signals(token_sha256))
    floor.add_route("/v1/namespaces/{namespace}/workflows", Workflows())
    floor.add_route("/healthz", Health())  # for `harness.wait_http`
    return floor


def main(port: int, threads: int, processes: int, token_sha256: bytes) -> None:
    """Serve on 127.0.0.1:`port` in `processes` processes (forked, SO_REUSEPORT, as `weave serve`)."""
    listeners = listen("127.0.0.1", port, processes)
    for listener in listeners[1:]:
        if os.fork() == 0:
            die_with_parent()  # the section stops the first process; the others end with it
            serve(listener, threads, token_sha256)
            os._exit(0)
    serve(listeners[0], threads, token_sha256)


def serve(listener, threads: int, token_sha256: bytes) -> None:
    waitress.server.create_server(app(token_sha256), sockets=[listener], threads=threads, ident="floor").run()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4]))
