"""A schedule has no overlap policy: a fire does not wait for the previous fire's instance to
end. These pin what the docs say about it (an outside audit saw 4 instances of an every-second
schedule of a 4 s workflow run at once), and the two ways they give to run one at a time: a
queue of concurrency 1 (later fires wait, pending), or an entity lock the handler takes
first (a fire that finds it held ends at once)."""

import asyncio
from collections import Counter

from laneway.engine import Done, HandlerContext, Workflow
from laneway.model import JSONValue
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine


async def _statuses(store: Store, name: str) -> Counter[str]:
    async with store.connection() as conn:
        rows = await conn.fetch("SELECT status FROM laneway.instances WHERE name = $1", name)
    return Counter(str(row["status"]) for row in rows)


def _held_until(release: asyncio.Event, name: str, queue: str | None = None) -> Workflow:
    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        await release.wait()
        return Done()

    return Workflow(name, handlers={"run": run}, initial="run", queue=queue)


async def test_a_fire_does_not_wait_for_the_previous_one_unless_its_queue_makes_it(
    store: Store,
) -> None:
    release = asyncio.Event()
    overlapping = _held_until(release, "overlapping")
    one_at_a_time = _held_until(release, "one_at_a_time", queue="one-at-a-time")
    engine = make_engine(store, overlapping, one_at_a_time, poll_interval_seconds=0.05)
    await engine.configure_queue("one-at-a-time", concurrency=1)
    try:
        async with engine.running():
            await engine.create_schedule("overlapping", "overlapping", every="1s")
            await engine.create_schedule("one-at-a-time", "one_at_a_time", every="1s")
            # Two fires of each while the first instances still run.
            both = await eventually(
                lambda: asyncio.gather(
                    _statuses(store, "overlapping"), _statuses(store, "one_at_a_time")
                ),
                lambda seen: seen[0]["running"] >= 2 and seen[1].total() >= 2,
            )
            assert both[1]["running"] == 1  # the later fires wait, pending
            assert both[1]["pending"] >= 1
            release.set()
    finally:
        release.set()


async def test_a_fire_that_finds_the_previous_ones_lock_held_ends_at_once(store: Store) -> None:
    release = asyncio.Event()

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        # Longer than any run; released when this instance ends, however it ends.
        lock = await ctx.require_tools().acquire_lock("schedule", "report", ttl_seconds=3600)
        if lock is None:
            return Done({"skipped": True})
        await release.wait()
        return Done({"skipped": False})

    report = Workflow("report", handlers={"run": run}, initial="run")
    engine = make_engine(store, report, poll_interval_seconds=0.05)
    try:
        async with engine.running():
            await engine.create_schedule("report", "report", every="1s")
            seen = await eventually(
                lambda: _statuses(store, "report"), lambda seen: seen["completed"] >= 1
            )
            assert seen["running"] == 1
            release.set()
    finally:
        release.set()
    async with store.connection() as conn:
        results = await conn.fetch(
            "SELECT result FROM laneway.instances WHERE status = 'completed'"
        )
    assert {"skipped": True} in [row["result"] for row in results]
