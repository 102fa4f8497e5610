"""GraphQL types of an instance: WorkflowInstanceStatus and what hangs off it (its waiting
reason, failed attempts, operations), and the results of enqueueing and signalling one.

Owns the mapping from instance records to what clients see: ids as strings, timestamps as
milliseconds since the Unix epoch. An instance's internal state and next action are never
exposed. No resolver logic beyond reading one record's waiting reason, failures, operations
and events. Fields whose name ends in an id are named explicitly (`instanceID`), so a host's
schema shows them as schema.graphql does under Strawberry's default name converter.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Self
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


@strawberry.type(
    description=(
        "Why an instance is not running yet, decided by the same predicates the claim uses."
    )
)
class WaitingReason:
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


@strawberry.type(description="The recorded outcome of one operation of a template instance.")
class WorkflowOperation:
    operation_id: strawberry.ID = strawberry.field(
        name="operationID", description="The operation's id."
    )
    stage: str = strawberry.field(description="The stage the operation belongs to.")
    type: str = strawberry.field(description="The operation's type, as the template names it.")
    status: str = strawberry.field(description="Its recorded outcome, such as completed or failed.")
    attempts: int = strawberry.field(description="How many attempts it took.")
    error: str | None = strawberry.field(description="Its error when it failed; null otherwise.")
    started_at: float | None = strawberry.field(
        description=(
            "When it started, in milliseconds since the Unix epoch; null when not recorded."
        )
    )
    finished_at: float | None = strawberry.field(
        description=(
            "When it finished, in milliseconds since the Unix epoch; null while unfinished."
        )
    )

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


@strawberry.type(
    description=(
        "One failed attempt of an instance: its exception's type and message, a bounded "
        "traceback, and where a template was."
    )
)
class AttemptFailure:
    attempt: int = strawberry.field(description="The number of the attempt that failed.")
    at: float = strawberry.field(
        description="When it failed, in milliseconds since the Unix epoch."
    )
    type: str = strawberry.field(description="The exception's type name.")
    message: str = strawberry.field(description="The exception's message.")
    traceback: str | None = strawberry.field(
        description=(
            "A bounded traceback of the user's frames; null for a lost worker or a wait's timeout."
        )
    )
    stage: str | None = strawberry.field(
        description="The template stage it failed in; null for a handler workflow."
    )
    operation: str | None = strawberry.field(
        description="The template operation it failed in; null when none."
    )

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


@strawberry.type(
    description="One instance of a workflow: where it is, how it went, what it returned."
)
class WorkflowInstanceStatus:
    instance_id: strawberry.ID = strawberry.field(
        name="instanceID", description="The instance's id (a UUID)."
    )
    name: str = strawberry.field(description="The name of the workflow it runs.")
    queue: str = strawberry.field(description="The queue it runs in.")
    status: str = strawberry.field(
        description=(
            "One of pending, running, paused, waiting (sleeping or waiting for a signal), "
            "completed, failed or cancelled."
        )
    )
    attempts: int = strawberry.field(
        description=(
            "How many times it has been claimed to run, over all its steps (the count never"
            " goes back): one claim can run several steps, and each retry, hand-back and"
            " wake-up after a wait is a new claim. A handler's ctx.attempt is its step's own"
            " count: it starts at 1 for each step and does not count hand-backs."
        )
    )
    last_error: str | None = strawberry.field(
        description="The last error recorded for it; null when there is none."
    )
    created_at: float = strawberry.field(
        description="When it was enqueued, in milliseconds since the Unix epoch."
    )
    updated_at: float = strawberry.field(
        description="When it last changed, in milliseconds since the Unix epoch."
    )
    priority: int = strawberry.field(
        description=(
            "Its priority: a due instance of higher priority is claimed first in its queue "
            "(default 0)."
        )
    )
    run_after: float = strawberry.field(
        description="The earliest time it may be claimed, in milliseconds since the Unix epoch."
    )
    params: JSON | None = strawberry.field(description="The params it was enqueued with.")
    result: JSON | None = strawberry.field(
        description="What it returned once completed; null until then."
    )
    parent_id: strawberry.ID | None = strawberry.field(
        name="parentID",
        description=(
            "The instance that started it; null when it was not started by another instance."
        ),
    )
    stage: str | None = strawberry.field(
        description=(
            "The stage it is at, as its template or handler last reported; null when none."
        )
    )
    checkpoint: str | None = strawberry.field(
        description="The checkpoint it last reached or is paused at; null when none."
    )
    progress: float | None = strawberry.field(
        description="The progress its handler last reported, from 0 to 1; null when none."
    )
    message: str | None = strawberry.field(
        description="The status line its handler last reported; null when none."
    )
    concurrency_key: str | None = strawberry.field(
        description=(
            "The concurrency key it was enqueued with: its queue's keyConcurrency and "
            "keyRatePerMinute apply per key. Null when none."
        )
    )
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

    @strawberry.field(  # type: ignore[untyped-decorator]
        extensions=[CodedErrors()],
        description=(
            "Why it is not running yet, while pending, paused or waiting; null while running, "
            "once it has ended, or when it moved on before the reason was read."
        ),
    )
    async def waiting_reason(self, info: Info[Any, Any]) -> WaitingReason | None:
        """Why it is not running yet: null while running and once terminal."""
        if self.status not in WAITING_STATUSES:
            return None
        found = self.reason  # read in the row's snapshot, so both show one moment
        if not self.reason_read:  # read after the row: it may have moved on (then null)
            found = await laneway_of(info.context).waiting_reasons.load((self.uuid, self.status))
        return WaitingReason.from_record(found) if found is not None else None

    @strawberry.field(  # type: ignore[untyped-decorator]
        extensions=[CodedErrors()], description="Its failed attempts, newest first."
    )
    async def failures(
        self,
        info: Info[Any, Any],
        limit: Annotated[
            int | None,
            strawberry.argument(
                description="How many of the newest to return, 1 to 500 (null: 10); "
                "BAD_USER_INPUT outside that range."
            ),
        ] = 10,
    ) -> list[AttemptFailure]:
        """Its failed attempts, newest first (`limit` keeps the newest)."""
        records = await laneway_of(info.context).failures.load((self.uuid, check_limit(limit, 10)))
        return [AttemptFailure.from_record(record) for record in records]

    @strawberry.field(  # type: ignore[untyped-decorator]
        extensions=[CodedErrors()],
        description="The recorded operations of a template instance; empty for a handler workflow.",
    )
    async def operations(self, info: Info[Any, Any]) -> list[WorkflowOperation]:
        """The recorded operations of a template instance; handler workflows have none."""
        records = await laneway_of(info.context).operations.load(self.uuid)
        return [WorkflowOperation.from_record(record) for record in records]

    @strawberry.field(  # type: ignore[untyped-decorator]
        extensions=[CodedErrors()],
        description="Its newest `limit` lifecycle events, oldest first.",
    )
    async def events(
        self,
        info: Info[Any, Any],
        limit: Annotated[
            int | None,
            strawberry.argument(
                description="How many of the newest events to return, 1 to 500 (null: 100); "
                "BAD_USER_INPUT outside that range."
            ),
        ] = 100,
    ) -> list[WorkflowEvent]:
        """The newest `limit` events of this instance, oldest first."""
        records = await laneway_of(info.context).services.store.latest_instance_events(
            self.uuid, check_limit(limit, 100)
        )
        return [WorkflowEvent.from_record(record) for record in records]


@strawberry.type(description="The instance an enqueue names, and whether this call created it.")
class EnqueueResult:
    instance_id: strawberry.ID = strawberry.field(
        name="instanceID", description="The instance's id."
    )
    created: bool = strawberry.field(
        description=(
            "True when this call created it; false when its idempotency or singleton key named "
            "an instance that already existed."
        )
    )
    record: strawberry.Private[InstanceRecord]

    @strawberry.field(  # type: ignore[untyped-decorator]
        description="The instance, as this call left it or found it."
    )
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


@strawberry.type(description="A signal sent to an instance, and the instance after it.")
class SignalResult:
    signal_id: strawberry.ID = strawberry.field(
        name="signalID",
        description=(
            "The signal's id; when accepted is false, the id of the earlier signal its "
            "idempotency key named."
        ),
    )
    accepted: bool = strawberry.field(
        description=(
            "True when this call sent the signal; false when its idempotencyKey repeated an "
            "earlier signal's."
        )
    )
    instance: WorkflowInstanceStatus = strawberry.field(
        description="The instance after the signal."
    )

    @classmethod
    def from_record(cls, record: SignalRecord) -> Self:
        return cls(
            signal_id=strawberry.ID(str(record.signal_id)),
            accepted=record.accepted,
            instance=WorkflowInstanceStatus.from_record(record.instance),
        )
