"""The event log partitioned by day (migration 0022): the conversion keeps every event,
partitions exist ahead, retention drops whole partitions (never one a live instance has events
in), the resume cursor crosses partition boundaries, and the default partition takes the rest."""

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from laneway.events import EventHub
from laneway.model import EventType, NewEvent, Status
from laneway.store import Store, open_store
from laneway.store.databases import database_url_for
from laneway.store.migrate import apply_migrations, migrations
from laneway.store.pool import connect
from tests.engine.helpers import eventually, make_engine
from tests.runtime_role import runtime_role
from tests.workflows import noop

DAY = 86_400.0

ADD_DAY = """
SELECT laneway.add_event_partition(d.day, d.day + interval '1 day')
  FROM (SELECT date_bin(interval '1 day', now() + $1 * interval '1 day',
                        timestamptz '2000-01-01 00:00:00+00') AS day) AS d
 WHERE NOT EXISTS (SELECT 1 FROM laneway.event_partitions() AS p WHERE p.lower = d.day)
"""

WHERE_EVENTS_ARE = """
SELECT event_id, tableoid::regclass::text AS partition
  FROM laneway.events
 WHERE instance_id = $1
 ORDER BY event_id
"""


@pytest.fixture
async def empty_database_url(server_url: str) -> AsyncIterator[str]:
    name = f"p_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield database_url_for(server_url, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _event(instance_id: uuid.UUID) -> NewEvent:
    return NewEvent(
        instance_id=instance_id, name="w", type=EventType.ENQUEUED, status=Status.PENDING
    )


async def _append(store: Store, instance_id: uuid.UUID, count: int) -> list[int]:
    """Append `count` events of one instance, one transaction each; their ids."""
    ids = []
    for _ in range(count):
        async with store.connection() as conn, conn.transaction():
            last = await store._append_events(conn, [_event(instance_id)])
        assert last is not None
        ids.append(last)
    return ids


async def _move(admin: asyncpg.Connection, event_ids: list[int], days: float) -> None:
    """Re-date events to `days` from now (negative: the past), so they live in that day's
    partition (the default one if there is none)."""
    await admin.execute(
        "UPDATE laneway.events SET at = now() + $2 * interval '1 day'"
        " WHERE event_id = ANY($1::bigint[])",
        event_ids,
        days,
    )


async def _finished_days_ago(
    admin: asyncpg.Connection, instance_id: uuid.UUID, days: float
) -> None:
    await admin.execute(
        "UPDATE laneway.instances SET finished_at = now() - $2 * interval '1 day'"
        " WHERE instance_id = $1",
        instance_id,
        days,
    )


async def test_the_migration_keeps_every_event_in_order_when_the_log_is_partitioned(
    empty_database_url: str,
) -> None:
    conn = await connect(empty_database_url)
    try:
        await apply_migrations(conn, [m for m in migrations() if m.name < "0022"])
        instance_ids = [uuid.uuid4() for _ in range(3)]
        # 60 events over 40 days, some 10 years ahead, not in time order, with every column.
        for n in range(60):
            await conn.execute(
                "INSERT INTO laneway.events (instance_id, name, type, status, at, attempt,"
                " error, stage, checkpoint, signal)"
                " VALUES ($1, 'w', 'checkpoint', 'running', now() - $2 * interval '1 day',"
                " $3, 'e' || $4, 's' || $4, 'c' || $4, 'g' || $4)",
                instance_ids[n % 3],
                (n * 7) % 40 if n % 10 else -3650,
                n,
                str(n),
            )
        await conn.execute("DELETE FROM laneway.events WHERE attempt = 59")  # a used id
        await conn.execute("GRANT SELECT ON laneway.events TO PUBLIC")
        read = "SELECT * FROM laneway.events ORDER BY event_id"
        before = [dict(r) for r in await conn.fetch(read)]

        assert (await apply_migrations(conn))[0] == "0022_partitioned_events"

        after = [dict(r) for r in await conn.fetch(read)]
        kind = await conn.fetchval(
            "SELECT relkind::text FROM pg_class WHERE oid = 'laneway.events'::regclass"
        )
        in_default = await conn.fetchval("SELECT count(*) FROM laneway.events_default")
        public_reads = await conn.fetchval(
            "SELECT has_table_privilege('public', 'laneway.events', 'SELECT')"
        )
        next_id = await conn.fetchval(
            "INSERT INTO laneway.events (instance_id, name, type, status)"
            " VALUES ($1, 'w', 'enqueued', 'pending') RETURNING event_id",
            instance_ids[0],
        )
    finally:
        await conn.close()
    assert len(before) == 59
    assert after == before
    assert kind == "p"
    assert in_default == 0  # every day that had events got its partition
    assert public_reads
    assert next_id == 61  # the identity goes on after the deleted 60th


async def test_partitions_exist_ahead_and_an_engine_adds_the_missing_ones(store: Store) -> None:
    now = await store.now()
    partitions = await store.event_partitions()
    assert partitions[0].lower <= now
    assert partitions[-1].upper >= now + timedelta(days=2)
    assert all(a.upper == b.lower for a, b in itertools.pairwise(partitions))

    added = await store.add_event_partitions(ahead_seconds=5 * DAY)
    assert len(added) == 3
    assert await store.add_event_partitions(ahead_seconds=5 * DAY) == []  # safe to repeat
    async with store.connection() as conn:  # an engine that lost the race adds nothing
        again = await conn.fetchval(
            "SELECT laneway.add_event_partition($1, $2)",
            partitions[0].lower,
            partitions[0].upper + timedelta(hours=1),
        )
    assert again is None
    longer = await store.event_partitions()
    assert longer[-1].upper >= now + timedelta(days=5)
    assert [p.upper - p.lower for p in longer] == [timedelta(days=1)] * len(longer)

    async with store.connection() as conn:  # the next days' partitions went missing
        for partition in longer[1:]:
            await conn.execute(f'DROP TABLE laneway."{partition.name}"')
    engine = make_engine(store, noop)
    await engine.tick()  # its maintenance round adds them back, two days ahead
    assert [p.name for p in await store.event_partitions()] == [p.name for p in partitions]


async def test_an_append_no_partition_covers_lands_in_the_default_then_moves_when_one_is_added(
    store: Store, admin: asyncpg.Connection
) -> None:
    today = (await store.event_partitions())[0]
    assert today.lower <= await store.now() < today.upper
    await admin.execute(f'DROP TABLE laneway."{today.name}"')
    instance_id = uuid.uuid4()
    ids = await _append(store, instance_id, 3)
    far = (await _append(store, instance_id, 1))[0]
    await _move(admin, [far], 3650)  # ten years ahead: no partition there either

    assert {r["partition"] for r in await admin.fetch(WHERE_EVENTS_ARE, instance_id)} == {
        "laneway.events_default"
    }
    assert await store.add_event_partitions() == [today.name]
    where = await admin.fetch(WHERE_EVENTS_ARE, instance_id)
    assert [r["event_id"] for r in where] == [*ids, far]
    assert [r["partition"] for r in where] == [f"laneway.{today.name}"] * 3 + [
        "laneway.events_default"
    ]


async def test_retention_drops_a_partition_of_finished_instances_and_keeps_one_a_live_one_uses(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    old = [await engine.enqueue("noop") for _ in range(3)]
    assert await engine.tick() == 3
    live = await engine.enqueue("noop", delay_ms=30 * DAY * 1000)  # waits a month
    for days in (10, 9):
        await admin.execute(ADD_DAY, -days)
    ten_days_ago, nine_days_ago = (await store.event_partitions())[:2]
    for handle in old:
        await _finished_days_ago(admin, handle.instance_id, 10)
        ids = [r["event_id"] for r in await admin.fetch(WHERE_EVENTS_ARE, handle.instance_id)]
        await _move(admin, ids[:1], -10)  # enqueued ten days ago, ran nine days ago
        await _move(admin, ids[1:], -9)
    live_ids = [r["event_id"] for r in await admin.fetch(WHERE_EVENTS_ARE, live.instance_id)]
    await _move(admin, live_ids, -9)  # enqueued nine days ago, still waiting

    assert await store.prune_finished(7 * DAY) == 3
    assert await store.retire_event_partitions() == [ten_days_ago.name]
    names = [p.name for p in await store.event_partitions()]
    assert ten_days_ago.name not in names
    assert nine_days_ago.name in names  # the live instance's events are there
    assert [r["event_id"] for r in await admin.fetch(WHERE_EVENTS_ARE, live.instance_id)] == (
        live_ids
    )
    assert await admin.fetchval(
        "SELECT count(*) FROM laneway.events WHERE instance_id = ANY($1::uuid[])",
        [h.instance_id for h in old],
    ) == 2 * len(old)  # the old instances' events of nine days ago wait for their partition
    assert await store.retire_event_partitions() == []  # safe to repeat

    await engine.cancel(live.instance_id)
    await _finished_days_ago(admin, live.instance_id, 8)
    assert await store.prune_finished(7 * DAY) == 1
    assert await store.retire_event_partitions() == [nine_days_ago.name]
    assert (
        await admin.fetchval(
            "SELECT count(*) FROM laneway.events WHERE at < now() - interval '2 days'"
        )
        == 0
    )
    # The current partitions stay whatever they hold: appends may still land there.
    assert len(await store.event_partitions()) == 3


async def test_a_partition_is_dropped_after_its_detach_committed_and_a_crash_between_leaves_nothing(
    store: Store, admin: asyncpg.Connection
) -> None:
    # The detach commits first (it holds the log's lock, which appends wait for); the drop,
    # whose commit unlinks the files, comes after in a transaction of its own (0028). A
    # partition a crash left detached is dropped by the next retirement.
    for days in (12, 11):
        await admin.execute(ADD_DAY, -days)
    twelve, eleven = (await store.event_partitions())[:2]
    assert await admin.fetchval("SELECT laneway.retire_event_partition($1)", twelve.name)
    # As a crash would leave it: out of the log, still a table.
    assert twelve.name not in [p.name for p in await store.event_partitions()]
    assert await admin.fetchval("SELECT to_regclass($1) IS NOT NULL", f"laneway.{twelve.name}")
    ids = await _append(store, uuid.uuid4(), 2)  # the log takes appends meanwhile
    assert len(ids) == 2

    assert await store.retire_event_partitions() == [twelve.name, eleven.name]
    for gone in (twelve, eleven):
        assert await admin.fetchval("SELECT to_regclass($1) IS NULL", f"laneway.{gone.name}")
    assert await store.retire_event_partitions() == []  # safe to repeat
    # Nothing but a detached event partition is dropped: the default one and today's stay.
    assert await admin.fetchval("SELECT to_regclass('laneway.events_default') IS NOT NULL")
    assert len(await store.event_partitions()) == 3


async def test_a_resume_cursor_returns_every_later_event_once_in_order_across_partitions(
    store: Store, admin: asyncpg.Connection, database_url: str
) -> None:
    for days in (3, 2, 1):
        await admin.execute(ADD_DAY, -days)
    # An instance that exists: the reads of one instance's events give none for a deleted one.
    instance_id = (await make_engine(store, noop).enqueue("noop")).instance_id
    other_id = uuid.uuid4()
    ids = await _append(store, instance_id, 24)
    others = await _append(store, other_id, 4)
    # Ids ascend across partitions, and not with time everywhere: the order is the ids'.
    await _move(admin, ids[0:6], -3)
    await _move(admin, ids[6:12], -2)
    await _move(admin, ids[12:15], 3650)  # the default partition
    await _move(admin, ids[15:18], -1)
    partitions = {r["partition"] for r in await admin.fetch(WHERE_EVENTS_ARE, instance_id)}
    assert len(partitions) == 5

    cursor, seen = ids[3], []
    while page := await store.events_after(cursor, 5):
        seen += [e.event_id for e in page]
        cursor = page[-1].event_id
    assert seen == sorted(ids[4:] + others)
    replay = await store.instance_events_after(instance_id, ids[3], 100)
    assert [e.event_id for e in replay] == ids[4:]
    assert await store.latest_event_id() == others[-1]

    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=ids[5], matches=lambda e: True) as stream,
    ):
        async with asyncio.timeout(10):
            replayed = [(await anext(stream)).event_id for _ in range(len(ids) - 6 + len(others))]
        live = await _append(store, instance_id, 1)
        async with asyncio.timeout(10):
            assert (await anext(stream)).event_id == live[0]
    assert replayed == sorted(ids[6:] + others)


async def test_a_least_privilege_role_keeps_the_partitions(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # A role with the documented grants and no CREATE (docs/deploying.md) adds, retires and
    # analyses partitions as every engine does: the functions run as the schema's owner (0031).
    await admin.execute(ADD_DAY, -10)
    partitions = await _partitions(admin)
    old, future = partitions[0], partitions[-1]
    await admin.execute(f'DROP TABLE laneway."{future}"')
    async with runtime_role(database_url) as role_url, open_store(role_url, pool_size=2) as store:
        assert await store.add_event_partitions() == [future]
        assert await store.retire_event_partitions() == [old]
        assert await store.analyze_events(every_seconds=0)
    assert await _partitions(admin) == partitions[1:]

    async def analysed() -> bool:
        stats = "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'events'"
        return bool(await admin.fetchval(stats))

    await eventually(analysed, bool)
    public = "SELECT has_function_privilege('public', 'laneway.analyze_events()', 'EXECUTE')"
    assert await admin.fetchval(public) is False  # only the roles granted it


async def _partitions(admin: asyncpg.Connection) -> list[str]:
    return [row["name"] for row in await admin.fetch("SELECT name FROM laneway.event_partitions()")]
