"""The engine: workflow definitions, claims, leases, runs, retries and schedules."""

from app.engine.context import Done, HandlerContext, Next, Step
from app.engine.definitions import RetryPolicy, Workflow
from app.engine.engine import Engine, EnqueueRequest
from app.engine.registry import WorkflowRegistry

__all__ = [
    "Done",
    "Engine",
    "EnqueueRequest",
    "HandlerContext",
    "Next",
    "RetryPolicy",
    "Step",
    "Workflow",
    "WorkflowRegistry",
]
