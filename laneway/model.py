"""Shared vocabulary: statuses, event types, the records every layer passes around.

Owns names and shapes only. Does no I/O and imports nothing else from `laneway`.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeAlias
from uuid import UUID

JSONValue: TypeAlias = Any
"""A value that survives a round trip through JSON (dicts, lists, str, int, float, bool, None)."""

NOTIFY_CHANNEL = "laneway_events"


class Status(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING = "waiting"  # sleeping or waiting for a signal: no lease, no slot
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class EventType(StrEnum):
    ENQUEUED = "enqueued"
    STARTED = "started"
    CHECKPOINT = "checkpoint"
    RETRYING = "retrying"
    PAUSED = "paused"
    RESUMED = "resumed"
    WAITING = "waiting"
    SIGNALLED = "signalled"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


def in_authors_order(schema: JSONValue, order: JSONValue) -> JSONValue:
    """A checkpoint's input schema with its properties in the order its author wrote them.

    `order` is the wait's `input_schema_order`: the names of the properties, which jsonb
    stores sorted by length. Waits written before 0.3.6 have none: the schema as stored.
    """
    if not isinstance(schema, dict) or not isinstance(order, list):
        return schema
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    ordered = {name: properties[name] for name in order if name in properties}
    ordered.update(properties)  # names the order does not hold keep their place after it
    return {**schema, "properties": ordered}


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRecord:
    """One instance as stored; `state` and `next_action` are internal, never exposed by the API."""

    instance_id: UUID
    name: str
    queue: str
    status: Status
    priority: int
    attempts: int
    max_attempts: int
    run_after: datetime
    created_at: datetime
    updated_at: datetime
    params: JSONValue
    state: dict[str, JSONValue]
    next_action: str | None
    next_params: JSONValue
    result: JSONValue
    last_error: str | None
    idempotency_key: str | None
    singleton_key: str | None
    owner_id: str | None
    lease_expires_at: datetime | None
    parent_id: UUID | None
    lease_epoch: int
    recoveries: int
    stage: str | None
    checkpoint: str | None
    progress: float | None
    message: str | None
    concurrency_key: str | None = None
    wake_at: datetime | None = None  # when a waiting or paused instance wakes (None: never)
    wait_signal: str | None = None  # the signal a waiting instance waits for
    wait: dict[str, JSONValue] | None = None  # the wait as its handler asked (engine/waits.py)
    # The attempts before the current step's budget began: the step's attempt number is
    # attempts - attempt_base (`attempts` counts every attempt and never goes back).
    attempt_base: int = 0
    # The enqueue's W3C traceparent when it was traced, else its first traced step's.
    trace_context: str | None = None
    first_failed_trace: str | None = None  # its first failed attempt's span, for retries' links
    version: str = "1"  # the version of its workflow it started with (and runs on)

    @property
    def step_attempt(self) -> int:
        """The attempt number of the current step (1 for its first), as a handler sees it."""
        return self.attempts - self.attempt_base

    @property
    def checkpoint_input_schema(self) -> JSONValue:
        """The JSON Schema a resume's input must match, while paused at a checkpoint with one."""
        if self.status != Status.PAUSED or not self.wait:
            return None
        return in_authors_order(self.wait.get("input_schema"), self.wait.get("input_schema_order"))

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingReason:
    """Why an instance that is pending, waiting or paused is not running (store.waiting_reasons).

    `code` is one of READY, DELAYED, RETRY_BACKOFF, QUEUE_FULL, RATE_LIMITED, KEY_FULL,
    KEY_RATE_LIMITED, QUEUE_PAUSED, NO_WORKER, AWAITING_REVIEW, SLEEPING, AWAITING_SIGNAL,
    VERSION_UNAVAILABLE; `message` says it in one line for a person; `until` is when it may
    next become claimable, where known.
    """

    code: str
    message: str
    until: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    """One row of `laneway.events`."""

    event_id: int
    instance_id: UUID
    name: str
    type: EventType
    status: Status
    at: datetime
    attempt: int | None = None
    error: str | None = None
    stage: str | None = None
    checkpoint: str | None = None
    signal: str | None = None  # the signal's name, for `waiting` and `signalled` events


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    """An event about to be appended, before the database gives it an id and a time."""

    instance_id: UUID
    name: str
    type: EventType
    status: Status
    attempt: int | None = None
    error: str | None = None
    stage: str | None = None
    checkpoint: str | None = None
    signal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification:
    """The NOTIFY payload: a doorbell saying that events up to `last_event_id` are committed.

    It carries identifiers only (well under 200 bytes), whatever the size of errors or state;
    readers fetch the rows from the table. `cancelled_ids` name the instances cancelled by that
    transaction (a bulk cancel's batch: at most 100), so the processes running them stop their
    handlers at once. The payload is written by SQL (queries.APPEND_EVENTS) as
    `{"e": <id>, "c": "<uuid>,<uuid>,..."}`.
    """

    last_event_id: int
    cancelled_ids: tuple[UUID, ...] = ()

    @classmethod
    def from_payload(cls, payload: str) -> "Notification":
        """Decode a payload; raises ValueError (or KeyError) on one Laneway did not write."""
        body = json.loads(payload)
        cancelled = body.get("c")
        return cls(
            last_event_id=int(body["e"]),
            cancelled_ids=tuple(UUID(one) for one in cancelled.split(",")) if cancelled else (),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueResult:
    """What an enqueue returns: the instance, and whether this call created it."""

    instance: InstanceRecord
    created: bool

    @property
    def instance_id(self) -> UUID:
        return self.instance.instance_id


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """One failed attempt of an instance (laneway.failures): its exception and when."""

    instance_id: UUID
    attempt: int
    at: datetime
    type: str
    message: str
    traceback: str | None
    stage: str | None
    operation: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalResult:
    """What sending a signal returns: its id, whether this call sent it (False: its idempotency
    key named an earlier one, whose id this is), and the instance after it."""

    signal_id: UUID
    accepted: bool
    instance: InstanceRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRecord:
    """A queue's settings and its instance counts per status.

    `settings_source` says where `concurrency` and `rate_per_minute` came from: "default"
    (nobody set them), "code" (a template's queue_settings, applied at engine start) or
    "operator" (configure_queue; code never overrides those).
    """

    name: str
    concurrency: int
    rate_per_minute: float | None
    paused: bool
    counts: dict[Status, int]
    settings_source: str
    key_concurrency: int | None = None  # cap per concurrency key (None: none)
    key_rate_per_minute: float | None = None  # starts per minute per key (None: none)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRecord:
    """A live process that runs an engine, as its last heartbeat wrote it (database times).

    `role` is "serve" (the API's process) or "worker" (`laneway worker`, or an engine run as a
    library); `running` and `workflows` are as of `last_seen_at`.
    """

    owner_id: str
    role: str
    host: str
    pid: int
    workflows: tuple[str, ...]
    running: int
    concurrency: int
    heartbeat_seconds: float
    started_at: datetime
    last_seen_at: datetime
    # (name, version) pairs it runs, by name then version (registry.run_key's 'name@version')
    versions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSample:
    """One minute of a queue's history, rolled up from its events (database times).

    `minute` is the start of the minute; `pending` is the depth sampled as the minute closed.
    """

    minute: datetime
    started: int
    completed: int
    failed: int
    retried: int
    pending: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A recurring enqueue: either an interval (`every`) or a cron expression with a timezone."""

    name: str
    workflow_name: str
    params: JSONValue
    every: str | None
    cron: str | None
    timezone: str
    enabled: bool
    next_run_at: datetime
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceFilter:
    """Filters for listing instances; None means any. `statuses` may be given as their
    names (`("failed",)`) or as any iterable: kept as a tuple of Status.

    Raises:
        ValueError: a status that is not one.
    """

    name: str | None = None
    queue: str | None = None
    statuses: tuple[Status, ...] | None = None
    parent_id: UUID | None = None
    concurrency_key: str | None = None
    version: str | None = None
    created_after: datetime | None = None  # created strictly after
    created_before: datetime | None = None  # created strictly before

    def __post_init__(self) -> None:
        given: object = self.statuses  # as a caller passed it, not as annotated
        if given is None:
            return
        if not isinstance(given, Iterable) or isinstance(given, str):
            given = (given,)
        statuses = tuple(given)
        for status in statuses:
            if status not in Status.__members__.values():
                known = ", ".join(Status)
                raise ValueError(f"unknown status {status!r} (one of {known})")
        object.__setattr__(self, "statuses", tuple(Status(s) for s in statuses))


@dataclass(frozen=True, slots=True, kw_only=True)
class NewInstance:
    """An instance about to be inserted; JSON already validated and encoded by the engine."""

    instance_id: UUID
    name: str
    queue: str
    priority: int
    max_attempts: int
    delay_ms: float
    params_json: str
    first_action: str
    idempotency_key: str | None = None
    singleton_key: str | None = None
    parent_id: UUID | None = None
    concurrency_key: str | None = None
    trace_context: str | None = None  # the enqueue's W3C traceparent, when it was traced
    version: str = "1"


@dataclass(frozen=True, slots=True, kw_only=True)
class DueWork:
    """What an idle poll found: expired leases, claimable instances, the seconds until the
    next wake-up of a waiting or paused instance (None: none will wake), and until the next
    enabled schedule is due (<= 0: due now; None: none is enabled)."""

    expired_leases: bool
    claimable: bool
    next_wake_in: float | None = None
    next_schedule_in: float | None = None

    @property
    def due_schedules(self) -> bool:
        return self.next_schedule_in is not None and self.next_schedule_in <= 0


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCommit:
    """What one group commit of runner writes did: a transition per applied write, the
    instances it claimed in the same transaction (the room it freed), and the event ids the
    doorbells of both rang with (None: that part rang none)."""

    transitions: list["Transition"]
    rung: int | None = None
    claimed: list["InstanceRecord"] = field(default_factory=list)
    claim_rung: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationRecord:
    """The recorded outcome of one template operation."""

    operation_id: UUID
    instance_id: UUID
    stage: str
    position: int
    type: str
    status: str
    attempts: int
    error: str | None
    data: JSONValue
    metadata: JSONValue
    started_at: datetime | None
    finished_at: datetime | None
    # The fix cycle whose pass wrote it: 0 for its stage's first pass, n for the fix operations
    # of cycle n and the verify pass after them (engine/fix_cycles.py).
    fix_cycle: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LockRecord:
    """An entity lock: held by an instance until it expires or is released."""

    entity_type: str
    entity_id: str
    owner_instance: UUID
    fencing_token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A state change a write made: what the instance became, for hooks and waiters."""

    instance_id: UUID
    name: str
    queue: str
    status: Status
    attempts: int
    error: str | None = None
    stage: str | None = None
    checkpoint: str | None = None

    @classmethod
    def of(cls, record: InstanceRecord) -> "Transition":
        """The transition that left an instance as `record` is."""
        return cls(
            instance_id=record.instance_id,
            name=record.name,
            queue=record.queue,
            status=record.status,
            attempts=record.attempts,
            error=record.last_error,
            stage=record.stage,
            checkpoint=record.checkpoint,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class InstancePage:
    """A keyset page of instances, newest first: the records (as summaries), each one's
    opaque cursor (a later page starts after it), and whether more come after the last."""

    records: list[InstanceRecord]
    cursors: list[str]
    has_next: bool

    @property
    def end_cursor(self) -> str | None:
        """The last record's cursor: where the next page starts (None for an empty page)."""
        return self.cursors[-1] if self.cursors else None


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkResult:
    """What a bulk cancel, retry or resume did: how many instances its filter selected that
    the action applies to, how many this call changed, and up to 100 of the matched ids,
    newest first."""

    matched: int
    changed: int
    sample_ids: list[UUID]


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlight:
    """Unfinished instances of one workflow version: all of them (`action` None), or those
    that may run `action` next (store.in_flight)."""

    name: str
    version: str
    action: str | None
    instances: int
