"""The cursor form of the instance list: workflowInstancesConnection, Relay-style.

Owns the connection's types (WorkflowInstanceConnection, WorkflowInstanceEdge, PageInfo) and
its resolver: the filters of workflowInstances plus a concurrency key and a version, parsed as
there (arguments.py), and a keyset page from the engine (engine/page_calls.py). A node is the
list's own WorkflowInstanceStatus, read as a summary.
"""

from collections.abc import Mapping
from typing import Any
from uuid import UUID

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql.arguments import given, status_filter
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.types import WorkflowInstanceStatus
from laneway.api.graphql.waiting_reasons import read_with_reasons
from laneway.model import InstanceFilter, InstancePage, WaitingReason

DEFAULT_FIRST = 50


@strawberry.type
class PageInfo:
    """Where a page ends, and whether another follows."""

    has_next_page: bool
    end_cursor: str | None = strawberry.field(
        description="The last edge's cursor, to pass as `after` for the next page; null when "
        "the page is empty."
    )


@strawberry.type
class WorkflowInstanceEdge:
    """One instance of a page, with the cursor of its place in the order."""

    cursor: str
    node: WorkflowInstanceStatus


@strawberry.type
class WorkflowInstanceConnection:
    """A page of instances, newest first (creation time, then id, descending)."""

    edges: list[WorkflowInstanceEdge]
    page_info: PageInfo

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
            page_info=PageInfo(has_next_page=page.has_next, end_cursor=page.end_cursor),
        )


async def resolve_workflow_instances_connection(
    info: Info[Any, Any],
    first: int | None = DEFAULT_FIRST,
    after: str | None = UNSET,
    name: str | None = UNSET,
    queue: str | None = UNSET,
    status: str | None = UNSET,
    statuses: list[str] | None = UNSET,
    concurrency_key: str | None = UNSET,
    version: str | None = UNSET,
) -> WorkflowInstanceConnection:
    """Instances newest first, `first` (1..500) after the cursor `after`, filtered as
    workflowInstances is, and by concurrency key and workflow version. Any page costs the same
    as the first."""
    where = InstanceFilter(
        name=given(name),
        queue=given(queue),
        statuses=status_filter(given(status), given(statuses)),
        concurrency_key=given(concurrency_key),
        version=given(version),
    )
    engine = laneway_of(info.context).services.engine
    page, reasons = await read_with_reasons(
        info,
        lambda: engine.page_instances(
            where, first=DEFAULT_FIRST if first is None else first, after=given(after)
        ),
        lambda found: found.records,
    )
    return WorkflowInstanceConnection.from_page(page, reasons)
