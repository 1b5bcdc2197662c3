"""The Weave SDK: a client for every endpoint of the HTTP API and a worker helper (docs/sdk.md).

Standard library only, and nothing else of Weave: a program that imports `weave.sdk` loads no
server module and no third-party package (a test proves it).

    from weave.sdk import Client, Worker

    client = Client("http://127.0.0.1:8080", token, "demo")
    workflow = client.start_workflow("order", 1, {"order_id": "o-1"}, deadline_seconds=3600)
    receipt = client.send_signal(workflow.workflow_id, name="payment.settled", payload_version="v1",
                                 target_step_key="payment", target_activation_sequence=1,
                                 correlation_key="o-1", payload={"amount": Decimal("129.90")},
                                 reason="PSP webhook")

See docs/sdk.md for the whole surface, the retry rules and a complete worker.
"""

from weave.sdk.client import Client, request_id
from weave.sdk.errors import (
    ActivationNotFound,
    BadRequest,
    ConnectionFailed,
    ContractMismatch,
    DefinitionNotFound,
    Forbidden,
    HeadersTooLarge,
    IdempotencyConflict,
    Internal,
    InvalidJson,
    InvalidResponse,
    InvalidState,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    SignalLimitReached,
    SignalNotFound,
    SignatureInvalid,
    TaskInFlight,
    TaskNotFound,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    UnsupportedMediaType,
    ValidationFailed,
    WeaveError,
    WorkflowExists,
    WorkflowNotFound,
    error_class,
)
from weave.sdk.jsonio import ABSENT, dumps, loads
from weave.sdk.models import (
    Completion,
    Definition,
    Event,
    Heartbeat,
    Receipt,
    RoutedReceipt,
    Signal,
    Step,
    StepTask,
    Task,
    Wait,
    Workflow,
)
from weave.sdk.worker import Cancelled, Fail, RunningTask, Worker, final, pending

__all__ = [
    "ABSENT",
    "ActivationNotFound",
    "BadRequest",
    "Cancelled",
    "Client",
    "Completion",
    "ConnectionFailed",
    "ContractMismatch",
    "Definition",
    "DefinitionNotFound",
    "Event",
    "Fail",
    "Forbidden",
    "HeadersTooLarge",
    "Heartbeat",
    "IdempotencyConflict",
    "Internal",
    "InvalidJson",
    "InvalidResponse",
    "InvalidState",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "QuotaExceeded",
    "Receipt",
    "RoutedReceipt",
    "RunningTask",
    "Signal",
    "SignalLimitReached",
    "SignalNotFound",
    "Step",
    "StepTask",
    "Task",
    "TaskInFlight",
    "TaskNotFound",
    "SignatureInvalid",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnsupportedMediaType",
    "ValidationFailed",
    "Wait",
    "WeaveError",
    "Worker",
    "Workflow",
    "WorkflowExists",
    "WorkflowNotFound",
    "dumps",
    "error_class",
    "final",
    "loads",
    "pending",
    "request_id",
]
