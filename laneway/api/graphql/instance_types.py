"""GraphQL types of an instance: WorkflowInstanceStatus and what hangs off it (its waiting
reason, failed attempts, operations), and the results of enqueueing and signalling one.

Owns the mapping from instance records to what clients see: ids as strings, timestamps as
milliseconds since the Unix epoch. An instance's internal state and next action are never
exposed. No resolver logic beyond reading one record's waiting reason, failures, operations
and events. Fields whose name ends in an id are named explicitly (`instanceID`), so a host's
schema shows them as schema.graphql does under Strawberry's default name converter.
"""

from collections.abc import Mapping
from typing import Any, Self
from uuid import UUID

import strawberry
from strawberry.types import Info

from laneway.api.graphql.arguments import check_limit
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.errors import CodedErrors
from laneway.api.graphql.event_types import WorkflowEvent
from laneway.api.graphql.scalars import JSON, millis
from laneway.api.graphql.waiting_reasons import WAITING_STATUSES
from laneway.model import (
    EnqueueResult as EnqueueRecord,
)
from laneway.model import (
    FailureRecord,
    InstanceRecord,
    OperationRecord,
)
from laneway.model import (
    SignalResult as SignalRecord,
)
from laneway.model import (
    WaitingReason as WaitingReasonRecord,
)


@strawberry.type
class WaitingReason:
    """Why an instance is not running: decided by the claim's own predicates."""

    code: str = strawberry.field(
        description=(
            "READY (claimable now), DELAYED (delayMs or a schedule's time ahead), "
            "RETRY_BACKOFF (waiting out a retry's backoff), QUEUE_FULL, RATE_LIMITED, "
            "KEY_FULL, KEY_RATE_LIMITED, QUEUE_PAUSED, NO_WORKER (no live process has its "
            "workflow registered, or every one runs an instance alone), AWAITING_REVIEW "
            "(paused at a checkpoint; until: when it expires), SLEEPING (a durable sleep; "
            "until: its wake time), AWAITING_SIGNAL "
            "(waiting for the signal the message names; until: its timeout) or "
            "VERSION_UNAVAILABLE (no live process has the version it runs on)."
        )
    )
    message: str = strawberry.field(description="The reason in one line, for a person.")
    until: float | None = strawberry.field(
        description="When it may next become claimable (ms since the epoch), when known."
    )

    @classmethod
    def from_record(cls, record: WaitingReasonRecord) -> Self:
        return cls(
            code=record.code,
            message=record.message,
            until=millis(record.until) if record.until is not None else None,
        )


@strawberry.type
class WorkflowOperation:
    """The recorded outcome of one operation of a template instance."""

    operation_id: strawberry.ID = strawberry.field(name="operationID")
    stage: str
    type: str
    status: str
    attempts: int
    error: str | None
    started_at: float | None
    finished_at: float | None

    @classmethod
    def from_record(cls, record: OperationRecord) -> Self:
        return cls(
            operation_id=strawberry.ID(str(record.operation_id)),
            stage=record.stage,
            type=record.type,
            status=record.status,
            attempts=record.attempts,
            error=record.error,
            started_at=millis(record.started_at) if record.started_at else None,
            finished_at=millis(record.finished_at) if record.finished_at else None,
        )


@strawberry.type
class AttemptFailure:
    """One failed attempt: its exception's type and message, a bounded traceback (the user's
    frames; none for a lost worker or a wait's timeout), and where a template was."""

    attempt: int
    at: float
    type: str
    message: str
    traceback: str | None
    stage: str | None
    operation: str | None

    @classmethod
    def from_record(cls, record: FailureRecord) -> Self:
        return cls(
            attempt=record.attempt,
            at=millis(record.at),
            type=record.type,
            message=record.message,
            traceback=record.traceback,
            stage=record.stage,
            operation=record.operation,
        )


@strawberry.type
class WorkflowInstanceStatus:
    """One instance: where it is, how it went, what it returned."""

    instance_id: strawberry.ID = strawberry.field(name="instanceID")
    name: str
    queue: str
    status: str
    attempts: int
    last_error: str | None
    created_at: float
    updated_at: float
    priority: int
    run_after: float
    params: JSON | None
    result: JSON | None
    parent_id: strawberry.ID | None = strawberry.field(name="parentID")
    stage: str | None
    checkpoint: str | None
    progress: float | None
    message: str | None
    concurrency_key: str | None
    version: str | None = strawberry.field(description="The version of its workflow it runs on.")
    checkpoint_input_schema: JSON | None = strawberry.field(
        description=(
            "While paused at a checkpoint with an input schema: that JSON Schema, which "
            "resumeWorkflow's input must match."
        )
    )
    uuid: strawberry.Private[UUID]
    reason: strawberry.Private[WaitingReasonRecord | None] = None  # when reason_read
    reason_read: strawberry.Private[bool] = False

    @classmethod
    def from_record(
        cls, record: InstanceRecord, reasons: Mapping[UUID, WaitingReasonRecord] | None = None
    ) -> Self:
        """`reasons`: read in the snapshot `record` was (read_with_reasons), if they were."""
        return cls(
            instance_id=strawberry.ID(str(record.instance_id)),
            name=record.name,
            queue=record.queue,
            status=record.status.value,
            attempts=record.attempts,
            last_error=record.last_error,
            created_at=millis(record.created_at),
            updated_at=millis(record.updated_at),
            priority=record.priority,
            run_after=millis(record.run_after),
            params=record.params,
            result=record.result,
            parent_id=strawberry.ID(str(record.parent_id)) if record.parent_id else None,
            stage=record.stage,
            checkpoint=record.checkpoint,
            progress=record.progress,
            message=record.message,
            concurrency_key=record.concurrency_key,
            version=record.version,
            checkpoint_input_schema=record.checkpoint_input_schema,
            uuid=record.instance_id,
            reason=reasons.get(record.instance_id) if reasons is not None else None,
            reason_read=reasons is not None,
        )

    @strawberry.field(extensions=[CodedErrors()])  # type: ignore[untyped-decorator]
    async def waiting_reason(self, info: Info[Any, Any]) -> WaitingReason | None:
        """Why it is not running yet: null while running and once terminal."""
        if self.status not in WAITING_STATUSES:
            return None
        found = self.reason  # read in the row's snapshot, so both show one moment
        if not self.reason_read:  # read after the row: it may have moved on (then null)
            found = await laneway_of(info.context).waiting_reasons.load(self.uuid)
        return WaitingReason.from_record(found) if found is not None else None

    @strawberry.field(extensions=[CodedErrors()])  # type: ignore[untyped-decorator]
    async def failures(self, info: Info[Any, Any], limit: int | None = 10) -> list[AttemptFailure]:
        """Its failed attempts, newest first (`limit` keeps the newest)."""
        records = await laneway_of(info.context).failures.load((self.uuid, check_limit(limit, 10)))
        return [AttemptFailure.from_record(record) for record in records]

    @strawberry.field(extensions=[CodedErrors()])  # type: ignore[untyped-decorator]
    async def operations(self, info: Info[Any, Any]) -> list[WorkflowOperation]:
        """The recorded operations of a template instance; handler workflows have none."""
        records = await laneway_of(info.context).operations.load(self.uuid)
        return [WorkflowOperation.from_record(record) for record in records]

    @strawberry.field(extensions=[CodedErrors()])  # type: ignore[untyped-decorator]
    async def events(self, info: Info[Any, Any], limit: int | None = 100) -> list[WorkflowEvent]:
        """The newest `limit` events of this instance, oldest first."""
        records = await laneway_of(info.context).services.store.latest_instance_events(
            self.uuid, check_limit(limit, 100)
        )
        return [WorkflowEvent.from_record(record) for record in records]


@strawberry.type
class EnqueueResult:
    """The instance an enqueue names, and whether this call created it."""

    instance_id: strawberry.ID = strawberry.field(name="instanceID")
    created: bool
    record: strawberry.Private[InstanceRecord]

    @strawberry.field
    def instance(self) -> WorkflowInstanceStatus:
        # Built when selected: a batch of 1,000 that asks only for ids builds none.
        return WorkflowInstanceStatus.from_record(self.record)

    @classmethod
    def from_record(cls, record: EnqueueRecord) -> Self:
        return cls(
            instance_id=strawberry.ID(str(record.instance_id)),
            created=record.created,
            record=record.instance,
        )


@strawberry.type
class SignalResult:
    """A signal sent to an instance: its id, whether this call sent it (false: its idempotency
    key named an earlier signal, whose id this is), and the instance after it."""

    signal_id: strawberry.ID = strawberry.field(name="signalID")
    accepted: bool
    instance: WorkflowInstanceStatus

    @classmethod
    def from_record(cls, record: SignalRecord) -> Self:
        return cls(
            signal_id=strawberry.ID(str(record.signal_id)),
            accepted=record.accepted,
            instance=WorkflowInstanceStatus.from_record(record.instance),
        )
