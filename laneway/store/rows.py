"""Store rows decoded into records: one function per row shape the statements return.

Owns the mapping from a statement's columns (laneway/store/queries/) to the records of
laneway.model; runs no SQL. `new_instance_record` builds the record of an instance just
enqueued from what was inserted and the few columns the database filled in.
"""

import dataclasses
import json
import operator
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg

from laneway.model import (
    EventRecord,
    EventType,
    FailureRecord,
    InstanceRecord,
    LockRecord,
    NewInstance,
    OperationRecord,
    QueueRecord,
    ScheduleRecord,
    Status,
    Transition,
    WaitingReason,
    WorkerRecord,
)

Row = asyncpg.Record
Conn = asyncpg.Connection


# instance_from_row fills an InstanceRecord's slots itself: the frozen dataclass's __init__ sets
# each of its 28 fields through object.__setattr__, 4 us a row, a tenth of the server CPU of a
# 50-row workflowInstances page (and paid by every claim). Every field is set from the column of
# its name (a missing one is a KeyError), with the two conversions below; tests/store/test_rows.py
# compares the record with the one __init__ builds. InstanceRecord has no __post_init__ to skip.
_STATUSES = {status.value: status for status in Status}
_new_record = object.__new__
_SlotSetter = Callable[[InstanceRecord, object], None]


def _slot_setter(name: str) -> _SlotSetter:
    setter: _SlotSetter = vars(InstanceRecord)[name].__set__  # the slot's member descriptor
    return setter


_ALL_SLOTS = tuple(
    (field.name, _slot_setter(field.name)) for field in dataclasses.fields(InstanceRecord)
)
# A row's columns but status and state, which are converted (instance_from_row).
_INSTANCE_SLOTS = tuple(
    (name, setter) for name, setter in _ALL_SLOTS if name not in {"status", "state"}
)
_set_status, _set_state = _slot_setter("status"), _slot_setter("state")


def instance_from_row(row: Row) -> InstanceRecord:
    """The record of a row of INSTANCE_COLUMNS (or of a summary, whose `state` and
    `next_params` are NULL: state {} and next_params None)."""
    record: InstanceRecord = _new_record(InstanceRecord)
    for name, set_slot in _INSTANCE_SLOTS:
        set_slot(record, row[name])
    _set_status(record, _STATUSES[row["status"]])
    state = row["state"]
    _set_state(record, state if state is not None else {})
    return record


def _jsonb_key(pair: tuple[str, Any]) -> tuple[int, bytes]:
    encoded = pair[0].encode()
    return len(encoded), encoded


def _in_jsonb_order(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) < 2:
        return dict(pairs)
    return dict(sorted(pairs, key=_jsonb_key))


_JSONB_DECODER = json.JSONDecoder(object_pairs_hook=_in_jsonb_order)  # one, not one per call


def jsonb_value(text: str) -> Any:
    """The value a jsonb column gives back for JSON `text` (no duplicate keys): objects' keys
    in jsonb's order (shorter first, then bytewise), so a record built from what was written
    reads the same as the row read back."""
    return _JSONB_DECODER.decode(text)


# What a new instance's record holds besides what the database filled in (run_after,
# created_at, params as jsonb gives them back): the request's own fields, under the same names
# on NewInstance, and the columns' defaults as migrations/0001 and 0003 set them (state, a new
# {} each, is set apart). Every field is one of these, or the import fails.
_FROM_REQUEST = (
    "instance_id",
    "name",
    "queue",
    "priority",
    "max_attempts",
    "idempotency_key",
    "singleton_key",
    "parent_id",
    "concurrency_key",
    "trace_context",
    "version",
)
_NEW_DEFAULTS: dict[str, object] = {
    "status": Status.PENDING,
    "attempts": 0,
    "result": None,
    "last_error": None,
    "owner_id": None,
    "lease_expires_at": None,
    "lease_epoch": 0,
    "recoveries": 0,
    "stage": None,
    "checkpoint": None,
    "progress": None,
    "message": None,
    "wake_at": None,
    "wait_signal": None,
    "wait": None,
    "attempt_base": 0,
    "first_failed_trace": None,
}
_FILLED = {"run_after", "created_at", "updated_at", "params", "next_params", "state", "next_action"}
if {name for name, _ in _ALL_SLOTS} != {*_FROM_REQUEST, *_NEW_DEFAULTS, *_FILLED}:
    raise ImportError("new_instance_record does not set every field of InstanceRecord")
_requested = operator.attrgetter(*_FROM_REQUEST)
_REQUEST_SLOTS = tuple(_slot_setter(name) for name in _FROM_REQUEST)
_DEFAULT_SLOTS = tuple((_slot_setter(name), value) for name, value in _NEW_DEFAULTS.items())
_set_run_after, _set_created_at, _set_updated_at = map(
    _slot_setter, ("run_after", "created_at", "updated_at")
)
_set_params, _set_next_params, _set_next_action = map(
    _slot_setter, ("params", "next_params", "next_action")
)


def new_instance_record(new: NewInstance, row: Row | Mapping[str, Any]) -> InstanceRecord:
    """The record of an instance just inserted by an enqueue statement: what the database filled
    in comes from `row`, the rest is what was inserted (the columns' defaults for the others;
    a test compares this with the row read back). Its slots are filled as instance_from_row
    fills them, without a mapping of every field built per record (a batch builds 1,000)."""
    record: InstanceRecord = _new_record(InstanceRecord)
    for set_slot, value in _DEFAULT_SLOTS:
        set_slot(record, value)
    for set_slot, value in zip(_REQUEST_SLOTS, _requested(new), strict=True):
        set_slot(record, value)
    params = row["params"]
    created_at = row["created_at"]  # updated_at too: both default to now(), the transaction's
    _set_run_after(record, row["run_after"])
    _set_created_at(record, created_at)
    _set_updated_at(record, created_at)
    _set_params(record, params)
    _set_next_params(record, params)
    _set_next_action(record, new.first_action)
    _set_state(record, {})
    return record


def event_from_row(row: Row) -> EventRecord:
    return EventRecord(
        event_id=row["event_id"],
        instance_id=row["instance_id"],
        name=row["name"],
        type=EventType(row["type"]),
        status=Status(row["status"]),
        at=row["at"],
        attempt=row["attempt"],
        error=row["error"],
        stage=row["stage"],
        checkpoint=row["checkpoint"],
        signal=row["signal"],
    )


def schedule_from_row(row: Row) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"],
        workflow_name=row["workflow_name"],
        params=row["params"],
        every=row["every"],
        cron=row["cron"],
        timezone=row["timezone"],
        enabled=row["enabled"],
        next_run_at=row["next_run_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def queue_from_row(row: Row) -> QueueRecord:
    return QueueRecord(
        name=row["name"],
        concurrency=row["concurrency"],
        rate_per_minute=row["rate_per_minute"],
        paused=row["paused"],
        counts={Status(status): int(n) for status, n in (row["counts"] or {}).items()},
        settings_source=row["settings_source"],
        key_concurrency=row["key_concurrency"],
        key_rate_per_minute=row["key_rate_per_minute"],
    )


def transition_from_row(row: Row) -> Transition:
    return Transition(
        instance_id=row["instance_id"],
        name=row["name"],
        queue=row["queue"],
        status=_STATUSES[row["status"]],
        attempts=row["attempts"],
        error=row.get("last_error"),
        stage=row.get("stage"),
        checkpoint=row.get("checkpoint"),
    )


def failure_from_row(row: Row) -> FailureRecord:
    return FailureRecord(
        instance_id=row["instance_id"],
        attempt=row["attempt"],
        at=row["at"],
        type=row["type"],
        message=row["message"],
        traceback=row["traceback"],
        stage=row["stage"],
        operation=row["operation"],
    )


def operation_from_row(row: Row) -> OperationRecord:
    return OperationRecord(
        operation_id=row["operation_id"],
        instance_id=row["instance_id"],
        stage=row["stage"],
        position=row["position"],
        type=row["type"],
        status=row["status"],
        attempts=row["attempts"],
        error=row["error"],
        data=row["data"],
        metadata=row["metadata"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        fix_cycle=row["fix_cycle"],
    )


def lock_from_row(row: Row) -> LockRecord:
    return LockRecord(
        entity_type=row["entity_type"],
        entity_id=row["entity_id"],
        owner_instance=row["owner_instance"],
        fencing_token=row["fencing_token"],
        expires_at=row["expires_at"],
    )


def worker_from_row(row: Row) -> WorkerRecord:
    return WorkerRecord(
        owner_id=row["owner_id"],
        role=row["role"],
        host=row["host"],
        pid=row["pid"],
        workflows=tuple(row["workflows"]),
        running=row["running"],
        concurrency=row["concurrency"],
        heartbeat_seconds=row["heartbeat_seconds"],
        started_at=row["started_at"],
        last_seen_at=row["last_seen_at"],
        versions=tuple(
            (name, version)
            for name, _, version in sorted(key.partition("@") for key in row["versions"])
        ),
    )


def waiting_reason_from_row(row: Row) -> WaitingReason:
    """The reason of a WAITING_REASONS row, with its one-line message."""
    code: str = row["code"]
    until: datetime | None = row["until"]
    message = _WAITING_MESSAGES[code](row, until)
    if row["wake_passed"]:
        message = _woken(row, message)
    return WaitingReason(code=code, message=message, until=until)


def _at(moment: datetime | None) -> str:
    return (
        "an unknown time"
        if moment is None
        else moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _woken(row: Row, message: str) -> str:
    """The message of a wait whose wake time came, which the next poll of a live process wakes:
    what ended, then what keeps it from running once pending (`message`), or how it ends."""
    at = _at(row["wake_at"])
    if row["status"] == "paused":
        checkpoint = f" {row['checkpoint']!r}" if row["checkpoint"] else ""
        ended = f"its checkpoint{checkpoint} expired at {at}"
    elif row["wait_signal"] is None:
        ended = f"its sleep ended at {at}"
    else:
        ended = f"its wait for signal {row['wait_signal']!r} timed out at {at}"
    if row["wake_ends"] is None:
        return f"{ended}; {message}"
    how = "it is cancelled" if row["wake_ends"] == "cancelled" else "it fails"
    if row["code"] == "NO_WORKER":
        return f"{ended}: {how} when a live process wakes it, and none is running"
    return f"{ended}: {how} at the next poll of a live process"


def _no_worker(row: Row) -> str:
    """No live worker has its workflow; or every one that runs its version runs an isolated
    instance alone, or drains to run one that is ahead of it in claim order."""
    alone: int = row["workers_alone"]
    making_way: int = row["workers_making_way"]
    if not alone and not making_way:
        return f"no live worker has workflow {row['name']!r} registered"
    doing = [
        *(["runs an instance alone"] if alone else []),
        *(["drains to run an instance alone"] if making_way else []),
    ]
    return (
        f"every live worker of workflow {row['name']!r} ({_counted(alone + making_way, 'worker')})"
        f" {' or '.join(doing)} (its worker was lost)"
        + (" that is ahead of it" if making_way else "")
        + ", claiming nothing beside it; it starts when one of those ends"
    )


def _counted(count: int, noun: str) -> str:
    """`1 worker`, `2 workers`: a count that says what it counts (not read as a version)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ready(row: Row) -> str:
    """Claimable: at the next claim, or, when every live worker that would take it had no room
    at its last heartbeat (its `running` is a heartbeat behind), when one of them has room."""
    lost = f" (its worker was lost {_counted(row['recoveries'], 'time')}: it runs alone)"
    if row["workers_free"]:
        return f"ready: queue {row['queue']!r} has room, it starts at the next claim" + (
            f" of a process that runs nothing else{lost}" if row["isolated"] else ""
        )
    return (
        f"ready: queue {row['queue']!r} has room; every live worker that runs it was busy at"
        f" its last heartbeat ({row['workers_running']} of {row['workers_concurrency']}"
        " running), so it starts when one of them has room"
        + (f" and runs nothing else{lost}" if row["isolated"] else "")
    )


def _key(row: Row) -> str:
    return f"key {row['concurrency_key']!r} of queue {row['queue']!r}"


def _lost(row: Row, until: datetime | None) -> str:
    """The part of a full queue's or key's message about its runs a lost process holds: when
    the first of their leases expires (`until`), or that it expired (`until` is then now)."""
    expires: datetime | None = row["lost_expires"]
    if not row["lost_running"] or until is None or expires is None:
        return ""
    return f"; {row['lost_running']} of them held by a process that stopped heartbeating" + (
        f" (the first of their leases expires at {_at(until)})"
        if expires >= until
        else f" (the first of their leases expired at {_at(expires)}: it is recovered"
        " at the next poll of a live process)"
    )


_WAITING_MESSAGES: dict[str, Callable[[Row, datetime | None], str]] = {
    "READY": lambda row, _: _ready(row),
    "DELAYED": lambda _, until: f"delayed until {_at(until)}",
    "RETRY_BACKOFF": lambda row, until: (
        f"attempt {row['attempts']} failed; the next attempt waits until {_at(until)}"
    ),
    "NO_WORKER": lambda row, _: _no_worker(row),
    "VERSION_UNAVAILABLE": lambda row, _: (
        f"no live worker runs version {row['version']!r} of workflow {row['name']!r}"
        f" (live workers run {', '.join(repr(v) for v in row['live_versions']) or 'none'})"
    ),
    "QUEUE_PAUSED": lambda row, _: f"queue {row['queue']!r} is paused",
    "QUEUE_FULL": lambda row, until: (
        f"queue {row['queue']!r} is full: {row['running']} of {row['concurrency']} running"
        + _lost(row, until)
    ),
    "RATE_LIMITED": lambda row, until: (
        f"queue {row['queue']!r} is rate-limited to {row['rate_per_minute']:g}/min: "
        f"the next token is due at {_at(until)}"
    ),
    "KEY_FULL": lambda row, until: (
        f"{_key(row)} is full: {row['key_running']} of {row['key_concurrency']} running"
        + _lost(row, until)
    ),
    "KEY_RATE_LIMITED": lambda row, until: (
        f"{_key(row)} is rate-limited to {row['key_rate_per_minute']:g}/min: "
        f"the next token is due at {_at(until)}"
    ),
    "AWAITING_REVIEW": lambda row, until: (
        (
            f"paused at checkpoint {row['checkpoint']!r}: waiting to be resumed"
            if row["checkpoint"]
            else "paused: waiting to be resumed"
        )
        + ("" if until is None else f" (it expires at {_at(until)})")
    ),
    "SLEEPING": lambda _, until: f"sleeping until {_at(until)}",
    "AWAITING_SIGNAL": lambda row, until: (
        f"waiting for signal {row['wait_signal']!r}"
        + (" (no timeout)" if until is None else f" until {_at(until)}, then it times out")
    ),
}
