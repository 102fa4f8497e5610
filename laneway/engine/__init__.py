"""The engine: workflow definitions, claims, leases, runs, retries and schedules."""

from laneway.engine.context import Done, HandlerContext, Next, Pause, PermanentFailure, Step
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
    "Operation",
    "OperationContext",
    "OperationRegistry",
    "OperationResult",
    "Pause",
    "PermanentFailure",
    "QueueSettings",
    "RetryPolicy",
    "Stage",
    "Step",
    "Template",
    "TemplateWorkflow",
    "Workflow",
    "WorkflowRegistry",
    "check_workflows",
    "compile_template",
    "completed",
    "failed",
]
