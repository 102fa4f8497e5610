"""The LISTEN side of the event path: a broadcaster backend on one dedicated asyncpg connection.

Owns that connection: LISTEN once at start-up, a heartbeat, reconnect with capped backoff and
re-LISTEN, and a gap marker after every reconnect. Does not publish (writers NOTIFY inside their
own transactions: a NOTIFY on this connection would race the heartbeat and the LISTEN for it,
and asyncpg allows one statement at a time per connection) and does not read the events table
(hub.py does).
"""

import asyncio
import logging
import random

import asyncpg
from broadcaster import BroadcastBackend, Event

from laneway.model import NOTIFY_CHANNEL
from laneway.store.pool import connect

logger = logging.getLogger(__name__)

LISTENER_APPLICATION_NAME = "laneway-listener"
BACKOFF_MIN_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 10.0
CLOSE_TIMEOUT_SECONDS = 1.0
INBOX_SIZE = 10_000

# Errors that mean "this connection (attempt) is unusable"; anything else is a bug and surfaces.
CONNECTION_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)

# $1 channel. A liveness probe that is also true only while this session still LISTENs, so a
# silently dropped LISTEN (a session reset, or a transaction-mode pooler such as PgBouncer in
# between, loses LISTEN state without an error) counts as a failure too.
# It lives here, not in laneway/store/queries/, because it runs on this connection only.
HEARTBEAT = "SELECT $1 = ANY (ARRAY(SELECT pg_listening_channels()))"

# Compared by identity: no payload a writer sends can be this object.
_GAP = Event(channel=NOTIFY_CHANNEL, message="")


def is_gap(event: Event) -> bool:
    """True for the marker meaning "notifications may have been lost": re-read the table."""
    return event is _GAP


class ListenBackend(BroadcastBackend):
    """broadcaster backend over one dedicated LISTEN connection that survives connection loss.

    `connect()` opens the connection and LISTENs on the one app-wide channel; `run()` (a task
    the owner keeps) heartbeats it and reconnects; `next_published()` yields one Event per
    NOTIFY payload, and a gap marker (see `is_gap`) after every reconnect and whenever the
    bounded inbox overflowed.
    """

    def __init__(
        self,
        url: str,
        *,
        channel: str = NOTIFY_CHANNEL,
        heartbeat_seconds: float = 5.0,
        inbox_size: int = INBOX_SIZE,
        application_name: str = LISTENER_APPLICATION_NAME,
    ) -> None:
        # BroadcastBackend.__init__ only raises NotImplementedError; it is deliberately not called.
        if heartbeat_seconds <= 0 or inbox_size < 1:
            raise ValueError("heartbeat_seconds and inbox_size must be positive")
        self._url = url
        self._channel = channel
        self._heartbeat_seconds = heartbeat_seconds
        self._application_name = application_name
        self._inbox: asyncio.Queue[Event] = asyncio.Queue(maxsize=inbox_size)
        self._overflowed = False
        self._dropped_count = 0
        self._reconnect_count = 0
        # asyncpg runs one statement at a time per connection; a second one at once fails with
        # "another operation is in progress", so the heartbeat and (re-)LISTEN take turns.
        self._lock = asyncio.Lock()
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()

    # -- state ---------------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """The connection is open (a half-open one counts until the heartbeat notices)."""
        return self._conn is not None and not self._conn.is_closed()

    @property
    def reconnect_count(self) -> int:
        return self._reconnect_count

    @property
    def dropped_count(self) -> int:
        """Payloads dropped because the inbox was full (each drop is followed by a gap marker)."""
        return self._dropped_count

    # -- broadcaster's backend interface -------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection and LISTEN; raises if the database cannot be reached now."""
        await self._open()

    async def disconnect(self) -> None:
        """Close the connection (the owner has stopped `run()` first)."""
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            async with self._lock, asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                await conn.close()
        except CONNECTION_ERRORS:
            conn.terminate()

    async def subscribe(self, channel: str) -> None:
        """The one channel is LISTENed once in `connect()`; never per subscriber.

        LISTEN/UNLISTEN per subscriber would race a subscriber that arrives while another
        leaves, and orphan one of them; one channel listened for the process's life cannot.
        """
        if channel != self._channel:
            raise ValueError(f"this backend listens on {self._channel!r} only")

    async def unsubscribe(self, channel: str) -> None:
        """Nothing to do: the channel stays LISTENed for the connection's lifetime."""

    async def publish(self, channel: str, message: object) -> None:
        """Refused: events are NOTIFYed by the writer's transaction, never through LISTEN."""
        raise TypeError("Laneway's writers NOTIFY in their own transactions, not through LISTEN")

    async def next_published(self) -> Event:
        """The next NOTIFY payload as an Event, or a gap marker (see `is_gap`)."""
        if self._overflowed and self._inbox.empty():
            self._overflowed = False
            return _GAP
        return await self._inbox.get()

    # -- supervision ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the connection listening until cancelled: heartbeat it, reconnect after a loss."""
        while True:
            conn, lost = self._conn, self._lost
            if conn is None or lost.is_set() or conn.is_closed():
                if conn is not None:
                    conn.terminate()  # idempotent; releases the socket whatever the cause
                await self._reconnect()
                continue
            try:
                async with asyncio.timeout(self._heartbeat_seconds):
                    await lost.wait()
            except TimeoutError:
                if not await self._is_alive(conn):
                    # A half-open socket (a vanished host, a partition) is never noticed
                    # otherwise: asyncpg only waits for bytes that never come. Terminating
                    # fires the termination listener and the loop reconnects.
                    logger.warning("listener heartbeat failed")
                    conn.terminate()
            else:
                logger.warning("listener connection lost")

    async def _is_alive(self, conn: asyncpg.Connection) -> bool:
        try:
            async with self._lock, asyncio.timeout(self._heartbeat_seconds):
                listening = await conn.fetchval(HEARTBEAT, self._channel)
        except CONNECTION_ERRORS:
            return False
        return listening is True

    async def _reconnect(self) -> None:
        self._conn = None
        delay = BACKOFF_MIN_SECONDS
        while True:
            try:
                await self._open()
            except CONNECTION_ERRORS as error:
                logger.warning(
                    "listener reconnect failed", extra={"delay_s": delay, "error": repr(error)}
                )
                # Jitter spreads the reconnects of many processes after a server restart.
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, BACKOFF_MAX_SECONDS)
            else:
                break
        self._reconnect_count += 1
        logger.info("listener reconnected", extra={"reconnects": self._reconnect_count})
        # NOTIFYs sent while we were away are gone: tell the reader to re-read the table.
        self._push(_GAP)

    async def _open(self) -> None:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            conn = await connect(self._url, application_name=self._application_name)
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        listening = False
        try:
            async with self._lock, asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                await conn.add_listener(self._channel, self._on_notify)
            listening = True
        finally:
            if not listening:
                conn.terminate()
        self._conn, self._lost = conn, lost

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object, /) -> None:
        self._push(Event(channel=channel, message=str(payload)))

    def _push(self, event: Event) -> None:
        try:
            self._inbox.put_nowait(event)
        except asyncio.QueueFull:
            # Bounded, so a stalled consumer cannot grow memory without limit: drop, and let
            # next_published() announce a gap once drained (subscribers replay from the table).
            self._overflowed = True
            if event is not _GAP:
                self._dropped_count += 1
                if self._dropped_count == 1 or self._dropped_count % 1000 == 0:
                    logger.warning("listener inbox full", extra={"dropped": self._dropped_count})
