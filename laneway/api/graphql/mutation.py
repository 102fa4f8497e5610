"""Mutation resolvers: cancel, resume, retry, signal, schedules, queue caps and the pause of a
queue (enqueue and the batch enqueue are enqueue.py's, the bulk cancel, retry and resume
bulk.py's).

Owns LanewayMutation, the root fields a host's Mutation inherits (or uses as it is), and one
engine call per field. Every field needs write access (permissions.CanWrite); the engine
decides what is allowed in which status.
"""

from typing import Annotated, Any

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

QueueName = Annotated[
    str, strawberry.argument(description="The queue's name; the queue is created if needed.")
]


async def resolve_cancel_workflow(
    info: Info[Any, Any], instance_id: InstanceID
) -> WorkflowInstanceStatus:
    """Cancel an instance; cancelling a terminal one returns it unchanged."""
    record = await laneway_of(info.context).services.engine.cancel(parse_instance_id(instance_id))
    return WorkflowInstanceStatus.from_record(record)


async def resolve_resume_workflow(
    info: Info[Any, Any],
    instance_id: InstanceID,
    input: Annotated[
        JSON | None,
        strawberry.argument(
            description="The reviewer's input: it must match checkpointInputSchema where there "
            "is one (else BAD_USER_INPUT, and the instance stays paused). It becomes the next "
            "action's params (a handler map) or joins the context under the checkpoint's label "
            "(a template)."
        ),
    ] = UNSET,
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
    name: Annotated[str, strawberry.argument(description="The signal's name.")],
    payload: Annotated[
        JSON | None,
        strawberry.argument(description="The signal's payload: the params its wait goes on with."),
    ] = UNSET,
    idempotency_key: Annotated[
        str | None,
        strawberry.argument(
            description="A key per instance: repeated, it sends no second signal (accepted false)."
        ),
    ] = UNSET,
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
    " replacement with the same timing (the same every, or the same cron and timezone, however"
    " written: a timing is stored in one spelling, 1h for 60m, 0 0 * * MON for 0 0 * * mon)"
    " keeps"
    " its next fire, so a catch-up fire due after downtime still happens; another timing fires"
    " next at its first occurrence from now. A fire does not wait for the previous fire's"
    " instance to end (no overlap policy; fires carry no singleton or concurrency key): for one"
    " at a time, give the workflow a queue of concurrency 1 (configureQueue)."
)


async def resolve_create_schedule(
    info: Info[Any, Any],
    name: Annotated[
        str,
        strawberry.argument(
            description="The schedule's name; a schedule of that name is replaced."
        ),
    ],
    workflow_name: Annotated[
        str, strawberry.argument(description="The workflow each fire enqueues.")
    ],
    params: Annotated[
        JSON | None, strawberry.argument(description="The params each fire enqueues it with.")
    ] = UNSET,
    every: Annotated[
        str | None,
        strawberry.argument(
            description="An interval such as 30s, 5m, 1h30m or 1d; give either every or cron "
            "(BAD_USER_INPUT otherwise)."
        ),
    ] = UNSET,
    cron: Annotated[
        str | None,
        strawberry.argument(description="A cron expression, read in timezone."),
    ] = UNSET,
    timezone: Annotated[
        str | None,
        strawberry.argument(
            description="The IANA timezone a cron expression is read in (null: UTC); an "
            "interval takes only UTC."
        ),
    ] = "UTC",
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


async def resolve_set_schedule_enabled(
    info: Info[Any, Any],
    name: Annotated[str, strawberry.argument(description="The schedule's name.")],
    enabled: Annotated[
        bool, strawberry.argument(description="True: it fires; false: it stops firing.")
    ],
) -> Schedule:
    """Enable or disable a schedule (NOT_FOUND when there is none by that name)."""
    record = await laneway_of(info.context).services.engine.set_schedule_enabled(name, enabled)
    return Schedule.from_record(record)


DELETE_SCHEDULE = (
    "Delete the schedule of that name: true when it was deleted, false when no schedule had"
    " that name (not NOT_FOUND, as setScheduleEnabled gives), so a second delete is harmless."
)


async def resolve_delete_schedule(
    info: Info[Any, Any],
    name: Annotated[str, strawberry.argument(description="The schedule's name.")],
) -> bool:
    """Delete a schedule; false when there was none by that name."""
    return await laneway_of(info.context).services.engine.delete_schedule(name)


async def resolve_configure_queue(
    info: Info[Any, Any],
    name: QueueName,
    concurrency: Annotated[
        int,
        strawberry.argument(
            description="At most this many of its instances run at once, 1 to 1,000,000."
        ),
    ],
    rate_per_minute: Annotated[
        float | None,
        strawberry.argument(
            description="At most this many of its instances start per minute, 0.0001 to 10^9 "
            "(left out or null: no rate cap)."
        ),
    ] = UNSET,
    key_concurrency: Annotated[
        int | None,
        strawberry.argument(
            description="At most this many running per concurrency key, 1 to 1,000,000 (left "
            "out or null: no cap per key)."
        ),
    ] = UNSET,
    key_rate_per_minute: Annotated[
        float | None,
        strawberry.argument(
            description="At most this many starts per minute per concurrency key, 0.0001 to "
            "10^9 (left out or null: no cap)."
        ),
    ] = UNSET,
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


async def resolve_pause_queue(info: Info[Any, Any], name: QueueName) -> QueueStats:
    """Pause a queue, creating it if needed: none of its instances starts until resumeQueue
    (running ones finish; pending ones wait with waitingReason QUEUE_PAUSED). Pausing a paused
    queue changes nothing; configureQueue and code's queue settings never resume it."""
    record = await laneway_of(info.context).services.engine.pause_queue(
        name, requested_by=requested_by(info.context)
    )
    return QueueStats.from_record(record)


async def resolve_resume_queue(info: Info[Any, Any], name: QueueName) -> QueueStats:
    """Resume a paused queue, creating it if needed: its pending instances start at once
    within its caps. Resuming a queue that is not paused changes nothing."""
    record = await laneway_of(info.context).services.engine.resume_queue(
        name, requested_by=requested_by(info.context)
    )
    return QueueStats.from_record(record)


@strawberry.type(
    name="Mutation",
    description="Laneway's mutations: enqueue, control instances, schedules and queues. Each "
    "needs write access.",
)
class LanewayMutation:
    """Laneway's mutations; a host's Mutation inherits them (or is this type)."""

    enqueue_workflow: EnqueueResult = fields.mutation(
        resolve_enqueue_workflow,
        description="Create an instance of a workflow, or return the instance its idempotency "
        "or singleton key names (created false).",
    )
    enqueue_workflows: list[EnqueueResult] = fields.mutation(
        resolve_enqueue_workflows,
        description="Enqueue up to 1000 instances in one transaction, each as enqueueWorkflow "
        "would: a refused request refuses the call (BAD_USER_INPUT naming its index) and "
        "nothing is written. Results come in request order.",
    )
    cancel_workflow: WorkflowInstanceStatus = fields.mutation(
        resolve_cancel_workflow,
        description="Cancel an instance, stopping its handler wherever it runs; an instance "
        "that has ended is returned unchanged. NOT_FOUND for an unknown instance.",
    )
    resume_workflow: WorkflowInstanceStatus = fields.mutation(
        resolve_resume_workflow,
        description="Put a paused instance back to pending, with the reviewer's input. CONFLICT "
        "unless it is paused, NOT_FOUND for an unknown instance.",
    )
    retry_workflow: WorkflowInstanceStatus = fields.mutation(
        resolve_retry_workflow,
        description="Run a failed instance again. CONFLICT unless it is failed, NOT_FOUND for an "
        "unknown instance.",
    )
    signal_workflow: SignalResult = fields.mutation(
        resolve_signal_workflow,
        description="Send a signal to an instance: a wait for it goes on with the payload; "
        "otherwise it is kept for the next wait of its name (oldest first, each once). "
        "NOT_FOUND for an unknown instance, CONFLICT for one that has ended.",
    )
    create_schedule: Schedule = fields.mutation(
        resolve_create_schedule, description=CREATE_SCHEDULE
    )
    set_schedule_enabled: Schedule = fields.mutation(
        resolve_set_schedule_enabled,
        description="Enable or disable a schedule. NOT_FOUND when there is none by that name.",
    )
    delete_schedule: bool = fields.mutation(resolve_delete_schedule, description=DELETE_SCHEDULE)
    configure_queue: QueueStats = fields.mutation(
        resolve_configure_queue,
        description="Set a queue's caps and those of each of its concurrency keys, creating the "
        "queue if needed; a cap left out or null is no cap. Code's queue settings never "
        "override it afterwards.",
    )
    pause_queue: QueueStats = fields.mutation(
        resolve_pause_queue,
        description="Pause a queue: none of its instances starts until resumeQueue (running ones "
        "finish). Pausing a paused queue changes nothing; configureQueue never resumes it.",
    )
    resume_queue: QueueStats = fields.mutation(
        resolve_resume_queue,
        description="Resume a paused queue: its pending instances start within its caps. "
        "Resuming a queue that is not paused changes nothing.",
    )
    cancel_workflows: BulkResult = fields.mutation(
        resolve_cancel_workflows,
        description="Cancel every instance the filter selects that has not ended. TIMEOUT (with "
        "matched and changed) when an HTTP request's deadline stops it between batches.",
    )
    retry_workflows: BulkResult = fields.mutation(
        resolve_retry_workflows,
        description="Run again every failed instance the filter selects, through its queue's "
        "caps. TIMEOUT (with matched and changed) when an HTTP request's deadline stops it between "
        "batches.",
    )
    resume_workflows: BulkResult = fields.mutation(
        resolve_resume_workflows,
        description="Resume, without input, every paused instance the filter selects; one whose "
        "checkpoint needs an input stays paused. TIMEOUT (with matched and changed) when an HTTP "
        "request's deadline stops it between batches.",
    )
