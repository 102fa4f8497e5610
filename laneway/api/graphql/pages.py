"""The cursor form of the instance list: workflowInstancesConnection, Relay-style.

Owns the connection's types (WorkflowInstanceConnection, WorkflowInstanceEdge, PageInfo) and
its resolver: the filters of workflowInstances plus a concurrency key and a version, parsed as
there (arguments.py), and a keyset page from the engine (engine/page_calls.py). A node is the
list's own WorkflowInstanceStatus, read as a summary (with its payloads only when the operation
selects them: payload_fields.py).
"""

from collections.abc import Mapping
from typing import Annotated, Any
from uuid import UUID

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql.arguments import (
    NameFilter,
    ParentFilter,
    QueueFilter,
    StatusesFilter,
    StatusFilter,
    given,
    parse_parent_id,
    status_filter,
)
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.payload_fields import selects_payloads
from laneway.api.graphql.types import WorkflowInstanceStatus
from laneway.api.graphql.waiting_reasons import read_with_reasons
from laneway.model import InstanceFilter, InstancePage, WaitingReason

DEFAULT_FIRST = 50


@strawberry.type(
    description="Where a page of workflowInstancesConnection ends, and whether another follows."
)
class PageInfo:
    has_next_page: bool = strawberry.field(description="Whether more instances follow this page.")
    end_cursor: str | None = strawberry.field(
        description="The last edge's cursor, to pass as `after` for the next page; null when "
        "the page is empty."
    )
    has_previous_page: bool = strawberry.field(
        description="Always false: pages are read forward (`first`, `after`), for which the "
        "Relay specification lets a server say false (as graphql-relay does)."
    )
    start_cursor: str | None = strawberry.field(
        description="The first edge's cursor; null when the page is empty."
    )


@strawberry.type(description="One instance of a page, with the cursor of its place in the order.")
class WorkflowInstanceEdge:
    cursor: str = strawberry.field(
        description="An opaque cursor: pass it as `after` to read the instances after this one."
    )
    node: WorkflowInstanceStatus = strawberry.field(description="The instance.")


@strawberry.type(
    description="A page of instances, newest first (creation time, then id, descending)."
)
class WorkflowInstanceConnection:
    edges: list[WorkflowInstanceEdge] = strawberry.field(
        description="The page's instances, in order."
    )
    page_info: PageInfo = strawberry.field(
        description="Where the page ends, and whether another follows."
    )

    @classmethod
    def from_page(
        cls, page: InstancePage, reasons: Mapping[UUID, WaitingReason] | None = None
    ) -> "WorkflowInstanceConnection":
        """`reasons`: read in the page's snapshot (read_with_reasons), if they were."""
        return cls(
            edges=[
                WorkflowInstanceEdge(
                    cursor=cursor, node=WorkflowInstanceStatus.from_record(record, reasons)
                )
                for cursor, record in zip(page.cursors, page.records, strict=True)
            ],
            page_info=PageInfo(
                has_next_page=page.has_next,
                end_cursor=page.end_cursor,
                has_previous_page=False,
                start_cursor=page.cursors[0] if page.cursors else None,
            ),
        )


async def resolve_workflow_instances_connection(
    info: Info[Any, Any],
    first: Annotated[
        int | None,
        strawberry.argument(
            description="How many instances in the page, 1 to 500 (null: 50); BAD_USER_INPUT "
            "outside that range."
        ),
    ] = DEFAULT_FIRST,
    after: Annotated[
        str | None,
        strawberry.argument(
            description="The endCursor of the page before (left out: the first page); "
            "BAD_USER_INPUT for a string that is not a cursor of this connection."
        ),
    ] = UNSET,
    name: NameFilter = UNSET,
    queue: QueueFilter = UNSET,
    status: StatusFilter = UNSET,
    statuses: StatusesFilter = UNSET,
    parent_id: ParentFilter = UNSET,
    concurrency_key: Annotated[
        str | None,
        strawberry.argument(description="Only instances enqueued with this concurrency key."),
    ] = UNSET,
    version: Annotated[
        str | None,
        strawberry.argument(
            description="Only instances running on this version of their workflow."
        ),
    ] = UNSET,
) -> WorkflowInstanceConnection:
    """Instances newest first, `first` (1..500) after the cursor `after`, filtered as
    workflowInstances is, and by parent, concurrency key and workflow version. Any page costs
    the same as the first."""
    parent = given(parent_id)
    where = InstanceFilter(
        name=given(name),
        queue=given(queue),
        statuses=status_filter(given(status), given(statuses)),
        parent_id=parse_parent_id(parent) if parent is not None else None,
        concurrency_key=given(concurrency_key),
        version=given(version),
    )
    engine = laneway_of(info.context).services.engine
    page, reasons = await read_with_reasons(
        info,
        lambda: engine.page_instances(
            where,
            first=DEFAULT_FIRST if first is None else first,
            after=given(after),
            payloads=selects_payloads(info),
        ),
        lambda found: found.records,
    )
    return WorkflowInstanceConnection.from_page(page, reasons)
