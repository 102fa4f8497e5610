"""Bulk mutations of the GraphQL API: cancelWorkflows, retryWorkflows, resumeWorkflows.

Owns the InstanceFilter input (its times are milliseconds since the Unix epoch, as every time
in the API), how it becomes the engine's model.InstanceFilter (BAD_USER_INPUT for an unknown
status or a time that is not a finite moment), and BulkResult. What each action applies to,
the batches and the dry run are the engine's (engine/bulk_calls.py).
"""

import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from laneway.api.graphql.arguments import given, parse_parent_id, status_filter
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.errors import STOP_AT
from laneway.errors import InvalidInputError
from laneway.model import BulkResult as BulkRecord
from laneway.model import InstanceFilter as FilterModel

# The latest moment a created-window bound may name: the end of year 9999, in ms.
MAX_TIME_MS = 253_402_300_799_999.0


@strawberry.input(
    name="InstanceFilter",
    description="Which instances a bulk action looks at; a field left out (or null) matches any.",
)
class InstanceFilterInput:
    name: str | None = strawberry.field(
        default=strawberry.UNSET, description="Only instances of the workflow of this name."
    )
    queue: str | None = strawberry.field(
        default=strawberry.UNSET, description="Only instances in the queue of this name."
    )
    statuses: list[str] | None = strawberry.field(
        default=strawberry.UNSET,
        description=(
            "Only instances in one of these statuses (BAD_USER_INPUT for an unknown one)."
        ),
    )
    parent_id: strawberry.ID | None = strawberry.field(
        default=strawberry.UNSET,
        name="parentID",
        description=(
            "Only the children of this instance (those it enqueued: their parentID), by its id"
            " (a UUID, BAD_USER_INPUT otherwise): a bulk cancel with it cancels a parent's"
            " children, which cancelling the parent leaves running."
        ),
    )
    concurrency_key: str | None = strawberry.field(
        default=strawberry.UNSET,
        name="concurrencyKey",
        description="Only instances enqueued with this concurrency key.",
    )
    version: str | None = strawberry.field(
        default=strawberry.UNSET,
        description="Only instances running on this version of their workflow.",
    )
    created_after: float | None = strawberry.field(
        default=strawberry.UNSET,
        name="createdAfter",
        description=(
            "Only instances created after this time (exclusive), in milliseconds since the Unix"
            " epoch, 0 to the end of year 9999 (BAD_USER_INPUT otherwise)."
        ),
    )
    created_before: float | None = strawberry.field(
        default=strawberry.UNSET,
        name="createdBefore",
        description=(
            "Only instances created before this time (exclusive), in milliseconds since the "
            "Unix epoch, 0 to the end of year 9999 (BAD_USER_INPUT otherwise)."
        ),
    )

    def to_model(self) -> FilterModel:
        """The engine's filter.

        Raises:
            InvalidInputError: an unknown status, a parentID that is not a UUID, or a time that
                is not finite or out of range.
        """
        parent = given(self.parent_id)
        return FilterModel(
            name=given(self.name),
            queue=given(self.queue),
            statuses=status_filter(None, given(self.statuses), "filter.statuses"),
            parent_id=parse_parent_id(parent) if parent is not None else None,
            concurrency_key=given(self.concurrency_key),
            version=given(self.version),
            created_after=parse_time_ms(given(self.created_after), "createdAfter"),
            created_before=parse_time_ms(given(self.created_before), "createdBefore"),
        )


def parse_time_ms(value: float | None, what: str) -> datetime | None:
    """A moment given in milliseconds since the Unix epoch (None stays None).

    Raises:
        InvalidInputError: not finite, or outside 0 ... the end of year 9999.
    """
    if value is None:
        return None
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME_MS):
        raise InvalidInputError(
            f"{what} must be a time in milliseconds from 0 to {MAX_TIME_MS:.0f}"
        )
    return datetime.fromtimestamp(value / 1000.0, tz=UTC)


@strawberry.type(description="What a bulk action did, or on a dry run would do.")
class BulkResult:
    matched: int = strawberry.field(
        description="How many instances the filter selects that the action applies to."
    )
    changed: int = strawberry.field(
        description="How many of them this call changed (0 on a dry run)."
    )
    sample_ids: list[strawberry.ID] = strawberry.field(
        name="sampleIDs", description="Up to 100 ids of the matched instances, newest first."
    )

    @classmethod
    def from_record(cls, record: BulkRecord) -> "BulkResult":
        return cls(
            matched=record.matched,
            changed=record.changed,
            sample_ids=[strawberry.ID(str(i)) for i in record.sample_ids],
        )


BulkCall = Callable[..., Awaitable[BulkRecord]]


# Explicit argument names: the contract's, under any name converter of a host's schema.
Filter = Annotated[
    InstanceFilterInput,
    strawberry.argument(name="filter", description="Which instances the action looks at."),
]
DryRun = Annotated[
    bool | None,
    strawberry.argument(
        name="dryRun",
        description="True: count and sample what it would change, and change nothing "
        "(null: false).",
    ),
]


async def _run(
    info: Info[Any, Any], call: BulkCall, where: InstanceFilterInput, dry_run: bool | None
) -> BulkResult:
    """The call, stopping between batches before the HTTP operation's deadline (BulkStoppedError:
    TIMEOUT with `matched` and `changed`) rather than cut off with nothing said."""
    connection = laneway_of(info.context).connection
    stop_at = None if connection is None else connection.scope.get(STOP_AT)
    record = await call(where.to_model(), dry_run=bool(dry_run), stop_at=stop_at)
    return BulkResult.from_record(record)


async def resolve_cancel_workflows(
    info: Info[Any, Any], where: Filter, dry_run: DryRun = False
) -> BulkResult:
    """Cancel every instance the filter selects that is not terminal (dryRun: count and sample
    only); an instance that ends while this runs stays as it ended."""
    return await _run(info, laneway_of(info.context).services.engine.cancel_many, where, dry_run)


async def resolve_retry_workflows(
    info: Info[Any, Any], where: Filter, dry_run: DryRun = False
) -> BulkResult:
    """Run again every failed instance the filter selects (dryRun: count and sample only); they
    go back through their queue's caps and rates."""
    return await _run(info, laneway_of(info.context).services.engine.retry_many, where, dry_run)


async def resolve_resume_workflows(
    info: Info[Any, Any], where: Filter, dry_run: DryRun = False
) -> BulkResult:
    """Resume, without input, every paused instance the filter selects (dryRun: count and
    sample only); one whose checkpoint's input schema needs an input stays paused (matched, not
    changed)."""
    return await _run(info, laneway_of(info.context).services.engine.resume_many, where, dry_run)
