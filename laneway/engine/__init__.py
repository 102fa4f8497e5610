"""The engine: workflow definitions, claims, leases, runs, retries and schedules."""

from laneway.engine.context import (
    Done,
    HandlerContext,
    Next,
    OnExpiry,
    Pause,
    PermanentFailure,
    Sleep,
    Step,
    WaitForSignal,
)
from laneway.engine.engine import Engine, EnqueueRequest
from laneway.engine.handler_map import RetryPolicy, Workflow
from laneway.engine.locks import EntityLocks, LockUnavailableError
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.template_interpreter import (
    Checkpoint,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    QueueSettings,
    Stage,
    Template,
    TemplateWorkflow,
    check_workflows,
    compile_template,
    completed,
    failed,
)

__all__ = [
    "Checkpoint",
    "Done",
    "Engine",
    "EnqueueRequest",
    "EntityLocks",
    "HandlerContext",
    "LockUnavailableError",
    "Next",
    "OnExpiry",
    "Operation",
    "OperationContext",
    "OperationRegistry",
    "OperationResult",
    "Pause",
    "PermanentFailure",
    "QueueSettings",
    "RetryPolicy",
    "Sleep",
    "Stage",
    "Step",
    "Template",
    "TemplateWorkflow",
    "WaitForSignal",
    "Workflow",
    "WorkflowRegistry",
    "check_workflows",
    "compile_template",
    "completed",
    "failed",
]
