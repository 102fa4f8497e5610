"""When a template operation's outcome is written: with its stage's write, or on its own before
anything that could crash would run it again (engine/runner_tools.py RunnerTools)."""

import asyncio

from laneway.engine.template import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    completed,
    failed,
)
from laneway.engine.template_interpreter import compile_template
from laneway.model import EventType, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, types_of


async def test_in_a_sequence_an_operation_is_written_before_the_next_one_starts(
    store: Store,
) -> None:
    seen_by_second: list[tuple[str, int]] = []

    async def first(ctx: OperationContext) -> OperationResult:
        return completed({"a": 1})

    async def second(ctx: OperationContext) -> OperationResult:
        rows = await store.operations(ctx.instance_id)
        seen_by_second.extend((row.stage, row.position) for row in rows)
        return completed()

    template = Template(
        type="sequenced",
        stages=[Stage(name="only", operations=[Operation(type="a"), Operation(type="b")])],
    )
    engine = make_engine(
        store, compile_template(template, OperationRegistry({"a": first, "b": second}))
    )
    enqueued = await engine.enqueue("sequenced")
    await engine.tick()
    assert seen_by_second == [("only", 0)]  # the first's row, committed before the second ran
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    rows = await store.operations(enqueued.instance_id)
    assert sorted((row.position, row.status) for row in rows) == [
        (0, "completed"),
        (1, "completed"),
    ]
    # The last operation rode with the completion: no step of its own, one transaction.
    assert await types_of(store, enqueued.instance_id) == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.COMPLETED,
    ]


async def test_a_parallel_operation_is_written_while_its_siblings_still_run(
    store: Store,
) -> None:
    release = asyncio.Event()

    async def quick(ctx: OperationContext) -> OperationResult:
        return completed({"quick": True})

    async def slow(ctx: OperationContext) -> OperationResult:
        await release.wait()
        return completed()

    template = Template(
        type="fanned",
        stages=[
            Stage(
                name="fan",
                parallel=True,
                operations=[Operation(type="quick"), Operation(type="slow")],
            )
        ],
    )
    engine = make_engine(
        store, compile_template(template, OperationRegistry({"quick": quick, "slow": slow}))
    )
    enqueued = await engine.enqueue("fanned")
    tick = asyncio.create_task(engine.tick())
    try:
        # A crash now must not run `quick` again: its row lands while `slow` still runs.
        rows = await eventually(
            lambda: store.operations(enqueued.instance_id), lambda found: len(found) == 1
        )
        assert (rows[0].type, rows[0].status, rows[0].data) == (
            "quick",
            "completed",
            {"quick": True},
        )
        assert not tick.done()
    finally:
        release.set()
        await asyncio.wait_for(tick, timeout=10)
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    rows = await store.operations(enqueued.instance_id)
    assert sorted(row.type for row in rows) == ["quick", "slow"]


async def test_outcomes_reach_their_rows_exactly_as_the_operations_returned_them(
    store: Store,
) -> None:
    # What the group commit writes of each outcome comes back as it was: quotes, backslashes,
    # non-ASCII text, nested data and nulls, a failure's reason (a NUL in it written as
    # U+FFFD, payloads.storable_text), a null data or metadata stored as jsonb null.
    data = {"quote": 'say "hi"\\n', "naïve": ["ü", 1.5, None, {"deep": [True]}], "n": 10**20}

    async def rich(ctx: OperationContext) -> OperationResult:
        return completed(data, metadata={"tab": "a\tb", "emoji": "\U0001f600"})

    async def refuses(ctx: OperationContext) -> OperationResult:
        return failed('no "way" \\ back, ünïcode \x00')  # NUL: see payloads.storable_text

    template = Template(
        type="round_trip",
        stages=[
            Stage(
                name="stage.one:x-1",
                operations=[
                    Operation(type="rich"),
                    Operation(type="refuses", critical=False, max_attempts=1),
                ],
            )
        ],
    )
    engine = make_engine(
        store, compile_template(template, OperationRegistry({"rich": rich, "refuses": refuses}))
    )
    enqueued = await engine.enqueue("round_trip")
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    rows = sorted(await store.operations(enqueued.instance_id), key=lambda row: row.position)
    assert [(row.stage, row.type, row.status, row.attempts) for row in rows] == [
        ("stage.one:x-1", "rich", "completed", 1),
        ("stage.one:x-1", "refuses", "failed", 1),
    ]
    assert rows[0].data == data
    assert rows[0].metadata == {"tab": "a\tb", "emoji": "\U0001f600"}
    assert rows[0].error is None
    assert rows[1].error == 'no "way" \\ back, ünïcode \ufffd'
    assert rows[1].data is None
    for row in rows:
        assert row.started_at is not None
        assert row.finished_at is not None
        assert row.started_at <= row.finished_at
    async with store.connection() as conn:
        stored = await conn.fetch(
            "SELECT position, jsonb_typeof(data) AS data, jsonb_typeof(metadata) AS metadata"
            "  FROM laneway.operations WHERE instance_id = $1 ORDER BY position",
            enqueued.instance_id,
        )
    assert [tuple(row) for row in stored] == [(0, "object", "object"), (1, "null", "null")]
