"""Laneway: a durable workflow engine on PostgreSQL, served as a GraphQL API.

This package's `__all__` is the promised API: the authoring API, and every type and error
the Engine's public methods take, return or raise (tests/test_public_api.py keeps it so);
anything else may be imported but is not promised.
"""

from importlib import metadata

from laneway.config import Settings
from laneway.engine import (
    Checkpoint,
    Done,
    Engine,
    EnqueueRequest,
    HandlerContext,
    Next,
    OnExpiry,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Pause,
    PermanentFailure,
    RetryPolicy,
    Sleep,
    Stage,
    Step,
    Template,
    WaitForSignal,
    Workflow,
    WorkflowRegistry,
    compile_template,
    completed,
    failed,
)
from laneway.engine.preflight import PreflightFinding, WorkflowSpec
from laneway.errors import (
    BulkStoppedError,
    ConflictError,
    InputRejectedError,
    InvalidInputError,
    LanewayError,
    NotFoundError,
)
from laneway.model import (
    BulkResult,
    EnqueueResult,
    EventRecord,
    EventType,
    InstanceFilter,
    InstancePage,
    InstanceRecord,
    Notification,
    OperationRecord,
    QueueRecord,
    QueueSample,
    ScheduleRecord,
    SignalResult,
    Status,
    WaitingReason,
    WorkerRecord,
)
from laneway.services import Services, open_services
from laneway.store.migrate import MigrationReport, migrate

__version__: str = metadata.version("laneway")  # pyproject.toml's, as installed

__all__ = [
    "BulkResult",
    "BulkStoppedError",
    "Checkpoint",
    "ConflictError",
    "Done",
    "Engine",
    "EnqueueRequest",
    "EnqueueResult",
    "EventRecord",
    "EventType",
    "HandlerContext",
    "InputRejectedError",
    "InstanceFilter",
    "InstancePage",
    "InstanceRecord",
    "InvalidInputError",
    "LanewayError",
    "MigrationReport",
    "Next",
    "NotFoundError",
    "Notification",
    "OnExpiry",
    "Operation",
    "OperationContext",
    "OperationRecord",
    "OperationRegistry",
    "OperationResult",
    "Pause",
    "PermanentFailure",
    "PreflightFinding",
    "QueueRecord",
    "QueueSample",
    "RetryPolicy",
    "ScheduleRecord",
    "Services",
    "Settings",
    "SignalResult",
    "Sleep",
    "Stage",
    "Status",
    "Step",
    "Template",
    "WaitForSignal",
    "WaitingReason",
    "WorkerRecord",
    "Workflow",
    "WorkflowRegistry",
    "WorkflowSpec",
    "__version__",
    "compile_template",
    "completed",
    "failed",
    "migrate",
    "open_services",
]
