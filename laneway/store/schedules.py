"""The Store's schedule area: schedules kept, and due ones fired.

Owns the schedule rows and their firing: due schedules locked, each occurrence enqueued as the
caller plans it, and the schedule advanced, in one transaction.
"""

from collections.abc import Callable, Sequence
from datetime import datetime

from laneway.errors import NotFoundError
from laneway.model import (
    EnqueueResult,
    NewInstance,
    ScheduleRecord,
)
from laneway.store import queries
from laneway.store.instances import InstanceStore
from laneway.store.rows import schedule_from_row


class ScheduleStore(InstanceStore):
    """Schedules; firing one enqueues through the instance area."""

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

    async def next_schedule_in(self, names: Sequence[str]) -> float | None:
        """Seconds until the next enabled schedule of the workflows `names` is due (<= 0: due
        now; None: none is)."""
        async with self._acquire() as conn:
            seconds: float | None = await conn.fetchval(queries.NEXT_SCHEDULE_IN, list(names))
        return seconds

    async def fire_due_schedules(
        self,
        plan: Callable[[ScheduleRecord, datetime], tuple[NewInstance | None, datetime]],
        names: Sequence[str],
        limit: int = 100,
    ) -> list[EnqueueResult]:
        """Fire every due schedule of the workflows `names` once, in one transaction.

        `plan(schedule, now)` says what to enqueue for the due occurrence (None: nothing, e.g.
        the workflow is not registered here) and when the schedule fires next.
        """
        results: list[EnqueueResult] = []
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(queries.LOCK_DUE_SCHEDULES, limit, list(names))
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
