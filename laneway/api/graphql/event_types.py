"""The GraphQL type of a lifecycle event: WorkflowEvent and its `from_record` converter.

Owns how an EventRecord is shown: ids as strings, `at` in milliseconds since the Unix epoch.
The websocket direct path (laneway/api/websocket.py) reads this type's fields by name, so a
field renamed here changes what it sends too. Does not read events (the store and hub do).
"""

from typing import Self

import strawberry

from laneway.api.graphql.scalars import millis
from laneway.model import EventRecord


@strawberry.type
class WorkflowEvent:
    """One lifecycle event of an instance."""

    event_id: strawberry.ID = strawberry.field(name="eventID")
    type: str
    instance_id: strawberry.ID = strawberry.field(name="instanceID")
    name: str
    status: str
    at: float
    attempt: int | None
    error: str | None
    stage: str | None
    checkpoint: str | None
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
