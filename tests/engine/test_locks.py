"""Entity locks: one holder at a time, growing fencing tokens, expiry, release at the end."""

import asyncio
import uuid
from collections import defaultdict

import pytest

from laneway.engine import Done, HandlerContext, LockUnavailableError, Workflow
from laneway.errors import InvalidInputError
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine


async def test_ten_instances_on_three_entities_never_share_a_lock(store: Store) -> None:
    holders: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    tokens: dict[str, list[int]] = defaultdict(list)

    async def guarded(ctx: HandlerContext, params: object) -> Done:
        assert isinstance(params, dict)
        entity = f"account-{params['i'] % 3}"
        engine_locks = engine.locks
        async with engine_locks.hold(
            "account", entity, ctx.instance_id, 30, wait_seconds=30
        ) as lock:
            holders[entity] += 1
            peak[entity] = max(peak[entity], holders[entity])
            tokens[entity].append(lock.fencing_token)
            await asyncio.sleep(0.02)  # the guarded work
            holders[entity] -= 1
        return Done()

    workflow = Workflow("guarded", handlers={"run": guarded}, initial="run")
    engine = make_engine(store, workflow, concurrency=10, poll_interval_seconds=0.05)
    async with engine.running():
        ids = [(await engine.enqueue("guarded", {"i": i})).instance_id for i in range(10)]
        for instance_id in ids:
            assert (await engine.wait(instance_id, timeout=30)).status == Status.COMPLETED
    assert set(peak) == {"account-0", "account-1", "account-2"}
    assert max(peak.values()) == 1
    for entity_tokens in tokens.values():
        assert entity_tokens == sorted(entity_tokens)
        assert len(set(entity_tokens)) == len(entity_tokens)
    for entity in peak:
        assert await engine.locks.holder("account", entity) is None


async def test_expired_lock_goes_to_the_next_owner_with_a_larger_token(store: Store) -> None:
    engine = make_engine(store)
    first, second = uuid.uuid4(), uuid.uuid4()
    held = await engine.locks.acquire("doc", "42", first, ttl_seconds=0.3)
    assert held is not None
    assert await engine.locks.acquire("doc", "42", second, ttl_seconds=5) is None
    taken = await eventually(
        lambda: engine.locks.acquire("doc", "42", second, ttl_seconds=5),
        lambda lock: lock is not None,
    )
    assert taken is not None
    assert taken.owner_instance == second
    assert taken.fencing_token > held.fencing_token
    assert await engine.locks.release(held) is False  # fenced: no longer the first owner's
    assert await engine.locks.release(taken) is True
    assert await engine.locks.holder("doc", "42") is None


async def test_hold_raises_when_the_entity_stays_taken(store: Store) -> None:
    engine = make_engine(store)
    await engine.locks.acquire("doc", "7", uuid.uuid4(), ttl_seconds=30)
    with pytest.raises(LockUnavailableError):
        async with engine.locks.hold("doc", "7", uuid.uuid4(), 30, wait_seconds=0.1):
            pass
    with pytest.raises(InvalidInputError):
        await engine.locks.acquire("doc", "", uuid.uuid4(), ttl_seconds=30)
    with pytest.raises(InvalidInputError):
        await engine.locks.acquire("doc", "x", uuid.uuid4(), ttl_seconds=0)


async def test_locks_of_an_instance_are_released_when_it_ends(store: Store) -> None:
    gate = asyncio.Event()

    async def locking(ctx: HandlerContext, params: object) -> Done:
        assert isinstance(params, dict)
        lock = await ctx.require_tools().acquire_lock("order", params["order"], 600)
        assert lock is not None
        if params.get("wait"):
            await gate.wait()
        return Done()

    workflow = Workflow("locking", handlers={"run": locking}, initial="run")
    engine = make_engine(store, workflow, poll_interval_seconds=0.05)
    async with engine.running():
        finished = await engine.enqueue("locking", {"order": "a"})
        await engine.wait(finished.instance_id, timeout=10)
        assert await engine.locks.holder("order", "a") is None  # completed: released
        stuck = await engine.enqueue("locking", {"order": "b", "wait": True})
        await eventually(lambda: engine.locks.holder("order", "b"), lambda lock: lock is not None)
        await engine.cancel(stuck.instance_id)
        assert await engine.locks.holder("order", "b") is None  # cancelled: released


async def test_nested_holds_of_one_owner_keep_the_lock_until_the_outermost_exits(
    store: Store,
) -> None:
    engine = make_engine(store)
    owner, other = uuid.uuid4(), uuid.uuid4()
    async with engine.locks.hold("acct", "n", owner, 30) as outer:
        async with engine.locks.hold("acct", "n", owner, 30) as inner:
            assert inner == outer  # the same lock: its token still fences the outer block
        with pytest.raises(RuntimeError, match="inner failed"):
            async with engine.locks.hold("acct", "n", owner, 30):
                raise RuntimeError("inner failed")
        assert await engine.locks.holder("acct", "n") == outer
        assert await engine.locks.acquire("acct", "n", other, ttl_seconds=30) is None
        with pytest.raises(LockUnavailableError):
            async with engine.locks.hold("acct", "n", other, 30, wait_seconds=0.1):
                pass
    assert await engine.locks.holder("acct", "n") is None
    taken = await engine.locks.acquire("acct", "n", other, ttl_seconds=30)
    assert taken is not None
    assert taken.fencing_token > outer.fencing_token


async def test_holds_of_one_owner_in_sibling_tasks_keep_the_lock_until_the_last_exits(
    store: Store,
) -> None:
    engine = make_engine(store)
    owner = uuid.uuid4()
    first_out, second_in = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with engine.locks.hold("acct", "s", owner, 30):
            await second_in.wait()  # both inside at once
        first_out.set()

    async def second() -> None:
        async with engine.locks.hold("acct", "s", owner, 30):
            second_in.set()
            await first_out.wait()
            lock = await engine.locks.holder("acct", "s")
            assert lock is not None
            assert lock.owner_instance == owner

    await asyncio.gather(first(), second())
    assert await engine.locks.holder("acct", "s") is None


async def test_nested_holds_are_released_when_their_instance_ends(store: Store) -> None:
    async def nested(ctx: HandlerContext, params: object) -> Done:
        async with engine.locks.hold("acct", "i", ctx.instance_id, 600) as outer:
            async with engine.locks.hold("acct", "i", ctx.instance_id, 600):
                pass
            return Done({"token": outer.fencing_token})

    workflow = Workflow("nested", handlers={"run": nested}, initial="run")
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("nested")
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.COMPLETED
    assert await engine.locks.holder("acct", "i") is None
