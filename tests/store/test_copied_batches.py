"""Batches copied in (COPY, a batch without keys): records as stored, and all or nothing when
the copy fails or the caller gives up while it runs."""

import asyncio
import dataclasses
import json
from collections.abc import Coroutine
from typing import Any

import asyncpg
import pytest

from laneway.engine import EnqueueRequest
from laneway.engine.requests import new_instance
from laneway.errors import InvalidInputError
from laneway.model import EnqueueResult
from laneway.store import Store
from laneway.store.instances import COPY_CHUNK, COPY_FROM, RECORDS_BETWEEN_TURNS
from tests.engine.helpers import make_engine
from tests.workflows import noop

# Enough to be copied, and for the records to be built over several turns of the copy task.
SIZE = max(COPY_FROM, 3 * RECORDS_BETWEEN_TURNS + 1)


def _started(coro: Coroutine[Any, Any, list[EnqueueResult]]) -> asyncio.Task[list[EnqueueResult]]:
    return asyncio.get_running_loop().create_task(coro)


async def _count(store: Store) -> tuple[int, int]:
    async with store.connection() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM laneway.instances) AS instances,"
            " (SELECT count(*) FROM laneway.events) AS events"
        )
    assert row is not None
    return row["instances"], row["events"]


async def test_a_copied_batch_returns_the_rows_as_stored(store: Store) -> None:
    engine = make_engine(store, noop)
    requests = [
        EnqueueRequest(
            name="noop",
            params={"zz": i, "a": [None, 2.5], "é": "x"},
            priority=i % 3,
            delay_ms=60_000 if i % 7 == 0 else 0,
            queue="elsewhere" if i % 5 == 0 else None,
        )
        for i in range(SIZE)
    ]
    results = await engine.enqueue_many(requests)
    assert [r.created for r in results] == [True] * SIZE
    assert [r.instance.params["zz"] for r in results] == list(range(SIZE))  # request order
    for result in results:
        stored = await engine.get(result.instance_id)
        assert result.instance == stored
        assert json.dumps(result.instance.params) == json.dumps(stored.params)  # key order too
    delayed = [r.instance for r in results if r.instance.params["zz"] % 7 == 0]
    assert all(r.run_after > r.created_at for r in delayed)
    assert await _count(store) == (SIZE, SIZE)


async def test_a_copy_that_fails_writes_nothing_and_the_store_goes_on(store: Store) -> None:
    batch = [new_instance(noop, EnqueueRequest(name="noop")) for _ in range(SIZE)]
    batch[-1] = dataclasses.replace(batch[-1], instance_id=batch[0].instance_id)
    with pytest.raises(asyncpg.UniqueViolationError):
        await store.enqueue_many(batch)
    assert await _count(store) == (0, 0)
    results = await make_engine(store, noop).enqueue_many(
        [EnqueueRequest(name="noop") for _ in range(SIZE)]
    )
    assert len(results) == SIZE
    assert await _count(store) == (SIZE, SIZE)


async def test_a_request_refused_after_chunks_were_copied_writes_nothing(
    store: Store, admin: asyncpg.Connection
) -> None:
    # Checked as they are copied, a chunk at a time: by the time the bad request is checked,
    # the chunks before it are in the transaction, which the refusal rolls back. The queue only
    # that batch named is not made, and not taken for made: a later batch makes it.
    engine = make_engine(store, noop)
    size = 3 * COPY_CHUNK + 5
    bad = 2 * COPY_CHUNK + 3
    requests = [
        EnqueueRequest(name="noop", queue="only_here" if i == 1 else None) for i in range(size)
    ]
    requests[bad] = EnqueueRequest(name="noop", priority=10**9)
    with pytest.raises(InvalidInputError, match=rf"^requests\[{bad}\]: priority must be within"):
        await engine.enqueue_many(requests)
    assert await _count(store) == (0, 0)
    assert not await admin.fetchval("SELECT count(*) FROM laneway.queues WHERE name = 'only_here'")
    requests[bad] = EnqueueRequest(name="noop")
    results = await engine.enqueue_many(requests)
    assert [r.instance.queue for r in results[:3]] == ["noop", "only_here", "noop"]
    assert await _count(store) == (size, size)
    assert await admin.fetchval("SELECT count(*) FROM laneway.queues WHERE name = 'only_here'") == 1


async def test_a_batch_given_up_at_any_point_is_all_or_nothing(store: Store) -> None:
    # Cancelled after 0, 3, 6 ... turns of the loop: before the transaction, in its first
    # statements, during the copy while the records are built. Each time the batch is wholly
    # in or wholly out, and the connection it used serves the next batch.
    engine = make_engine(store, noop)
    total = 0
    for turns in range(0, 200, 3):
        call = _started(engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(SIZE)]))
        for _ in range(turns):
            await asyncio.sleep(0)
        call.cancel()
        try:
            await call
            total += SIZE
        except asyncio.CancelledError:
            pass
        instances, events = await _count(store)
        if instances > total:  # committed before the cancel could stop it
            total += SIZE
        assert (instances, events) == (total, total), f"after {turns} turns"
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(SIZE)])
    assert await _count(store) == (total + SIZE, total + SIZE)


async def test_a_batch_given_up_during_its_copy_writes_nothing(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    for _ in range(3):
        # The copy waits for this lock, so the poll sees it under way however quick the
        # machine (a batch of 1,000 could end before the poll's first look, now and then).
        async with store.connection() as blocker, blocker.transaction():
            await blocker.execute("LOCK TABLE laneway.instances IN SHARE MODE")
            requests = [EnqueueRequest(name="noop") for _ in range(1000)]
            call = _started(engine.enqueue_many(requests))
            async with asyncio.timeout(10):
                while not await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND state = 'active'"
                    " AND query LIKE 'COPY %laneway%'"
                ):
                    assert not call.done(), "the batch ended before its copy was seen"
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        assert await _count(store) == (0, 0)
    results = await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(SIZE)])
    assert len(results) == SIZE
    assert await _count(store) == (SIZE, SIZE)
