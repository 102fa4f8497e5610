"""Retention: finished instances older than the retention period go, with their operation rows,
and their events with their day's partition once no instance left has events in it; anything
unfinished or recent stays."""

from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop

DAY = 86_400.0


async def _age(store: Store, instance_id: object, days: float) -> None:
    """As if the instance had run and ended `days` ago: its events in that day's partition."""
    async with store.connection() as conn:
        await conn.execute(
            "SELECT laneway.add_event_partition(d.day, d.day + interval '1 day')"
            "  FROM (SELECT date_bin(interval '1 day', now() - $1 * interval '1 day',"
            "                        timestamptz '2000-01-01 00:00:00+00') AS day) AS d"
            " WHERE NOT EXISTS (SELECT 1 FROM laneway.event_partitions() AS p"
            "                    WHERE p.lower = d.day)",
            days,
        )
        await conn.execute(
            "UPDATE laneway.instances SET finished_at = now() - $2 * interval '1 day'"
            " WHERE instance_id = $1",
            instance_id,
            days,
        )
        await conn.execute(
            "UPDATE laneway.events SET at = now() - $2 * interval '1 day' WHERE instance_id = $1",
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
    events_of_old = (await _counts(store, old.instance_id))[1]
    assert events_of_old > 0
    assert await store.prune_finished(7 * DAY) == 1
    # The events wait for their partition: no row of the log is deleted one by one.
    assert await _counts(store, old.instance_id) == (0, events_of_old)
    assert len(await store.retire_event_partitions()) == 1
    assert await _counts(store, old.instance_id) == (0, 0)
    instances, events = await _counts(store, recent.instance_id)
    assert (instances, events > 0) == (1, True)
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
