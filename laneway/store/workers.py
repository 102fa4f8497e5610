"""The Store's worker area: the registry of live processes that run an engine.

Owns the rows of laneway.workers: each engine's heartbeat (which also deletes the rows of
processes that stopped heartbeating), its removal at a clean stop, and the live list.
"""

from collections.abc import Sequence

from laneway.model import WorkerRecord
from laneway.store import queries
from laneway.store.base import StoreBase
from laneway.store.rows import worker_from_row


class WorkerStore(StoreBase):
    """Live workers: one row per running engine, kept fresh by its heartbeat."""

    async def heartbeat_worker(
        self,
        *,
        owner_id: str,
        role: str,
        host: str,
        pid: int,
        workflows: Sequence[str],
        versions: Sequence[str],
        running: int,
        concurrency: int,
        heartbeat_seconds: float,
    ) -> None:
        """Register this process or refresh its row (one statement), and delete the rows of
        processes older than three of their heartbeats. `versions` are its run keys
        ('name@version'). The statement also reads the newest migration the database has
        applied: one this installation does not ship sets `newer_release` (base.py), for the
        process to see a newer release migrate the database while it runs."""
        async with self._acquire() as conn:
            newest: str | None = await conn.fetchval(
                queries.HEARTBEAT_WORKER,
                owner_id,
                role,
                host,
                pid,
                list(workflows),
                running,
                concurrency,
                heartbeat_seconds,
                list(versions),
            )
        await self._note_newest_migration(newest)

    async def remove_worker(self, owner_id: str) -> None:
        """Take a cleanly stopping process out of the registry."""
        async with self._acquire() as conn:
            await conn.execute(queries.REMOVE_WORKER, owner_id)

    async def live_worker(self, owner_id: str) -> tuple[WorkerRecord, float] | None:
        """The live row of `owner_id` and the seconds since it was last seen (by the database's
        clock), or None when no live process holds that id."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.LIVE_WORKER, owner_id)
        if row is None:
            return None
        seen_seconds_ago: float = row["seen_seconds_ago"]
        return worker_from_row(row), seen_seconds_ago

    async def live_workers(self) -> list[WorkerRecord]:
        """The processes whose last heartbeat is younger than three of their intervals."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.LIVE_WORKERS)
        return [worker_from_row(row) for row in rows]
