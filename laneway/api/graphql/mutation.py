"""Mutation resolvers: cancel, resume, retry, signal, schedules, queue caps and the pause of a
queue (enqueue and the batch enqueue are enqueue.py's, the bulk cancel, retry and resume
bulk.py's).

Owns LanewayMutation, the root fields a host's Mutation inherits (or uses as it is), and one
engine call per field. Every field needs write access (permissions.CanWrite); the engine
decides what is allowed in which status.
"""

from typing import Any

import strawberry
from strawberry.types import Info
from strawberry.types.unset import UNSET

from laneway.api.graphql import fields
from laneway.api.graphql.arguments import InstanceID, given, parse_instance_id
from laneway.api.graphql.bulk import (
    BulkResult,
    resolve_cancel_workflows,
    resolve_resume_workflows,
    resolve_retry_workflows,
)
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.enqueue import resolve_enqueue_workflow, resolve_enqueue_workflows
from laneway.api.graphql.types import (
    JSON,
    EnqueueResult,
    QueueStats,
    Schedule,
    SignalResult,
    WorkflowInstanceStatus,
)


async def resolve_cancel_workflow(
    info: Info[Any, Any], instance_id: InstanceID
) -> WorkflowInstanceStatus:
    """Cancel an instance; cancelling a terminal one returns it unchanged."""
    record = await laneway_of(info.context).services.engine.cancel(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


async def resolve_resume_workflow(
    info: Info[Any, Any], instance_id: InstanceID, input: JSON | None = UNSET
) -> WorkflowInstanceStatus:
    """Put a paused instance back to pending (CONFLICT unless it is paused), with the
    reviewer's input: it must match checkpointInputSchema where there is one (else
    BAD_USER_INPUT naming the failing path in extensions.path, every one in
    extensions.problems, and the instance stays paused). The input becomes the params of the
    next action (a handler map) or joins the context under the checkpoint's label (a
    template)."""
    record = await laneway_of(info.context).services.engine.resume(
        parse_instance_id(instance_id), given(input)
    )
    return WorkflowInstanceStatus.from_record(record)


async def resolve_signal_workflow(
    info: Info[Any, Any],
    instance_id: InstanceID,
    name: str,
    payload: JSON | None = UNSET,
    idempotency_key: str | None = UNSET,
) -> SignalResult:
    """Send a signal to an instance. A wait for it goes on with the payload as its params;
    otherwise the signal is kept for the next wait of its name (oldest first, each once). A
    repeated idempotencyKey (per instance) is not a second signal: accepted false. NOT_FOUND
    for an unknown instance, CONFLICT for one that has ended."""
    result = await laneway_of(info.context).services.engine.signal(
        parse_instance_id(instance_id),
        name,
        given(payload),
        idempotency_key=given(idempotency_key),
    )
    return SignalResult.from_record(result)


async def resolve_retry_workflow(
    info: Info[Any, Any], instance_id: InstanceID
) -> WorkflowInstanceStatus:
    """Run a failed instance again (CONFLICT unless it is failed)."""
    record = await laneway_of(info.context).services.engine.retry(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


CREATE_SCHEDULE = (
    "Create a schedule, or replace the one of that name. It fires every interval (every: 30s,"
    " 5m, 1h30m, 1d; units d, h, m, s, ms, in all whole seconds from 1s to 366d), counted from"
    " the Unix epoch in UTC (1d fires at 00:00 UTC, 7d on Thursdays), so an interval takes no"
    " timezone but UTC (BAD_USER_INPUT); or on a cron expression (five fields, or @hourly,"
    " @daily, @weekly, @monthly, @yearly) read in timezone (default UTC). A new schedule is"
    " enabled; replacing one never changes whether it is enabled (setScheduleEnabled does). A"
    " replacement with the"
    " same timing (the same every, or the same cron and timezone) keeps its next fire, so a"
    " catch-up fire due after downtime still happens; another timing fires next at its first"
    " occurrence from now. A fire does not wait for the previous fire's instance to end (no"
    " overlap policy; fires carry no singleton or concurrency key): for one at a time, give the"
    " workflow a queue of concurrency 1 (configureQueue)."
)


async def resolve_create_schedule(
    info: Info[Any, Any],
    name: str,
    workflow_name: str,
    params: JSON | None = UNSET,
    every: str | None = UNSET,
    cron: str | None = UNSET,
    timezone: str | None = "UTC",
) -> Schedule:
    """Create or replace a schedule firing every interval or on a cron expression."""
    record = await laneway_of(info.context).services.engine.create_schedule(
        name,
        workflow_name,
        given(params),
        every=given(every),
        cron=given(cron),
        timezone="UTC" if timezone is None else timezone,  # null: the default; "" is refused
    )
    return Schedule.from_record(record)


async def resolve_set_schedule_enabled(info: Info[Any, Any], name: str, enabled: bool) -> Schedule:
    """Enable or disable a schedule (NOT_FOUND when there is none by that name)."""
    record = await laneway_of(info.context).services.engine.set_schedule_enabled(name, enabled)
    return Schedule.from_record(record)


DELETE_SCHEDULE = (
    "Delete the schedule of that name: true when it was deleted, false when no schedule had"
    " that name (not NOT_FOUND, as setScheduleEnabled gives), so a second delete is harmless."
)


async def resolve_delete_schedule(info: Info[Any, Any], name: str) -> bool:
    """Delete a schedule; false when there was none by that name."""
    return await laneway_of(info.context).services.engine.delete_schedule(name)


async def resolve_configure_queue(
    info: Info[Any, Any],
    name: str,
    concurrency: int,
    rate_per_minute: float | None = UNSET,
    key_concurrency: int | None = UNSET,
    key_rate_per_minute: float | None = UNSET,
) -> QueueStats:
    """Set a queue's concurrency and rate caps, and the caps of each of its concurrency keys,
    creating the queue if needed. A cap left out or null is no cap."""
    record = await laneway_of(info.context).services.engine.configure_queue(
        name,
        concurrency=concurrency,
        rate_per_minute=given(rate_per_minute),
        key_concurrency=given(key_concurrency),
        key_rate_per_minute=given(key_rate_per_minute),
    )
    return QueueStats.from_record(record)


def requested_by(context: object) -> str:
    """Who asked, for the log line of an operator's action: the client's address over HTTP or
    a websocket; "graphql in this process" for a schema executed in-process (the CLI without
    --url, or a host's own call)."""
    connection = laneway_of(context).connection
    if connection is None:
        return "graphql in this process"
    client = connection.client
    return f"graphql from {client.host}" if client is not None else "graphql"


async def resolve_pause_queue(info: Info[Any, Any], name: str) -> QueueStats:
    """Pause a queue, creating it if needed: none of its instances starts until resumeQueue
    (running ones finish; pending ones wait with waitingReason QUEUE_PAUSED). Pausing a paused
    queue changes nothing; configureQueue and code's queue settings never resume it."""
    record = await laneway_of(info.context).services.engine.pause_queue(
        name, requested_by=requested_by(info.context)
    )
    return QueueStats.from_record(record)


async def resolve_resume_queue(info: Info[Any, Any], name: str) -> QueueStats:
    """Resume a paused queue, creating it if needed: its pending instances start at once
    within its caps. Resuming a queue that is not paused changes nothing."""
    record = await laneway_of(info.context).services.engine.resume_queue(
        name, requested_by=requested_by(info.context)
    )
    return QueueStats.from_record(record)


@strawberry.type(name="Mutation")
class LanewayMutation:
    """Laneway's mutations; a host's Mutation inherits them (or is this type)."""

    enqueue_workflow: EnqueueResult = fields.mutation(resolve_enqueue_workflow)
    enqueue_workflows: list[EnqueueResult] = fields.mutation(resolve_enqueue_workflows)
    cancel_workflow: WorkflowInstanceStatus = fields.mutation(resolve_cancel_workflow)
    resume_workflow: WorkflowInstanceStatus = fields.mutation(resolve_resume_workflow)
    retry_workflow: WorkflowInstanceStatus = fields.mutation(resolve_retry_workflow)
    signal_workflow: SignalResult = fields.mutation(resolve_signal_workflow)
    create_schedule: Schedule = fields.mutation(
        resolve_create_schedule, description=CREATE_SCHEDULE
    )
    set_schedule_enabled: Schedule = fields.mutation(resolve_set_schedule_enabled)
    delete_schedule: bool = fields.mutation(resolve_delete_schedule, description=DELETE_SCHEDULE)
    configure_queue: QueueStats = fields.mutation(resolve_configure_queue)
    pause_queue: QueueStats = fields.mutation(resolve_pause_queue)
    resume_queue: QueueStats = fields.mutation(resolve_resume_queue)
    cancel_workflows: BulkResult = fields.mutation(resolve_cancel_workflows)
    retry_workflows: BulkResult = fields.mutation(resolve_retry_workflows)
    resume_workflows: BulkResult = fields.mutation(resolve_resume_workflows)
