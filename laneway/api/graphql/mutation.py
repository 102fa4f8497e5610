"""Mutation resolvers: enqueue, cancel, resume, retry, schedules and queue caps.

Owns parsing write arguments and one engine call per field. Every field needs write access
(auth.CanWrite); the engine decides what is allowed in which status.
"""

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.auth import CanWrite
from laneway.api.graphql.context import RequestContext
from laneway.api.graphql.query import parse_instance_id
from laneway.api.graphql.types import (
    JSON,
    EnqueueResult,
    QueueStats,
    Schedule,
    WorkflowInstanceStatus,
    given,
)


async def resolve_enqueue_workflow(
    info: Info[RequestContext, None],
    name: str,
    params: JSON | None = UNSET,
    queue: str | None = UNSET,
    priority: int | None = UNSET,
    delay_ms: float | None = UNSET,
    idempotency_key: str | None = UNSET,
    singleton_key: str | None = UNSET,
) -> EnqueueResult:
    """Create an instance, or return the one its idempotency or singleton key names."""
    result = await info.context.services.engine.enqueue(
        name,
        given(params),
        queue=given(queue),
        priority=given(priority) or 0,
        delay_ms=given(delay_ms) or 0.0,
        idempotency_key=given(idempotency_key),
        singleton_key=given(singleton_key),
    )
    return EnqueueResult.from_record(result)


async def resolve_cancel_workflow(
    info: Info[RequestContext, None], instance_id: strawberry.ID
) -> WorkflowInstanceStatus:
    """Cancel an instance; cancelling a terminal one returns it unchanged."""
    record = await info.context.services.engine.cancel(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


async def resolve_resume_workflow(
    info: Info[RequestContext, None], instance_id: strawberry.ID
) -> WorkflowInstanceStatus:
    """Put a paused instance back to pending (CONFLICT unless it is paused)."""
    record = await info.context.services.engine.resume(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


async def resolve_retry_workflow(
    info: Info[RequestContext, None], instance_id: strawberry.ID
) -> WorkflowInstanceStatus:
    """Run a failed instance again (CONFLICT unless it is failed)."""
    record = await info.context.services.engine.retry(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


async def resolve_create_schedule(
    info: Info[RequestContext, None],
    name: str,
    workflow_name: str,
    params: JSON | None = UNSET,
    every: str | None = UNSET,
    cron: str | None = UNSET,
    timezone: str | None = "UTC",
) -> Schedule:
    """Create or replace a schedule firing every interval or on a cron expression."""
    record = await info.context.services.engine.create_schedule(
        name,
        workflow_name,
        given(params),
        every=given(every),
        cron=given(cron),
        timezone=timezone or "UTC",
    )
    return Schedule.from_record(record)


async def resolve_set_schedule_enabled(
    info: Info[RequestContext, None], name: str, enabled: bool
) -> Schedule:
    """Enable or disable a schedule (NOT_FOUND when there is none by that name)."""
    record = await info.context.services.engine.set_schedule_enabled(name, enabled)
    return Schedule.from_record(record)


async def resolve_delete_schedule(info: Info[RequestContext, None], name: str) -> bool:
    """Delete a schedule; false when there was none by that name."""
    return await info.context.services.engine.delete_schedule(name)


async def resolve_configure_queue(
    info: Info[RequestContext, None],
    name: str,
    concurrency: int,
    rate_per_minute: float | None = UNSET,
) -> QueueStats:
    """Set a queue's concurrency and rate caps, creating the queue if needed."""
    record = await info.context.services.engine.configure_queue(
        name, concurrency=concurrency, rate_per_minute=given(rate_per_minute)
    )
    return QueueStats.from_record(record)


@strawberry.type
class Mutation:
    enqueue_workflow: EnqueueResult = strawberry.mutation(
        resolver=resolve_enqueue_workflow, permission_classes=[CanWrite]
    )
    cancel_workflow: WorkflowInstanceStatus = strawberry.mutation(
        resolver=resolve_cancel_workflow, permission_classes=[CanWrite]
    )
    resume_workflow: WorkflowInstanceStatus = strawberry.mutation(
        resolver=resolve_resume_workflow, permission_classes=[CanWrite]
    )
    retry_workflow: WorkflowInstanceStatus = strawberry.mutation(
        resolver=resolve_retry_workflow, permission_classes=[CanWrite]
    )
    create_schedule: Schedule = strawberry.mutation(
        resolver=resolve_create_schedule, permission_classes=[CanWrite]
    )
    set_schedule_enabled: Schedule = strawberry.mutation(
        resolver=resolve_set_schedule_enabled, permission_classes=[CanWrite]
    )
    delete_schedule: bool = strawberry.mutation(
        resolver=resolve_delete_schedule, permission_classes=[CanWrite]
    )
    configure_queue: QueueStats = strawberry.mutation(
        resolver=resolve_configure_queue, permission_classes=[CanWrite]
    )
