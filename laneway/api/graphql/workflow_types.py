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


@strawberry.type
class WorkflowDefinitionInfo:
    """A workflow this process can run."""

    name: str
    queue: str
    kind: str
    stages: list[str]
    description: str
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


@strawberry.type
class EntityLock:
    """An entity lock held by an instance until it expires, is released, or the instance ends."""

    entity_type: str
    entity_id: str = strawberry.field(name="entityID")
    owner_instance_id: strawberry.ID = strawberry.field(name="ownerInstanceID")
    fencing_token: str
    expires_at: float

    @classmethod
    def from_record(cls, record: LockRecord) -> Self:
        return cls(
            entity_type=record.entity_type,
            entity_id=record.entity_id,
            owner_instance_id=strawberry.ID(str(record.owner_instance)),
            fencing_token=str(record.fencing_token),
            expires_at=millis(record.expires_at),
        )


@strawberry.type
class Worker:
    """A live process that runs an engine, as of its last heartbeat; role "serve" or "worker"."""

    owner_id: strawberry.ID = strawberry.field(name="ownerID")
    role: str
    host: str
    pid: int
    workflows: list[str]
    versions: list[WorkflowVersion]
    running: int
    concurrency: int
    started_at: float
    last_seen_at: float

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


@strawberry.type
class Schedule:
    """A recurring enqueue: an interval (`every`) or a cron expression in a timezone."""

    name: str
    workflow_name: str
    every: str | None
    cron: str | None
    timezone: str
    enabled: bool
    next_run: float | None
    params: JSON | None

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
