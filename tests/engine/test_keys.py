"""Idempotency and singleton keys hold under races (issue #2, points 1 and 2)."""

import asyncio

from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop


async def test_second_enqueue_returns_first_instance_when_idempotency_key_repeats(
    store: Store,
) -> None:
    engine = make_engine(store, noop)
    first = await engine.enqueue("noop", {"a": 1}, idempotency_key="order-42")
    second = await engine.enqueue("noop", {"a": 2}, idempotency_key="order-42")
    assert first.created
    assert not second.created
    assert second.instance_id == first.instance_id
    assert second.instance.params == {"a": 1}


async def test_exactly_one_row_when_fifty_enqueues_race_on_ten_connections(store: Store) -> None:
    engine = make_engine(store, noop)
    results = await asyncio.gather(
        *(engine.enqueue("noop", {"i": i}, idempotency_key="race") for i in range(50))
    )
    assert sum(r.created for r in results) == 1
    assert len({r.instance_id for r in results}) == 1
    async with store.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM laneway.instances") == 1
        assert await conn.fetchval("SELECT count(*) FROM laneway.events") == 1


async def test_one_active_instance_per_singleton_key_when_enqueues_race(store: Store) -> None:
    engine = make_engine(store, noop)
    results = await asyncio.gather(
        *(engine.enqueue("noop", {"i": i}, singleton_key="nightly") for i in range(30))
    )
    assert sum(r.created for r in results) == 1
    active = results[0].instance_id
    assert {r.instance_id for r in results} == {active}
    other_key = await engine.enqueue("noop", singleton_key="other")
    assert other_key.created


async def test_new_singleton_instance_starts_when_previous_one_ended(store: Store) -> None:
    engine = make_engine(store, noop)
    first = await engine.enqueue("noop", singleton_key="s")
    await engine.tick()
    assert (await engine.get(first.instance_id)).status == Status.COMPLETED  # type: ignore[union-attr]
    second = await engine.enqueue("noop", singleton_key="s")
    assert second.created
    assert second.instance_id != first.instance_id
    cancelled = await engine.enqueue("noop", singleton_key="t")
    await engine.cancel(cancelled.instance_id)
    assert (await engine.enqueue("noop", singleton_key="t")).created
