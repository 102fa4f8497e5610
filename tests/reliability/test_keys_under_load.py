"""S-07 and S-08 (docs/reliability.md): idempotency and singleton keys under concurrent enqueues.

S-07: 200 enqueues with one idempotency key over 20 pools of one connection each. The
documented policy for the same key with other params (Engine.enqueue) is: return the first
instance, created=False, and write nothing.

S-08: 100 concurrent enqueues of one singleton key while a worker subprocess runs it; the
worker is killed with SIGKILL mid-step, more enqueues race the pending reclaim, and another
engine recovers and finishes it. At no moment on the database clock are two instances of
the key alive ([enqueued, terminal)) or running ([started, end of run)).
"""

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from uuid import UUID

from laneway.engine import Engine
from laneway.model import EnqueueResult, EventType, Status
from laneway.store import Store, open_store
from tests.e2e.workers import worker_process
from tests.engine.helpers import eventually, make_engine
from tests.reliability.conftest import Figure
from tests.reliability.history import (
    events_by_instance,
    life_interval,
    max_overlap,
    run_intervals,
    status_counts,
)
from tests.workflows import noop, two_steps

ROW_AND_EVENTS = """
SELECT (SELECT array_agg(to_jsonb(i)::text) FROM laneway.instances AS i) AS rows,
       (SELECT count(*) FROM laneway.events) AS events
"""


@contextlib.asynccontextmanager
async def clients(database_url: str, count: int, pool_size: int) -> AsyncIterator[list[Engine]]:
    """`count` engines that only enqueue, each on its own pool of `pool_size` connections."""
    async with contextlib.AsyncExitStack() as stack:
        engines = []
        for _ in range(count):
            store = await stack.enter_async_context(open_store(database_url, pool_size=pool_size))
            engines.append(make_engine(store, noop, two_steps))
        yield engines


async def snapshot(store: Store) -> tuple[list[str], int]:
    async with store.connection() as conn:
        row = await conn.fetchrow(ROW_AND_EVENTS)
    assert row is not None
    return sorted(row["rows"] or []), row["events"]


async def test_one_instance_when_200_enqueues_share_an_idempotency_key_over_20_connections(
    store: Store, database_url: str
) -> None:
    async with clients(database_url, 20, pool_size=1) as engines:
        results = await asyncio.gather(
            *(
                engines[n % 20].enqueue("noop", {"order": 42}, idempotency_key="order-42")
                for n in range(200)
            )
        )
        before = await snapshot(store)
        reused = await asyncio.gather(
            *(
                engine.enqueue("noop", {"order": 43}, idempotency_key="order-42")
                for engine in engines
            )
        )
        after = await snapshot(store)

    assert sum(r.created for r in results) == 1
    (instance_id,) = {r.instance_id for r in results}
    assert before[1] == 1  # one instance, one `enqueued` event
    assert len(before[0]) == 1
    # Other params under the same key: the first instance comes back, nothing is written.
    assert not any(r.created for r in reused)
    assert {r.instance_id for r in reused} == {instance_id}
    assert all(r.instance.params == {"order": 42} for r in [*results, *reused])
    assert after == before


async def burst(engines: Sequence[Engine], calls: int) -> list[EnqueueResult]:
    """`calls` concurrent enqueues of the singleton, spread over the engines' pools."""
    return await asyncio.gather(
        *(
            engines[n % len(engines)].enqueue("two_steps", {"n": n}, singleton_key="nightly")
            for n in range(calls)
        )
    )


def _ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _ledger(path: Path) -> list[str]:
    return _ledger_lines(path)


async def _status(store: Store, instance_id: UUID) -> Status | None:
    record = await store.get_instance(instance_id)
    return record.status if record is not None else None


async def test_never_two_alive_when_singleton_holder_is_killed_mid_step(
    store: Store, database_url: str, tmp_path: Path, figure: Figure
) -> None:
    ledger = tmp_path / "ledger.txt"
    hold = {"LANEWAY_TEST_HOLD_SECOND": "3600", "LANEWAY_TEST_LEDGER": str(ledger)}
    results: list[EnqueueResult] = []
    async with clients(database_url, 5, pool_size=4) as engines:
        async with worker_process(database_url, "s08-doomed", hold) as doomed:
            results += await burst(engines, 100)
            first = results[0].instance_id
            await eventually(
                lambda: _ledger(ledger), lambda lines: f"{first} second 1" in lines, timeout=60
            )
            doomed.send_signal(signal.SIGKILL)
            await doomed.wait()
        pending_reclaim = await burst(engines, 100)
        results += pending_reclaim
        rescuer = make_engine(store, two_steps, lease_seconds=1.0, poll_interval_seconds=0.05)
        async with rescuer.running():
            rounds = 0
            async with asyncio.timeout(60):
                while await _status(store, first) != Status.COMPLETED:  # race the reclaim
                    results += await burst(engines, 10)
                    rounds += 1
            results += await burst(engines, 100)
            await eventually(
                lambda: status_counts(store),
                lambda counts: set(counts) == {Status.COMPLETED},
                timeout=30,
            )

    histories = await events_by_instance(store)
    lives = [life_interval(events) for events in histories.values()]
    runs = [run for events in histories.values() for run in run_intervals(events)]
    first_types = [e.type for e in histories[first]]
    figure("s08_enqueues", len(results))
    figure("s08_instances", len(histories))
    figure("s08_bursts_during_reclaim", rounds)
    assert {r.instance_id for r in pending_reclaim} == {first}
    assert sum(r.created for r in results) == len(histories) >= 2
    assert first_types.count(EventType.STARTED) == 2  # the killed run, then the rescue
    assert first_types.count(EventType.RETRYING) == 1  # the lease recovered after the kill
    assert max_overlap(lives) == 1
    assert max_overlap(runs) == 1
