"""Store rows decoded into records: one function per row shape the statements return.

Owns the mapping from a statement's columns (laneway/store/queries/) to the records of
laneway.model; runs no SQL. `new_instance_record` builds the record of an instance just
enqueued from what was inserted and the few columns the database filled in.
"""

import asyncpg

from laneway.model import (
    EventRecord,
    EventType,
    InstanceRecord,
    LockRecord,
    NewInstance,
    OperationRecord,
    QueueRecord,
    ScheduleRecord,
    Status,
    Transition,
)

Row = asyncpg.Record
Conn = asyncpg.Connection


def instance_from_row(row: Row) -> InstanceRecord:
    parent = row["parent_id"]
    return InstanceRecord(
        instance_id=row["instance_id"],
        name=row["name"],
        queue=row["queue"],
        status=Status(row["status"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_after=row["run_after"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        params=row["params"],
        state=row["state"] if row["state"] is not None else {},
        next_action=row["next_action"],
        next_params=row["next_params"],
        result=row["result"],
        last_error=row["last_error"],
        idempotency_key=row["idempotency_key"],
        singleton_key=row["singleton_key"],
        owner_id=row["owner_id"],
        lease_expires_at=row["lease_expires_at"],
        lease_epoch=row["lease_epoch"],
        recoveries=row["recoveries"],
        parent_id=parent,
        stage=row["stage"],
        checkpoint=row["checkpoint"],
        progress=row["progress"],
        message=row["message"],
    )


def new_instance_record(new: NewInstance, row: Row) -> InstanceRecord:
    """The record of an instance just inserted by an enqueue statement: what the database filled
    in comes from `row`, the rest is what was inserted (the columns' defaults for the others,
    as migrations/0001 and 0003 set them; a test compares this with the row read back)."""
    params = row["params"]
    created_at = row["created_at"]
    return InstanceRecord(
        instance_id=new.instance_id,
        name=new.name,
        queue=new.queue,
        status=Status.PENDING,
        priority=new.priority,
        attempts=0,
        max_attempts=new.max_attempts,
        run_after=row["run_after"],
        created_at=created_at,
        updated_at=created_at,  # both default to now(), the transaction's time
        params=params,
        state={},
        next_action=new.first_action,
        next_params=params,
        result=None,
        last_error=None,
        idempotency_key=new.idempotency_key,
        singleton_key=new.singleton_key,
        owner_id=None,
        lease_expires_at=None,
        lease_epoch=0,
        recoveries=0,
        parent_id=new.parent_id,
        stage=None,
        checkpoint=None,
        progress=None,
        message=None,
    )


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
    )


def transition_from_row(row: Row) -> Transition:
    return Transition(
        instance_id=row["instance_id"],
        name=row["name"],
        queue=row["queue"],
        status=Status(row["status"]),
        attempts=row["attempts"],
        error=row.get("last_error"),
        stage=row.get("stage"),
        checkpoint=row.get("checkpoint"),
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
    )


def lock_from_row(row: Row) -> LockRecord:
    return LockRecord(
        entity_type=row["entity_type"],
        entity_id=row["entity_id"],
        owner_instance=row["owner_instance"],
        fencing_token=row["fencing_token"],
        expires_at=row["expires_at"],
    )
