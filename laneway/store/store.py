"""Store: one method per state change, each one transaction with its events and NOTIFY.

Owns every read and write of Laneway's tables and the decoding of rows into records.
Decides nothing about workflows: the engine says what to write, the store writes it
atomically and reports what changed. Runner writes are fenced by owner id.
"""

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from laneway.errors import InvalidInputError, NotFoundError
from laneway.model import (
    CheckpointWrite,
    CompleteWrite,
    DueWork,
    EnqueueResult,
    EventRecord,
    EventType,
    FailWrite,
    InstanceFilter,
    InstanceRecord,
    LockRecord,
    NewEvent,
    NewInstance,
    OperationRecord,
    QueueRecord,
    RunnerWrite,
    ScheduleRecord,
    Status,
    Transition,
)
from laneway.store import queries
from laneway.store.migrate import apply_migrations
from laneway.store.pool import (
    APPLICATION_NAME,
    DEFAULT_TIMEOUTS,
    MIGRATION_TIMEOUTS,
    ConnectionPool,
    Loan,
    Timeouts,
    connect,
    create_pool,
)

EVENTS_LOCK_KEY = 7_461_726_102  # serialises event appends; see queries.APPEND_EVENTS
ACQUIRE_TIMEOUT_SECONDS = 5.0  # longest wait for a pooled connection
DEFAULT_MAX_RECOVERIES = 3  # lost workers tolerated per instance before it is dead-lettered

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


def _event_for(record: InstanceRecord, event_type: EventType, **data: Any) -> NewEvent:
    return NewEvent(
        instance_id=record.instance_id,
        name=record.name,
        type=event_type,
        status=record.status,
        **data,
    )


@contextlib.asynccontextmanager
async def open_store(
    database_url: str,
    *,
    pool_size: int = 10,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> AsyncIterator["Store"]:
    """Migrate the database, open a pool, and yield a Store; close the pool on exit."""
    conn = await connect(
        database_url, application_name=application_name, timeouts=MIGRATION_TIMEOUTS
    )
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    pool = await create_pool(
        database_url, size=pool_size, application_name=application_name, timeouts=timeouts
    )
    try:
        yield Store(pool, database_url)
    finally:
        await pool.close()


class Store:
    """Laneway's tables, behind one method per verb."""

    def __init__(
        self,
        pool: ConnectionPool,
        database_url: str,
        *,
        acquire_timeout: float = ACQUIRE_TIMEOUT_SECONDS,
    ) -> None:
        self._pool = pool
        self.database_url = database_url
        self._acquire_timeout = acquire_timeout
        self._known_queues: set[str] = set()

    def _acquire(self) -> Loan:
        # A pool that stays exhausted (or a database that stopped answering) fails the call
        # with TimeoutError instead of queueing it forever.
        return self._pool.acquire(timeout=self._acquire_timeout)

    # -- plumbing ------------------------------------------------------------------------------

    async def _append_events(
        self, conn: Conn, events: Sequence[NewEvent], cancelled_id: UUID | None = None
    ) -> int | None:
        """Append events and ring the doorbell, inside the caller's transaction."""
        if not events:
            return None
        last_id: int | None = await conn.fetchval(
            queries.APPEND_EVENTS,
            EVENTS_LOCK_KEY,
            [e.instance_id for e in events],
            [e.name for e in events],
            [e.type.value for e in events],
            [e.status.value for e in events],
            [e.attempt for e in events],
            [e.error for e in events],
            [e.stage for e in events],
            [e.checkpoint for e in events],
            str(cancelled_id) if cancelled_id else None,
            column=1,
        )
        return last_id

    async def ping(self) -> None:
        """Raise if the database cannot answer."""
        async with self._acquire() as conn:
            await conn.fetchval(queries.DB_NOW)

    async def now(self) -> datetime:
        """The database clock."""
        async with self._acquire() as conn:
            value: datetime = await conn.fetchval(queries.DB_NOW)
            return value

    # -- queues --------------------------------------------------------------------------------

    async def _ensure_queue(self, conn: Conn, name: str) -> None:
        if name not in self._known_queues:
            await conn.execute(queries.ENSURE_QUEUE, name)
            self._known_queues.add(name)

    async def ensure_queues(self, names: Iterable[str]) -> None:
        """Create queues with default settings where they do not exist yet."""
        async with self._acquire() as conn:
            for name in names:
                await self._ensure_queue(conn, name)

    async def configure_queue(
        self, name: str, concurrency: int, rate_per_minute: float | None
    ) -> QueueRecord:
        """Create or change a queue's caps."""
        async with self._acquire() as conn, conn.transaction():
            await conn.execute(queries.CONFIGURE_QUEUE, name, concurrency, rate_per_minute)
            self._known_queues.add(name)
            row = await conn.fetchrow(queries.QUEUE_STATS, name)
        assert row is not None
        return queue_from_row(row)

    async def queues(self, name: str | None = None) -> list[QueueRecord]:
        """Queues with their settings and instance counts per status."""
        async with self._acquire() as conn:
            return [queue_from_row(row) for row in await conn.fetch(queries.QUEUE_STATS, name)]

    # -- instance reads --------------------------------------------------------------------------

    async def get_instance(self, instance_id: UUID) -> InstanceRecord | None:
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.GET_INSTANCE, instance_id)
        return instance_from_row(row) if row else None

    async def list_instances(
        self, where: InstanceFilter, *, limit: int, offset: int
    ) -> list[InstanceRecord]:
        statuses = [s.value for s in where.statuses] if where.statuses is not None else None
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.LIST_INSTANCES,
                where.name,
                where.queue,
                statuses,
                where.parent_id,
                limit,
                offset,
            )
        return [instance_from_row(row) for row in rows]

    async def unregistered_pending(self, registered: Sequence[str]) -> dict[str, int]:
        """Due pending instances per workflow name that `registered` does not include."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.UNREGISTERED_PENDING, list(registered))
        return {row["name"]: row["pending"] for row in rows}

    # -- instance writes from the API side -------------------------------------------------------

    async def enqueue(self, new: NewInstance) -> EnqueueResult:
        """Insert an instance with its `enqueued` event, or return the one its keys name."""
        if new.idempotency_key is not None or new.singleton_key is not None:
            (result,) = await self.enqueue_many([new])
            return result
        # Without keys it can only conflict on its fresh id: one insert, nothing to look up.
        # (The common call, whose latency is the rate of a client enqueuing one at a time.)
        async with self._acquire() as conn:
            await self._ensure_queue(conn, new.queue)
            (record,) = await self._insert(conn, [new])
        return EnqueueResult(instance=record, created=True)

    async def enqueue_many(self, batch: Sequence[NewInstance]) -> list[EnqueueResult]:
        """Enqueue instances with their `enqueued` events in one statement (one commit, one
        NOTIFY).

        Results come in the order of `batch`; an instance whose keys name an existing one
        returns that one, not created. The unique indexes decide races; a conflicting row that
        vanished before it could be read (a singleton that just ended) lets the next insert
        round through.
        """
        if not batch:
            return []
        async with self._acquire() as conn:
            for queue in {new.queue for new in batch}:
                await self._ensure_queue(conn, queue)
            return await self._enqueue_on(conn, batch)

    async def _enqueue_on(self, conn: Conn, batch: Sequence[NewInstance]) -> list[EnqueueResult]:
        found: dict[UUID, EnqueueResult] = {}
        todo = list(batch)
        for _ in range(5):
            for record in await self._insert(conn, todo):
                found[record.instance_id] = EnqueueResult(instance=record, created=True)
            skipped = [n for n in todo if n.instance_id not in found]
            todo = []
            for new in skipped:
                existing = await self._find_by_keys(conn, new)
                if existing is None:
                    todo.append(new)
                else:
                    found[new.instance_id] = EnqueueResult(instance=existing, created=False)
            if not todo:
                return [found[new.instance_id] for new in batch]
        raise InvalidInputError("enqueue kept conflicting with a concurrent change; try again")

    async def _insert(self, conn: Conn, todo: Sequence[NewInstance]) -> list[InstanceRecord]:
        """Insert the instances with their events; those whose keys conflict are left out."""
        if len(todo) == 1:
            new = todo[0]
            keyed = new.idempotency_key is not None or new.singleton_key is not None
            row = await conn.fetchrow(
                queries.ENQUEUE_INSTANCE if keyed else queries.ENQUEUE_INSTANCE_WITHOUT_KEYS,
                new.instance_id,
                new.name,
                new.queue,
                new.priority,
                new.max_attempts,
                new.delay_ms,
                new.params_json,
                new.first_action,
                new.idempotency_key,
                new.singleton_key,
                new.parent_id,
                EVENTS_LOCK_KEY,
            )
            return [] if row is None else [new_instance_record(new, row)]
        rows = await conn.fetch(
            queries.ENQUEUE_INSTANCES,
            [n.instance_id for n in todo],
            [n.name for n in todo],
            [n.queue for n in todo],
            [n.priority for n in todo],
            [n.max_attempts for n in todo],
            [n.delay_ms for n in todo],
            [n.params_json for n in todo],
            [n.first_action for n in todo],
            [n.idempotency_key for n in todo],
            [n.singleton_key for n in todo],
            [n.parent_id for n in todo],
            EVENTS_LOCK_KEY,
        )
        inserted = {new.instance_id: new for new in todo}
        return [new_instance_record(inserted[row["instance_id"]], row) for row in rows]

    async def _find_by_keys(self, conn: Conn, new: NewInstance) -> InstanceRecord | None:
        row = None
        if new.idempotency_key is not None:
            row = await conn.fetchrow(queries.FIND_BY_IDEMPOTENCY_KEY, new.idempotency_key)
        if row is None and new.singleton_key is not None:
            row = await conn.fetchrow(queries.FIND_ACTIVE_SINGLETON, new.name, new.singleton_key)
        return instance_from_row(row) if row else None

    async def cancel_instance(self, instance_id: UUID) -> tuple[InstanceRecord, bool]:
        """Cancel a non-terminal instance; a terminal one is returned unchanged (False)."""
        async with self._acquire() as conn, conn.transaction():
            row = await conn.fetchrow(queries.CANCEL_INSTANCE, instance_id)
            if row is None:
                return await self._existing(conn, instance_id), False
            record = instance_from_row(row)
            await conn.execute(queries.RELEASE_INSTANCE_LOCKS, [instance_id])
            await self._append_events(
                conn,
                [_event_for(record, EventType.CANCELLED, attempt=record.attempts)],
                cancelled_id=instance_id,
            )
            return record, True

    async def resume_instance(self, instance_id: UUID) -> InstanceRecord | None:
        """Put a paused instance back to pending; None when it is not paused."""
        async with self._acquire() as conn, conn.transaction():
            row = await conn.fetchrow(queries.RESUME_INSTANCE, instance_id)
            if row is None:
                await self._existing(conn, instance_id)
                return None
            record = instance_from_row(row)
            await self._append_events(conn, [_event_for(record, EventType.RESUMED)])
            return record

    async def retry_instance(self, instance_id: UUID) -> InstanceRecord | None:
        """Put a failed instance back to pending from its last checkpoint; None when not failed."""
        async with self._acquire() as conn, conn.transaction():
            row = await conn.fetchrow(queries.RETRY_INSTANCE, instance_id)
            if row is None:
                await self._existing(conn, instance_id)
                return None
            record = instance_from_row(row)
            await self._append_events(
                conn, [_event_for(record, EventType.RETRYING, error="retry requested")]
            )
            return record

    async def _existing(self, conn: Conn, instance_id: UUID) -> InstanceRecord:
        row = await conn.fetchrow(queries.GET_INSTANCE, instance_id)
        if row is None:
            raise NotFoundError(f"no instance {instance_id}")
        return instance_from_row(row)

    # -- claims and leases -----------------------------------------------------------------------

    async def claim(
        self, owner_id: str, workflow_names: Sequence[str], limit: int, lease_seconds: float
    ) -> list[InstanceRecord]:
        """Claim up to `limit` due instances within every queue's caps, across processes."""
        if limit <= 0 or not workflow_names:
            return []
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.CLAIM, owner_id, list(workflow_names), limit, lease_seconds, EVENTS_LOCK_KEY
            )
        return [instance_from_row(row) for row in rows]

    async def due_work(self, workflow_names: Sequence[str]) -> DueWork:
        """One statement telling an idle engine which kinds of work are waiting."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.DUE_WORK, list(workflow_names))
        assert row is not None
        return DueWork(
            expired_leases=row["expired_leases"],
            due_schedules=row["due_schedules"],
            claimable=row["claimable"],
        )

    async def recover_expired_leases(
        self, limit: int = 500, *, max_recoveries: int = DEFAULT_MAX_RECOVERIES
    ) -> list[Transition]:
        """Return instances whose lease ran out to pending.

        An instance out of attempts, or whose worker was already lost `max_recoveries` times
        (dead-lettered), ends failed instead.
        """
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(queries.RECOVER_EXPIRED_LEASES, limit, max_recoveries)
            transitions = [transition_from_row(row) for row in rows]
            await self._release_locks_of_terminal(conn, transitions)
            await self._append_events(conn, [_recovery_event(t) for t in transitions])
        return transitions

    async def prune_finished(self, retention_seconds: float, limit: int = 5000) -> int:
        """Delete up to `limit` instances that ended over `retention_seconds` ago, with their
        events and operations; returns how many went."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.PRUNE_FINISHED, retention_seconds, limit)
        return len(rows)

    async def renew_leases(
        self, owner_id: str, leases: Mapping[UUID, int], lease_seconds: float
    ) -> set[UUID]:
        """Extend the leases (instance id → lease epoch) this owner still holds.

        Returns the ids still held.
        """
        if not leases:
            return set()
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.RENEW_LEASES, owner_id, list(leases), list(leases.values()), lease_seconds
            )
        return {row["instance_id"] for row in rows}

    async def release(self, owner_id: str, leases: Mapping[UUID, int]) -> list[Transition]:
        """Hand unfinished instances (id → lease epoch) back at shutdown; the attempt is free."""
        if not leases:
            return []
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                queries.RELEASE_INSTANCES, owner_id, list(leases), list(leases.values())
            )
            transitions = [transition_from_row(row) for row in rows]
            await self._append_events(
                conn,
                [
                    NewEvent(
                        instance_id=t.instance_id,
                        name=t.name,
                        type=EventType.RETRYING,
                        status=t.status,
                        attempt=t.attempts,
                        error="released: worker shutting down",
                    )
                    for t in transitions
                ],
            )
        return transitions

    async def write_runner_batch(
        self, owner_id: str, lease_seconds: float, writes: Sequence[RunnerWrite]
    ) -> list[Transition]:
        """Apply many runners' writes in one transaction; writes whose lease is lost do nothing.

        Returns one transition per applied write (a missing instance id means fenced out).
        """
        checkpoints = [w for w in writes if isinstance(w, CheckpointWrite)]
        completions = [w for w in writes if isinstance(w, CompleteWrite)]
        failures = [w for w in writes if isinstance(w, FailWrite)]
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.WRITE_RUNNER_BATCH,
                owner_id,
                lease_seconds,
                EVENTS_LOCK_KEY,
                [w.instance_id for w in checkpoints],
                [w.state_json for w in checkpoints],
                [w.next_action for w in checkpoints],
                [w.next_params_json for w in checkpoints],
                [w.progress for w in checkpoints],
                [w.message for w in checkpoints],
                [w.stage for w in checkpoints],
                [w.pause_label for w in checkpoints],
                [w.epoch for w in checkpoints],
                [w.attempt for w in checkpoints],
                [w.instance_id for w in completions],
                [w.result_json for w in completions],
                [w.state_json for w in completions],
                [w.epoch for w in completions],
                [w.instance_id for w in failures],
                [w.error for w in failures],
                [w.delay_ms for w in failures],
                [w.final for w in failures],
                [w.epoch for w in failures],
            )
        return [transition_from_row(row) for row in rows]

    async def _release_locks_of_terminal(
        self, conn: Conn, transitions: Sequence[Transition]
    ) -> None:
        ended = [t.instance_id for t in transitions if t.status.is_terminal]
        if ended:
            await conn.execute(queries.RELEASE_INSTANCE_LOCKS, ended)

    # -- template operations ---------------------------------------------------------------------

    async def record_operation(
        self,
        *,
        owner_id: str,
        epoch: int,
        operation: OperationRecord,
        seconds: float,
        data_json: str,
        metadata_json: str,
    ) -> OperationRecord | None:
        """Record a finished operation, fenced by the owner; None when the lease is lost."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(
                queries.RECORD_OPERATION,
                operation.operation_id,
                operation.instance_id,
                owner_id,
                operation.stage,
                operation.position,
                operation.type,
                operation.status,
                operation.attempts,
                operation.error,
                data_json,
                metadata_json,
                seconds,
                epoch,
            )
        return operation_from_row(row) if row else None

    async def operations(self, instance_id: UUID) -> list[OperationRecord]:
        """An instance's recorded operations, in the order they finished."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.LIST_OPERATIONS, instance_id)
        return [operation_from_row(row) for row in rows]

    async def operations_of(
        self, instance_ids: Sequence[UUID]
    ) -> dict[UUID, list[OperationRecord]]:
        """Operations of several instances at once (one query), by instance id."""
        result: dict[UUID, list[OperationRecord]] = {i: [] for i in instance_ids}
        async with self._acquire() as conn:
            for row in await conn.fetch(queries.LIST_OPERATIONS_OF, list(instance_ids)):
                result[row["instance_id"]].append(operation_from_row(row))
        return result

    # -- entity locks ----------------------------------------------------------------------------

    async def acquire_lock(
        self, entity_type: str, entity_id: str, owner_instance: UUID, ttl_seconds: float
    ) -> LockRecord | None:
        """Take the lock if it is free, expired, or already this owner's; else None."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(
                queries.ACQUIRE_LOCK, entity_type, entity_id, owner_instance, ttl_seconds
            )
        return lock_from_row(row) if row else None

    async def release_lock(self, lock: LockRecord) -> bool:
        """Release a lock still held under its fencing token; False if it was lost."""
        async with self._acquire() as conn:
            token = await conn.fetchval(
                queries.RELEASE_LOCK, lock.entity_type, lock.entity_id, lock.fencing_token
            )
        return token is not None

    async def current_lock(self, entity_type: str, entity_id: str) -> LockRecord | None:
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.GET_LOCK, entity_type, entity_id)
        return lock_from_row(row) if row else None

    # -- events ----------------------------------------------------------------------------------

    async def events_after(self, after_event_id: int, limit: int) -> list[EventRecord]:
        """Events with ids above `after_event_id`, in id (= commit) order."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.EVENTS_AFTER, after_event_id, limit)
        return [event_from_row(row) for row in rows]

    async def instance_events_after(
        self, instance_id: UUID, after_event_id: int, limit: int
    ) -> list[EventRecord]:
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.INSTANCE_EVENTS_AFTER, instance_id, after_event_id, limit
            )
        return [event_from_row(row) for row in rows]

    async def latest_instance_events(self, instance_id: UUID, limit: int) -> list[EventRecord]:
        """The newest `limit` events of one instance, oldest first."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.LATEST_INSTANCE_EVENTS, instance_id, limit)
        return [event_from_row(row) for row in rows]

    async def latest_event_id(self) -> int:
        async with self._acquire() as conn:
            value: int = await conn.fetchval(queries.LATEST_EVENT_ID)
        return value

    # -- schedules -------------------------------------------------------------------------------

    async def upsert_schedule(
        self,
        *,
        name: str,
        workflow_name: str,
        params_json: str,
        every: str | None,
        cron: str | None,
        timezone: str,
        next_run_at: datetime,
    ) -> ScheduleRecord:
        async with self._acquire() as conn:
            row = await conn.fetchrow(
                queries.UPSERT_SCHEDULE,
                name,
                workflow_name,
                params_json,
                every,
                cron,
                timezone,
                next_run_at,
            )
        assert row is not None
        return schedule_from_row(row)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.GET_SCHEDULE, name)
        return schedule_from_row(row) if row else None

    async def schedules(self) -> list[ScheduleRecord]:
        async with self._acquire() as conn:
            return [schedule_from_row(row) for row in await conn.fetch(queries.LIST_SCHEDULES)]

    async def set_schedule_enabled(
        self, name: str, enabled: bool, next_run_at: datetime
    ) -> ScheduleRecord:
        """Enable or disable; enabling starts from `next_run_at`, so no backlog fires."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.SET_SCHEDULE_ENABLED, name, enabled, next_run_at)
        if row is None:
            raise NotFoundError(f"no schedule named {name!r}")
        return schedule_from_row(row)

    async def delete_schedule(self, name: str) -> bool:
        async with self._acquire() as conn:
            return await conn.fetchval(queries.DELETE_SCHEDULE, name) is not None

    async def fire_due_schedules(
        self,
        plan: Callable[[ScheduleRecord, datetime], tuple[NewInstance | None, datetime]],
        limit: int = 100,
    ) -> list[EnqueueResult]:
        """Fire every due schedule once, in one transaction.

        `plan(schedule, now)` says what to enqueue for the due occurrence (None: nothing, e.g.
        the workflow is not registered here) and when the schedule fires next.
        """
        results: list[EnqueueResult] = []
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(queries.LOCK_DUE_SCHEDULES, limit)
            if not rows:
                return results
            now: datetime = await conn.fetchval(queries.DB_NOW)
            for row in rows:
                schedule = schedule_from_row(row)
                new, next_run_at = plan(schedule, now)
                if new is not None:
                    await self._ensure_queue(conn, new.queue)
                    results.extend(await self._enqueue_on(conn, [new]))
                await conn.execute(queries.ADVANCE_SCHEDULE, schedule.name, next_run_at)
        return results

    # -- administration --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection, for diagnostics and tests; never for LISTEN."""
        async with self._acquire() as conn:
            yield conn


def _recovery_event(t: Transition) -> NewEvent:
    """The event of a recovered lease: retrying from the checkpoint, or failed for good.

    (Runner writes name their events in laneway.write_runner_batch itself: migrations/0010.)
    """
    return NewEvent(
        instance_id=t.instance_id,
        name=t.name,
        type=EventType.RETRYING if t.status == Status.PENDING else EventType.FAILED,
        status=t.status,
        attempt=t.attempts,
        error=t.error,
        stage=t.stage,
        checkpoint=t.checkpoint,
    )
