"""GraphQL types of what runs workflows and around them: the workflows a process registered,
its live workers, schedules and entity locks, with their converters.

Owns how those records are shown: ids as strings, times as milliseconds since the Unix epoch.
Does not read them (query.py's resolvers do) or decide anything about them (the engine does).
"""

from typing import Self

import strawberry

from laneway.api.graphql.scalars import JSON, millis
from laneway.api.graphql.versions import WorkflowVersion
from laneway.engine import Workflow
from laneway.model import LockRecord, ScheduleRecord, WorkerRecord


@strawberry.type(description="A workflow this process has registered, by its newest version.")
class WorkflowDefinitionInfo:
    name: str = strawberry.field(description="The workflow's name: what enqueueWorkflow takes.")
    queue: str = strawberry.field(
        description="The queue its instances run in unless an enqueue names another."
    )
    kind: str = strawberry.field(description='"handlers" (a handler map) or "template".')
    stages: list[str] = strawberry.field(
        description="A template's stages in order; empty for a handler map."
    )
    description: str = strawberry.field(description="The description its author gave it.")
    version: str = strawberry.field(description="The newest version here: what an enqueue starts.")
    versions: list[str] = strawberry.field(description="Every version registered, newest first.")

    @classmethod
    def from_definition(cls, workflow: Workflow, versions: list[str]) -> Self:
        return cls(
            name=workflow.name,
            queue=workflow.queue_name,
            kind=workflow.kind,
            stages=list(workflow.stages),
            description=workflow.description,
            version=workflow.version,
            versions=versions,
        )


@strawberry.type(
    description=(
        "An entity lock, held by an instance until it expires, is released, or the instance ends."
    )
)
class EntityLock:
    entity_type: str = strawberry.field(description="The kind of entity locked.")
    entity_id: str = strawberry.field(name="entityID", description="The locked entity's id.")
    owner_instance_id: strawberry.ID = strawberry.field(
        name="ownerInstanceID", description="The instance that holds the lock."
    )
    fencing_token: str = strawberry.field(
        description=(
            "The fencing token of this hold, as a decimal string: it grows with every "
            "acquisition, so a holder whose lock expired and was taken can be told from the new"
            " one."
        )
    )
    expires_at: float = strawberry.field(
        description="When the lock expires unless renewed, in milliseconds since the Unix epoch."
    )

    @classmethod
    def from_record(cls, record: LockRecord) -> Self:
        return cls(
            entity_type=record.entity_type,
            entity_id=record.entity_id,
            owner_instance_id=strawberry.ID(str(record.owner_instance)),
            fencing_token=str(record.fencing_token),
            expires_at=millis(record.expires_at),
        )


@strawberry.type(description="A live process that runs an engine, as of its last heartbeat.")
class Worker:
    owner_id: strawberry.ID = strawberry.field(
        name="ownerID", description="The process's id in the workers registry."
    )
    role: str = strawberry.field(
        description=(
            '"serve" (the API\'s process) or "worker" (laneway worker, or an engine run as a '
            "library)."
        )
    )
    host: str = strawberry.field(description="The host name it runs on.")
    pid: int = strawberry.field(description="Its process id on that host.")
    workflows: list[str] = strawberry.field(
        description="The names of the workflows it has registered."
    )
    versions: list[WorkflowVersion] = strawberry.field(
        description="Each workflow version it has registered."
    )
    running: int = strawberry.field(
        description="How many instances it was running at its last heartbeat."
    )
    concurrency: int = strawberry.field(description="At most this many instances it runs at once.")
    started_at: float = strawberry.field(
        description="When it started, in milliseconds since the Unix epoch."
    )
    last_seen_at: float = strawberry.field(
        description="Its last heartbeat, in milliseconds since the Unix epoch."
    )

    @classmethod
    def from_record(cls, record: WorkerRecord) -> Self:
        return cls(
            owner_id=strawberry.ID(record.owner_id),
            role=record.role,
            host=record.host,
            pid=record.pid,
            workflows=list(record.workflows),
            versions=[WorkflowVersion(name=name, version=v) for name, v in record.versions],
            running=record.running,
            concurrency=record.concurrency,
            started_at=millis(record.started_at),
            last_seen_at=millis(record.last_seen_at),
        )


@strawberry.type(
    description=(
        "A recurring enqueue: every interval (`every`) or on a cron expression in a timezone."
    )
)
class Schedule:
    name: str = strawberry.field(description="The schedule's name.")
    workflow_name: str = strawberry.field(description="The workflow each fire enqueues.")
    every: str | None = strawberry.field(
        description=(
            "Its interval (such as 30s, 5m, 1h30m, 1d), counted from the Unix epoch in UTC; "
            "null for a cron schedule."
        )
    )
    cron: str | None = strawberry.field(
        description="Its cron expression, read in timezone; null for an interval schedule."
    )
    timezone: str = strawberry.field(
        description="The timezone its cron expression is read in (UTC for an interval)."
    )
    enabled: bool = strawberry.field(description="Whether it fires; setScheduleEnabled changes it.")
    next_run: float | None = strawberry.field(
        description=(
            "When it fires next, in milliseconds since the Unix epoch; null while disabled."
        )
    )
    params: JSON | None = strawberry.field(
        description="The params each fire enqueues its workflow with."
    )

    @classmethod
    def from_record(cls, record: ScheduleRecord) -> Self:
        return cls(
            name=record.name,
            workflow_name=record.workflow_name,
            every=record.every,
            cron=record.cron,
            timezone=record.timezone,
            enabled=record.enabled,
            next_run=millis(record.next_run_at) if record.enabled else None,
            params=record.params,
        )
