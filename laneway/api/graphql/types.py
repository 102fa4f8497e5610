"""Every GraphQL object type of the contract, gathered from the modules that define them.

Kept so that `from laneway.api.graphql.types import ...` works for hosts and for Laneway's
own resolvers; the types live in scalars.py, event_types.py, instance_types.py,
queue_types.py and workflow_types.py, each with its `from_record` converters.
"""

from laneway.api.graphql.event_types import WorkflowEvent
from laneway.api.graphql.instance_types import (
    AttemptFailure,
    EnqueueResult,
    SignalResult,
    WaitingReason,
    WorkflowInstanceStatus,
    WorkflowOperation,
)
from laneway.api.graphql.queue_types import QueueSample, QueueStats, StatusCounts
from laneway.api.graphql.scalars import JSON, millis
from laneway.api.graphql.workflow_types import EntityLock, Schedule, Worker, WorkflowDefinitionInfo

__all__ = [
    "JSON",
    "AttemptFailure",
    "EnqueueResult",
    "EntityLock",
    "QueueSample",
    "QueueStats",
    "Schedule",
    "SignalResult",
    "StatusCounts",
    "WaitingReason",
    "Worker",
    "WorkflowDefinitionInfo",
    "WorkflowEvent",
    "WorkflowInstanceStatus",
    "WorkflowOperation",
    "millis",
]
