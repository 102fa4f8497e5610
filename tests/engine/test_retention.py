"""Retention: finished instances older than the retention period go, with their events and
operation rows; anything unfinished or recent stays."""

from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop

DAY = 86_400.0


async def _age(store: Store, instance_id: object, days: float) -> None:
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET finished_at = now() - $2 * interval '1 day'"
            " WHERE instance_id = $1",
            instance_id,
            days,
        )


async def _counts(store: Store, instance_id: object) -> tuple[int, int]:
    async with store.connection() as conn:
        instances = await conn.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE instance_id = $1", instance_id
        )
        events = await conn.fetchval(
            "SELECT count(*) FROM laneway.events WHERE instance_id = $1", instance_id
        )
    return instances, events


async def test_a_sweep_deletes_only_instances_that_ended_before_the_retention_period(
    store: Store,
) -> None:
    engine = make_engine(store, noop, retention_seconds=7 * DAY)
    old = await engine.enqueue("noop")
    recent = await engine.enqueue("noop")
    assert await engine.tick() == 2
    waiting = await engine.enqueue("noop")
    await _age(store, old.instance_id, 8)
    await _age(store, recent.instance_id, 6)
    assert await store.prune_finished(7 * DAY) == 1
    assert await _counts(store, old.instance_id) == (0, 0)
    assert (await _counts(store, recent.instance_id))[0] == 1
    pending = await engine.get(waiting.instance_id)
    assert pending is not None
    assert pending.status == Status.PENDING


async def test_an_engine_sweeps_on_its_maintenance_round_unless_retention_is_off(
    store: Store,
) -> None:
    keeping = make_engine(store, noop, retention_seconds=0)
    done = await keeping.enqueue("noop")
    assert await keeping.tick() == 1
    await _age(store, done.instance_id, 400)
    await keeping.tick()
    assert (await _counts(store, done.instance_id))[0] == 1  # retention 0: kept forever
    sweeping = make_engine(store, noop, retention_seconds=DAY)
    await sweeping.tick()
    assert await _counts(store, done.instance_id) == (0, 0)
