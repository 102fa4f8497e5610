"""The Store's history area: the event log's reads and the template operations' records.

Owns the reads of what is written once and then only read: events (appended by
laneway.append_events, in every area's transactions) and the operation rows of template
stages (written by the group commit, laneway.write_runner_batch, with the instance's writes).
"""

from collections.abc import Sequence
from uuid import UUID

from laneway.model import (
    EventRecord,
    OperationRecord,
)
from laneway.store import queries
from laneway.store.base import StoreBase
from laneway.store.rows import (
    event_from_row,
    operation_from_row,
)


class HistoryStore(StoreBase):
    """Events and recorded operations."""

    # -- template operations ---------------------------------------------------------------------

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

    # -- events ----------------------------------------------------------------------------------

    async def events_after(self, after_event_id: int, limit: int) -> list[EventRecord]:
        """Events with ids above `after_event_id`, in id (= commit) order."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.EVENTS_AFTER, after_event_id, limit)
        return [event_from_row(row) for row in rows]

    async def instance_events_after(
        self, instance_id: UUID, after_event_id: int, limit: int
    ) -> list[EventRecord]:
        """One instance's events with ids above `after_event_id`, in id order; none once the
        instance is deleted (its events can outlive it in their day's partition)."""
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.INSTANCE_EVENTS_AFTER, instance_id, after_event_id, limit
            )
        return [event_from_row(row) for row in rows]

    async def latest_instance_events(self, instance_id: UUID, limit: int) -> list[EventRecord]:
        """The newest `limit` events of one instance, oldest first; none once it is deleted."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.LATEST_INSTANCE_EVENTS, instance_id, limit)
        return [event_from_row(row) for row in rows]

    async def latest_event_id(self) -> int:
        async with self._acquire() as conn:
            value: int = await conn.fetchval(queries.LATEST_EVENT_ID)
        return value

    async def last_drawn_event_id(self) -> int:
        """The highest event id drawn so far, committed or not (0 before the first event)."""
        async with self._acquire() as conn:
            value: int = await conn.fetchval(queries.LAST_DRAWN_EVENT_ID)
        return value
