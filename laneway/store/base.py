"""The part of the Store every area shares: the pool, the event append, the clock.

Owns how a Store method gets its connection (a bounded wait on the pool), the one Python call
of the event append (queries.APPEND_EVENTS, which calls laneway.append_events), the hand-over
of kept signals that both a sender and the group commit make (queries.CONSUME_SIGNALS), and the
administrative connection for diagnostics, and `snapshot`: reads of one task that see one
moment; and `newer_release`, whether a newer release migrated the database while this process
ran, set once by the first read that finds out (an engine's heartbeat, or `check_schema`). The
areas' methods live in queues.py, instances.py, leases.py, history.py, schedules.py,
workers.py and queue_history.py; store.py composes them into Store.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from laneway.errors import DatabaseNewerError
from laneway.model import EventType, NewEvent, Status, Transition
from laneway.store import queries
from laneway.store.migrate import shipped_names
from laneway.store.pool import ConnectionPool
from laneway.store.rows import Conn

EVENTS_LOCK_KEY = 7_461_726_102  # serialises event appends; see queries.APPEND_EVENTS
ACQUIRE_TIMEOUT_SECONDS = 5.0  # longest wait for a pooled connection


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A connection in a read-only REPEATABLE READ transaction, held by one task for its
    reads on one pool (`Store.snapshot`)."""

    pool: ConnectionPool
    task: "asyncio.Task[Any] | None"
    conn: Conn


# Task-local, not process state: a task's `async with store.snapshot()` block sets it, and a
# context is copied into each new task, which then finds a snapshot it does not hold (`task`).
_SNAPSHOT: ContextVar[_Snapshot | None] = ContextVar("laneway_store_snapshot", default=None)


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
        # Set once, by the first read that finds a migration this installation does not ship:
        # a newer release migrated the database under this process, whose SQL may no longer
        # fit it. Its engine stops (engine/presence.py) and its API refuses (api/lifespan.py).
        self.newer_release: DatabaseNewerError | None = None
        self._newer_release_found = asyncio.Event()

    @property
    def connections_busy(self) -> bool:
        """Whether every connection of the pool is in use now (ConnectionPool.busy)."""
        return self._pool.busy

    def _acquire(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        held = _SNAPSHOT.get()  # inside this task's `snapshot` block: its connection
        if held is not None and held.pool is self._pool and held.task is asyncio.current_task():
            return contextlib.nullcontext(held.conn)  # the snapshot's, lent for its block
        # A pool that stays exhausted (or a database that stopped answering) fails the call
        # with TimeoutError instead of queueing it forever.
        return self._pool.acquire(timeout=self._acquire_timeout)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        """Inside the block, this task's reads of the store see one moment: they run on one
        connection in a read-only REPEATABLE READ transaction (its snapshot is taken by the
        first of them). Two reads that each took their own moment could show an instance in
        two states at once, as a status beside a waiting reason that says otherwise did.

        Only this task's calls join it (a task made in the block runs on the pool as usual);
        a write in the block fails (ReadOnlySQLTransactionError); a snapshot inside one is the
        same snapshot.
        """
        async with (
            self._acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            token = _SNAPSHOT.set(_Snapshot(self._pool, asyncio.current_task(), conn))
            try:
                yield
            finally:
                _SNAPSHOT.reset(token)

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
        """Raise if the database cannot answer, or answers read-only (a standby after a
        failover, default_transaction_read_only): ReadOnlySQLTransactionError, after which the
        pool closes that session, so the next ping opens one on the database as it is then."""
        async with self._acquire() as conn:
            if await conn.fetchval(queries.READ_ONLY) == "on":
                raise asyncpg.ReadOnlySQLTransactionError("the database answers read-only")

    async def check_schema(self) -> DatabaseNewerError | None:
        """Read the newest migration the database has applied (one statement), for a process
        whose engine does not run and so has no heartbeat to read it; `newer_release`."""
        async with self._acquire() as conn:
            newest: str | None = await conn.fetchval(queries.SCHEMA_VERSION)
        await self._note_newest_migration(newest)
        return self.newer_release

    async def wait_newer_release(self) -> DatabaseNewerError:
        """Return `newer_release` once it is set."""
        await self._newer_release_found.wait()
        assert self.newer_release is not None
        return self.newer_release

    async def _note_newest_migration(self, newest: str | None) -> None:
        """Set `newer_release` when `newest`, the database's newest migration, is not one this
        installation ships; it names every such migration (one more statement, that once)."""
        if newest is None or self.newer_release is not None or newest in shipped_names():
            return
        async with self._acquire() as conn:
            applied = {row["name"] for row in await conn.fetch(queries.APPLIED_MIGRATIONS)}
        self.newer_release = DatabaseNewerError(sorted(applied - shipped_names()) or [newest])
        self._newer_release_found.set()

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
