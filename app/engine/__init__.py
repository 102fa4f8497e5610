"""The engine: workflow definitions, claims, leases, runs, retries and schedules."""

from app.engine.context import Done, HandlerContext, Next, Pause, Step
from app.engine.definitions import RetryPolicy, Workflow
from app.engine.engine import Engine, EnqueueRequest
from app.engine.locks import EntityLocks, LockUnavailableError
from app.engine.registry import WorkflowRegistry

__all__ = [
    "Done",
    "Engine",
    "EnqueueRequest",
    "EntityLocks",
    "HandlerContext",
    "LockUnavailableError",
    "Next",
    "Pause",
    "RetryPolicy",
    "Step",
    "Workflow",
    "WorkflowRegistry",
]
