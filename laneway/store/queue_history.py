"""The Store's queue history area: the per-minute roll-up of the event log and its read.

Owns the rows of laneway.queue_history and its high-water mark
(laneway.queue_history_progress): the roll-up one engine runs once a minute (one statement,
counted once however many engines run it), and a queue's last minutes for the API.
"""

from laneway.errors import NotFoundError
from laneway.model import QueueSample
from laneway.store import queries
from laneway.store.base import StoreBase

HISTORY_RETENTION_SECONDS = 2 * 86_400.0  # per-minute rows are kept two days
ROLL_UP_BATCH = 50_000  # most events one roll-up statement reads


class QueueHistoryStore(StoreBase):
    """Per queue, per minute: started, completed, failed, retried, and the pending depth."""

    async def roll_up_queue_history(
        self,
        *,
        batch: int = ROLL_UP_BATCH,
        retention_seconds: float = HISTORY_RETENTION_SECONDS,
    ) -> tuple[bool, bool]:
        """Count the events of closed minutes not yet counted, sample the pending depth for
        the minute that just closed, and delete rows past retention (one statement).

        Returns (rolled, more): rolled is False when another roll-up held the mark and this one
        did nothing; more is True when it stopped at `batch` events and should run again.
        """
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.ROLL_UP_QUEUE_HISTORY, batch, retention_seconds)
        assert row is not None
        return bool(row["rolled"]), bool(row["more"])

    async def queue_history(self, queue: str, minutes: int) -> list[QueueSample]:
        """The last `minutes` closed minutes of `queue`, oldest first, zeros where idle.

        Raises:
            NotFoundError: no such queue.
        """
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.QUEUE_HISTORY, queue, minutes)
        if not rows:
            raise NotFoundError(f"no queue {queue!r}")
        return [
            QueueSample(
                minute=row["minute"],
                started=row["started"],
                completed=row["completed"],
                failed=row["failed"],
                retried=row["retried"],
                pending=row["pending"],
            )
            for row in rows
        ]
