"""The demo: the definitions `weave dev` publishes, and the body of the signal its walk-through
sends. Written once here for `weave dev`, the tests and the benchmarks (scripts/benchmarks/), which
wait on the same payment step and send it the same signal."""

from __future__ import annotations

DEV_QUEUE = "default"
# The step the README walk-through waits on: the PSP's word that the order is paid.
PAYMENT_STEP = {
    "key": "payment",
    "type": "SIGNAL",
    "timeout_seconds": 3600,
    "correlation": "/input/order_id",
    "signal": {
        "name": "payment.settled",
        "payload_version": "v1",
        "payload_schema": {
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "number"}},
        },
    },
}
# The README walk-through: reserve stock (TASK), wait for the payment (SIGNAL), ship (TASK).
DEV_DEFINITION = {
    "name": "order",
    "steps": [
        {"key": "reserve", "type": "TASK", "queue": DEV_QUEUE, "max_attempts": 3, "timeout_seconds": 300},
        PAYMENT_STEP,
        {"key": "ship", "type": "TASK", "queue": DEV_QUEUE, "max_attempts": 3, "timeout_seconds": 300},
    ],
}
# The second walk-through: track a parcel (POLL). Query rounds ask the carrier where the parcel is,
# the next one a few seconds after each PENDING answer, while the carrier's webhook may send the
# final answer first. A definition of its own, so that `order` v1 and its walk-through stay as they are.
DEV_POLL_INTERVAL = 5
DEV_POLL_DEFINITION = {
    "name": "shipment",
    "steps": [
        {
            "key": "track",
            "type": "POLL",
            "queue": DEV_QUEUE,
            "interval_seconds": DEV_POLL_INTERVAL,
            "timeout_seconds": 3600,
            "max_attempts": 3,
            "correlation": "/input/tracking_number",
            "final_signal": {
                "name": "shipment.final",
                "payload_version": "v1",
                "payload_schema": {
                    "type": "object",
                    "required": ["status"],
                    "properties": {"status": {"type": "string"}},
                },
            },
        },
    ],
}

# The README's repair walk-through: a refund waits for its approval (SIGNAL) for only a few seconds,
# so that a workflow reaches review by itself, soon, and an operator repairs it.
DEV_REVIEW_WAIT = 10
DEV_REVIEW_DEFINITION = {
    "name": "refund",
    "steps": [
        {
            "key": "approve",
            "type": "SIGNAL",
            "timeout_seconds": DEV_REVIEW_WAIT,
            "correlation": "/input/refund_id",
            "signal": {
                "name": "refund.approved",
                "payload_version": "v1",
                "payload_schema": {
                    "type": "object",
                    "required": ["approved_by"],
                    "properties": {"approved_by": {"type": "string"}},
                },
            },
        },
    ],
}
DEV_DEFINITIONS = (DEV_DEFINITION, DEV_POLL_DEFINITION, DEV_REVIEW_DEFINITION)


def payment_signal(
    correlation_key: str,
    payload: object = None,
    reason: str = "PSP webhook: payment settled",
    sequence: int = 1,
) -> dict:
    """The body of a `payment.settled` signal to PAYMENT_STEP's activation `sequence`; the payload
    `{"amount": 12.5}` unless given."""
    return {
        "name": PAYMENT_STEP["signal"]["name"],
        "payload_version": PAYMENT_STEP["signal"]["payload_version"],
        "target_step_key": PAYMENT_STEP["key"],
        "target_activation_sequence": sequence,
        "correlation_key": correlation_key,
        "payload": {"amount": 12.5} if payload is None else payload,
        "reason": reason,
    }
