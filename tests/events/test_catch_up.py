"""Streams that read the table for themselves (laneway/events/catch_up.py) on a real
PostgreSQL: hundreds behind at once on a small pool, none failing and no writer starved; a
stream that gets no connection waits and tries again."""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from laneway.events import EventHub, EventSelection, EventStream
from laneway.events.catch_up import PAGE_SIZE, CatchUpReads, reads_for_pool
from laneway.model import EventRecord
from laneway.store import Store
from laneway.store.pool import ConnectionPool, create_pool
from tests.events.test_backend import until
from tests.events.test_hub import any_event, ids_of, make_engine, own_store, table_ids, take
from tests.events.test_hub import write_events as write

STREAMS = 200
POOL_SIZE = 4
ACQUIRE_TIMEOUT = 0.5  # seconds a Store call waits for a pooled connection
BATCHES = 8  # of BATCH events, one transaction each
BATCH = 500  # events: every page the hub reads overflows every queue (10)


@contextlib.asynccontextmanager
async def small_store(
    database_url: str, acquire_timeout: float = ACQUIRE_TIMEOUT
) -> AsyncIterator[tuple[Store, ConnectionPool]]:
    pool = await create_pool(database_url, size=POOL_SIZE)
    try:
        yield Store(pool, database_url, acquire_timeout=acquire_timeout), pool
    finally:
        await pool.close()


async def test_hundreds_of_streams_behind_at_once_all_catch_up_and_writers_are_not_starved(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = make_engine(store)  # the burst comes from a pool of its own
    before = await store.latest_event_id()
    async with (
        small_store(database_url) as (small, _),
        EventHub.open(database_url, small, subscriber_queue_size=10, poll_seconds=60) as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        streams: list[EventStream] = [
            await stack.enter_async_context(hub.open_stream(after_event_id=None, matches=any_event))
            for _ in range(STREAMS)
        ]
        total = BATCHES * (BATCH + 1)

        async def follow(stream: EventStream) -> list[int]:
            async with asyncio.timeout(120):
                return [(await anext(stream)).event_id for _ in range(total)]

        followers = [asyncio.create_task(follow(stream)) for stream in streams]
        prober = make_engine(small)  # enqueues on the pool the streams read from
        latencies = []
        for _ in range(BATCHES):
            await write(writer, BATCH, batch=BATCH)
            began = time.monotonic()
            await prober.enqueue("noop")
            latencies.append(time.monotonic() - began)
        received = await asyncio.gather(*followers)
    expected = await table_ids(store, before)
    assert len(expected) == total
    assert all(ids == expected for ids in received)
    assert all(stream.overflow_count > 0 for stream in streams)  # each caught up from the table
    assert max(latencies) < ACQUIRE_TIMEOUT
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_stream_that_gets_no_connection_waits_and_tries_again(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await write(make_engine(store), 50, batch=50)
    expected = await table_ids(store)
    async with (
        small_store(database_url, acquire_timeout=0.1) as (small, pool),
        EventHub.open(database_url, small, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=0, matches=any_event) as stream,
    ):
        held = contextlib.AsyncExitStack()
        async with held:
            for _ in range(POOL_SIZE):  # the pool is busy elsewhere: no read gets a connection
                await held.enter_async_context(pool.acquire())
            replay = asyncio.create_task(take(stream, len(expected), within=30))

            def retrying() -> bool:
                return any(
                    r.getMessage().startswith("event catch-up read failed") for r in caplog.records
                )

            await until(retrying)
            assert not replay.done()
        received = await replay
    assert ids_of(received) == expected


async def test_streams_behind_at_the_same_place_share_the_read_of_a_full_page(
    store: Store, database_url: str
) -> None:
    await write(make_engine(store), PAGE_SIZE + 10, batch=PAGE_SIZE + 10)
    ended = asyncio.Event()
    async with own_store(database_url) as recording:
        reads = CatchUpReads(recording, limit=1)
        full = await asyncio.gather(*(reads.page(None, 0, ended) for _ in range(50)))
        end = full[0][-1].event_id if full[0] else 0
        tail = await asyncio.gather(*(reads.page(None, end, ended) for _ in range(3)))
    assert [len(page or ()) for page in full] == [PAGE_SIZE] * 50
    assert [len(page or ()) for page in tail] == [10] * 3
    # A full page cannot change, so it is read once; a short one can grow, so each asker
    # reads it for itself.
    assert recording.scans == [0, end, end, end]


class ConcurrencyRecordingStore(Store):
    """A real Store that counts the per-instance table reads running at once. The first reads
    wait for one another until `overlap` of them run, so that as many as the limit allows
    are seen at once (and a limit below `overlap` never lets them go: the test times out)."""

    def __init__(self, pool: ConnectionPool, database_url: str, overlap: int) -> None:
        super().__init__(pool, database_url)
        self.running = 0
        self.most = 0
        self._overlap = overlap
        self._overlapped = asyncio.Event()

    async def instance_events_after(
        self, instance_id: UUID, after_event_id: int, limit: int
    ) -> list[EventRecord]:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if self.running >= self._overlap:
                self._overlapped.set()
            await self._overlapped.wait()
            return await super().instance_events_after(instance_id, after_event_id, limit)
        finally:
            self.running -= 1


@pytest.mark.parametrize(("pool_size", "reads"), [(2, 1), (4, 1), (10, 2), (25, 5)])
async def test_catch_up_reads_take_a_fifth_of_the_pool_and_leave_at_least_one(
    store: Store, database_url: str, pool_size: int, reads: int
) -> None:
    assert reads_for_pool(pool_size) == reads
    instance_ids = await write(make_engine(store), 12)
    pool = await create_pool(database_url, size=pool_size)
    recording = ConcurrencyRecordingStore(pool, database_url, overlap=reads)
    try:
        async with (
            EventHub.open(database_url, recording, poll_seconds=60) as hub,
            contextlib.AsyncExitStack() as stack,
        ):
            streams = [
                await stack.enter_async_context(
                    hub.open_stream(after_event_id=0, matches=EventSelection(instance_id))
                )
                for instance_id in instance_ids
            ]
            replays = await asyncio.gather(*(take(stream, 1) for stream in streams))
    finally:
        await pool.close()
    assert [events[0].instance_id for events in replays] == instance_ids
    assert recording.most == reads
