"""EventHub: per-subscriber event streams, replayed from the table and then followed live.

Owns the in-process fan-out: one reader reads new rows once per wake-up (NOTIFY, gap or poll)
and hands them to every subscriber's bounded queue; each stream replays, dedupes and catches
up by event id. Does not hold the LISTEN connection (backend.py) or decide workflow semantics.

broadcaster is the fan-in through its backend interface: ListenBackend merges every writer's
NOTIFY into one Event stream, consumed by `_pump` as `Broadcast._listener` would. Broadcast
itself is not used: its listener is a task nobody watches (if it dies, every subscription
hangs in silence), it awaits each put into unbounded queues (a stalled client grows memory
without limit), it LISTENs per subscribe (racing subscribers can be orphaned), and our
subscribers get rows, not payloads.
"""

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from uuid import UUID

from laneway.errors import InvalidInputError
from laneway.events.backend import (
    CONNECTION_ERRORS,
    LISTENER_APPLICATION_NAME,
    ListenBackend,
    is_gap,
)
from laneway.events.catch_up import (
    PAGE_SIZE,
    RETRY_MAX_SECONDS,
    RETRY_MIN_SECONDS,
    CatchUpReads,
    reads_for_pool,
)
from laneway.model import NOTIFY_CHANNEL, EventRecord, Notification
from laneway.store import Store

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0  # a fallback: NOTIFY wakes the reader, and a reconnect re-reads the table

EventFilter = Callable[[EventRecord], bool]
NotificationCallback = Callable[[Notification], None]


@dataclass(frozen=True, slots=True)
class EventSelection:
    """The filter of a subscription: one instance, one workflow name, both, or everything.

    An EventFilter that the hub can read: a stream of one instance replays through that
    instance's index instead of paging through every event in the table.
    """

    instance_id: UUID | None = None
    name: str | None = None

    def __call__(self, event: EventRecord) -> bool:
        return (self.instance_id is None or event.instance_id == self.instance_id) and (
            self.name is None or event.name == self.name
        )


class EventStream(AsyncIterator[EventRecord]):
    """One subscriber's events in id order: a table replay, then live; no duplicate, no gap.

    Overflow policy: when the bounded queue would overflow, the hub drops this subscriber's
    backlog and marks it behind, so memory stays bounded. At its next read the stream catches up
    from the table after its position (catch_up.py: a few such reads at once per hub, retried
    while no connection or no database answers), then follows live events again; it never
    raises for being slow. The stream ends (StopAsyncIteration) when the hub closes.
    """

    def __init__(
        self,
        reads: CatchUpReads,
        matches: EventFilter,
        *,
        after_event_id: int,
        replay: bool,
        maxsize: int,
    ) -> None:
        self._reads = reads
        self._matches = matches
        self._instance_id = matches.instance_id if isinstance(matches, EventSelection) else None
        self._maxsize = maxsize
        self._queue: deque[EventRecord] = deque()  # live events handed over by the hub's reader
        self._replayed: deque[EventRecord] = deque()  # matching events of the last table page
        self._wakeup = asyncio.Event()
        # Every event up to `_position` has been delivered, filtered out, or is in `_replayed`.
        self._position = after_event_id
        self._accepting = True
        self._replay_needed = replay
        self._replaying = False
        self._overflow_count = 0
        self._closed = False
        self._ended = asyncio.Event()  # closed or failed: a table read waiting to retry gives up
        self.delivered = 0  # events this stream has handed out
        self._error: BaseException | None = None

    @property
    def last_event_id(self) -> int:
        """A resume point: every matching event up to this id has been delivered."""
        if self._replayed:
            return self._replayed[0].event_id - 1
        return self._position

    @property
    def queued(self) -> int:
        """Live events waiting in this subscriber's bounded queue."""
        return len(self._queue)

    @property
    def is_behind(self) -> bool:
        """The queue overflowed and the stream has not started catching up yet."""
        return not self._accepting

    @property
    def overflow_count(self) -> int:
        return self._overflow_count

    async def __anext__(self) -> EventRecord:
        # Let the rest of the process run between two events: a subscriber draining a
        # backlog would otherwise hold the loop for the whole backlog (its sends need not
        # wait), and lease renewals, claims and the listener heartbeat would stall behind it.
        await asyncio.sleep(0)
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            if self._replayed:
                self.delivered += 1
                return self._replayed.popleft()
            if self._replay_needed:
                # Rejoin the live feed first, then read the table: whatever the reader hands
                # over from now on is kept, and what the table also returned is skipped by id.
                self._replay_needed = False
                self._accepting = True
                self._replaying = True
            if self._replaying:
                await self._read_page()
                continue
            if self._queue:
                event = self._queue.popleft()
                if event.event_id > self._position:
                    self._position = event.event_id
                    self.delivered += 1
                    return event
                continue
            self._wakeup.clear()
            await self._wakeup.wait()

    async def _read_page(self) -> None:
        page = await self._reads.page(self._instance_id, self._position, self._ended)
        if page is None:  # the stream ended meanwhile
            return
        if len(page) < PAGE_SIZE:
            self._replaying = False
        if page:
            self._position = page[-1].event_id
            self._replayed.extend(event for event in page if self._matches(event))

    # -- called by the hub, synchronously: never blocks the fan-out ---------------------------

    def _start_at(self, event_id: int) -> None:
        self._position = max(self._position, event_id)

    def _offer(self, events: Sequence[EventRecord]) -> None:
        if not self._accepting:
            return
        try:
            wanted = [e for e in events if e.event_id > self._position and self._matches(e)]
        except Exception as error:  # the filter is the subscriber's code: fail it, not the hub
            self._fail(error)
            return
        if not wanted:
            return
        if len(self._queue) + len(wanted) > self._maxsize:
            self._queue.clear()
            self._accepting = False
            self._replay_needed = True
            self._overflow_count += 1
            logger.info("subscriber fell behind", extra={"queue_size": self._maxsize})
        else:
            self._queue.extend(wanted)
        self._wakeup.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._accepting = False
        self._queue.clear()
        self._wakeup.set()
        self._ended.set()

    def _close(self) -> None:
        self._closed = True
        self._accepting = False
        self._queue.clear()
        self._wakeup.set()
        self._ended.set()


class EventHub:
    """The events of one process's subscribers, fed by one LISTEN connection and one reader."""

    def __init__(
        self,
        store: Store,
        backend: ListenBackend,
        *,
        on_notification: NotificationCallback | None,
        subscriber_queue_size: int,
        poll_seconds: float,
        catch_up_reads: int | None = None,
    ) -> None:
        self._store = store
        if catch_up_reads is None:
            catch_up_reads = reads_for_pool(store.pool_capacity)
        self._reads = CatchUpReads(store, limit=catch_up_reads)
        self._backend = backend
        self._cursor = 0  # the reader has handed out every event up to here (set by start)
        self._on_notification = on_notification
        self._subscriber_queue_size = subscriber_queue_size
        self._poll_seconds = poll_seconds
        self._streams: set[EventStream] = set()
        self._wake = asyncio.Event()
        self._notified = 0  # the highest id a NOTIFY has announced
        self._closed = False
        self._failure: BaseException | None = None
        self._refusal: BaseException | None = None  # see refuse
        self._subscribers = 0  # see subscriber_count
        self._delivered_by_ended = 0  # events handed out by streams that have ended
        self._tasks: list[asyncio.Task[None]] = []
        self._start_lock = asyncio.Lock()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        database_url: str,
        store: Store,
        *,
        on_notification: NotificationCallback | None = None,
        listen: bool = True,
        heartbeat_seconds: float = 5.0,
        subscriber_queue_size: int = 1000,
        poll_seconds: float = POLL_SECONDS,
        application_name: str = LISTENER_APPLICATION_NAME,
        catch_up_reads: int | None = None,
    ) -> AsyncIterator["EventHub"]:
        """The hub, listening now (`listen`) or from the first `start()`; stopped on exit.

        `on_notification` is called with every NOTIFY payload (it must be quick; its errors are
        logged and dropped). `poll_seconds` bounds how late an event can be if a NOTIFY is lost.
        With `listen=False` a process that only writes (a producer) holds no LISTEN connection
        and is not woken by every event in the database; `open_stream` starts it when needed.
        `catch_up_reads` bounds the pool connections that streams reading the table for
        themselves (a replay, a catch-up) take at once (catch_up.py); None: a fifth of the
        store's pool, at least one.
        """
        if (
            subscriber_queue_size < 1
            or poll_seconds <= 0
            or (catch_up_reads is not None and catch_up_reads < 1)
        ):
            raise ValueError(
                "subscriber_queue_size, poll_seconds and catch_up_reads must be positive"
            )
        backend = ListenBackend(
            database_url, heartbeat_seconds=heartbeat_seconds, application_name=application_name
        )
        hub = cls(
            store,
            backend,
            on_notification=on_notification,
            subscriber_queue_size=subscriber_queue_size,
            poll_seconds=poll_seconds,
            catch_up_reads=catch_up_reads,
        )
        try:
            if listen:
                await hub.start()
            yield hub
        finally:
            hub._close()
            for task in hub._tasks:
                task.cancel()
            if hub._tasks:
                await asyncio.wait(hub._tasks)
            await backend.disconnect()

    async def start(self) -> None:
        """Open the LISTEN connection and start the reader; at once if they already run.

        Raises:
            RuntimeError: the hub is closed.
            asyncpg.PostgresError, OSError, TimeoutError: the database cannot be reached now.
        """
        if self._tasks:
            return
        async with self._start_lock:
            if self._tasks:
                return
            if self._closed:
                raise RuntimeError("the event hub is closed")
            backend = self._backend
            await backend.connect()
            try:
                await backend.subscribe(NOTIFY_CHANNEL)
                # Taken after LISTEN: every event committed later rings the bell.
                latest = await self._store.latest_event_id()
            except BaseException:
                await backend.disconnect()
                raise
            self._cursor = self._notified = latest
            self._tasks = [
                asyncio.create_task(backend.run(), name="laneway-events-listener"),
                asyncio.create_task(self._pump(), name="laneway-events-pump"),
                asyncio.create_task(self._read_loop(), name="laneway-events-reader"),
            ]
            for task in self._tasks:
                task.add_done_callback(self._on_task_done)

    @property
    def is_connected(self) -> bool:
        """The listener connection is up and the hub's tasks are running (for /healthz)."""
        return self._failure is None and not self._closed and self._backend.is_connected

    @property
    def last_event_id(self) -> int:
        """The highest event id the hub has read and handed to its subscribers."""
        return self._cursor

    @property
    def reconnect_count(self) -> int:
        """How many times the listener connection was re-established."""
        return self._backend.reconnect_count

    @property
    def delivered_count(self) -> int:
        """Events handed to this hub's subscribers, since it opened."""
        return self._delivered_by_ended + sum(stream.delivered for stream in self._streams)

    @property
    def subscriber_count(self) -> int:
        """Streams whose starting point is fixed: an event committed after a subscriber is
        counted reaches it (a stream still reading its start is registered, not counted)."""
        return self._subscribers

    @contextlib.asynccontextmanager
    async def open_stream(
        self, *, after_event_id: int | None, matches: EventFilter
    ) -> AsyncIterator[EventStream]:
        """Subscribe now; the stream replays the matching events after `after_event_id` from the
        table (None: none, live from now on; 0: from the beginning), then follows live ones.

        Raises:
            ValueError: `after_event_id` is negative.
            InvalidInputError: `after_event_id` is past every id the database has drawn (a
                cursor from another database, or from before a restore): events would come
                with lower ids, and the stream would skip them all.
            RuntimeError: the hub is closed or one of its tasks crashed.
            BaseException: the hub was refused (`refuse`): that error.
            asyncpg.PostgresError, OSError, TimeoutError: the hub was not listening yet and the
                database cannot be reached now (see `start`).
        """
        if after_event_id is not None and after_event_id < 0:
            raise ValueError("after_event_id must not be negative")
        if self._closed or self._failure is not None:
            raise RuntimeError("the event hub is not running") from self._failure
        if self._refusal is not None:
            # Raised afresh each time: its traceback would otherwise grow with every refusal.
            raise self._refusal.with_traceback(None)
        await self.start()
        if after_event_id is not None and after_event_id > self._cursor:
            drawn = await self._store.last_drawn_event_id()
            if after_event_id > drawn:
                raise InvalidInputError(
                    f"after event id {after_event_id} is past the newest event id of this "
                    f"database ({drawn}): resume from an event id it sent, or from 0"
                )
        stream = EventStream(
            self._reads,
            matches,
            after_event_id=self._cursor if after_event_id is None else after_event_id,
            replay=after_event_id is not None,
            maxsize=self._subscriber_queue_size,
        )
        # Registered before any await: nothing the reader hands out from now on is missed.
        self._streams.add(stream)
        counted = False
        try:
            if after_event_id is None:
                stream._start_at(await self._store.latest_event_id())
            self._subscribers += 1
            counted = True
            yield stream
        finally:
            self._streams.discard(stream)
            self._subscribers -= counted
            self._delivered_by_ended += stream.delivered

    def refuse(self, error: BaseException) -> None:
        """End every stream with `error`, and refuse every new one with it, for good: this
        process must read no more events with its SQL (a newer release migrated the database,
        api/lifespan.py). The listener goes on, and so do the notifications an engine still
        draining is given."""
        self._refusal = error
        for stream in self._streams:
            stream._fail(error)

    # -- background tasks ----------------------------------------------------------------------

    async def _pump(self) -> None:
        """Turn each NOTIFY into a wake-up of the reader and a call of `on_notification`."""
        while True:
            event = await self._backend.next_published()
            if is_gap(event):
                self._wake.set()  # notifications may have been lost: re-read the table
                continue
            try:
                notification = Notification.from_payload(event.message)
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                logger.warning(
                    "malformed notification dropped",
                    extra={"payload": event.message[:200], "error": repr(error)},
                )
                continue
            self._notified = max(self._notified, notification.last_event_id)
            # Coalescing: a doorbell for rows the reader already read wakes nobody.
            if notification.last_event_id > self._cursor:
                self._wake.set()
            if self._on_notification is not None:
                try:
                    self._on_notification(notification)
                except Exception:
                    logger.exception("notification callback failed")

    async def _read_loop(self) -> None:
        """Read new rows once per wake-up (or every `poll_seconds`) and fan them out."""
        delay = RETRY_MIN_SECONDS
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_seconds):
                    await self._wake.wait()
            # Cleared before reading, so a NOTIFY that arrives during the read causes exactly
            # one more read: any number of them coalesce into it.
            self._wake.clear()
            try:
                await self._read_new_events()
            except CONNECTION_ERRORS as error:
                logger.warning("event read failed", extra={"delay_s": delay, "error": repr(error)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                self._wake.set()
            else:
                delay = RETRY_MIN_SECONDS

    async def _read_new_events(self) -> None:
        # Ids become visible in id order (the append lock, queries.APPEND_EVENTS), so reading
        # `event_id > cursor` in id order never skips a row that commits later.
        if not self._streams:
            # Nobody to hand rows to (a worker process, an idle API): skip the read. A stream
            # opened later starts from the table itself, so nothing it needs is lost.
            self._cursor = max(self._cursor, self._notified)
            return
        while True:
            page = await self._store.events_after(self._cursor, PAGE_SIZE)
            self._reads.offer(self._cursor, page)  # for streams behind at the same place
            if page:
                self._cursor = page[-1].event_id
                for stream in self._streams:
                    stream._offer(page)
            if len(page) < PAGE_SIZE:
                return

    def _on_task_done(self, task: "asyncio.Task[None]") -> None:
        if task.cancelled():
            return
        error = task.exception() or RuntimeError(f"{task.get_name()} stopped")
        # Never a silent hang (a dead fan-out task would otherwise leave every stream waiting
        # for good): log, report unhealthy, and fail every stream.
        logger.error("event hub task crashed", exc_info=error, extra={"task": task.get_name()})
        self._failure = error
        for stream in self._streams:
            stream._fail(error)

    def _close(self) -> None:
        self._closed = True
        for stream in self._streams:
            stream._close()
