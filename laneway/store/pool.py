"""Laneway's connection pool and per-connection setup: JSON codecs, application name, timeouts.

Owns how a connection is made and lent. Does not run Laneway queries (the Store does).
"""

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import asyncpg

# Errors that mean the database went away (a restart, a lost connection, a pool that could not
# lend one in time), not that a statement was wrong: whoever gets one may wait and try again.
DATABASE_GONE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    # A session the server ended in mid-statement can surface as a protocol-state error
    # ("cannot switch to state 12") instead of a closed connection: gone all the same.
    asyncpg.InternalClientError,
    # A session opened read-only (a standby after a failover, default_transaction_read_only
    # for a while): the pool closes it (READ_ONLY), and the next one finds the database as it
    # is then.
    asyncpg.ReadOnlySQLTransactionError,
)
READ_ONLY = asyncpg.ReadOnlySQLTransactionError

logger = logging.getLogger(__name__)

APPLICATION_NAME = "laneway"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Server-side guard rails in milliseconds (0 turns one off, PostgreSQL's default for all).

    A statement that runs away, a lock wait that would stall a claim, or a transaction left
    open by a stuck client is ended by PostgreSQL itself, whatever the client is doing. A
    long-open transaction also holds back vacuum's xmin horizon, so dead rows pile up in the
    queue tables and every claim slows down.
    """

    statement_ms: int = 30_000
    lock_ms: int = 2_000
    idle_in_transaction_ms: int = 60_000

    @classmethod
    def from_seconds(
        cls, *, statement: float, lock: float, idle_in_transaction: float
    ) -> "Timeouts":
        """The timeouts Settings gives in seconds, in PostgreSQL's whole milliseconds."""
        return cls(
            statement_ms=_milliseconds(statement),
            lock_ms=_milliseconds(lock),
            idle_in_transaction_ms=_milliseconds(idle_in_transaction),
        )


def _milliseconds(seconds: float) -> int:
    # Rounded up to 1 ms, not down: a positive timeout under half a millisecond would round to
    # 0, which PostgreSQL takes as "no timeout", the opposite of what was asked for.
    return 0 if seconds == 0 else max(1, round(seconds * 1000))


DEFAULT_TIMEOUTS = Timeouts()
# Migrations wait for each other on an advisory lock and may rewrite large tables.
MIGRATION_TIMEOUTS = Timeouts(statement_ms=0, lock_ms=0, idle_in_transaction_ms=60_000)


async def setup_connection(conn: asyncpg.Connection) -> None:
    """Decode json/jsonb to Python values; inputs go in as text the engine already encoded.

    Both travel in the binary format (jsonb's is a version byte before the text), which COPY
    needs (store/instances.py copies batches in) and which asyncpg can also decode inside
    composite values; it costs the same as the text format."""
    await conn.set_type_codec(
        "json", schema="pg_catalog", encoder=_encode_json, decoder=json.loads, format="binary"
    )
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_encode_jsonb, decoder=_decode_jsonb, format="binary"
    )


def _encode_json(value: Any) -> bytes:
    text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
    return text.encode()


_JSONB_VERSION = b"\x01"  # the one version of jsonb's binary format


def _encode_jsonb(value: Any) -> bytes:
    return _JSONB_VERSION + _encode_json(value)


_DECODE = json.JSONDecoder().decode  # json.loads without its per-call type checks


def _decode_jsonb(data: bytes) -> Any:
    return _DECODE(data[1:].decode())


def server_settings(
    application_name: str = APPLICATION_NAME, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> dict[str, str]:
    """What every Laneway connection sets at start-up: its name and the guard rails.

    The name lets an operator (or a test) find and terminate one process's sessions in
    pg_stat_activity; the timeouts are `Timeouts`, applied per session so they hold whatever
    the role's or the server's defaults are.
    """
    return {
        "application_name": application_name,
        "idle_in_transaction_session_timeout": str(timeouts.idle_in_transaction_ms),
        "lock_timeout": str(timeouts.lock_ms),
        "statement_timeout": str(timeouts.statement_ms),
    }


COMMAND_TIMEOUT_SECONDS = 60.0  # client-side bound on a statement (the server has its own)
CLOSE_TIMEOUT_SECONDS = 5.0  # how long close() waits for lent connections to come back
MAX_IDLE_SECONDS = 300.0  # an idle connection beyond the first is closed after this long


class ConnectionPool:
    """Up to `size` connections, lent last-in first-out; what a Store runs its statements on.

    asyncpg's own pool costs more per loan than a short statement costs the server: a task to
    shield every release, a timer re-armed per release, a proxy and a future per acquire. Here
    a loan of an idle connection is a list pop and its return a list append; a return does
    nothing that could be cancelled, so nothing needs shielding.

    A connection goes back on the idle stack only if it is known to be at rest: its block
    ended normally, or with an error the server reported (that exchange is complete), and
    outside a transaction. Any other exit (a cancellation, a timeout, a lost connection, a
    client-side error) may have left a statement in flight, so the connection settles in the
    background first: asyncpg's cancel request reaches the server (cutting the socket instead
    would abort it, and a backend running a statement, or waiting on a lock, does not notice a
    closed socket), then a trivial statement must answer outside a transaction within
    CLOSE_TIMEOUT_SECONDS; if it does the connection is lent again, if not it is closed (or
    terminated). A connection that died while idle is dropped when next taken. Never more than
    `size` connections are open (settling ones included); waiters are served first come, first
    served.

    A burst opens connections that a quieter load no longer needs: the stack keeps the ones
    used least recently at its bottom, and one timer closes those that sat idle for
    `max_idle_seconds` (None: never), always keeping one, so neither the process nor the
    server holds a burst's connections for the rest of its life.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        *,
        size: int,
        max_idle_seconds: float | None = MAX_IDLE_SECONDS,
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one connection")
        self._connect = connect
        self._size = size
        self._max_idle = max_idle_seconds
        # (connection, monotonic time it came back), least recently used first
        self._idle: list[tuple[asyncpg.Connection, float]] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._lent: set[asyncpg.Connection] = set()
        self._opening = 0
        self._settling: set[asyncio.Task[None]] = set()
        # A waiter is handed a connection, or None: "a slot is free, open one yourself".
        self._waiters: deque[asyncio.Future[asyncpg.Connection | None]] = deque()
        self._closed = False
        self._drained: asyncio.Event | None = None  # set by close() once nothing is lent

    @property
    def capacity(self) -> int:
        """The most connections this pool opens at once."""
        return self._size

    @property
    def size(self) -> int:
        """Connections open (idle, lent or settling) or being opened."""
        return len(self._idle) + len(self._lent) + len(self._settling) + self._opening

    @property
    def idle(self) -> int:
        """Connections open and not lent."""
        return len(self._idle)

    @property
    def busy(self) -> bool:
        """Every connection of the pool is lent (or settling back): none idle, none opening."""
        return not self._idle and not self._opening and self.size >= self._size

    def acquire(self, timeout: float | None = None) -> "Loan":
        """`async with pool.acquire(timeout) as conn:` a connection for the block.

        Raises (on entry):
            TimeoutError: no connection within `timeout` seconds (PoolBusyError when every
                connection was lent all along).
            asyncpg.InterfaceError: the pool is closed.
            asyncpg.PostgresError, OSError: a new connection could not be opened.
        """
        return Loan(self, timeout)

    def _lend_idle(self) -> asyncpg.Connection | None:
        while self._idle and not self._closed:
            conn, _ = self._idle.pop()
            if not conn.is_closed():
                self._lent.add(conn)
                return conn
        return None

    async def _lend(self) -> asyncpg.Connection:
        while True:
            if self._closed:
                raise asyncpg.InterfaceError("the connection pool is closed")
            conn = self._lend_idle()
            if conn is not None:
                return conn
            if self.size < self._size:
                return await self._open()
            waiter: asyncio.Future[asyncpg.Connection | None] = (
                asyncio.get_running_loop().create_future()
            )
            self._waiters.append(waiter)
            try:
                handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    # Handed over just as this waiter gave up: pass it on.
                    if (given := waiter.result()) is None:
                        self._free_slot()
                    else:
                        self._give_back(given, at_rest=True)
                else:
                    waiter.cancel()
                raise
            if handed is not None:
                return handed  # lent on this waiter's behalf by _give_back

    async def _open(self) -> asyncpg.Connection:
        self._opening += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._opening -= 1
            self._free_slot()
            raise
        self._opening -= 1
        self._lent.add(conn)
        if self._closed:  # closed while connecting
            self._give_back(conn, at_rest=False)
            raise asyncpg.InterfaceError("the connection pool is closed")
        return conn

    def _give_back(self, conn: asyncpg.Connection, *, at_rest: bool, reusable: bool = True) -> None:
        self._lent.discard(conn)
        if self._closed or conn.is_closed():
            conn.terminate()  # also asyncpg's cleanup of a connection lost under it
            self._free_slot()
            return
        if not reusable:
            self._start_settling(conn, check=False)  # closed, its slot freed once it is
            return
        if not at_rest or conn.is_in_transaction():
            settle = self._start_settling(conn, check=True)
            if (noted := _CUT_OFF.get()) is not None:
                noted.add(settle)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._lent.add(conn)
                waiter.set_result(conn)
                return
        self._idle.append((conn, time.monotonic()))
        if self._expiry is None and len(self._idle) > 1 and self._max_idle is not None:
            self._arm_expiry()

    def _arm_expiry(self) -> None:
        assert self._max_idle is not None
        due = self._idle[0][1] + self._max_idle - time.monotonic()
        self._expiry = asyncio.get_running_loop().call_later(max(due, 0.0), self._expire)

    def _expire(self) -> None:
        """Close the connections idle for max_idle_seconds, from the bottom of the stack (the
        longest idle), keeping one; re-arm for the next one due."""
        self._expiry = None
        assert self._max_idle is not None
        cutoff = time.monotonic() - self._max_idle
        while len(self._idle) > 1 and self._idle[0][1] <= cutoff:
            conn, _ = self._idle.pop(0)
            self._start_settling(conn, check=False)
        if len(self._idle) > 1 and not self._closed:
            self._arm_expiry()

    def _start_settling(self, conn: asyncpg.Connection, *, check: bool) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._settle(conn, check=check))
        self._settling.add(task)
        return task

    async def _settle(self, conn: asyncpg.Connection, *, check: bool) -> None:
        """Lend a connection that did not end at rest again once it is: a cancelled statement
        has ended on the server (asyncpg lets its cancel request land before it sends the next
        statement) and a trivial one answers outside a transaction. Then its session is reset
        (asyncpg's reset: what the block left of a transaction on the client, its session
        advisory locks, LISTENs and settings; the settings of its start-up stay). Otherwise,
        or without `check` (an expired idle connection), close it."""
        task = asyncio.current_task()
        at_rest = False
        try:
            if check:
                try:
                    async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                        await conn.execute("SELECT 1")
                        if not conn.is_in_transaction():
                            # A cancel that stopped the block's BEGIN on the server left
                            # asyncpg's transaction behind, failed, as the connection's own:
                            # the next one would take itself for a nested one (SAVEPOINT).
                            await conn.reset()
                            at_rest = not conn.is_in_transaction()
                except Exception:  # lost, frozen or broken: not lent again either way
                    pass
            if not at_rest:
                await _close_or_terminate(conn, CLOSE_TIMEOUT_SECONDS)
        finally:
            # Also when close() cancels this: the pool is closed, so the connection ends.
            self._settling.discard(task)
            self._give_back(conn, at_rest=at_rest)

    def _free_slot(self) -> None:
        if self._closed:
            if self._drained is not None and not (self._lent or self._opening or self._settling):
                self._drained.set()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> None:
        """Close the idle connections, and the lent ones as their blocks end; after `timeout`
        seconds terminate what is still lent. Waiters and later acquires get InterfaceError."""
        if self._closed:
            return
        self._closed = True
        self._drained = asyncio.Event()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("the connection pool is closed"))
        self._waiters.clear()
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await _close_or_terminate(conn, timeout)
        if self._lent or self._opening or self._settling:
            try:
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
            except TimeoutError:
                logger.warning("connections still lent at pool close: terminated")
        for conn in self._lent:
            conn.terminate()
        self._lent.clear()
        for task in self._settling:
            task.cancel()  # a cancelled settle terminates its connection


async def _close_or_terminate(conn: asyncpg.Connection, timeout: float) -> None:
    """Close gracefully (pending cancel requests first); terminate if that fails or hangs."""
    try:
        await conn.close(timeout=timeout)
    except Exception:
        conn.terminate()


class PoolBusyError(TimeoutError):
    """No connection within the timeout because every one of the pool's was lent meanwhile:
    the database answers, this process's work holds all its connections. A TimeoutError still
    (what waits for a connection expects one), but said apart from a database that does not
    answer (a connection that could not be opened in time): the API tells clients which."""


# The settles of the loans that the current context gave back mid-statement, while a
# `statements_ended` block notes them.
_CUT_OFF: ContextVar[set[asyncio.Task[None]] | None] = ContextVar("laneway_cut_off", default=None)


@contextlib.asynccontextmanager
async def statements_ended() -> AsyncIterator[None]:
    """Leaving the block (however it ends), wait until each statement that the block's
    cancelled loans may have left running has ended on the server, as their connections
    settled (at most CLOSE_TIMEOUT_SECONDS).

    Whoever cancels work and then says "it was rolled back" must say so only once it holds:
    asyncpg's cancel request reaches the server a moment after the cancellation, and a
    statement that is its own transaction (an enqueue) and gets its lock meanwhile commits.
    """
    noted: set[asyncio.Task[None]] = set()
    token = _CUT_OFF.set(noted)
    try:
        yield
    finally:
        _CUT_OFF.reset(token)
        if noted:
            await asyncio.wait(noted, timeout=CLOSE_TIMEOUT_SECONDS)


class Loan:
    """One `async with pool.acquire()` block (a class, not a generator: it runs per statement)."""

    __slots__ = ("_conn", "_pool", "_timeout")

    def __init__(self, pool: ConnectionPool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> asyncpg.Connection:
        conn = self._pool._lend_idle()  # the common case: no timer, no await
        if conn is None:
            try:
                async with asyncio.timeout(self._timeout):
                    conn = await self._pool._lend()
            except TimeoutError:
                if self._pool.busy:
                    raise PoolBusyError(
                        f"every one of the pool's {self._pool.size} connections stayed lent"
                        f" for {self._timeout:g} s"
                    ) from None
                raise
        self._conn = conn
        return conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            at_rest = exc_type is None or issubclass(exc_type, asyncpg.PostgresError)
            # A read-only session stays read-only after the database takes writes again.
            reusable = exc_type is None or not issubclass(exc_type, READ_ONLY)
            self._pool._give_back(conn, at_rest=at_rest, reusable=reusable)


async def create_pool(
    database_url: str,
    *,
    size: int = 10,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    max_idle_seconds: float | None = MAX_IDLE_SECONDS,
) -> ConnectionPool:
    """A pool whose connections decode JSON and carry Laneway's timeouts. One connection is
    opened now, so an unreachable database fails here rather than at the first statement."""

    async def open_one() -> asyncpg.Connection:
        return await connect(database_url, application_name=application_name, timeouts=timeouts)

    pool = ConnectionPool(open_one, size=size, max_idle_seconds=max_idle_seconds)
    async with pool.acquire():
        pass
    return pool


async def connect(
    database_url: str,
    *,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    command_timeout: float = COMMAND_TIMEOUT_SECONDS,
) -> asyncpg.Connection:
    """One connection: the pool's, or the LISTEN or migration connection outside it."""
    conn = await asyncpg.connect(
        database_url,
        server_settings=server_settings(application_name, timeouts),
        command_timeout=command_timeout,
    )
    await setup_connection(conn)
    return conn
