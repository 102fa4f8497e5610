"""GraphQL types of queues: QueueStats (caps, pause, counts per status) and QueueSample (one
minute of a queue's history), with their `from_record` converters.

Owns how queue records are shown; times are milliseconds since the Unix epoch. Does not decide
caps or sample minutes (the engine and store do).
"""

from typing import Self

import strawberry

from laneway.api.graphql.scalars import millis
from laneway.model import QueueRecord, Status
from laneway.model import (
    QueueSample as QueueSampleRecord,
)


@strawberry.type(description="How many instances of a queue are in each status.")
class StatusCounts:
    pending: int = strawberry.field(description="Instances waiting to be claimed.")
    running: int = strawberry.field(description="Instances running now.")
    paused: int = strawberry.field(
        description="Instances paused at a checkpoint, awaiting resumeWorkflow."
    )
    waiting: int = strawberry.field(description="Instances sleeping or waiting for a signal.")
    completed: int = strawberry.field(description="Instances that completed.")
    failed: int = strawberry.field(description="Instances that failed.")
    cancelled: int = strawberry.field(description="Instances that were cancelled.")


@strawberry.type(
    description=(
        "A queue: its caps, whether it is paused, and how many of its instances are in each status."
    )
)
class QueueStats:
    name: str = strawberry.field(description="The queue's name.")
    concurrency: int = strawberry.field(
        description="At most this many of its instances run at once."
    )
    rate_per_minute: float | None = strawberry.field(
        description="At most this many of its instances start per minute; null: no rate cap."
    )
    key_concurrency: int | None = strawberry.field(
        description="At most this many running per concurrency key (null: no cap per key)."
    )
    key_rate_per_minute: float | None = strawberry.field(
        description="At most this many starts per minute per concurrency key (null: no cap)."
    )
    paused: bool = strawberry.field(
        description=(
            "Paused by pauseQueue: none of its instances starts until resumeQueue (those "
            "running finish; pending ones wait, waitingReason QUEUE_PAUSED)."
        )
    )
    counts: StatusCounts = strawberry.field(description="Its instances per status.")
    settings_source: str = strawberry.field(
        description=(
            'Where concurrency and ratePerMinute came from: "default" (nobody set them), '
            '"code" (a template\'s queue settings, applied at engine start while no operator '
            'has set them; a changed code default is applied at the next start) or "operator" '
            "(configureQueue: code never overrides it; there is no way back to code's "
            "defaults yet)."
        )
    )

    @classmethod
    def from_record(cls, record: QueueRecord) -> Self:
        count = record.counts.get
        return cls(
            name=record.name,
            concurrency=record.concurrency,
            rate_per_minute=record.rate_per_minute,
            key_concurrency=record.key_concurrency,
            key_rate_per_minute=record.key_rate_per_minute,
            paused=record.paused,
            settings_source=record.settings_source,
            counts=StatusCounts(
                pending=count(Status.PENDING, 0),
                running=count(Status.RUNNING, 0),
                paused=count(Status.PAUSED, 0),
                waiting=count(Status.WAITING, 0),
                completed=count(Status.COMPLETED, 0),
                failed=count(Status.FAILED, 0),
                cancelled=count(Status.CANCELLED, 0),
            ),
        )


@strawberry.type(description="One closed minute of a queue's history.")
class QueueSample:
    at: float = strawberry.field(
        description="The start of the minute, in milliseconds since the Unix epoch."
    )
    started: int = strawberry.field(description="Started events of its instances in the minute.")
    completed: int = strawberry.field(description="Its instances that completed in the minute.")
    failed: int = strawberry.field(description="Its instances that failed in the minute.")
    retried: int = strawberry.field(
        description="Failed attempts scheduled for an automatic retry in the minute."
    )
    pending: int = strawberry.field(
        description=(
            "Its pending instances, sampled as the minute closed (0 when no sample was taken)."
        )
    )

    @classmethod
    def from_record(cls, record: QueueSampleRecord) -> Self:
        return cls(
            at=millis(record.minute),
            started=record.started,
            completed=record.completed,
            failed=record.failed,
            retried=record.retried,
            pending=record.pending,
        )
