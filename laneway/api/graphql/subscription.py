"""Subscription resolvers: `workflowEvents`, a lossless stream of lifecycle events.

Owns LanewaySubscription, the root field a host's Subscription inherits (or uses as it is),
and turning the subscription's arguments into an EventHub stream. The hub subscribes before
it replays from the event table and drops what it already sent, so a client that resumes
with `afterEventID` sees no gap and no duplicate.
"""

from collections.abc import AsyncGenerator
from typing import Any

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql import fields
from laneway.api.graphql.arguments import (
    AfterEventID,
    OptionalInstanceID,
    given,
    parse_event_id,
    parse_instance_id,
)
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.types import WorkflowEvent
from laneway.events import EventSelection


async def resolve_workflow_events(
    info: Info[Any, Any],
    instance_id: OptionalInstanceID = UNSET,
    name: str | None = UNSET,
    after_event_id: AfterEventID = UNSET,
) -> AsyncGenerator[WorkflowEvent, None]:
    """Events as they happen. `afterEventID` first replays the events after that one
    (`"0"`: every retained event); without it, the stream starts now."""
    instance, after_id = given(instance_id), given(after_event_id)
    matches = EventSelection(
        parse_instance_id(instance) if instance is not None else None, given(name)
    )
    after = parse_event_id(after_id) if after_id is not None else None
    async with laneway_of(info.context).services.hub.open_stream(
        after_event_id=after, matches=matches
    ) as events:
        async for event in events:
            yield WorkflowEvent.from_record(event)


@strawberry.type(name="Subscription")
class LanewaySubscription:
    """Laneway's `workflowEvents`; a host's Subscription inherits it (or is this type)."""

    workflow_events: AsyncGenerator[WorkflowEvent, None] = fields.subscription(
        resolve_workflow_events
    )
