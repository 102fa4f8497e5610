"""Laneway: a durable workflow engine on PostgreSQL, served as a GraphQL API.

This package's `__all__` is the promised authoring API; anything else may be imported but
is not promised.
"""

from app.config import Settings
from app.engine import (
    Done,
    Engine,
    EnqueueRequest,
    HandlerContext,
    Next,
    Pause,
    RetryPolicy,
    Step,
    Workflow,
    WorkflowRegistry,
)
from app.errors import ConflictError, InvalidInputError, LanewayError, NotFoundError
from app.services import Services, open_services

__version__ = "0.1.0"

__all__ = [
    "ConflictError",
    "Done",
    "Engine",
    "EnqueueRequest",
    "HandlerContext",
    "InvalidInputError",
    "LanewayError",
    "Next",
    "NotFoundError",
    "Pause",
    "RetryPolicy",
    "Services",
    "Settings",
    "Step",
    "Workflow",
    "WorkflowRegistry",
    "__version__",
    "open_services",
]
