"""Laneway: a durable workflow engine on PostgreSQL, served as a GraphQL API.

This package's `__all__` is the promised authoring API; anything else may be imported but
is not promised.
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
    ConflictError,
    InputRejectedError,
    InvalidInputError,
    LanewayError,
    NotFoundError,
)
from laneway.model import BulkResult, InstanceFilter
from laneway.services import Services, open_services
from laneway.store.migrate import MigrationReport, migrate

__version__: str = metadata.version("laneway")  # pyproject.toml's, as installed

__all__ = [
    "BulkResult",
    "Checkpoint",
    "ConflictError",
    "Done",
    "Engine",
    "EnqueueRequest",
    "HandlerContext",
    "InputRejectedError",
    "InstanceFilter",
    "InvalidInputError",
    "LanewayError",
    "MigrationReport",
    "Next",
    "NotFoundError",
    "OnExpiry",
    "Operation",
    "OperationContext",
    "OperationRegistry",
    "OperationResult",
    "Pause",
    "PermanentFailure",
    "PreflightFinding",
    "RetryPolicy",
    "Services",
    "Settings",
    "Sleep",
    "Stage",
    "Step",
    "Template",
    "WaitForSignal",
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
