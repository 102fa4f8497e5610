"""Query resolvers: instances, event history, workflows, queues and their history, schedules
and live workers.

Owns LanewayQuery, the root fields a host's Query inherits, and one call into the engine or
store per field. Every field needs read access (permissions.CanRead); arguments are parsed in
arguments.py.
"""

from typing import Annotated, Any

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql import fields
from laneway.api.graphql.arguments import (
    EntityID,
    InstanceID,
    NameFilter,
    OptionalInstanceID,
    QueueFilter,
    StatusesFilter,
    StatusFilter,
    check_limit,
    given,
    parse_event_id,
    parse_instance_id,
    status_filter,
)
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.pages import (
    WorkflowInstanceConnection,
    resolve_workflow_instances_connection,
)
from laneway.api.graphql.payload_fields import selects_payloads
from laneway.api.graphql.types import (
    EntityLock,
    QueueSample,
    QueueStats,
    Schedule,
    Worker,
    WorkflowDefinitionInfo,
    WorkflowEvent,
    WorkflowInstanceStatus,
)
from laneway.api.graphql.versions import PreflightFinding, resolve_deploy_preflight
from laneway.api.graphql.waiting_reasons import read_with_reasons
from laneway.model import InstanceFilter


async def resolve_workflow_instance(
    info: Info[Any, Any], instance_id: InstanceID
) -> WorkflowInstanceStatus | None:
    """One instance, or null when there is none with this id."""
    engine = laneway_of(info.context).services.engine
    record, reasons = await read_with_reasons(
        info,
        lambda: engine.get(parse_instance_id(instance_id)),
        lambda found: [found] if found else [],
    )
    return WorkflowInstanceStatus.from_record(record, reasons) if record else None


async def resolve_workflow_instances(
    info: Info[Any, Any],
    name: NameFilter = UNSET,
    queue: QueueFilter = UNSET,
    status: StatusFilter = UNSET,
    statuses: StatusesFilter = UNSET,
    limit: Annotated[
        int | None,
        strawberry.argument(
            description="How many to return, 1 to 500 (null: 50); BAD_USER_INPUT outside that "
            "range."
        ),
    ] = 50,
    offset: Annotated[
        int | None,
        strawberry.argument(
            description="How many to skip first (null: 0); BAD_USER_INPUT when negative."
        ),
    ] = 0,
) -> list[WorkflowInstanceStatus]:
    """Instances newest first, filtered by workflow name, queue and status."""
    where = InstanceFilter(
        name=given(name),
        queue=given(queue),
        statuses=status_filter(given(status), given(statuses)),
    )
    engine = laneway_of(info.context).services.engine
    records, reasons = await read_with_reasons(
        info,
        # Summaries: the type never shows an instance's state or next params (megabytes, maybe),
        # and params, result and the wait (256 KiB each) only when the operation selects them.
        lambda: engine.list_instances(
            where,
            limit=check_limit(limit, 50),
            offset=offset or 0,
            summaries=True,
            payloads=selects_payloads(info),
        ),
        lambda found: found,
    )
    return [WorkflowInstanceStatus.from_record(record, reasons) for record in records]


async def resolve_workflow_event_history(
    info: Info[Any, Any],
    instance_id: OptionalInstanceID = UNSET,
    after_event_id: Annotated[
        strawberry.ID | None,
        strawberry.argument(
            name="afterEventID",
            description="Only events after this one, by its eventID (a decimal string, "
            "BAD_USER_INPUT otherwise); left out: from the oldest event kept.",
        ),
    ] = UNSET,
    limit: Annotated[
        int | None,
        strawberry.argument(
            description="At most this many events, 1 to 500 (null: 100); BAD_USER_INPUT outside "
            "that range."
        ),
    ] = 100,
) -> list[WorkflowEvent]:
    """Events in commit order after `afterEventID`, of one instance or of all."""
    instance, after = given(instance_id), given(after_event_id)
    records = await laneway_of(info.context).services.engine.events(
        parse_instance_id(instance) if instance is not None else None,
        after_event_id=parse_event_id(after) if after is not None else 0,
        limit=check_limit(limit, 100),
    )
    return [WorkflowEvent.from_record(record) for record in records]


def resolve_workflows(info: Info[Any, Any]) -> list[WorkflowDefinitionInfo]:
    """The workflows registered in this process: each by its newest version, with the list of
    its versions."""
    registry = laneway_of(info.context).services.engine.registry
    return [
        WorkflowDefinitionInfo.from_definition(workflow, registry.versions(workflow.name))
        for workflow in registry.newest()
    ]


async def resolve_queues(info: Info[Any, Any]) -> list[QueueStats]:
    """Every queue with its caps and instance counts per status."""
    return [
        QueueStats.from_record(r) for r in await laneway_of(info.context).services.engine.queues()
    ]


async def resolve_queue_history(
    info: Info[Any, Any],
    name: Annotated[str, strawberry.argument(description="The queue's name.")],
    minutes: Annotated[
        int | None,
        strawberry.argument(
            description="How many closed minutes, 1 to 1440 (null: 60); BAD_USER_INPUT outside "
            "that range."
        ),
    ] = 60,
) -> list[QueueSample]:
    """A queue's last `minutes` closed minutes (1..1440, null: 60), oldest first, one per
    minute, zeros where idle."""
    engine = laneway_of(info.context).services.engine
    samples = await engine.queue_history(name, minutes=60 if minutes is None else minutes)
    return [QueueSample.from_record(r) for r in samples]


async def resolve_schedules(info: Info[Any, Any]) -> list[Schedule]:
    """Every schedule."""
    return [
        Schedule.from_record(r) for r in await laneway_of(info.context).services.engine.schedules()
    ]


async def resolve_workers(info: Info[Any, Any]) -> list[Worker]:
    """Every live process that runs an engine, with what it runs and when it was last seen."""
    return [Worker.from_record(r) for r in await laneway_of(info.context).services.engine.workers()]


async def resolve_entity_lock(
    info: Info[Any, Any],
    entity_type: Annotated[str, strawberry.argument(description="The kind of entity.")],
    entity_id: EntityID,
) -> EntityLock | None:
    """Who holds an entity lock right now; null when nobody does (or it expired)."""
    record = await laneway_of(info.context).services.engine.locks.holder(entity_type, entity_id)
    return EntityLock.from_record(record) if record else None


@strawberry.type(
    name="Query",
    description="Laneway's queries: instances, events, workflows, queues, schedules, locks and "
    "workers. Each needs read access.",
)
class LanewayQuery:
    """Laneway's queries; a host's Query inherits them next to its own fields."""

    workflow_instance: WorkflowInstanceStatus | None = fields.query(
        resolve_workflow_instance,
        description="One instance by its id; null when there is none.",
    )
    workflow_instances: list[WorkflowInstanceStatus] = fields.query(
        resolve_workflow_instances,
        description="Instances newest first, filtered by workflow name, queue and status, a "
        "page by limit and offset (workflowInstancesConnection pages without an offset's cost).",
    )
    workflow_instances_connection: WorkflowInstanceConnection = fields.query(
        resolve_workflow_instances_connection,
        description="Instances newest first (creation time, then id), a page at a time after a "
        "cursor, filtered as workflowInstances is and by concurrency key and version. Any page "
        "costs the same as the first.",
    )
    workflow_event_history: list[WorkflowEvent] = fields.query(
        resolve_workflow_event_history,
        description="Events in commit order after afterEventID, of one instance or of all: to "
        "read on, pass the last eventID as afterEventID.",
    )
    workflows: list[WorkflowDefinitionInfo] = fields.query(
        resolve_workflows,
        description="The workflows registered in this process, each by its newest version, "
        "with the list of its versions.",
    )
    queues: list[QueueStats] = fields.query(
        resolve_queues,
        description="Every queue, with its caps, whether it is paused, and its instance counts "
        "per status.",
    )
    queue_history: list[QueueSample] = fields.query(
        resolve_queue_history,
        description="A queue's last `minutes` closed minutes, oldest first, one sample per "
        "minute (zeros where it was idle).",
    )
    schedules: list[Schedule] = fields.query(resolve_schedules, description="Every schedule.")
    entity_lock: EntityLock | None = fields.query(
        resolve_entity_lock,
        description="Who holds an entity's lock now; null when nobody does (or the lock expired).",
    )
    workers: list[Worker] = fields.query(
        resolve_workers,
        description="Every live process that runs an engine, with what it runs and when it was "
        "last seen.",
    )
    deploy_preflight: list[PreflightFinding] = fields.query(
        resolve_deploy_preflight,
        description="What the code described by `workflows` could not run of the instances in "
        "flight, per workflow version and reason; empty when deploying it strands nothing.",
    )
