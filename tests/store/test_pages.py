"""Keyset pages of instances (queries/pages.py, store/pages.py, engine/page_calls.py).

A walk to the end visits every row that existed when it began exactly once, strictly in
(created_at, instance_id) descending order, while another connection keeps inserting rows (at
the head, and in the middle of the walk's range); the filters match the offset list's; a
cursor that the engine did not make is refused; the walk is an index path in a generic plan.
Rows are seeded with one INSERT ... generate_series, so 100,000 take a second, not minutes.
"""

import asyncio
import base64
import dataclasses
import itertools
from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg
import pytest

from laneway.engine.engine import Engine
from laneway.engine.page_calls import decode_cursor, encode_cursor
from laneway.engine.registry import WorkflowRegistry
from laneway.errors import InvalidInputError
from laneway.model import InstanceFilter, InstanceRecord, Status
from laneway.store import Store, open_store, queries

# Three rows per creation time (a batch enqueue's rows share theirs), so the id breaks ties;
# names, queues, statuses, keys and versions in cycles of coprime lengths, so every
# combination occurs; 'rare' is one row in 101, and every 97th row has the parent $3.
# $1 the number of rows, $2 the newest creation time.
SEED = """
INSERT INTO laneway.instances (instance_id, name, queue, status, concurrency_key, version,
                               parent_id, created_at, updated_at)
SELECT gen_random_uuid(),
       CASE WHEN g % 101 = 0 THEN 'rare' ELSE (ARRAY['alpha', 'beta', 'gamma', 'delta'])[1 + g % 4]
       END,
       (ARRAY['q1', 'q2'])[1 + g % 2],
       (ARRAY['pending', 'completed', 'failed', 'cancelled', 'completed', 'paused',
              'completed'])[1 + g % 7],
       CASE WHEN g % 3 = 0 THEN 'k' || (g % 4) END,
       CASE WHEN g % 11 = 10 THEN '2' ELSE '1' END,
       CASE WHEN g % 97 = 0 THEN $3::uuid END,
       $2::timestamptz - (g / 3) * interval '1 millisecond',
       $2::timestamptz
  FROM generate_series(1, $1::int) AS g
"""
PARENT = UUID("0190a1b2-0000-7000-8000-000000000001")
ALL_ROWS = """
SELECT instance_id, created_at, name, queue, status, parent_id, concurrency_key, version
  FROM laneway.instances
"""
# $1 a creation time: one row at the head (now()) and one at $1, in the walk's range.
INSERT_DURING_WALK = """
INSERT INTO laneway.instances (instance_id, name, queue, created_at)
VALUES (gen_random_uuid(), 'alpha', 'q1', now()), (gen_random_uuid(), 'beta', 'q2', $1)
"""


@dataclasses.dataclass(frozen=True)
class Row:
    instance_id: UUID
    created_at: datetime
    name: str
    queue: str
    status: str
    parent_id: UUID | None
    concurrency_key: str | None
    version: str

    @property
    def key(self) -> tuple[datetime, UUID]:
        return (self.created_at, self.instance_id)


async def seed(admin: asyncpg.Connection, count: int) -> list[Row]:
    """`count` instances created before now, newest first as the pages order them."""
    newest = await admin.fetchval("SELECT now() - interval '1 minute'")
    assert await admin.execute(SEED, count, newest, PARENT) == f"INSERT 0 {count}"
    await admin.execute("ANALYZE laneway.instances")
    return await all_rows(admin)


async def all_rows(admin: asyncpg.Connection) -> list[Row]:
    rows = [Row(**dict(r)) for r in await admin.fetch(ALL_ROWS)]
    return sorted(rows, key=lambda r: r.key, reverse=True)


def engine_on(store: Store) -> Engine:
    return Engine(store, WorkflowRegistry([]))


async def walk(engine: Engine, where: InstanceFilter, first: int) -> list[InstanceRecord]:
    """Every page from the first to the last; each page's cursors checked against its rows."""
    seen: list[InstanceRecord] = []
    after: str | None = None
    while True:
        page = await engine.page_instances(where, first=first, after=after)
        assert len(page.records) <= first
        assert page.cursors == [encode_cursor(r) for r in page.records]
        seen.extend(page.records)
        if not page.has_next:
            return seen
        assert len(page.records) == first
        after = page.end_cursor


def strictly_descending(records: list[InstanceRecord]) -> bool:
    keys = [(r.created_at, r.instance_id) for r in records]
    return all(a > b for a, b in itertools.pairwise(keys))


async def test_a_walk_meets_every_row_once_in_order_while_rows_are_inserted(
    store: Store, admin: asyncpg.Connection, database_url: str
) -> None:
    before = await seed(admin, 100_000)
    engine = engine_on(store)
    inserter = await asyncpg.connect(database_url)
    stop = asyncio.Event()
    first_insert = asyncio.Event()
    inserted = 0

    async def insert_while_walking() -> None:
        # New rows at the head, and amid the range the walk has still to cover or has passed.
        nonlocal inserted
        step = 0
        while not stop.is_set():
            await inserter.execute(
                INSERT_DURING_WALK, before[(step * 7919) % len(before)].created_at
            )
            inserted += 2
            step += 1
            first_insert.set()

    task = asyncio.create_task(insert_while_walking())
    try:
        await first_insert.wait()
        at_start = inserted
        seen = await walk(engine, InstanceFilter(), first=500)
        during = inserted - at_start
    finally:
        stop.set()
        await task
        await inserter.close()

    assert during > 0  # the walk did run while rows arrived
    assert strictly_descending(seen)  # so no row twice, and in order
    seen_ids = {r.instance_id for r in seen}
    assert {r.instance_id for r in before} <= seen_ids
    assert len(seen) == len(seen_ids)
    # Summaries: a page never reads the state.
    assert all(r.state == {} and r.next_params is None for r in seen[:10])


FILTERS = [
    InstanceFilter(),
    InstanceFilter(name="rare"),
    InstanceFilter(name="alpha", statuses=(Status.FAILED, Status.PENDING)),
    InstanceFilter(queue="q2"),
    InstanceFilter(statuses=(Status.PAUSED,)),
    InstanceFilter(statuses=()),
    InstanceFilter(concurrency_key="k1"),
    InstanceFilter(version="2"),
    InstanceFilter(name="beta", version="2", queue="q1"),
]


def matches(row: Row, where: InstanceFilter) -> bool:
    statuses = None if where.statuses is None else {s.value for s in where.statuses}
    return (
        (where.name is None or row.name == where.name)
        and (where.queue is None or row.queue == where.queue)
        and (statuses is None or row.status in statuses)
        and (where.parent_id is None or row.parent_id == where.parent_id)
        and (where.concurrency_key is None or row.concurrency_key == where.concurrency_key)
        and (where.version is None or row.version == where.version)
        and (where.created_after is None or row.created_at > where.created_after)
        and (where.created_before is None or row.created_at < where.created_before)
    )


async def test_filters_page_what_the_offset_list_lists(
    store: Store, admin: asyncpg.Connection
) -> None:
    rows = await seed(admin, 3_000)
    engine = engine_on(store)
    middle = rows[1_000].created_at  # shared by its neighbours: the window's ends fall in ties
    windows = [
        InstanceFilter(created_before=middle),
        InstanceFilter(created_after=middle),
        InstanceFilter(created_after=rows[2_000].created_at, created_before=middle),
        InstanceFilter(name="gamma", created_before=middle),
        InstanceFilter(parent_id=PARENT),
    ]
    for where in [*FILTERS, *windows]:
        expected = [r.instance_id for r in rows if matches(r, where)]
        paged = [r.instance_id for r in await walk(engine, where, first=37)]
        listed = [
            r.instance_id
            for offset in range(0, len(expected) + 1, 500)
            for r in await engine.list_instances(where, limit=500, offset=offset, summaries=True)
        ]
        assert paged == expected, where
        assert listed == expected, where  # the offset list keeps the same order
    assert any(matches(r, windows[4]) for r in rows)  # the parent filter had rows to find


async def test_a_cursor_stays_a_place_after_its_row_is_gone(
    store: Store, admin: asyncpg.Connection
) -> None:
    rows = await seed(admin, 300)
    engine = engine_on(store)
    page = await engine.page_instances(first=10)
    assert page.end_cursor is not None
    await admin.execute("DELETE FROM laneway.instances WHERE instance_id = $1", rows[9].instance_id)
    after = await engine.page_instances(first=10, after=page.end_cursor)
    assert [r.instance_id for r in after.records] == [r.instance_id for r in rows[10:20]]


async def test_the_last_page_says_so_and_an_empty_one_has_no_cursor(
    store: Store, admin: asyncpg.Connection
) -> None:
    rows = await seed(admin, 20)
    engine = engine_on(store)
    whole = await engine.page_instances(first=20)
    assert [r.instance_id for r in whole.records] == [r.instance_id for r in rows]
    assert not whole.has_next
    assert (await engine.page_instances(first=19)).has_next
    empty = await engine.page_instances(first=5, after=whole.end_cursor)
    assert empty.records == []
    assert empty.end_cursor is None
    assert not empty.has_next


def _raw(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def _spell(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def test_a_cursor_round_trips_exactly(store: Store, admin: asyncpg.Connection) -> None:
    (row,) = await seed(admin, 1)
    (record,) = (await engine_on(store).page_instances(first=1)).records
    cursor = encode_cursor(record)
    assert decode_cursor(cursor) == row.key  # to the microsecond
    assert len(cursor) == 34


def _bad_cursors(good: str) -> Iterator[str]:
    raw = _raw(good)
    yield ""
    yield "not a cursor"
    yield good + "A"  # too long for the layout
    yield good[:-2]  # too short
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    yield good[:-1] + alphabet[alphabet.index(good[-1]) ^ 1]  # a pad bit: the same bytes
    yield _spell(b"\x02" + raw[1:])  # another layout's version
    yield _spell(raw[:1] + (2**63 - 1).to_bytes(8, "big") + raw[9:])  # no such time
    yield good[:10] + "+" + good[11:]  # the other alphabet's character
    yield "é" * 34
    yield "A" * 10_000


async def test_a_cursor_the_engine_did_not_make_is_refused(
    store: Store, admin: asyncpg.Connection
) -> None:
    await seed(admin, 2)
    engine = engine_on(store)
    good = (await engine.page_instances(first=1)).end_cursor
    assert good is not None
    for bad in _bad_cursors(good):
        with pytest.raises(InvalidInputError, match="after is not a cursor"):
            await engine.page_instances(after=bad)
    for first in (0, -1, 501):
        with pytest.raises(InvalidInputError, match="first must be between 1 and 500"):
            await engine.page_instances(first=first)
    assert len((await engine.page_instances(first=500)).records) == 2


PARAMETER_TYPES = "text, text, text[], uuid, text, text, timestamptz, timestamptz, " + (
    "timestamptz, uuid, integer"
)
NO_FILTER = "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"


@pytest.mark.parametrize(
    ("filters", "depth", "index"),
    [
        (NO_FILTER, None, "instances_page"),
        (NO_FILTER, 15_000, "instances_page"),
        ("NULL, 'q1', '{failed}', NULL, NULL, NULL, NULL, NULL", 10_000, "instances_page"),
        ("'rare', NULL, NULL, NULL, NULL, NULL, NULL, NULL", 10_000, "instances_name_page"),
    ],
)
async def test_a_page_planned_for_its_values_walks_an_index_from_the_start_key(
    store: Store, admin: asyncpg.Connection, filters: str, depth: int | None, index: str
) -> None:
    rows = await seed(admin, 20_000)
    start = "NULL, NULL"
    if depth is not None:
        start = f"'{rows[depth].created_at.isoformat()}', '{rows[depth].instance_id}'"
    await admin.execute("SET plan_cache_mode = force_custom_plan")  # as the store runs it
    # With its payloads or without (the select list differs, not the walk).
    for n, statement in enumerate(
        [queries.PAGE_INSTANCES, queries.PAGE_INSTANCES_WITHOUT_PAYLOADS]
    ):
        await admin.execute(f"PREPARE page{n} ({PARAMETER_TYPES}) AS {statement}")
        explained = await admin.fetch(
            f"EXPLAIN (COSTS OFF) EXECUTE page{n} ({filters}, {start}, 51)"
        )
        plan = "\n".join(row[0] for row in explained)
        assert f"Index Scan using {index} on instances" in plan, plan
        assert "ROW(created_at, instance_id) < ROW(" in plan, plan
        assert "Sort" not in plan, plan


async def test_the_store_never_pages_with_a_generic_plan(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # After five runs of a prepared statement PostgreSQL may switch to a generic plan, which
    # cannot fold the filter's `$n IS NULL OR ...` terms (see store/pages.py).
    await seed(admin, 2_000)
    async with open_store(database_url, pool_size=1) as one:
        engine = engine_on(one)
        for _ in range(12):
            await engine.page_instances(InstanceFilter(statuses=(Status.FAILED,)), first=5)
        async with one._acquire() as conn:
            plans = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement = $1",
                queries.PAGE_INSTANCES,
            )
    assert plans is not None
    assert plans["generic_plans"] == 0
    assert plans["custom_plans"] >= 12


async def test_the_creation_window_end_is_where_the_walk_starts(
    store: Store, admin: asyncpg.Connection
) -> None:
    rows = await seed(admin, 100)
    end = rows[50].created_at
    engine = engine_on(store)
    after_end = await engine.page_instances(InstanceFilter(created_before=end), first=100)
    expected = [r.instance_id for r in rows if r.created_at < end]
    assert [r.instance_id for r in after_end.records] == expected
    # A cursor before the window's end wins over it, and one after it loses.
    early = encode_cursor(after_end.records[5])
    later = await engine.page_instances(InstanceFilter(created_before=end), first=100, after=early)
    assert [r.instance_id for r in later.records] == expected[6:]
    late = await engine.page_instances(
        InstanceFilter(created_before=end + timedelta(seconds=1)),
        first=100,
        after=encode_cursor(after_end.records[0]),
    )
    assert [r.instance_id for r in late.records] == expected[1:]
