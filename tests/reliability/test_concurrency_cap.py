"""S-01 (docs/reliability.md): a queue cap of 5 holds across three engines on separate pools.

500 instances whose one step takes 20–200 ms, all enqueued up front; the overlap of their
[started, completed) intervals is measured on the events' database timestamps.
"""

import asyncio
import random

from laneway.engine import Done, EnqueueRequest, HandlerContext, Workflow
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine
from tests.reliability.conftest import Figure
from tests.reliability.engines import running_engines
from tests.reliability.history import (
    busy_fraction,
    events_by_instance,
    max_overlap,
    run_intervals,
    status_counts,
)
from tests.sizes import size

CAP = 5
ENGINES = 3
INSTANCES = size(500, 5000)  # the plan's S-01: 5,000
STEP_MS = (20, 200)
# While a backlog waits, the cap is kept busy: at least 80 % of its slots in use. Measured
# here at 92–97 % with the box's load average at 5–6.
MIN_UTILISATION = 0.8


async def _step(ctx: HandlerContext, params: JSONValue) -> Done:
    assert isinstance(params, dict)
    await asyncio.sleep(params["ms"] / 1000)
    return Done()


capped = Workflow("capped", handlers={"run": _step}, initial="run", queue="narrow")


async def test_queue_cap_holds_across_engines_when_a_backlog_of_500_drains(
    store: Store, database_url: str, figure: Figure
) -> None:
    client = make_engine(store, capped)
    await client.configure_queue("narrow", concurrency=CAP)
    durations = random.Random(1).choices(range(STEP_MS[0], STEP_MS[1] + 1), k=INSTANCES)
    await client.enqueue_many(
        [EnqueueRequest(name="capped", params={"ms": ms}) for ms in durations]
    )

    async with running_engines(database_url, ENGINES, capped, prefix="cap"):
        await eventually(
            lambda: status_counts(store),
            lambda counts: counts.get(Status.COMPLETED) == INSTANCES,
            timeout=60 * size(1, 10),
        )

    histories = await events_by_instance(store)
    intervals = [i for events in histories.values() for i in run_intervals(events)]
    starts = sorted(start for start, _ in intervals)
    utilisation = busy_fraction(intervals, CAP, starts[0], starts[-1])
    figure("s01_max_overlap", max_overlap(intervals))
    figure("s01_utilisation_with_backlog", round(utilisation, 3))
    figure(
        "s01_drain_seconds", round((max(e for _, e in intervals) - starts[0]).total_seconds(), 2)
    )
    assert len(intervals) == INSTANCES
    assert max_overlap(intervals) == CAP  # never above the cap, and the cap was reached
    assert utilisation >= MIN_UTILISATION
