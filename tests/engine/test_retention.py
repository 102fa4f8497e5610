"""Retention: finished instances older than the retention period go, with their operation rows,
and their events with their day's partition once no instance left has events in it; anything
unfinished or recent stays."""

from uuid import UUID

import pytest

from laneway.engine import Engine, WorkflowRegistry
from laneway.engine import upkeep as upkeep_module
from laneway.engine.upkeep import Upkeep
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


async def _finished_long_ago(engine: Engine, store: Store, count: int) -> list[UUID]:
    """`count` instances that ended eight days ago."""
    handles = [await engine.enqueue("noop") for _ in range(count)]
    assert await engine.tick() == count
    for handle in handles:
        await _age(store, handle.instance_id, 8)
    return [handle.instance_id for handle in handles]


async def test_one_sweep_deletes_a_backlog_of_many_batches_and_keeps_unfinished_instances(
    store: Store,
) -> None:
    # One batch per sweep capped retention at a batch per engine every five minutes: a busy
    # deployment never caught up, and the old days' partitions stayed. A sweep goes on while
    # its batches come back full (here 2 instances each, so 7 need 4 batches).
    engine = make_engine(store, noop)
    finished = await _finished_long_ago(engine, store, 7)
    unfinished = await engine.enqueue("noop")
    async with store.connection() as conn:  # the unfinished one began a day earlier
        await conn.execute(
            "SELECT laneway.add_event_partition(d.day, d.day + interval '1 day')"
            "  FROM (SELECT date_bin(interval '1 day', now() - interval '9 days',"
            "                        timestamptz '2000-01-01 00:00:00+00') AS day) AS d"
        )
        await conn.execute(
            "UPDATE laneway.events SET at = now() - interval '9 days' WHERE instance_id = $1",
            unfinished.instance_id,
        )
    kept_events = (await _counts(store, unfinished.instance_id))[1]
    assert kept_events > 0

    upkeep = Upkeep(store, WorkflowRegistry([noop]), 7 * DAY, prune_batch=2)
    await upkeep.run()

    # Every finished instance went in the one sweep, so their day's partition went with them.
    assert [await _counts(store, i) for i in finished] == [(0, 0)] * 7
    assert await _counts(store, unfinished.instance_id) == (1, kept_events)
    pending = await engine.get(unfinished.instance_id)
    assert pending is not None
    assert pending.status == Status.PENDING


async def test_a_sweep_cut_short_by_its_time_comes_back_soon_not_in_minutes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No time for a second batch (the first always runs), and "soon" is at once.
    monkeypatch.setattr(upkeep_module, "PRUNE_SWEEP_SECONDS", 0.0)
    monkeypatch.setattr(upkeep_module, "PRUNE_BEHIND_SECONDS", 0.0)
    engine = make_engine(store, noop)
    finished = await _finished_long_ago(engine, store, 5)
    upkeep = Upkeep(store, WorkflowRegistry([noop]), 7 * DAY, prune_batch=2)

    async def left() -> int:
        return sum([(await _counts(store, i))[0] for i in finished])

    for expected in (3, 1, 0):
        await upkeep.run()
        assert await left() == expected
    again = await _finished_long_ago(engine, store, 1)
    await upkeep.run()
    assert (await _counts(store, again[0]))[0] == 1  # caught up (a short batch): minutes now


async def test_a_sweep_frees_the_keys_bound_to_an_instance_it_deletes(store: Store) -> None:
    # A key that gave way to a singleton key's holder is bound to the holder; it answers with
    # the holder while the holder exists, and is free again once retention deleted it, as
    # the holder's own key is.
    engine = make_engine(store, noop)
    holder = await engine.enqueue("noop", singleton_key="s", idempotency_key="own")
    bound = await engine.enqueue("noop", singleton_key="s", idempotency_key="order-42")
    assert (bound.created, bound.instance_id) == (False, holder.instance_id)
    assert await engine.tick() == 1
    await _age(store, holder.instance_id, 8)
    assert await store.prune_finished(7 * DAY) == 1
    async with store.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM laneway.idempotency_aliases") == 0
    for key in ("own", "order-42"):
        again = await engine.enqueue("noop", idempotency_key=key)
        assert again.created
        assert again.instance.idempotency_key == key
