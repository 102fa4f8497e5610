"""The Store's queue area: a queue's caps (an operator's, or code's defaults) and pause, the
queues as listed with their counts, and the creation of a queue an enqueue names (remembered
per process, so that a known queue costs no statement).
"""

from collections.abc import Iterable

from laneway.model import QueueRecord
from laneway.store import queries
from laneway.store.base import StoreBase
from laneway.store.rows import Conn, queue_from_row


class QueueStore(StoreBase):
    """Queues, as the API side and the engine's start read and change them."""

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
        self,
        name: str,
        concurrency: int,
        rate_per_minute: float | None,
        key_concurrency: int | None = None,
        key_rate_per_minute: float | None = None,
    ) -> QueueRecord:
        """Create or change a queue's caps as an operator's: code never overrides them again.
        Rings the doorbell: caps raised may let idle workers start what waited."""
        async with self._acquire() as conn, conn.transaction():
            await conn.execute(
                queries.CONFIGURE_QUEUE,
                name,
                concurrency,
                rate_per_minute,
                key_concurrency,
                key_rate_per_minute,
            )
            await conn.execute(queries.RING_FOR_QUEUE_ROOM)
            self._known_queues.add(name)
            row = await conn.fetchrow(queries.QUEUE_STATS, name)
        assert row is not None
        return queue_from_row(row)

    async def apply_code_queue_settings(
        self, name: str, concurrency: int, rate_per_minute: float | None
    ) -> bool:
        """Write code's default caps for a queue unless an operator has set its caps; True
        if they were written (a new queue, or new values over defaults or older code's)."""
        async with self._acquire() as conn:
            status = await conn.execute(
                queries.APPLY_CODE_QUEUE_SETTINGS, name, concurrency, rate_per_minute
            )
        self._known_queues.add(name)
        return status != "INSERT 0 0"

    async def set_queue_paused(self, name: str, paused: bool) -> tuple[QueueRecord, bool]:
        """Pause or resume a queue, creating it (default caps) if there is none; the queue,
        and whether this call changed it. A resume that changed it rings the doorbell."""
        async with self._acquire() as conn, conn.transaction():
            changed = await conn.fetchval(queries.SET_QUEUE_PAUSED, name, paused) is not None
            if changed and not paused:
                await conn.execute(queries.RING_FOR_QUEUE_ROOM)
            self._known_queues.add(name)
            row = await conn.fetchrow(queries.QUEUE_STATS, name)
        assert row is not None
        return queue_from_row(row), changed

    async def queues(self, name: str | None = None) -> list[QueueRecord]:
        """Queues with their settings and instance counts per status."""
        async with self._acquire() as conn:
            return [queue_from_row(row) for row in await conn.fetch(queries.QUEUE_STATS, name)]
