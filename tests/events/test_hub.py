"""EventHub on a real PostgreSQL: replay then live, no gap and no duplicate through adversity."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Engine, EnqueueRequest, WorkflowRegistry
from laneway.errors import DatabaseNewerError
from laneway.events import EventHub, EventSelection, EventStream
from laneway.model import EventRecord, EventType, NewEvent, Notification, Status
from laneway.store import Store
from laneway.store.pool import ConnectionPool, connect, create_pool
from tests.chaos.proxy import TcpProxy
from tests.events.test_backend import listener_pids, terminate_listener, until
from tests.workflows import noop


def any_event(event: EventRecord) -> bool:
    return True


class ReadRecordingStore(Store):
    """A real Store that records where each table read started."""

    def __init__(self, pool: ConnectionPool, database_url: str) -> None:
        super().__init__(pool, database_url)
        self.scans: list[int] = []  # after_event_id of every read of all events
        self.instance_reads: list[UUID] = []

    async def events_after(self, after_event_id: int, limit: int) -> list[EventRecord]:
        self.scans.append(after_event_id)
        return await super().events_after(after_event_id, limit)

    async def instance_events_after(
        self, instance_id: UUID, after_event_id: int, limit: int
    ) -> list[EventRecord]:
        self.instance_reads.append(instance_id)
        return await super().instance_events_after(instance_id, after_event_id, limit)


@contextlib.asynccontextmanager
async def own_store(database_url: str) -> AsyncIterator[ReadRecordingStore]:
    """A recording Store on a pool of its own, closed on exit."""
    pool = await create_pool(database_url)
    try:
        yield ReadRecordingStore(pool, database_url)
    finally:
        await pool.close()


def make_engine(store: Store) -> Engine:
    return Engine(store, WorkflowRegistry([noop]))


async def write_events(engine: Engine, count: int, *, batch: int = 1) -> list[UUID]:
    """`count` enqueued events: one transaction (and one NOTIFY) per `batch` of them."""
    ids: list[UUID] = []
    for _ in range(0, count, batch):
        if batch == 1:
            ids.append((await engine.enqueue("noop")).instance_id)
        else:
            results = await engine.enqueue_many([EnqueueRequest(name="noop")] * batch)
            ids += [r.instance_id for r in results]
    return ids


async def table_ids(store: Store, after_event_id: int = 0) -> list[int]:
    ids: list[int] = []
    while page := await store.events_after(after_event_id, 500):
        ids += [e.event_id for e in page]
        after_event_id = page[-1].event_id
    return ids


async def take(stream: EventStream, count: int, *, within: float = 10.0) -> list[EventRecord]:
    async with asyncio.timeout(within):
        return [await anext(stream) for _ in range(count)]


def ids_of(events: list[EventRecord]) -> list[int]:
    return [e.event_id for e in events]


# -- replay and live --------------------------------------------------------------------------


async def test_live_events_arrive_in_order_when_opened_without_cursor(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    await write_events(engine, 5)  # history: not part of a live stream
    before = await store.latest_event_id()
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
    ):
        instance_ids = await write_events(engine, 20)
        received = await take(stream, 20)
        assert hub.last_event_id == received[-1].event_id
        assert stream.last_event_id == received[-1].event_id
    assert ids_of(received) == await table_ids(store, before)
    assert [e.instance_id for e in received] == instance_ids
    assert {e.type for e in received} == {EventType.ENQUEUED}


async def test_everything_is_replayed_then_live_when_after_event_id_is_zero(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    await write_events(engine, 100, batch=25)
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=0, matches=any_event) as stream,
    ):
        replayed = await take(stream, 100)
        await write_events(engine, 5)
        live = await take(stream, 5)
    assert ids_of(replayed + live) == await table_ids(store)


async def test_only_later_events_are_replayed_when_resuming_after_the_fiftieth(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    await write_events(engine, 100, batch=10)
    history = await table_ids(store)
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=history[49], matches=any_event) as stream,
    ):
        replayed = await take(stream, 50)
        await write_events(engine, 3)
        live = await take(stream, 3)
    assert ids_of(replayed) == history[50:]
    assert ids_of(live) == (await table_ids(store))[100:]


async def test_only_matching_events_arrive_when_the_stream_is_filtered(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    watched = (await engine.enqueue("noop")).instance_id

    def is_watched(event: EventRecord) -> bool:
        return event.instance_id == watched

    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=0, matches=is_watched) as replaying,
        hub.open_stream(after_event_id=None, matches=is_watched) as live,
    ):
        await write_events(engine, 10)
        await store.cancel_instance(watched)
        from_start = await take(replaying, 2)
        [cancelled] = await take(live, 1)
        # Filtered before queueing: the other instances' events never took queue space.
        assert live.queued == 0
    assert [(e.instance_id, e.type) for e in from_start] == [
        (watched, EventType.ENQUEUED),
        (watched, EventType.CANCELLED),
    ]
    assert cancelled == from_start[1]


async def test_one_instance_is_replayed_from_its_own_events_not_from_every_event(
    database_url: str,
) -> None:
    async with own_store(database_url) as store:
        engine = make_engine(store)
        watched = (await engine.enqueue("noop")).instance_id
        await write_events(engine, 1_200, batch=400)  # others' events: three pages
        latest = await store.latest_event_id()
        async with (
            EventHub.open(database_url, store, poll_seconds=60) as hub,
            hub.open_stream(after_event_id=0, matches=EventSelection(watched)) as stream,
        ):
            [enqueued] = await take(stream, 1)
            await write_events(engine, 3)
            await store.cancel_instance(watched)
            [cancelled] = await take(stream, 1)  # live, past the others' new events
        assert [(e.instance_id, e.type) for e in (enqueued, cancelled)] == [
            (watched, EventType.ENQUEUED),
            (watched, EventType.CANCELLED),
        ]
        assert store.instance_reads == [watched]
        # Only the hub's live reader read all events, and only from the tail on.
        assert all(after >= latest for after in store.scans)


async def test_every_subscriber_receives_every_event_when_ten_are_open_at_once(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        streams = [
            await stack.enter_async_context(
                hub.open_stream(after_event_id=None if n % 2 else 0, matches=any_event)
            )
            for n in range(10)
        ]
        assert hub.subscriber_count == 10
        writing = asyncio.create_task(write_events(engine, 50, batch=5))
        results = await asyncio.gather(*(take(stream, 50) for stream in streams))
        await writing
    expected = await table_ids(store)
    assert all(ids_of(received) == expected for received in results)


async def test_table_is_read_once_per_wake_up_when_many_subscribers_follow(
    database_url: str,
) -> None:
    async with own_store(database_url) as store:
        engine = make_engine(store)
        async with (
            EventHub.open(database_url, store, poll_seconds=60) as hub,
            contextlib.AsyncExitStack() as stack,
        ):
            streams = [
                await stack.enter_async_context(
                    hub.open_stream(after_event_id=None, matches=any_event)
                )
                for _ in range(20)
            ]
            await write_events(engine, 30)
            await asyncio.gather(*(take(stream, 30) for stream in streams))
    # One reader: at most one read per NOTIFY, however many subscribers there are.
    assert len(store.scans) <= 30


async def test_table_is_not_read_while_nobody_subscribes(database_url: str) -> None:
    async with own_store(database_url) as store:
        engine = make_engine(store)
        async with EventHub.open(database_url, store, poll_seconds=0.05) as hub:
            for _ in range(5):
                await engine.enqueue("noop")
            latest = await store.latest_event_id()
            await until(lambda: hub.last_event_id >= latest)  # the cursor follows the doorbells
            assert store.scans == []
            async with hub.open_stream(after_event_id=0, matches=lambda e: True) as stream:
                replayed = [await anext(stream) for _ in range(5)]
            assert [e.event_id for e in replayed] == sorted(e.event_id for e in replayed)


async def test_a_hub_opened_without_listen_connects_at_the_first_stream(
    store: Store, database_url: str, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store)
    async with EventHub.open(database_url, store, listen=False) as hub:
        before = await write_events(engine, 3)  # a producer: nothing listens, nothing is lost
        # Compared, not asserted on its own: mypy would keep `is_connected` narrowed to False.
        assert (hub.is_connected, await listener_pids(admin)) == (False, [])
        async with hub.open_stream(after_event_id=0, matches=any_event) as stream:
            assert len(await listener_pids(admin)) == 1
            assert hub.is_connected
            after = await write_events(engine, 2)
            received = await take(stream, 5)
        await hub.start()  # already listening: no second connection
        assert len(await listener_pids(admin)) == 1
    assert [e.instance_id for e in received] == before + after
    await until(lambda: no_listener(admin))  # closed with the hub (the server notices soon)


async def no_listener(admin: asyncpg.Connection) -> bool:
    return await listener_pids(admin) == []


# -- adversity --------------------------------------------------------------------------------


async def test_every_event_arrives_once_in_order_when_listener_is_terminated_mid_stream(
    store: Store, database_url: str, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store)
    terminated = asyncio.Event()

    async def writer() -> None:
        await write_events(engine, 50)
        await terminated.wait()
        await write_events(engine, 50)

    # poll_seconds=60: nothing may be rescued by the fallback poll here.
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
        asyncio.TaskGroup() as tasks,
    ):
        tasks.create_task(writer())
        received = await take(stream, 30)
        old_pid = await terminate_listener(admin)
        terminated.set()
        received += await take(stream, 70)
        await until(lambda: hub.is_connected and hub.reconnect_count == 1)
        assert old_pid not in await listener_pids(admin)
    assert ids_of(received) == await table_ids(store)


async def test_events_written_while_the_listener_is_down_arrive_when_it_reconnects(
    store: Store, database_url: str, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store)
    proxy = TcpProxy(database_url)
    async with (
        proxy.running() as url,
        EventHub.open(url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
    ):
        proxy.refuse()
        await terminate_listener(admin)
        await until(lambda: not hub.is_connected)
        before = hub.last_event_id
        await write_events(engine, 5)  # their NOTIFYs reach no listener
        assert hub.last_event_id == before
        proxy.accept()
        received = await take(stream, 5)  # the reconnect's gap marker makes the hub re-read
        assert hub.is_connected
    assert ids_of(received) == await table_ids(store)


async def test_half_open_listener_is_replaced_when_the_heartbeat_times_out(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    proxy = TcpProxy(database_url)
    async with (
        proxy.running() as url,
        EventHub.open(url, store, heartbeat_seconds=0.2, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
    ):
        await write_events(engine, 5)
        received = await take(stream, 5)
        proxy.blackhole()  # the socket stays open, but nothing crosses it any more
        await write_events(engine, 5)
        # A few heartbeat periods: wait 0.2 s, the probe times out after 0.2 s, reconnect.
        received += await take(stream, 5, within=3.0)
        # The rows may already have come on a doorbell of the first writes that was still on
        # its way: the reconnect is awaited, not assumed to have come first.
        await until(lambda: hub.reconnect_count > 0, within=3.0)
        assert hub.reconnect_count == 1
        assert hub.is_connected
    assert ids_of(received) == await table_ids(store)


async def test_lost_notifications_are_recovered_by_the_poll_when_the_listener_misses_them(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    proxy = TcpProxy(database_url)
    async with (
        proxy.running() as url,
        EventHub.open(url, store, heartbeat_seconds=60, poll_seconds=0.1) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
    ):
        proxy.blackhole()  # the heartbeat will not notice within this test
        await write_events(engine, 3)
        received = await take(stream, 3, within=5.0)
        assert hub.reconnect_count == 0
    assert ids_of(received) == await table_ids(store)


async def test_stalled_subscriber_stays_bounded_then_catches_up_when_it_reads_again(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    async with (
        EventHub.open(database_url, store, subscriber_queue_size=100, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stalled,
        hub.open_stream(after_event_id=None, matches=any_event) as healthy,
        asyncio.TaskGroup() as tasks,
    ):
        # A reader that keeps up is not held back by the stalled one.
        following = tasks.create_task(take(healthy, 3000, within=20))
        for _ in range(30):
            await write_events(engine, 100, batch=100)
            assert stalled.queued <= 100
        latest = await store.latest_event_id()

        def reader_caught_up() -> bool:
            assert stalled.queued <= 100
            return hub.last_event_id == latest

        await until(reader_caught_up)
        overflowed = stalled.is_behind
        assert overflowed
        assert stalled.queued <= 100
        assert stalled.overflow_count >= 1
        caught_up = await take(stalled, 3000)
        assert not stalled.is_behind
        await write_events(engine, 1)
        live = await take(stalled, 1)
    expected = await table_ids(store)
    assert ids_of(caught_up + live) == expected
    assert ids_of(following.result()) == expected[:3000]


async def test_events_arrive_in_id_order_when_overlapping_writers_commit_in_reverse(
    store: Store, database_url: str, admin: asyncpg.Connection
) -> None:
    """Writer A draws its event id first and holds its commit open; writer B starts later and,
    without the append lock, would commit its higher id first and a reader polling every 50 ms
    would move past A's id for good. The lock makes B wait, so the hub delivers both, in order.
    """
    engine = make_engine(store)
    subject = (await engine.enqueue("noop")).instance
    before = await store.latest_event_id()
    first_writer = await connect(database_url, application_name="laneway-test-writer")
    commit_first = asyncio.Event()
    first_appended = asyncio.Event()

    async def write_first() -> int | None:
        async with first_writer.transaction():
            event_id = await store._append_events(
                first_writer,
                [
                    NewEvent(
                        instance_id=subject.instance_id,
                        name=subject.name,
                        type=EventType.CHECKPOINT,
                        status=Status.PENDING,
                    )
                ],
            )
            first_appended.set()
            await commit_first.wait()
        return event_id

    try:
        async with (
            EventHub.open(database_url, store, poll_seconds=0.05) as hub,
            hub.open_stream(after_event_id=None, matches=any_event) as stream,
        ):
            async with asyncio.TaskGroup() as tasks:
                first = tasks.create_task(write_first())
                await first_appended.wait()
                second = tasks.create_task(engine.enqueue("noop"))
                await until(
                    lambda: admin.fetchval(
                        "SELECT count(*) > 0 FROM pg_locks"
                        " WHERE locktype = 'advisory' AND NOT granted AND database ="
                        " (SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                )
                # The reader polls through this window and sees neither event.
                assert await store.events_after(before, 10) == []
                assert hub.last_event_id == before
                assert stream.queued == 0
                commit_first.set()
            received = await take(stream, 2)
    finally:
        await first_writer.close()
    [second_event] = await store.instance_events_after(second.result().instance_id, 0, 10)
    assert ids_of(received) == [first.result(), second_event.event_id]


# -- notifications and lifecycle --------------------------------------------------------------


async def test_callback_gets_the_cancelled_instance_when_an_instance_is_cancelled(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    notifications: asyncio.Queue[Notification] = asyncio.Queue()
    async with EventHub.open(database_url, store, on_notification=notifications.put_nowait):
        enqueued = await engine.enqueue("noop")
        await store.cancel_instance(enqueued.instance_id)
        async with asyncio.timeout(10):
            while not (notification := await notifications.get()).cancelled_ids:
                pass
    cancelled = (await store.instance_events_after(enqueued.instance_id, 0, 10))[-1]
    assert cancelled.type == EventType.CANCELLED
    assert notification == Notification(
        last_event_id=cancelled.event_id, cancelled_ids=(enqueued.instance_id,)
    )


async def test_hub_keeps_going_when_payloads_are_malformed_or_the_callback_fails(
    store: Store, database_url: str, admin: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store)
    calls: list[Notification] = []

    def flaky(notification: Notification) -> None:
        calls.append(notification)
        if len(calls) == 1:
            raise RuntimeError("callback bug")

    caplog.set_level(logging.WARNING, logger="laneway.events")
    async with (
        EventHub.open(database_url, store, on_notification=flaky, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=any_event) as stream,
    ):
        await admin.execute("SELECT pg_notify('laneway_events', 'not json')")
        await admin.execute("""SELECT pg_notify('laneway_events', '{"c": 1}')""")
        await write_events(engine, 2)
        received = await take(stream, 2)
        await until(lambda: len(calls) == 2)
        assert hub.is_connected
    assert ids_of(received) == await table_ids(store)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("malformed notification dropped") == 2
    assert messages.count("notification callback failed") == 1


async def test_stream_raises_the_filter_error_when_its_filter_fails(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)

    def broken(event: EventRecord) -> bool:
        raise LookupError("filter bug")

    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=None, matches=broken) as stream,
        hub.open_stream(after_event_id=None, matches=any_event) as other,
    ):
        await write_events(engine, 1)
        with pytest.raises(LookupError, match="filter bug"):
            await take(stream, 1)
        assert len(await take(other, 1)) == 1


async def test_streams_end_and_unsubscribe_when_the_hub_closes(
    store: Store, database_url: str
) -> None:
    hub_context = EventHub.open(database_url, store)
    hub = await hub_context.__aenter__()
    closed = False
    try:
        async with hub.open_stream(after_event_id=None, matches=any_event) as stream:
            pending = asyncio.ensure_future(anext(stream, None))
            await asyncio.sleep(0)  # let it start waiting
            assert hub.subscriber_count == 1
            await hub_context.__aexit__(None, None, None)
            closed = True
            assert await pending is None
        assert hub.subscriber_count == 0
        assert not hub.is_connected
        with pytest.raises(RuntimeError, match="not running"):
            async with hub.open_stream(after_event_id=None, matches=any_event):
                pass
    finally:
        if not closed:
            await hub_context.__aexit__(None, None, None)


async def test_a_refused_hub_ends_its_streams_with_the_error_and_opens_no_more(
    store: Store, database_url: str
) -> None:
    # A newer release migrated the database (api/lifespan.py): subscribers must not read on
    # with this process's SQL, and are told why. The listener goes on (an engine's drain).
    async with EventHub.open(database_url, store) as hub:
        async with hub.open_stream(after_event_id=None, matches=any_event) as stream:
            pending = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0)  # let it start waiting
            refusal = DatabaseNewerError(["9999_from_a_newer_release"])
            hub.refuse(refusal)
            with pytest.raises(DatabaseNewerError) as ended:
                await asyncio.wait_for(pending, timeout=5)
            assert ended.value is refusal
        for _ in range(2):
            with pytest.raises(DatabaseNewerError):
                async with hub.open_stream(after_event_id=0, matches=any_event):
                    pytest.fail("a refused hub opened a stream")
        assert hub.subscriber_count == 0
        assert hub.is_connected
