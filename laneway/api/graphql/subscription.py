"""Subscription resolvers: `workflowEvents`, a lossless stream of lifecycle events.

Owns LanewaySubscription, the root field a host's Subscription inherits (or uses as it is),
and turning the subscription's arguments into an EventHub stream. The hub subscribes before
it replays from the event table and drops what it already sent, so a client that resumes
with `afterEventID` sees no gap and no duplicate.
"""

from collections.abc import AsyncGenerator
from typing import Annotated, Any

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql import fields
from laneway.api.graphql.arguments import (
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
    name: Annotated[
        str | None,
        strawberry.argument(
            description="Only the events of instances of the workflow of this name."
        ),
    ] = UNSET,
    after_event_id: Annotated[
        strawberry.ID | None,
        strawberry.argument(
            name="afterEventID",
            description='First replay the events after this one, by its eventID ("0": every '
            "event kept); left out: the stream starts now. BAD_USER_INPUT for anything but a "
            "decimal event id.",
        ),
    ] = UNSET,
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


@strawberry.type(
    name="Subscription",
    description="Laneway's event stream (graphql-transport-ws). It needs read access.",
)
class LanewaySubscription:
    """Laneway's `workflowEvents`; a host's Subscription inherits it (or is this type)."""

    workflow_events: AsyncGenerator[WorkflowEvent, None] = fields.subscription(
        resolve_workflow_events,
        description="Lifecycle events as they commit, without loss: resuming with afterEventID "
        "replays what followed that event, with no gap and no duplicate before the live ones.",
    )
