"""S-09 (docs/reliability.md): 200 instances, each cancelled at a random moment.

Three steps each; every step first writes a ledger row on its own autocommit connection
(stamped clock_timestamp(), the database clock), then works 5–50 ms, and fails a quarter of
the time, so cancels land before a start, inside steps, between steps and in retry backoffs.
Two engines run them. Half the cancels go through the engine running the instance's
neighbours (a local run is stopped at once), half through a third engine that runs nothing
(the runner finds out at its next, fenced, write).

Per instance: exactly one terminal event, matching the final status; after an acknowledged
cancel, no event of any kind, and at most one step start (one whose go-ahead, a claim or a
checkpoint, committed before the cancel).
"""

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from uuid import UUID

import asyncpg

from laneway.engine import Done, Engine, EnqueueRequest, HandlerContext, Next, RetryPolicy, Workflow
from laneway.engine.handler_map import Handler
from laneway.model import JSONValue, Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine
from tests.reliability.conftest import Figure
from tests.reliability.history import TERMINAL_EVENTS, Event, events_by_instance, status_counts
from tests.sizes import size

INSTANCES = size(200, 1000)  # the plan's S-09: 1,000
STEPS = ("one", "two", "three")
FAILURE_RATE = 0.25
CANCEL_WITHIN_SECONDS = 0.4

CREATE_LEDGER = """
CREATE TABLE reliability_ledger (
    instance_id  uuid NOT NULL,
    step         text NOT NULL,
    attempt      integer NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
RECORD_STEP = "INSERT INTO reliability_ledger (instance_id, step, attempt) VALUES ($1, $2, $3)"
READ_LEDGER = "SELECT instance_id, at FROM reliability_ledger"


def cancellable(ledger: asyncpg.Pool, seed: int) -> Workflow:
    """W3 with failures: each step records itself, works 5–50 ms, then fails or moves on."""
    chance = random.Random(seed)

    def step(name: str, following: str | None) -> Handler:
        async def run(ctx: HandlerContext, params: JSONValue) -> Next | Done:
            await ledger.execute(RECORD_STEP, ctx.instance_id, name, ctx.attempt)
            await asyncio.sleep(chance.uniform(0.005, 0.05))
            if chance.random() < FAILURE_RATE:
                raise RuntimeError(f"step {name} failed")
            return Next(following) if following else Done()

        return run

    return Workflow(
        "cancellable",
        handlers={
            name: step(name, following)
            for name, following in zip(STEPS, [*STEPS[1:], None], strict=True)
        },
        initial=STEPS[0],
        retry=RetryPolicy(max_attempts=4, backoff="fixed", base_ms=30),
    )


@contextlib.asynccontextmanager
async def ledger_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    # asyncpg's own pool: the ledger is the test's side channel, apart from Laneway's pool.
    pool = await asyncpg.create_pool(
        database_url, min_size=1, max_size=8, server_settings={"application_name": "ledger"}
    )
    try:
        await pool.execute(CREATE_LEDGER)
        yield pool
    finally:
        await pool.close()


def state_at(events: list[Event], moment: datetime) -> str:
    """What the instance was doing at `moment`, read from its events before it."""
    before = [e for e in events if e.at < moment]
    last = before[-1].type.value if before else "nothing"
    return {"started": "running", "checkpoint": "running", "retrying": "in backoff"}.get(last, last)


async def cancel_later(engine: Engine, instance_id: UUID, delay: float) -> None:
    await asyncio.sleep(delay)  # the race under test: a cancel at a random moment of the run
    await engine.cancel(instance_id)


async def test_each_instance_ends_once_and_steps_stop_when_cancels_land_at_random(
    store: Store, database_url: str, figure: Figure
) -> None:
    chance = random.Random(9)
    async with (
        ledger_pool(database_url) as ledger,
        open_store(database_url, pool_size=4) as second_store,
        open_store(database_url, pool_size=4) as api_store,
    ):
        workflow = cancellable(ledger, seed=10)
        near = make_engine(store, workflow, owner_id="near", poll_interval_seconds=0.05)
        far = make_engine(second_store, workflow, owner_id="far", poll_interval_seconds=0.05)
        api = make_engine(api_store, workflow)
        enqueued = await api.enqueue_many(
            [EnqueueRequest(name="cancellable") for _ in range(INSTANCES)]
        )
        ids = [r.instance_id for r in enqueued]
        async with near.running(), far.running():
            await asyncio.gather(
                *(
                    cancel_later(
                        chance.choice([near, api]),
                        instance_id,
                        chance.uniform(0, CANCEL_WITHIN_SECONDS),
                    )
                    for instance_id in ids
                )
            )
            await eventually(
                lambda: status_counts(store),
                lambda counts: all(status.is_terminal for status in counts),
                timeout=60 * size(1, 10),
            )
        step_starts: dict[UUID, list[datetime]] = {i: [] for i in ids}
        for row in await ledger.fetch(READ_LEDGER):
            step_starts[row["instance_id"]].append(row["at"])

    histories = await events_by_instance(store)
    async with store.connection() as conn:  # every instance (the API's lists stop at 500)
        rows = await conn.fetch("SELECT instance_id, status FROM laneway.instances")
    finals = {row["instance_id"]: Status(row["status"]) for row in rows}
    landed: Counter[str] = Counter()
    late_steps: list[float] = []
    for instance_id in ids:
        events = histories[instance_id]
        terminal = [e for e in events if e.type in TERMINAL_EVENTS]
        assert len(terminal) == 1, events
        assert terminal[0].type.value == finals[instance_id].value
        if finals[instance_id] != Status.CANCELLED:
            landed["after the end"] += 1
            continue
        cancelled_at = terminal[0].at
        landed[state_at(events, cancelled_at)] += 1
        assert events[-1] == terminal[0], events  # nothing happened after the cancel
        late = [at for at in step_starts[instance_id] if at > cancelled_at]
        assert len(late) <= 1, (events, late)
        late_steps += [(at - cancelled_at).total_seconds() * 1000 for at in late]
    for state, count in sorted(landed.items()):
        figure(f"s09_cancel_landed_{state.replace(' ', '_')}", count)
    figure("s09_steps_started_after_cancel", len(late_steps))
    figure("s09_latest_step_start_after_cancel_ms", round(max(late_steps, default=0), 1))
    # The race was run: cancels hit running steps and retry backoffs, not only idle rows.
    assert landed["running"] >= 10
    assert landed["in backoff"] >= 1
