"""Send up to 100 signals in one request (B8), each answered as its own request would be.

The request is authenticated once (the credential as it is at its start) and its body read and
capped once; then every item runs the single request's path in the single request's order:
the `workflow_id` path rule (404), the idempotency key (422), the item's own schema (`signal` or
`route_signal`, 422), its size rules (413, 422), the quota (429) and the unit of work of
`weave.sql.signals.send_signal` or `weave.sql.routing.route_signal`, each item in its own
transaction (docs/decisions.md, "Signal batches"). An item's refusal is rendered by the error
handler's own mapping (`weave.errors.answer`), so that its body is the single answer's byte for
byte; a receipt is the frozen text itself.
"""

from __future__ import annotations

import logging

import falcon

from weave import errors, jsontext
from weave.db import InvalidValue, Unavailable
from weave.errors import Code, WeaveError
from weave.http import PATH_IDS, Resource, check_path_ids, operation, read_json
from weave.resources import signals as single
from weave.schemas import validate

log = logging.getLogger(__name__)

ITEM_MEMBERS = ("workflow_id", "idempotency_key")  # what an item adds to its single request's body


def item_answer(database, principal, item: dict) -> errors.Answer:
    """What `item` alone would have answered: 201 with its receipt (and Idempotent-Replayed on a
    replay), or its problem."""
    try:
        receipt = single.counted(lambda: _send(database, principal, item))
    except Exception as exc:
        if not isinstance(exc, (WeaveError, Unavailable, InvalidValue)):
            log.exception("unexpected error in a signal batch item")
        return errors.answer(exc)
    return errors.Answer(201, receipt.text, single.REPLAYED if receipt.replayed else {})


def _send(database, principal, item: dict):
    body = {name: value for name, value in item.items() if name not in ITEM_MEMBERS}
    if "workflow_id" not in item:
        key = single.checked_key(item.get("idempotency_key"), "idempotency_key", "/idempotency_key")
        validate("route_signal", body)
        return single.send_routed(database, principal, key, body)
    workflow_id = item["workflow_id"]
    if not isinstance(workflow_id, str):
        rule = PATH_IDS["workflow_id"].description
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"/workflow_id: a string of {rule}",
            [{"pointer": "/workflow_id", "message": f"a string of {rule}"}],
        )
    check_path_ids({"workflow_id": workflow_id}, Code.WORKFLOW_NOT_FOUND)  # 404, as the single request's path
    key = single.checked_key(item.get("idempotency_key"), "idempotency_key", "/idempotency_key")
    validate("signal", body)
    return single.send_addressed(database, principal, workflow_id, key, body)


def results_text(answers: list[errors.Answer]) -> str:
    """`{"results": [...]}` with each body written as its answer's own text, never re-serialised:
    a receipt in a batch is the bytes a single request answers."""
    results = []
    for answered in answers:
        headers = f',"headers":{jsontext.compact(answered.headers)}' if answered.headers else ""
        results.append(f'{{"status":{answered.status},"body":{answered.text}{headers}}}')
    return '{"results":[' + ",".join(results) + "]}"


class SignalBatches(Resource):
    @operation(
        "Send 1-100 signals, instance-addressed or by business key (B8); 200 with each item's own answer",
        description=(
            "Each item is answered exactly as its single request (POST /workflows/{workflow_id}/signals for an"
            " item with `workflow_id`, POST /signals for one without) would be: its status, its receipt or"
            " problem+json byte for byte, and `headers` with the Idempotent-Replayed or Retry-After it would"
            " carry. Items are independent and run in order, each in its own transaction: a refused item"
            " changes nothing and does not stop the others. The body cap applies to the whole request; each"
            " payload keeps its 256 KiB limit. Re-sending a batch whose answer was lost answers every item"
            " that was accepted as a replay."
        ),
        scopes=("workflows:signal",),
        not_found=Code.NOT_FOUND,
        request="signal_batch",
        response="signal_batch_results",
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, namespace: str) -> None:
        items = read_json(req, "signal_batch", self.body_limit)["signals"]
        principal = req.context.principal
        resp.status = 200
        resp.content_type = "application/json"
        resp.text = results_text([item_answer(self.database, principal, item) for item in items])
