"""The GraphQL type of a lifecycle event: WorkflowEvent and its `from_record` converter.

Owns how an EventRecord is shown: ids as strings, `at` in milliseconds since the Unix epoch.
The websocket direct path (laneway/api/websocket.py) reads this type's fields by name, so a
field renamed here changes what it sends too. Does not read events (the store and hub do).
"""

from typing import Self

import strawberry

from laneway.api.graphql.scalars import millis
from laneway.model import EventRecord


@strawberry.type(description="One lifecycle event of an instance.")
class WorkflowEvent:
    event_id: strawberry.ID = strawberry.field(
        name="eventID",
        description=(
            "The event's id, a decimal string: pass it as "
            "afterEventID to read or stream the events after it."
        ),
    )
    type: str = strawberry.field(
        description=(
            "What happened: enqueued, started, checkpoint, retrying, paused, resumed, waiting, "
            "signalled, completed, failed or cancelled."
        )
    )
    instance_id: strawberry.ID = strawberry.field(
        name="instanceID", description="The id of the instance it happened to."
    )
    name: str = strawberry.field(description="The name of the instance's workflow.")
    status: str = strawberry.field(description="The instance's status as of this event.")
    at: float = strawberry.field(
        description="When it happened, in milliseconds since the Unix epoch."
    )
    attempt: int | None = strawberry.field(
        description=(
            "The instance's attempt count when the event was written (see `attempts`): on"
            " started, checkpoint, paused, waiting, completed, failed and retrying events the"
            " number of the attempt the event is about (on retrying, the attempt that failed);"
            " 0 on an enqueued event, and on any event before the first attempt started (a"
            " cancelled one, say). Null on resumed and requested retrying events written"
            " before 0.3.9."
        )
    )
    error: str | None = strawberry.field(
        description="The error message, on an event about an error; null on others."
    )
    stage: str | None = strawberry.field(
        description="The template stage, on an event that names one; null on others."
    )
    checkpoint: str | None = strawberry.field(
        description="The checkpoint's label, on an event that names one; null on others."
    )
    signal: str | None = strawberry.field(
        description="The signal's name, for waiting and signalled events (never its payload)."
    )

    @classmethod
    def from_record(cls, record: EventRecord) -> Self:
        return cls(
            event_id=strawberry.ID(str(record.event_id)),
            type=record.type.value,
            instance_id=strawberry.ID(str(record.instance_id)),
            name=record.name,
            status=record.status.value,
            at=millis(record.at),
            attempt=record.attempt,
            error=record.error,
            stage=record.stage,
            checkpoint=record.checkpoint,
            signal=record.signal,
        )
