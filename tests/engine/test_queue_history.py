"""Queue history (issue #18, point 5): the once-a-minute roll-up of the event log into per
queue, per minute counts, counted once however often and by however many engines it runs.

Past minutes are made by writing events with chosen `at` stamps directly, never by waiting.
"""

import asyncio
import itertools
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Engine
from laneway.errors import InvalidInputError, NotFoundError
from laneway.model import QueueSample
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine
from tests.workflows import noop

# (event type, error) written per instance; what each counts as.
_ACTIVITY = [
    ("enqueued", None),  # not counted
    ("started", None),  # started
    ("retrying", "boom"),  # retried: a failed attempt scheduled for an automatic retry
    ("started", None),  # started
    ("completed", None),  # completed
]


async def _minute_ago(admin: asyncpg.Connection, minutes: int) -> datetime:
    value: datetime = await admin.fetchval(
        "SELECT date_trunc('minute', now()) - $1::integer * interval '1 minute'", minutes
    )
    return value


async def _event(
    admin: asyncpg.Connection, instance_id: UUID, kind: str, at: datetime, error: str | None = None
) -> None:
    await admin.execute(
        """INSERT INTO laneway.events (instance_id, name, type, status, at, error)
           VALUES ($1, 'noop', $2, 'pending', $3, $4)""",
        instance_id,
        kind,
        at,
        error,
    )


async def _instances(engine: Engine, count: int) -> list[UUID]:
    return [(await engine.enqueue("noop")).instance_id for _ in range(count)]


async def _rows(admin: asyncpg.Connection, queue: str = "noop") -> dict[datetime, tuple[int, ...]]:
    rows = await admin.fetch(
        """SELECT minute, started, completed, failed, retried, pending
             FROM laneway.queue_history WHERE queue = $1 ORDER BY minute""",
        queue,
    )
    return {r["minute"]: tuple(r)[1:] for r in rows}


async def test_a_minute_is_counted_once_however_often_and_by_how_many_it_is_rolled_up(
    store: Store, admin: asyncpg.Connection, database_url: str
) -> None:
    engine = make_engine(store, noop)
    ids = await _instances(engine, 3)
    past = await _minute_ago(admin, 3)
    for instance_id in ids:
        for offset, (kind, error) in enumerate(_ACTIVITY):
            await _event(admin, instance_id, kind, past + timedelta(seconds=offset), error)
    # A failed instance, an operator's retry and a shutdown hand-back (neither is a retry).
    await _event(admin, ids[0], "failed", past + timedelta(seconds=30))
    await _event(admin, ids[0], "retrying", past + timedelta(seconds=31), "retry requested")
    await _event(
        admin, ids[1], "retrying", past + timedelta(seconds=32), "released: worker shutting down"
    )

    async with open_store(database_url, pool_size=2) as other:
        # Two engines' roll-ups at once, then each again: one holds the mark, the other skips.
        results = await asyncio.gather(store.roll_up_queue_history(), other.roll_up_queue_history())
        assert any(rolled for rolled, _more in results)
        await store.roll_up_queue_history()
        await other.roll_up_queue_history()
    assert (await _rows(admin))[past][:4] == (6, 3, 1, 3)  # started, completed, failed, retried

    # An event of that minute committed late is added to it, still once.
    await _event(admin, ids[2], "failed", past + timedelta(seconds=50))
    await store.roll_up_queue_history()
    await store.roll_up_queue_history()
    assert (await _rows(admin))[past][:4] == (6, 3, 2, 3)


async def test_a_backlog_is_rolled_up_in_batches_and_old_events_are_passed_over(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    (instance_id,) = await _instances(engine, 1)
    past = await _minute_ago(admin, 5)
    for second in range(7):
        await _event(admin, instance_id, "started", past + timedelta(seconds=second))
    ancient = await _minute_ago(admin, 3 * 1440)  # beyond the one-day lookback
    await _event(admin, instance_id, "started", ancient)

    rounds = 0
    more = True
    while more:
        _rolled, more = await store.roll_up_queue_history(batch=3)
        rounds += 1
    assert rounds == 4  # 9 events (the enqueue's too), 3 at a time, then one finding none left
    rows = await _rows(admin)
    assert rows[past][0] == 7
    assert ancient not in rows


async def test_the_pending_depth_is_sampled_for_the_minute_that_just_closed(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    await _instances(engine, 4)
    await store.roll_up_queue_history()
    rows = await _rows(admin)
    newest = max(rows)
    assert rows[newest][4] == 4
    # The sample is the newest closed minute at the roll-up (the minute may turn meanwhile).
    assert await _minute_ago(admin, 2) <= newest <= await _minute_ago(admin, 1)

    # A later roll-up in the same minute overwrites the sample; it does not add to it.
    await engine.cancel((await engine.list_instances(limit=1))[0].instance_id)
    await store.roll_up_queue_history()
    rows = await _rows(admin)
    assert rows[max(rows)][4] == 3


async def test_rows_past_two_days_are_pruned_by_the_roll_up(
    store: Store, admin: asyncpg.Connection
) -> None:
    old = await _minute_ago(admin, 2 * 1440 + 5)
    kept = await _minute_ago(admin, 1440)
    for minute in (old, kept):
        await admin.execute(
            "INSERT INTO laneway.queue_history (queue, minute, started) VALUES ('noop', $1, 1)",
            minute,
        )
    await store.roll_up_queue_history()
    assert list(await _rows(admin)) == [kept]


async def test_the_history_has_every_minute_oldest_first_with_zeros_where_idle(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    (instance_id,) = await _instances(engine, 1)
    past = await _minute_ago(admin, 3)
    await _event(admin, instance_id, "started", past + timedelta(seconds=1))
    await _event(admin, instance_id, "failed", past + timedelta(seconds=2))
    await store.roll_up_queue_history()

    history = await engine.queue_history("noop", minutes=10)
    assert len(history) == 10
    minutes = [sample.minute for sample in history]
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(minutes))
    busy = [s for s in history if s.minute == past]
    # pending is 0: it is sampled only for the minute that had just closed at a roll-up.
    assert busy == [
        QueueSample(minute=past, started=1, completed=0, failed=1, retried=0, pending=0)
    ]
    idle = [s for s in history if s.minute != past]
    assert len(idle) == 9
    assert all(s.started == s.failed == s.completed == s.retried == 0 for s in idle)

    with pytest.raises(NotFoundError):
        await engine.queue_history("no_such_queue")
    for minutes_out_of_range in (0, 1441):
        with pytest.raises(InvalidInputError):
            await engine.queue_history("noop", minutes=minutes_out_of_range)


async def test_a_running_engine_rolls_up_and_two_engines_count_once(
    store: Store, admin: asyncpg.Connection, database_url: str
) -> None:
    async with open_store(database_url, pool_size=4) as other:
        first = make_engine(store, noop, owner_id="a", poll_interval_seconds=0.05)
        second = make_engine(other, noop, owner_id="b", poll_interval_seconds=0.05)
        (instance_id,) = await _instances(first, 1)
        past = await _minute_ago(admin, 2)
        for second_of_minute in range(5):
            await _event(admin, instance_id, "started", past + timedelta(seconds=second_of_minute))
        async with first.running(), second.running():

            async def started() -> int:
                rows = await _rows(admin)
                return rows.get(past, (0,))[0]

            assert await eventually(started, lambda n: n >= 5) == 5

            async def both_rolled() -> bool:
                loops = (first.claim_loop, second.claim_loop)
                return all(loop._upkeep.has_rolled_up for loop in loops)

            # Each loop rolls up at its first poll (and at the first poll of every minute).
            await eventually(both_rolled, bool)
            await other.roll_up_queue_history()
        assert await started() == 5


async def test_instances_past_retention_before_the_roll_up_are_counted_then_pruned(
    store: Store, admin: asyncpg.Connection
) -> None:
    # The roll-up reads each event's queue from its instance: retention keeps an instance
    # until the roll-up has counted its events, whichever runs first, in whichever process.
    engine = make_engine(store, noop, retention_seconds=60.0)
    ids = await _instances(engine, 3)
    assert await engine.tick() == 3
    past = await _minute_ago(admin, 2)
    await admin.execute(
        "UPDATE laneway.instances SET finished_at = now() - interval '1 hour'"
        " WHERE instance_id = ANY($1::uuid[])",
        ids,
    )
    await admin.execute(
        "UPDATE laneway.events SET at = $2 WHERE instance_id = ANY($1::uuid[])", ids, past
    )
    pruned_first = await store.prune_finished(60.0)
    assert await store.roll_up_queue_history() == (True, False)
    assert (await _rows(admin))[past][:4] == (3, 3, 0, 0)
    assert pruned_first == 0
    assert await store.prune_finished(60.0) == 3
    assert (
        await admin.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE instance_id = ANY($1::uuid[])", ids
        )
        == 0
    )
    # Pruned, then rolled up again: nothing is counted twice or lost.
    assert await store.roll_up_queue_history() == (True, False)
    assert (await _rows(admin))[past][:4] == (3, 3, 0, 0)
