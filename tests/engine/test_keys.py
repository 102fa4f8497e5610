"""Idempotency and singleton keys hold under races (issue #2, points 1 and 2)."""

import asyncio

from laneway.model import EnqueueResult, Status
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop

Task = asyncio.Task[EnqueueResult]


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


async def test_a_key_that_met_a_held_singleton_returns_the_holder_after_it_ended(
    store: Store,
) -> None:
    # An outside audit: the key given with a held singleton key returned the holder but was
    # bound to nothing, so the identical retry after the holder ended created an instance.
    engine = make_engine(store, noop)
    holder = await engine.enqueue("noop", {"n": 1}, singleton_key="s")
    first = await engine.enqueue("noop", {"n": 2}, singleton_key="s", idempotency_key="order-42")
    assert (first.created, first.instance_id) == (False, holder.instance_id)
    assert await engine.tick() == 1
    assert (await engine.get(holder.instance_id)).status == Status.COMPLETED  # type: ignore[union-attr]
    retry = await engine.enqueue("noop", {"n": 2}, singleton_key="s", idempotency_key="order-42")
    assert (retry.created, retry.instance_id) == (False, holder.instance_id)
    elsewhere = await engine.enqueue("noop", {"n": 3}, idempotency_key="order-42")
    assert (elsewhere.created, elsewhere.instance_id) == (False, holder.instance_id)
    async with store.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM laneway.instances") == 1


async def test_one_instance_answers_for_a_key_when_enqueues_race_a_singleton_ending(
    store: Store,
) -> None:
    # The first requests name the held singleton key (each gives way to the holder and binds
    # the key to it), then half do and half do not (each could create an instance with the key
    # as its own); the holder is cancelled among them, so some find the singleton key free.
    # Before the binding, the first ones returned the holder and a later one created an
    # instance under the key.
    engine = make_engine(store, noop)
    for round_ in range(5):
        key = f"order-{round_}"
        holder = await engine.enqueue("noop", singleton_key=f"s-{round_}")

        def request(i: int, key: str = key, singleton: str = f"s-{round_}") -> Task:
            return asyncio.create_task(
                engine.enqueue(
                    "noop",
                    {"i": i},
                    idempotency_key=key,
                    singleton_key=singleton if i < 10 or i % 2 else None,
                )
            )

        before = [request(i) for i in range(20)]
        cancelling = asyncio.create_task(engine.cancel(holder.instance_id))
        answers = await asyncio.gather(*before, *(request(i) for i in range(20, 40)))
        await cancelling
        assert len({r.instance_id for r in answers}) == 1, round_
        assert sum(r.created for r in answers) <= 1
        async with store.connection() as conn:
            owners = await conn.fetchval(
                "SELECT count(*) FROM laneway.instances WHERE idempotency_key = $1", key
            )
            bound = await conn.fetchval(
                "SELECT count(*) FROM laneway.idempotency_aliases WHERE key = $1", key
            )
        assert owners + bound == 1  # the key is the created instance's, or bound to the holder
        later = await engine.enqueue("noop", idempotency_key=key)
        assert (later.created, later.instance_id) == (False, answers[0].instance_id)
