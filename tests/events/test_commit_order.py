"""E-06 (docs/reliability.md): writers that commit out of id order, subscribers that miss nothing.

Eight writers append an event each per round and hold their transaction open for a random
0-200 ms (at full size) between the append and the commit, so commits land in every order
the append lock allows; five subscribers follow live. Every subscriber must receive every
event once, in id order. PR tier: 20 rounds of 0-20 ms; LANEWAY_CHAOS_FULL=1: the plan's
1,000 rounds of 0-200 ms (about 15 minutes: the holds are serialized by the append lock).
"""

import asyncio
import contextlib
import random

import asyncpg

from laneway.events import EventHub, EventStream
from laneway.model import EventType, NewEvent, Status
from laneway.store import Store
from laneway.store.pool import connect
from tests.events.test_hub import any_event, ids_of, make_engine, table_ids
from tests.sizes import FULL

ROUNDS = 1000 if FULL else 20
MAX_HOLD_SECONDS = 0.2 if FULL else 0.02
WRITERS = 8
SUBSCRIBERS = 5


async def read_all(stream: EventStream, count: int) -> list[int]:
    return ids_of([await anext(stream) for _ in range(count)])


async def test_no_subscriber_misses_an_event_when_writers_commit_out_of_order(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    subject = (await engine.enqueue("noop")).instance
    event = NewEvent(
        instance_id=subject.instance_id,
        name=subject.name,
        type=EventType.CHECKPOINT,
        status=Status.PENDING,
    )
    rng = random.Random(20261130)
    before = await store.latest_event_id()
    total = ROUNDS * WRITERS
    async with contextlib.AsyncExitStack() as stack:
        writers = [
            await connect(database_url, application_name=f"laneway-test-writer-{i}")
            for i in range(WRITERS)
        ]
        for writer in writers:
            stack.push_async_callback(writer.close)
        hub = await stack.enter_async_context(EventHub.open(database_url, store))
        streams = [
            await stack.enter_async_context(hub.open_stream(after_event_id=None, matches=any_event))
            for _ in range(SUBSCRIBERS)
        ]
        readers = [asyncio.create_task(read_all(stream, total)) for stream in streams]

        async def write(writer: asyncpg.Connection, hold: float) -> None:
            async with writer.transaction():
                await store._append_events(writer, [event])
                await asyncio.sleep(hold)  # the injected fault: a slow commit

        for _ in range(ROUNDS):
            async with asyncio.TaskGroup() as group:
                for writer in writers:
                    group.create_task(write(writer, rng.uniform(0, MAX_HOLD_SECONDS)))
        async with asyncio.timeout(60):
            received = await asyncio.gather(*readers)
    written = await table_ids(store, before)
    assert len(written) == total
    for ids in received:
        assert ids == written  # every event, once, in id order
