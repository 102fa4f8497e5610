"""Claims under a queue's cap: each freed room costs one claim, riding on the group commit
that freed it, and a claim that finds every queue full writes nothing (claim_loop.py
`room`, `_slots_bound`, `_own_doorbells`; migrations 0023, 0024)."""

import asyncpg
import pytest

from laneway.config import Settings
from laneway.engine import Done, EnqueueRequest, HandlerContext, Workflow
from laneway.model import Status
from laneway.services import open_services
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, watch_claims

CAP = 3
COUNT = 60


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


lane = Workflow("lane", handlers={"run": _done}, initial="run", queue="lane")


async def test_under_a_cap_each_freed_room_costs_one_claim(database_url: str) -> None:
    # The engine may run 20 at once, the queue 3: each group commit that ends some claims the
    # room it freed in its own transaction, so the loop itself claims only to start. Neither
    # the runs that end one by one, nor the doorbells of its own claims and commits coming
    # back through the listener, make it claim again for nothing (they did: about three
    # claims per freed room, two of them empty).
    settings = Settings(database_url=database_url, worker_concurrency=20, pool_size=5)
    async with open_services(settings, workflows=(lane,)) as services:
        engine, store = services.engine, services.store
        await engine.configure_queue("lane", concurrency=CAP)
        await engine.enqueue_many([EnqueueRequest(name="lane") for _ in range(COUNT)])
        seen = watch_claims(store)
        async with engine.running():
            await eventually(
                lambda: engine.list_instances(limit=100),
                lambda found: [i.status for i in found] == [Status.COMPLETED] * COUNT,
                timeout=30,
            )
    claims, rides = seen.own, seen.rides  # the loop's own, those riding on a group commit
    assert sum(claims) + sum(rides) == COUNT  # each instance claimed once
    assert max(claims + rides) <= CAP
    # The loop claims by itself to start and seldom after: a claim costs no round trip of
    # its own once the first runs end (the room they free is claimed by their commit).
    assert len(claims) <= 10, (claims, rides)
    assert sum(rides) >= COUNT - 2 * CAP, (claims, rides)
    assert (claims + rides).count(0) <= 10, (claims, rides)  # hardly any claim for nothing


async def test_a_claim_that_finds_the_queue_full_is_read_only(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, lane)
    await engine.configure_queue("lane", concurrency=1)
    await engine.enqueue_many([EnqueueRequest(name="lane") for _ in range(3)])
    assert len(await store.claim("first", ["lane@1"], 5, 30.0)) == 1  # the queue is full now
    async with admin.transaction():
        rows = await admin.fetch(
            "SELECT instance_id FROM laneway.claim('second', ARRAY['lane@1'], 5, 30.0, 1)"
        )
        assert rows == []
        # No transaction id: it locked no row and wrote nothing, so it commits without a flush.
        assert await admin.fetchval("SELECT pg_current_xact_id_if_assigned()") is None


@pytest.mark.parametrize("concurrency", [None, 2])
async def test_a_queue_with_room_is_still_claimed_from(
    store: Store, concurrency: int | None
) -> None:
    engine = make_engine(store, lane)
    if concurrency is not None:
        await engine.configure_queue("lane", concurrency=concurrency)
    await engine.enqueue_many([EnqueueRequest(name="lane") for _ in range(3)])
    claimed = await store.claim("first", ["lane@1"], 5, 30.0)
    assert len(claimed) == (3 if concurrency is None else concurrency)
