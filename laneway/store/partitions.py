"""The Store's partition area: the time partitions of the event log (migration 0022).

Owns the partitions of laneway.events: adding them ahead of time, retiring the past ones whose
instances are all gone (a detach and a drop, no row deleted, nothing left for vacuum), and the
statistics of the partitioned parent, which autovacuum never analyses. The engine's upkeep
calls these at its own pace; every call is safe to make from many engines at once (one at a
time does the work, the others skip) and safe to repeat.

A partition is one UTC day: retention counts in days (LANEWAY_RETENTION_DAYS, 7 by default),
so a day is the grain at which events can go, it keeps the partitions few (about a week of
them, plus the two days added ahead) and each one large enough to be worth a detach.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from laneway.store import queries
from laneway.store.base import StoreBase

logger = logging.getLogger(__name__)

PARTITIONS_LOCK_KEY = 7_461_726_103  # serialises changes to the event partitions
PARTITION_SECONDS = 86_400.0  # one partition per UTC day (see the module docstring)
AHEAD_SECONDS = 2 * 86_400.0  # partitions exist this far ahead of now
ANALYZE_EVERY_SECONDS = 3_600.0  # the parent's statistics are refreshed when older than this


@dataclass(frozen=True, slots=True, kw_only=True)
class EventPartition:
    """One range partition of laneway.events: events with lower <= at < upper."""

    name: str
    lower: datetime
    upper: datetime


class PartitionStore(StoreBase):
    """The event log's partitions: added ahead, retired whole, the parent analysed."""

    async def event_partitions(self) -> list[EventPartition]:
        """The range partitions, oldest first (the default partition is not among them)."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.EVENT_PARTITIONS)
        return [EventPartition(name=r["name"], lower=r["lower"], upper=r["upper"]) for r in rows]

    async def add_event_partitions(
        self, *, width_seconds: float = PARTITION_SECONDS, ahead_seconds: float = AHEAD_SECONDS
    ) -> list[str]:
        """Add the partitions that make the log covered from now to `ahead_seconds` ahead, each
        `width_seconds` wide, one transaction each; returns the names added. When an attach
        cannot get its lock in time, it and the rest are left for the next call."""
        added: list[str] = []
        async with self._acquire() as conn:
            missing = await conn.fetch(
                queries.MISSING_EVENT_PARTITIONS, width_seconds, ahead_seconds
            )
            for row in missing:
                try:
                    async with conn.transaction():
                        if not await conn.fetchval(
                            queries.TRY_LOCK_PARTITIONS, PARTITIONS_LOCK_KEY
                        ):
                            return added
                        name = await conn.fetchval(
                            queries.ADD_EVENT_PARTITION, row["lower"], row["upper"]
                        )
                        if name is not None:  # None: another engine added it meanwhile
                            added.append(name)
                except asyncpg.LockNotAvailableError as exc:
                    # Readers of the default partition kept the attach waiting too long.
                    logger.info("event partition not added", extra={"error": str(exc)})
                    return added
        return added

    async def retire_event_partitions(self, *, ended_seconds_ago: float = 0.0) -> list[str]:
        """Detach every partition that ended over `ended_seconds_ago` (and over an hour) ago
        and holds no event of an instance that still exists, one transaction each, then drop
        what was detached in a transaction of its own (migrations/0028: appends wait for the
        detach's commit, not for the drop's); returns the names dropped, a partition a crash
        left detached included. One that could not get its lock in time is left for the next
        call.

        Retention passes its own period: a younger partition still holds instances retention
        keeps (those that ended late in its day, as a rule), and checking it would read it for
        nothing."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.RETIRING_EVENT_PARTITIONS, ended_seconds_ago)
            for name in [r["name"] for r in rows]:
                try:
                    async with conn.transaction():
                        if not await conn.fetchval(
                            queries.TRY_LOCK_PARTITIONS, PARTITIONS_LOCK_KEY
                        ):
                            break
                        await conn.fetchval(queries.RETIRE_EVENT_PARTITION, name)
                except asyncpg.LockNotAvailableError as exc:
                    logger.info(
                        "event partition not retired", extra={"partition": name, "error": str(exc)}
                    )
            try:
                async with conn.transaction():
                    if not await conn.fetchval(queries.TRY_LOCK_PARTITIONS, PARTITIONS_LOCK_KEY):
                        return []
                    dropped = await conn.fetch(queries.DROP_DETACHED_EVENT_PARTITIONS)
            except asyncpg.LockNotAvailableError as exc:
                logger.info("detached event partitions not dropped", extra={"error": str(exc)})
                return []
        return [r["name"] for r in dropped]

    async def analyze_events(self, *, every_seconds: float = ANALYZE_EVERY_SECONDS) -> bool:
        """ANALYZE the partitioned event log if its statistics are older than `every_seconds`
        (the age is the database's, so engines share the pace); returns whether it ran."""
        async with self._acquire() as conn, conn.transaction():
            if not await conn.fetchval(queries.TRY_LOCK_PARTITIONS, PARTITIONS_LOCK_KEY):
                return False
            if await conn.fetchval(queries.EVENTS_STATISTICS_STALE, every_seconds) is False:
                return False
            await conn.execute(queries.ANALYZE_EVENTS_TIMEOUT)
            await conn.execute(queries.ANALYZE_EVENTS)
        return True
