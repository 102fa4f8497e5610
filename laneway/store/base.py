"""The part of the Store every area shares: the pool, the event append, the clock.

Owns how a Store method gets its connection (a bounded wait on the pool), the one Python call
of the event append (queries.APPEND_EVENTS, which calls laneway.append_events), the hand-over
of kept signals that both a sender and the group commit make (queries.CONSUME_SIGNALS), and the
administrative connection for diagnostics. The areas' methods live in instances.py, leases.py,
history.py, schedules.py, workers.py and queue_history.py; store.py composes them into Store.
"""

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from uuid import UUID

from laneway.model import EventType, NewEvent, Status, Transition
from laneway.store import queries
from laneway.store.pool import ConnectionPool, Loan
from laneway.store.rows import Conn

EVENTS_LOCK_KEY = 7_461_726_102  # serialises event appends; see queries.APPEND_EVENTS
ACQUIRE_TIMEOUT_SECONDS = 5.0  # longest wait for a pooled connection


class StoreBase:
    """The pool and the helpers every area of the Store uses."""

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

    @property
    def connections_busy(self) -> bool:
        """Whether every connection of the pool is in use now (ConnectionPool.busy)."""
        return self._pool.busy

    def _acquire(self) -> Loan:
        # A pool that stays exhausted (or a database that stopped answering) fails the call
        # with TimeoutError instead of queueing it forever.
        return self._pool.acquire(timeout=self._acquire_timeout)

    async def _append_events(
        self, conn: Conn, events: Sequence[NewEvent], cancelled_ids: Sequence[UUID] = ()
    ) -> int | None:
        """Append events and ring the doorbell, inside the caller's transaction; the doorbell
        names `cancelled_ids` (at most 100: the payload stays under NOTIFY's 8,000 bytes)."""
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
            ",".join(map(str, cancelled_ids)) or None,
            [e.signal for e in events],
        )
        return last_id

    async def _consume_signals(self, conn: Conn, instance_ids: Sequence[UUID]) -> int:
        """Hand the oldest kept signal to each of these instances that waits for one of its
        name, with its `signalled` event, inside the caller's transaction (the sender's and the
        group commit's: queries.CONSUME_SIGNALS); how many went on."""
        rows = await conn.fetch(queries.CONSUME_SIGNALS, list(instance_ids))
        await self._append_events(
            conn,
            [
                NewEvent(
                    instance_id=row["instance_id"],
                    name=row["name"],
                    type=EventType.SIGNALLED,
                    status=Status(row["status"]),
                    attempt=row["attempts"],
                    signal=row["signal"],
                )
                for row in rows
            ],
        )
        return len(rows)

    async def _record_failures(self, conn: Conn, transitions: Sequence[Transition]) -> None:
        """Keep, for `failures`, the failed attempts that were no handler's exception (a lost
        worker, a wait's timeout): their lastError reads `Type: message`."""
        failed = [t for t in transitions if t.error]
        if not failed:
            return
        split = [(t.error or "").partition(": ") for t in failed]
        await conn.execute(
            queries.RECORD_FAILURES,
            [t.instance_id for t in failed],
            [t.attempts for t in failed],
            [kind for kind, _, _ in split],
            [message for _, _, message in split],
            [t.stage for t in failed],
        )

    @property
    def pool_capacity(self) -> int:
        """The most connections the store's pool opens at once."""
        return self._pool.capacity

    def pool_counts(self) -> tuple[int, int]:
        """Pooled connections lent out now, and open and idle."""
        return self._pool.size - self._pool.idle, self._pool.idle

    async def ping(self) -> None:
        """Raise if the database cannot answer."""
        async with self._acquire() as conn:
            await conn.fetchval(queries.DB_NOW)

    async def now(self) -> datetime:
        """The database clock."""
        async with self._acquire() as conn:
            value: datetime = await conn.fetchval(queries.DB_NOW)
            return value

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection, for diagnostics and tests; never for LISTEN."""
        async with self._acquire() as conn:
            yield conn
