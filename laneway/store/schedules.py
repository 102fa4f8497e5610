"""The Store's schedule area: schedules kept, and due ones fired.

Owns the schedule rows and their firing: due schedules locked, each occurrence enqueued as the
caller plans it, and the schedule advanced, in one transaction. A schedule the caller could not
plan is left as it is, and the caller names it among those it skips from then on.
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

SchedulePlan = tuple[NewInstance | None, datetime] | None
"""What to enqueue for a due occurrence (None: nothing) and when the schedule fires next; or
None for the whole: leave the schedule as it is (the caller could not plan it)."""


def skipped_columns(
    skipped: Sequence[ScheduleRecord],
) -> tuple[list[str], list[str | None], list[str | None], list[str]]:
    """The schedules an engine skips as the four arrays of queries.not_skipped: names,
    intervals, cron expressions, timezones."""
    return (
        [s.name for s in skipped],
        [s.every for s in skipped],
        [s.cron for s in skipped],
        [s.timezone for s in skipped],
    )


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

    async def next_schedule_in(
        self, names: Sequence[str], skipped: Sequence[ScheduleRecord] = ()
    ) -> float | None:
        """Seconds until the next enabled schedule of the workflows `names` is due (<= 0: due
        now; None: none is), but for the schedules `skipped` (as they were when skipped)."""
        async with self._acquire() as conn:
            seconds: float | None = await conn.fetchval(
                queries.NEXT_SCHEDULE_IN, list(names), *skipped_columns(skipped)
            )
        return seconds

    async def fire_due_schedules(
        self,
        plan: Callable[[ScheduleRecord, datetime], SchedulePlan],
        names: Sequence[str],
        limit: int = 100,
        skipped: Sequence[ScheduleRecord] = (),
    ) -> list[EnqueueResult]:
        """Fire every due schedule of the workflows `names` once, in one transaction, but for
        the schedules `skipped` (as they were when skipped: one changed since is due again).

        `plan(schedule, now)` says what to enqueue for the due occurrence (None: nothing, e.g.
        the workflow is not registered here) and when the schedule fires next; or, when it
        answers None, to leave that schedule as it is.
        """
        results: list[EnqueueResult] = []
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                queries.LOCK_DUE_SCHEDULES, limit, list(names), *skipped_columns(skipped)
            )
            if not rows:
                return results
            now: datetime = await conn.fetchval(queries.DB_NOW)
            for row in rows:
                schedule = schedule_from_row(row)
                planned = plan(schedule, now)
                if planned is None:
                    continue
                new, next_run_at = planned
                if new is not None:
                    await self._ensure_queue(conn, new.queue)
                    results.extend(await self._enqueue_on(conn, [new]))
                await conn.execute(queries.ADVANCE_SCHEDULE, schedule.name, next_run_at)
        return results
