"""The Engine's schedule calls: create, enable, delete and list recurring enqueues.

A part of Engine (engine.py), kept apart so that each file reads as one area; the recurrence
rules are schedules.py's, the firing is the claim loop's.
"""

from typing import TYPE_CHECKING

from laneway.engine.handler_map import Workflow, check_name
from laneway.engine.payloads import encode_json
from laneway.engine.schedules import (
    UTC_ZONES,
    check_zone_name,
    format_every,
    parse_recurrence,
)
from laneway.errors import InvalidInputError, NotFoundError
from laneway.model import JSONValue, ScheduleRecord
from laneway.store import Store

if TYPE_CHECKING:
    from laneway.engine.claim_loop import ClaimLoop


class ScheduleCalls:
    """Schedules, on the Engine's store and registry."""

    store: Store
    claim_loop: "ClaimLoop"

    def _workflow(self, name: str) -> Workflow:
        raise NotImplementedError  # Engine's

    async def create_schedule(
        self,
        name: str,
        workflow_name: str,
        params: JSONValue = None,
        *,
        every: str | None = None,
        cron: str | None = None,
        timezone: str = "UTC",
    ) -> ScheduleRecord:
        """Create (or replace) a schedule that enqueues `workflow_name` at every fire.

        Replacing one keeps whether it is enabled (a new schedule is enabled; a disabled one
        stays disabled until set_schedule_enabled), and, when its timing is the same (the
        same `every`, or the same `cron` and `timezone`), its next fire: a catch-up fire due
        after downtime still fires, so code may declare its schedules at every start. A
        changed timing fires next at its first occurrence from now.

        An interval fires on its grid counted from the Unix epoch in UTC (`1d` at 00:00 UTC,
        `7d` on Thursdays), so it takes no timezone but UTC (a name of UTC, such as `Etc/UTC`,
        is stored as `UTC`); a cron expression is read in `timezone`, an IANA zone name.

        Raises:
            InvalidInputError: unknown workflow, bad name, interval, cron or timezone, or an
                interval with a timezone other than UTC.
        """
        check_name(name, "schedule name")
        workflow = self._workflow(workflow_name)
        recurrence = parse_recurrence(every=every, cron=cron, timezone=timezone)
        # Refused here, not in parse_recurrence: one stored so by a release before still fires.
        check_zone_name(timezone)
        if every is not None and timezone not in UTC_ZONES:
            raise InvalidInputError(
                f"an interval is counted from the Unix epoch in UTC (every 1d fires at 00:00"
                f" UTC), so it takes no timezone but UTC, not {timezone!r}; to fire at a local"
                " time, give a cron expression in that timezone"
            )
        params_json = encode_json(workflow.validate_params(params), what="params")
        now = await self.store.now()
        next_run_at = recurrence.next_fire_after(now)
        record = await self.store.upsert_schedule(
            name=name,
            workflow_name=workflow.name,
            params_json=params_json,
            # In one spelling each (`5S`, `60m` and `1h` are one interval): the same timing,
            # however written, is the same text, which keeps the next fire (UPSERT_SCHEDULE)
            every=None if recurrence.every is None else format_every(recurrence.every),
            cron=recurrence.cron,
            timezone="UTC" if every is not None or timezone in UTC_ZONES else recurrence.timezone,
            next_run_at=next_run_at,
        )
        if record.enabled:
            # This process fires it on time (others find it at their next poll, then on time).
            self.claim_loop.schedules_in((record.next_run_at - now).total_seconds())
        return record

    async def set_schedule_enabled(self, name: str, enabled: bool) -> ScheduleRecord:
        """Enable or disable a schedule; re-enabling does not fire the missed backlog.

        Raises:
            NotFoundError: no such schedule.
        """
        schedule = await self.store.get_schedule(name)
        if schedule is None:
            raise NotFoundError(f"no schedule named {name!r}")
        if not enabled:  # no rule read: one this process cannot plan can still be turned off
            return await self.store.set_schedule_enabled(name, False, schedule.next_run_at)
        recurrence = parse_recurrence(
            every=schedule.every, cron=schedule.cron, timezone=schedule.timezone
        )
        now = await self.store.now()
        next_run_at = recurrence.next_fire_after(now)
        record = await self.store.set_schedule_enabled(name, enabled, next_run_at)
        self.claim_loop.schedules_in((next_run_at - now).total_seconds())
        return record

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; False when there was none by that name."""
        return await self.store.delete_schedule(name)

    async def schedules(self) -> list[ScheduleRecord]:
        return await self.store.schedules()
