"""Send up to 100 signals in one request (B8), each answered as its own request would be.

The request is authenticated once (the credential as it is at its start) and its body read and
capped once; then every item goes through the single request's checks in the single request's
order: the `workflow_id` path rule (404), the idempotency key (422), the item's own schema
(`signal` or `route_signal`, 422), its size rules (413, 422) and the quota (429). A routed item
is then sent by `weave.sql.routing.route_signal` alone; consecutive instance-addressed items are
sent together by `weave.sql.signals.send_signals`, one transaction deciding each as
`send_signal` would alone (docs/decisions.md, "Signal batches"). An item's refusal is rendered
by the error handler's own mapping (`weave.errors.answer`), so that its body is the single
answer's byte for byte; a receipt is the frozen text itself.
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
from weave.sql import routing, signals
from weave.sql.signals import SignalRequest

log = logging.getLogger(__name__)

ITEM_MEMBERS = ("workflow_id", "idempotency_key")  # what an item adds to its single request's body


def answer_items(database, principal, items: list[dict]) -> list[errors.Answer]:
    """Each item's answer, in order. Items are checked and their quota taken one by one, as their
    single requests would; consecutive instance-addressed items are then sent together
    (`send_run`); a routed item ends the run before it (what was sent before it is decided first,
    as in a sequence of single requests), and so does an item repeating a workflow and key of the
    run, whose single request would find the earlier one's receipt before anything else."""
    answers: list[errors.Answer | None] = [None] * len(items)
    run: dict[int, tuple[str, SignalRequest]] = {}  # item index -> (workflow_id, request)

    def send_run() -> None:
        if run:
            for index, answered in sent_together(database, principal, run).items():
                answers[index] = answered
            run.clear()

    for index, item in enumerate(items):
        try:
            workflow_id, request = prepared(database, principal, item)
        except Exception as exc:
            answers[index] = refused(exc)
            continue
        if workflow_id is None:
            send_run()
            answers[index] = answer_of(lambda: routing.route_signal(database, principal, request))
            continue
        if (workflow_id, request.idempotency_key) in {(w, r.idempotency_key) for w, r in run.values()}:
            send_run()
        run[index] = (workflow_id, request)
    send_run()
    return answers


def prepared(database, principal, item: dict) -> tuple[str | None, SignalRequest]:
    """The item's workflow (None for a fact routed by its key, B1) and its request, checked in the
    single request's order (the path's workflow_id, the key, the body, its sizes) and its quota
    taken (S1.3); else the single request's refusal is raised."""
    body = {name: value for name, value in item.items() if name not in ITEM_MEMBERS}
    workflow_id = item.get("workflow_id")
    if "workflow_id" in item:
        if not isinstance(workflow_id, str):
            rule = PATH_IDS["workflow_id"].description
            raise WeaveError(
                Code.VALIDATION_FAILED,
                f"/workflow_id: a string of {rule}",
                [{"pointer": "/workflow_id", "message": f"a string of {rule}"}],
            )
        check_path_ids({"workflow_id": workflow_id}, Code.WORKFLOW_NOT_FOUND)  # 404, as the single request's path
    schema, build = ("route_signal", single.route_request) if workflow_id is None else ("signal", single.signal_request)
    key = single.checked_key(item.get("idempotency_key"), "idempotency_key", "/idempotency_key")
    validate(schema, body)
    request = build(key, body)
    single.take_quota(database, principal)
    return workflow_id, request


def sent_together(database, principal, run: dict[int, tuple[str, SignalRequest]]) -> dict[int, errors.Answer]:
    """The answers to a run of instance-addressed items, sent in one transaction
    (`signals.send_signals`; a run of one by `send_signal`, as alone). When the database is
    unavailable, each item answers 503 as it would alone (its outcome unknown: a re-sent batch
    settles it). Any other failure of the transaction (a value the database refused, a bug) has
    rolled it back whole, so each item is sent again alone, to answer what it alone answers."""
    if len(run) == 1:
        ((index, (workflow_id, request)),) = run.items()
        return {index: answer_of(lambda: signals.send_signal(database, principal, workflow_id, request))}
    try:
        outcomes = signals.send_signals(database, principal, list(run.values()))
    except Unavailable as exc:
        return {index: refused(exc) for index in run}
    except Exception:
        log.warning("a run of %d signals failed together; sending each alone", len(run), exc_info=True)
        return {
            index: answer_of(lambda w=workflow_id, r=request: signals.send_signal(database, principal, w, r))
            for index, (workflow_id, request) in run.items()
        }
    return {
        index: refused(outcome) if isinstance(outcome, Exception) else accepted(outcome)
        for index, outcome in zip(run, outcomes)
    }


def answer_of(send) -> errors.Answer:
    """What a single request answers for `send()`: 201 with its receipt, or its refusal."""
    try:
        receipt = send()
    except Exception as exc:
        return refused(exc)
    return accepted(receipt)


def accepted(receipt: signals.Receipt) -> errors.Answer:
    """201 with the receipt's own text (and Idempotent-Replayed on a replay), counted as a single send's."""
    single.count_receipt(receipt)
    return errors.Answer(201, receipt.text, single.REPLAYED if receipt.replayed else {})


def refused(exc: Exception) -> errors.Answer:
    """The problem the error handler answers for `exc`, counted as a single send's refusal."""
    if not isinstance(exc, (WeaveError, Unavailable, InvalidValue)):
        log.error("unexpected error in a signal batch item", exc_info=exc)
    single.count_refusal(exc)
    return errors.answer(exc)


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
            " carry. Items are independent and run in order (consecutive items with `workflow_id` in one"
            " transaction, each decided as it would be alone): a refused item changes nothing and does not"
            " stop the others. The body cap applies to the whole request; each"
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
        resp.text = results_text(answer_items(self.database, principal, items))
