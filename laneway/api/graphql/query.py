"""Query resolvers: instances, event history, workflows, queues and schedules.

Owns parsing read arguments (ids, statuses, limits) and one call into the engine or store per
field. Every field needs read access (auth.CanRead).
"""

from uuid import UUID

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.auth import CanRead
from laneway.api.graphql.context import RequestContext
from laneway.api.graphql.types import (
    EntityLock,
    QueueStats,
    Schedule,
    WorkflowDefinitionInfo,
    WorkflowEvent,
    WorkflowInstanceStatus,
    check_limit,
    given,
)
from laneway.errors import InvalidInputError
from laneway.model import InstanceFilter, Status


def parse_instance_id(value: str) -> UUID:
    """An instance id argument.

    Raises:
        InvalidInputError: not a UUID.
    """
    try:
        return UUID(value)
    except (TypeError, ValueError):
        raise InvalidInputError("instanceID must be a UUID") from None


def parse_event_id(value: str) -> int:
    """An event id argument: a decimal string of a non-negative integer.

    Raises:
        InvalidInputError: anything else.
    """
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19):
        raise InvalidInputError("an event id must be a decimal string of a non-negative integer")
    return int(value)


def parse_status(value: str) -> Status:
    """A status argument.

    Raises:
        InvalidInputError: not one of the statuses.
    """
    try:
        return Status(value)
    except ValueError:
        known = ", ".join(s.value for s in Status)
        raise InvalidInputError(f"status must be one of {known}") from None


def status_filter(status: str | None, statuses: list[str] | None) -> tuple[Status, ...] | None:
    """`status` and `statuses` together: an instance must match both when both are given."""
    wanted: set[Status] | None = None
    if statuses is not None:
        wanted = {parse_status(s) for s in statuses}
    if status is not None:
        one = parse_status(status)
        wanted = {one} if wanted is None else wanted & {one}
    return None if wanted is None else tuple(sorted(wanted))


async def resolve_workflow_instance(
    info: Info[RequestContext, None], instance_id: strawberry.ID
) -> WorkflowInstanceStatus | None:
    """One instance, or null when there is none with this id."""
    record = await info.context.services.engine.get(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record) if record else None


async def resolve_workflow_instances(
    info: Info[RequestContext, None],
    name: str | None = UNSET,
    queue: str | None = UNSET,
    status: str | None = UNSET,
    statuses: list[str] | None = UNSET,
    limit: int | None = 50,
    offset: int | None = 0,
) -> list[WorkflowInstanceStatus]:
    """Instances newest first, filtered by workflow name, queue and status."""
    where = InstanceFilter(
        name=given(name),
        queue=given(queue),
        statuses=status_filter(given(status), given(statuses)),
    )
    records = await info.context.services.engine.list_instances(
        where, limit=check_limit(limit, 50), offset=offset or 0
    )
    return [WorkflowInstanceStatus.from_record(record) for record in records]


async def resolve_workflow_event_history(
    info: Info[RequestContext, None],
    instance_id: strawberry.ID | None = UNSET,
    after_event_id: strawberry.ID | None = UNSET,
    limit: int | None = 100,
) -> list[WorkflowEvent]:
    """Events in commit order after `afterEventID`, of one instance or of all."""
    instance, after = given(instance_id), given(after_event_id)
    records = await info.context.services.engine.events(
        parse_instance_id(instance) if instance is not None else None,
        after_event_id=parse_event_id(after) if after is not None else 0,
        limit=check_limit(limit, 100),
    )
    return [WorkflowEvent.from_record(record) for record in records]


def resolve_workflows(info: Info[RequestContext, None]) -> list[WorkflowDefinitionInfo]:
    """The workflows registered in this process."""
    return [
        WorkflowDefinitionInfo.from_definition(workflow)
        for workflow in info.context.services.engine.workflows()
    ]


async def resolve_queues(info: Info[RequestContext, None]) -> list[QueueStats]:
    """Every queue with its caps and instance counts per status."""
    return [QueueStats.from_record(r) for r in await info.context.services.engine.queues()]


async def resolve_schedules(info: Info[RequestContext, None]) -> list[Schedule]:
    """Every schedule."""
    return [Schedule.from_record(r) for r in await info.context.services.engine.schedules()]


async def resolve_entity_lock(
    info: Info[RequestContext, None], entity_type: str, entity_id: str
) -> EntityLock | None:
    """Who holds an entity lock right now; null when nobody does (or it expired)."""
    record = await info.context.services.engine.locks.holder(entity_type, entity_id)
    return EntityLock.from_record(record) if record else None


@strawberry.type
class Query:
    workflow_instance: WorkflowInstanceStatus | None = strawberry.field(
        resolver=resolve_workflow_instance, permission_classes=[CanRead]
    )
    workflow_instances: list[WorkflowInstanceStatus] = strawberry.field(
        resolver=resolve_workflow_instances, permission_classes=[CanRead]
    )
    workflow_event_history: list[WorkflowEvent] = strawberry.field(
        resolver=resolve_workflow_event_history, permission_classes=[CanRead]
    )
    workflows: list[WorkflowDefinitionInfo] = strawberry.field(
        resolver=resolve_workflows, permission_classes=[CanRead]
    )
    queues: list[QueueStats] = strawberry.field(
        resolver=resolve_queues, permission_classes=[CanRead]
    )
    schedules: list[Schedule] = strawberry.field(
        resolver=resolve_schedules, permission_classes=[CanRead]
    )
    entity_lock: EntityLock | None = strawberry.field(
        resolver=resolve_entity_lock, permission_classes=[CanRead]
    )
