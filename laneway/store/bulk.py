"""The Store's bulk area: what a filter selects for cancel, retry or resume, and the batch writes.

Owns the selection of a bulk action (count, sample, and the clock and last event id that bound
it: queries.BULK_MATCH), the keyset walk over it in batches (queries.BULK_BATCH), and the batch
writes, each one transaction: the rows (their status re-checked by the UPDATE itself), their
events in one append, and for a cancel the entity locks and the doorbell naming every cancelled
id. The single cancel, resume and retry (instances.py) are these writes' batch of one. What an
action applies to, and what to do after each batch, is the engine's (engine/bulk_calls.py).
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from laneway.errors import NotFoundError
from laneway.model import EventType, InstanceFilter, InstanceRecord, JSONValue, NewEvent, Status
from laneway.store import queries
from laneway.store.instances import DEADLOCK_ATTEMPTS, InstanceStore, after_deadlock, filter_args
from laneway.store.rows import Conn, instance_from_row

BATCH_SIZE = 100  # rows per batch transaction; also keeps a cancel's doorbell under 8,000 bytes
SAMPLE_SIZE = 100  # ids a bulk action reports of what it matched


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkMatch:
    """What a filter selects for an action: the count, the newest ids, and when it was read."""

    matched: int
    sample_ids: list[UUID]
    at: datetime  # the database clock after the count: nothing created since was counted
    last_event_id: int  # the last event the count saw (queries.BULK_MATCH): what it counted


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkCandidate:
    """A row of a batch as it was read, unlocked: its key, and for a resume its pause."""

    instance_id: UUID
    created_at: datetime
    checkpoint: str | None
    input_schema: JSONValue


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkBatch:
    """A batch of a bulk action's walk: the rows the count took, and the last row read."""

    taken: list[BulkCandidate]
    last: BulkCandidate | None  # where the next batch starts; None: the walk is over


def bulk_batch_args(
    where: InstanceFilter,
    statuses: Sequence[Status],
    match: BulkMatch,
    after: BulkCandidate | None,
    limit: int,
    *,
    unchanged: bool,
) -> tuple[object, ...]:
    """queries.BULK_BATCH's arguments for BulkStore.bulk_batch."""
    counted_in = [s.value for s in statuses if where.statuses is None or s in where.statuses]
    # What was created after the count's clock cannot have been counted: a bound the keyset
    # index serves, before the exact one (queries.BULK_BATCH) is read row by row.
    before = match.at if where.created_before is None else min(where.created_before, match.at)
    walk = replace(where, statuses=None, created_before=before)
    return (
        *filter_args(walk),
        [s.value for s in statuses],
        after.created_at if after else None,
        after.instance_id if after else None,
        limit,
        match.last_event_id,
        counted_in,
        unchanged,
    )


def _event_for(record: InstanceRecord, event_type: EventType, **data: Any) -> NewEvent:
    return NewEvent(
        instance_id=record.instance_id,
        name=record.name,
        type=event_type,
        status=record.status,
        **data,
    )


class BulkStore(InstanceStore):
    """Cancel, resume and retry: of one instance, of a batch, and of what a filter selects."""

    async def bulk_match(self, where: InstanceFilter, statuses: Sequence[Status]) -> BulkMatch:
        """How many instances `where` selects in `statuses`, the newest SAMPLE_SIZE of them
        (newest first), and the database clock just after they were counted."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(
                queries.BULK_MATCH, *filter_args(where), [s.value for s in statuses], SAMPLE_SIZE
            )
        assert row is not None
        return BulkMatch(
            matched=row["matched"],
            sample_ids=list(row["sample_ids"]),
            at=row["at"],
            last_event_id=row["last_event_id"],
        )

    async def bulk_batch(
        self,
        where: InstanceFilter,
        statuses: Sequence[Status],
        match: BulkMatch,
        after: BulkCandidate | None,
        limit: int = BATCH_SIZE,
        *,
        unchanged: bool = False,
    ) -> BulkBatch:
        """The next `limit` rows, oldest first, after `after` (None: from the start), of
        `where` in `statuses`, and of them those `match` counted (taken): rows that existed at
        the count and were then in the statuses it counted (`where`'s, of `statuses`), and are
        in `statuses` now; with `unchanged`, only rows with no event since the count (still as
        they were counted). The next batch starts after the last row read, taken or not, so
        each batch reads `limit` rows at most however few of them are taken."""
        args = bulk_batch_args(where, statuses, match, after, limit, unchanged=unchanged)
        async with self._acquire() as conn, conn.transaction(readonly=True):
            await conn.execute(queries.BULK_WALK_PLANS)  # a walk that stops at `limit` rows
            rows = await conn.fetch(queries.BULK_BATCH, *args)
        read = [
            BulkCandidate(
                instance_id=row["instance_id"],
                created_at=row["created_at"],
                checkpoint=row["checkpoint"],
                input_schema=row["input_schema"],
            )
            for row in rows
        ]
        return BulkBatch(
            taken=[c for c, row in zip(read, rows, strict=True) if row["taken"]],
            last=read[-1] if read else None,
        )

    # -- one instance: the batch of one ----------------------------------------------------------

    async def cancel_instance(self, instance_id: UUID) -> tuple[InstanceRecord, bool]:
        """Cancel a non-terminal instance; a terminal one is returned unchanged (False).

        Raises:
            NotFoundError: no such instance.
        """
        async with self._acquire() as conn, conn.transaction():
            for record in await self._cancel_on(conn, [instance_id]):
                return record, True
            return await self._existing(conn, instance_id), False

    async def resume_instance(
        self, instance_id: UUID, input_json: str | None = None, checkpoint: str | None = None
    ) -> InstanceRecord | None:
        """Put an instance paused at `checkpoint` back to pending, its input (if any) the next
        action's params; None when it is not paused there.

        Raises:
            NotFoundError: no such instance.
        """
        async with self._acquire() as conn, conn.transaction():
            for record in await self._resume_on(conn, [instance_id], [input_json], [checkpoint]):
                return record
            await self._existing(conn, instance_id)
            return None

    async def retry_instance(self, instance_id: UUID) -> InstanceRecord | None:
        """Put a failed instance back to pending from its last checkpoint; None when not failed.

        Raises:
            NotFoundError: no such instance.
        """
        for record in await self._batch(lambda conn: self._retry_on(conn, [instance_id])):
            return record
        async with self._acquire() as conn:
            await self._existing(conn, instance_id)
        return None

    async def _existing(self, conn: Conn, instance_id: UUID) -> InstanceRecord:
        row = await conn.fetchrow(queries.GET_INSTANCE, instance_id)
        if row is None:
            raise NotFoundError(f"no instance {instance_id}")
        return instance_from_row(row)

    # -- batches: each one transaction ---------------------------------------------------------

    async def cancel_instances(self, instance_ids: Sequence[UUID]) -> list[InstanceRecord]:
        """Cancel those of these instances that are not terminal; the records it changed."""
        return await self._batch(lambda conn: self._cancel_on(conn, instance_ids))

    async def resume_instances(
        self,
        instance_ids: Sequence[UUID],
        inputs: Sequence[str | None],
        checkpoints: Sequence[str | None],
    ) -> list[InstanceRecord]:
        """Put those of these instances still paused at their checkpoint back to pending, each
        input (json text, None: none) its next action's params; the records it changed."""
        return await self._batch(
            lambda conn: self._resume_on(conn, instance_ids, inputs, checkpoints)
        )

    async def retry_instances(self, instance_ids: Sequence[UUID]) -> list[InstanceRecord]:
        """Put those of these instances that are failed back to pending; the records changed."""
        return await self._batch(lambda conn: self._retry_on(conn, instance_ids))

    async def _batch(
        self, write: Callable[[Conn], Awaitable[list[InstanceRecord]]]
    ) -> list[InstanceRecord]:
        """`write` in one transaction, again after a deadlock (a batch locks up to 100 rows,
        in its plan's order, which another multi-row writer, a group commit, may cross) or a
        singleton key taken meanwhile (a retry raced an enqueue of the same key): the
        rolled-back batch changed nothing, and its UPDATE re-checks every status and key."""
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                async with self._acquire() as conn, conn.transaction():
                    return await write(conn)
            except (asyncpg.exceptions.DeadlockDetectedError, asyncpg.UniqueViolationError):
                if attempt == DEADLOCK_ATTEMPTS:
                    raise
            await after_deadlock(attempt)
        raise AssertionError("unreachable")

    async def _cancel_on(self, conn: Conn, instance_ids: Sequence[UUID]) -> list[InstanceRecord]:
        rows = await conn.fetch(queries.CANCEL_INSTANCES, list(instance_ids))
        records = [instance_from_row(row) for row in rows]
        if records:
            cancelled = [r.instance_id for r in records]
            await conn.execute(queries.RELEASE_INSTANCE_LOCKS, cancelled)
            await self._append_events(
                conn,
                [_event_for(r, EventType.CANCELLED, attempt=r.attempts) for r in records],
                cancelled_ids=cancelled,
            )
        return records

    async def _resume_on(
        self,
        conn: Conn,
        instance_ids: Sequence[UUID],
        inputs: Sequence[str | None],
        checkpoints: Sequence[str | None],
    ) -> list[InstanceRecord]:
        rows = await conn.fetch(
            queries.RESUME_INSTANCES, list(instance_ids), list(inputs), list(checkpoints)
        )
        records = [instance_from_row(row) for row in rows]
        # Every event carries the instance's attempt count as written (WorkflowEvent.attempt).
        events = [_event_for(r, EventType.RESUMED, attempt=r.attempts) for r in records]
        await self._append_events(conn, events)
        return records

    async def _retry_on(self, conn: Conn, instance_ids: Sequence[UUID]) -> list[InstanceRecord]:
        rows = await conn.fetch(queries.RETRY_INSTANCES, list(instance_ids))
        records = [instance_from_row(row) for row in rows]
        # The attempt that failed, as an automatic retry's event has it: a retry leaves the
        # count as it was (the next attempt is attempts + 1).
        await self._append_events(
            conn,
            [
                _event_for(r, EventType.RETRYING, attempt=r.attempts, error="retry requested")
                for r in records
            ],
        )
        return records
