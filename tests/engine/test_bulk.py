"""Bulk actions on a real PostgreSQL: caps hold, races end once, a repeat changes nothing, and
retry and resume change only what they counted."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Done, Engine, HandlerContext, Pause, RetryPolicy, Workflow
from laneway.engine.requests import EnqueueRequest, new_instance
from laneway.errors import BulkStoppedError, ConflictError
from laneway.events.hub import EventHub
from laneway.model import (
    EventType,
    InstanceFilter,
    InstanceRecord,
    JSONValue,
    NewEvent,
    Notification,
    Status,
)
from laneway.store import Store
from laneway.store.bulk import BulkMatch
from laneway.store.rows import Conn
from tests.engine.helpers import eventually, make_engine

running_now = 0
most_running = 0


async def _counted(ctx: HandlerContext, params: JSONValue) -> Done:
    global running_now, most_running
    running_now += 1
    most_running = max(most_running, running_now)
    try:
        await asyncio.sleep(0.002)
    finally:
        running_now -= 1
    return Done()


capped = Workflow("capped", handlers={"run": _counted}, initial="run", queue="capped")


async def _quick(ctx: HandlerContext, params: JSONValue) -> Done:
    await asyncio.sleep(0.001 * (hash(ctx.instance_id) % 5))
    return Done()


quick = Workflow("quick", handlers={"run": _quick}, initial="run", queue="quick")
parked = Workflow("parked", handlers={"run": _quick}, initial="run", queue="parked")


def _pausing(name: str, schema: JSONValue) -> Workflow:
    async def ask(ctx: HandlerContext, params: JSONValue) -> Pause:
        return Pause("decide", "decided", input_schema=schema)

    async def decided(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done()

    return Workflow(name, handlers={"ask": ask, "decided": decided}, initial="ask")


async def _enqueue(store: Store, name: str, n: int) -> list[UUID]:
    engine = make_engine(store, capped, quick, parked)
    results = await engine.enqueue_many([EnqueueRequest(name=name) for _ in range(n)])
    return [r.instance_id for r in results]


async def _fail_all(store: Store, name: str) -> None:
    """Make every instance of `name` failed, as if its attempts had run out (fast, by SQL)."""
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
            " last_error = 'RuntimeError: boom', finished_at = now() WHERE name = $1",
            name,
        )


async def _count(store: Store, sql: str, *args: object) -> int:
    async with store.connection() as conn:
        value: int = await conn.fetchval(sql, *args)
    return value


async def test_bulk_retry_of_2000_failed_never_runs_more_than_the_queue_allows(
    store: Store,
) -> None:
    global most_running
    most_running = 0
    await _enqueue(store, "capped", 2000)
    await _fail_all(store, "capped")
    engines = [make_engine(store, capped, concurrency=50) for _ in range(2)]
    await engines[0].configure_queue("capped", concurrency=5)
    result = await engines[0].retry_many(InstanceFilter(name="capped"))
    assert (result.matched, result.changed) == (2000, 2000)
    peak_in_db = 0

    async def completed() -> int:
        nonlocal peak_in_db
        async with store.connection() as conn:
            row = await conn.fetchrow(
                "SELECT count(*) FILTER (WHERE status = 'running') AS running,"
                " count(*) FILTER (WHERE status = 'completed') AS completed"
                " FROM laneway.instances WHERE name = 'capped'"
            )
        assert row is not None
        peak_in_db = max(peak_in_db, row["running"])
        return int(row["completed"])

    async with engines[0].running(), engines[1].running():
        await eventually(completed, lambda n: n == 2000, timeout=120)
    assert most_running <= 5
    assert peak_in_db <= 5
    assert most_running >= 2  # the cap was reached for, not a serial run by accident
    retried = await _count(
        store, "SELECT count(*) FROM laneway.events WHERE type = 'retrying' AND name = 'capped'"
    )
    assert retried == 2000


async def test_bulk_cancel_racing_with_workers_ends_each_instance_once(store: Store) -> None:
    ids = await _enqueue(store, "quick", 400)
    worker = make_engine(store, quick, concurrency=20, poll_interval_seconds=0.05)
    async with worker.running():
        await eventually(
            lambda: _count(
                store, "SELECT count(*) FROM laneway.instances WHERE status = 'completed'"
            ),
            lambda n: n >= 20,
        )
        result = await worker.cancel_many(InstanceFilter(name="quick"))
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT i.instance_id, i.status,"
            " array_agg(e.type) FILTER (WHERE e.type IN ('completed', 'cancelled', 'failed'))"
            " AS ends FROM laneway.instances AS i JOIN laneway.events AS e USING (instance_id)"
            " GROUP BY i.instance_id, i.status"
        )
    assert len(rows) == len(ids)
    for row in rows:
        assert row["ends"] == [row["status"]], row
    cancelled = sum(row["status"] == "cancelled" for row in rows)
    assert cancelled == result.changed
    assert 0 < result.changed <= result.matched


async def test_a_repeated_bulk_call_changes_nothing(store: Store) -> None:
    await _enqueue(store, "parked", 120)
    engine = make_engine(store, parked)
    where = InstanceFilter(name="parked")
    first = await engine.cancel_many(where)
    assert (first.matched, first.changed) == (120, 120)
    events = await _count(store, "SELECT count(*) FROM laneway.events")
    second = await engine.cancel_many(where)
    assert (second.matched, second.changed, second.sample_ids) == (0, 0, [])
    assert await _count(store, "SELECT count(*) FROM laneway.events") == events
    assert (await engine.retry_many(InstanceFilter(name="parked"))).changed == 0


async def test_a_bulk_call_past_its_time_stops_between_batches_saying_how_far_it_got(
    store: Store,
) -> None:
    # Over HTTP the operation's deadline would cut it off mid-batch and say nothing of what it
    # did; with a time to stop at, it ends between batches (after one at least, so that calls
    # again always get on) and says how many it changed, and the same call again finishes.
    await _enqueue(store, "parked", 250)
    engine = make_engine(store, parked)
    where = InstanceFilter(name="parked")
    already = asyncio.get_running_loop().time()
    with pytest.raises(BulkStoppedError) as stopped:
        await engine.cancel_many(where, stop_at=already)
    assert (stopped.value.matched, stopped.value.changed) == (250, 100)
    assert stopped.value.details() == {"matched": 250, "changed": 100}
    assert "100 of the 250" in str(stopped.value)
    cancelled = "SELECT count(*) FROM laneway.instances WHERE status = 'cancelled'"
    assert await _count(store, cancelled) == 100
    rest = await engine.cancel_many(where, stop_at=asyncio.get_running_loop().time() + 60)
    assert (rest.matched, rest.changed) == (150, 150)


async def test_dry_run_counts_and_samples_newest_first_and_changes_nothing(store: Store) -> None:
    await _enqueue(store, "parked", 150)
    engine = make_engine(store, parked)
    events = await _count(store, "SELECT count(*) FROM laneway.events")
    result = await engine.cancel_many(InstanceFilter(name="parked"), dry_run=True)
    assert (result.matched, result.changed) == (150, 0)
    newest = await engine.list_instances(InstanceFilter(name="parked"), limit=100)
    assert result.sample_ids == [r.instance_id for r in newest]
    assert await _count(store, "SELECT count(*) FROM laneway.events") == events
    pending = "SELECT count(*) FROM laneway.instances WHERE status = 'pending'"
    assert await _count(store, pending) == 150
    assert (await engine.retry_many(InstanceFilter(name="parked"), dry_run=True)).matched == 0


async def test_statuses_may_be_named_by_their_text(store: Store) -> None:
    # InstanceFilter is public: ("failed",) is what a caller writes, and it used to crash the
    # statement's parameters with an AttributeError; an unknown one is named.
    await _enqueue(store, "parked", 3)
    await _fail_all(store, "parked")
    engine = make_engine(store, parked)
    failed: Any = ("failed",)  # as an untyped caller (a script, a notebook) passes them
    result = await engine.retry_many(InstanceFilter(name="parked", statuses=failed))
    assert (result.matched, result.changed) == (3, 3)
    unknown: Any = ("finished",)
    with pytest.raises(ValueError, match="unknown status 'finished'"):
        InstanceFilter(statuses=unknown)


async def test_filters_by_version_and_created_window(store: Store) -> None:
    ids = await _enqueue(store, "parked", 6)
    async with store.connection() as conn:
        # ids[0..2] are version 2; ids[i] was created i hours ago
        await conn.execute(
            "UPDATE laneway.instances SET version = '2' WHERE instance_id = ANY($1::uuid[])",
            ids[:3],
        )
        for hours, instance_id in enumerate(ids):
            await conn.execute(
                "UPDATE laneway.instances SET created_at = now() - $2::float8 * interval '1 hour'"
                " WHERE instance_id = $1",
                instance_id,
                float(hours),
            )
        now = await conn.fetchval("SELECT now()")
    engine = make_engine(store, parked)
    by_version = await engine.cancel_many(InstanceFilter(version="2"), dry_run=True)
    assert set(by_version.sample_ids) == set(ids[:3])
    window = InstanceFilter(
        name="parked",
        created_after=now - timedelta(hours=4.5),
        created_before=now - timedelta(hours=1.5),
    )
    result = await engine.cancel_many(window)
    assert (result.matched, result.changed) == (3, 3)
    assert result.sample_ids == [ids[2], ids[3], ids[4]]
    statuses = {r.instance_id: r.status for r in await engine.list_instances(limit=10)}
    assert [statuses[i] for i in ids] == [
        Status.PENDING,
        Status.PENDING,
        Status.CANCELLED,
        Status.CANCELLED,
        Status.CANCELLED,
        Status.PENDING,
    ]
    # The statuses of the filter narrow what the action applies to.
    paused_only = InstanceFilter(name="parked", statuses=(Status.PAUSED,))
    assert (await engine.cancel_many(paused_only)).matched == 0


async def test_bulk_resume_skips_pauses_whose_schema_needs_an_input(store: Store) -> None:
    free = _pausing("free", None)
    strict = _pausing("strict", {"type": "object", "required": ["decision"]})
    engine = make_engine(store, free, strict)
    for name in ("free", "strict"):
        await engine.enqueue_many([EnqueueRequest(name=name) for _ in range(3)])
    while await engine.tick():
        pass
    result = await engine.resume_many(InstanceFilter())
    assert (result.matched, result.changed) == (6, 3)
    by_status = {
        (r.name, r.status)
        for r in await engine.list_instances(limit=10)
        if r.name in ("free", "strict")
    }
    assert by_status == {("free", Status.PENDING), ("strict", Status.PAUSED)}
    resumed = await _count(store, "SELECT count(*) FROM laneway.events WHERE type = 'resumed'")
    assert resumed == 3
    again = await engine.resume_many(InstanceFilter())
    assert (again.matched, again.changed) == (3, 0)


async def test_one_doorbell_stops_every_handler_of_a_cancelled_batch_elsewhere(
    store: Store, database_url: str
) -> None:
    stopped: list[UUID] = []
    started = asyncio.Event()

    async def hang(ctx: HandlerContext, params: JSONValue) -> Done:
        if len(ctx.state) == 0:
            started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append(ctx.instance_id)
            raise
        return Done()

    hanging = Workflow("hanging", handlers={"run": hang}, initial="run")
    worker = make_engine(store, hanging, concurrency=10)
    api = make_engine(store, hanging)
    notifications: list[Notification] = []

    def heard(notification: Notification) -> None:
        notifications.append(notification)
        worker.notify(notification)

    ids = [
        r.instance_id
        for r in await api.enqueue_many([EnqueueRequest(name="hanging") for _ in range(10)])
    ]
    async with EventHub.open(database_url, store, on_notification=heard), worker.running():
        running = "SELECT count(*) FROM laneway.instances WHERE status = 'running'"
        await eventually(lambda: _count(store, running), lambda n: n == 10)
        result = await api.cancel_many(InstanceFilter(name="hanging"))
        assert result.changed == 10
        await eventually(lambda: asyncio.sleep(0, len(stopped)), lambda n: n == 10)
    assert set(stopped) == set(ids)
    assert any(set(n.cancelled_ids) == set(ids) for n in notifications)


def test_a_doorbell_names_several_cancelled_ids() -> None:
    a, b = UUID(int=1), UUID(int=2)
    notification = Notification.from_payload(f'{{"e": 7, "c": "{a},{b}"}}')
    assert notification == Notification(last_event_id=7, cancelled_ids=(a, b))
    assert Notification.from_payload('{"e": 7}').cancelled_ids == ()


async def test_a_batch_that_deadlocked_is_written_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _enqueue(store, "parked", 3)
    real = store._cancel_on
    tries: list[int] = []

    async def deadlocks_once(conn: Conn, instance_ids: Sequence[UUID]) -> list[InstanceRecord]:
        tries.append(len(instance_ids))
        records = await real(conn, instance_ids)
        if len(tries) == 1:  # after its writes: the rollback must undo them
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return records

    monkeypatch.setattr(store, "_cancel_on", deadlocks_once)
    result = await make_engine(store, parked).cancel_many(InstanceFilter(name="parked"))
    assert (result.changed, tries) == (3, [3, 3])
    cancelled = "SELECT count(*) FROM laneway.events WHERE type = 'cancelled'"
    assert await _count(store, cancelled) == 3


async def _fail(store: Store, *instance_ids: UUID) -> None:
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
            " last_error = 'RuntimeError: boom', finished_at = now()"
            " WHERE instance_id = ANY($1::uuid[])",
            list(instance_ids),
        )


async def test_a_failed_singleton_comes_back_only_while_nobody_holds_its_key(
    store: Store,
) -> None:
    engine = make_engine(store, parked)
    first = (await engine.enqueue("parked", singleton_key="k")).instance_id
    plain = (await engine.enqueue("parked")).instance_id
    await _fail(store, first, plain)
    holder = await engine.enqueue("parked", singleton_key="k")  # the key is free: first ended
    assert holder.created
    with pytest.raises(ConflictError, match="another unfinished instance of parked holds"):
        await engine.retry(first)
    # A bulk retry goes on past it: the others come back, it stays failed.
    result = await engine.retry_many(InstanceFilter(name="parked", statuses=(Status.FAILED,)))
    assert result.changed == 1
    assert (await engine.get(plain)).status == Status.PENDING  # type: ignore[union-attr]
    assert (await engine.get(first)).status == Status.FAILED  # type: ignore[union-attr]
    # Once the holder ended, it comes back.
    await engine.cancel(holder.instance_id)
    assert (await engine.retry(first)).status == Status.PENDING


async def test_of_failed_singletons_with_one_key_a_bulk_retry_brings_back_one(
    store: Store,
) -> None:
    engine = make_engine(store, parked)
    ids = []
    for _ in range(3):
        ids.append((await engine.enqueue("parked", singleton_key="same")).instance_id)
        await _fail(store, ids[-1])
    result = await engine.retry_many(InstanceFilter(name="parked"))
    assert result.changed == 1
    statuses = [(await engine.get(i)).status for i in ids]  # type: ignore[union-attr]
    assert sorted(statuses) == [Status.FAILED, Status.FAILED, Status.PENDING]


async def _boom(ctx: HandlerContext, params: JSONValue) -> Done:
    raise RuntimeError("boom")


failing = Workflow(
    "failing", handlers={"run": _boom}, initial="run", retry=RetryPolicy(max_attempts=1)
)
parks = _pausing("parks", None)


async def _one_rests_now_one_after_the_count(
    engine: Engine, store: Store, name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[UUID, UUID]:
    """Two instances of `name`: one run now (it rests: fails or pauses), and one that comes
    due only once the next bulk call has counted what it matched. The call's next step waits
    until that one, created before the count, has run the same way (the real runner's writes
    and events). Returns (the one run now, the one run after the count)."""
    early = (await engine.enqueue(name)).instance_id
    late = (await engine.enqueue(name, delay_ms=3_600_000)).instance_id
    assert await engine.tick() == 1
    counted = store.bulk_match

    async def count_then_run_the_late_one(*args: Any, **kwargs: Any) -> BulkMatch:
        match = await counted(*args, **kwargs)
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET run_after = now() WHERE instance_id = $1", late
            )
        assert await engine.tick() == 1
        return match

    monkeypatch.setattr(store, "bulk_match", count_then_run_the_late_one)
    return early, late


async def _status(engine: Engine, instance_id: UUID) -> Status:
    record = await engine.get(instance_id)
    assert record is not None
    return record.status


async def test_bulk_retry_leaves_an_instance_that_failed_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(store, failing)
    early, late = await _one_rests_now_one_after_the_count(engine, store, "failing", monkeypatch)
    result = await engine.retry_many(InstanceFilter(name="failing"))
    assert (result.matched, result.changed) == (1, 1)
    assert await _status(engine, early) == Status.PENDING
    assert await _status(engine, late) == Status.FAILED  # failed after the count: not this call's


async def test_bulk_resume_leaves_an_instance_that_paused_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(store, parks)
    early, late = await _one_rests_now_one_after_the_count(engine, store, "parks", monkeypatch)
    result = await engine.resume_many(InstanceFilter(name="parks"))
    assert (result.matched, result.changed) == (1, 1)
    assert await _status(engine, early) == Status.PENDING
    assert await _status(engine, late) == Status.PAUSED


async def test_bulk_cancel_takes_an_instance_that_paused_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pending when counted, paused since: still one a cancel applies to, and counted.
    engine = make_engine(store, parks)
    early, late = await _one_rests_now_one_after_the_count(engine, store, "parks", monkeypatch)
    result = await engine.cancel_many(InstanceFilter(name="parks"))
    assert (result.matched, result.changed) == (2, 2)
    assert {await _status(engine, early), await _status(engine, late)} == {Status.CANCELLED}


async def test_bulk_retry_leaves_a_failure_committed_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer that began before the count and committed after it: its updated_at (its
    # transaction's start) is older than the count's clock, yet the count did not see it.
    engine = make_engine(store, failing)
    early = (await engine.enqueue("failing")).instance_id
    late = (await engine.enqueue("failing", delay_ms=3_600_000)).instance_id
    assert await engine.tick() == 1
    counted = store.bulk_match

    async def count_while_the_late_one_fails(*args: Any, **kwargs: Any) -> BulkMatch:
        async with store.connection() as conn, conn.transaction():
            await conn.execute(
                "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
                " last_error = 'RuntimeError: boom', finished_at = now(), updated_at = now()"
                " WHERE instance_id = $1",
                late,
            )
            event = NewEvent(
                instance_id=late, name="failing", type=EventType.FAILED, status=Status.FAILED
            )
            await store._append_events(conn, [event])  # as every writer does: one transaction
            return await counted(*args, **kwargs)  # counted before that transaction commits

    monkeypatch.setattr(store, "bulk_match", count_while_the_late_one_fails)
    result = await engine.retry_many(InstanceFilter(name="failing"))
    assert (result.matched, result.changed) == (1, 1)
    assert await _status(engine, early) == Status.PENDING
    assert await _status(engine, late) == Status.FAILED


@pytest.mark.parametrize(
    "where",
    [
        InstanceFilter(name="parked"),
        InstanceFilter(queue="parked"),
        InstanceFilter(statuses=(Status.PENDING,)),
        InstanceFilter(created_before=datetime.now(UTC) + timedelta(days=1)),
    ],
    ids=["name", "queue", "status", "created-before"],
)
async def test_bulk_cancel_leaves_an_instance_whose_enqueue_committed_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch, where: InstanceFilter
) -> None:
    # A batch enqueue that began before the count and committed after it: the rows' created_at
    # (their transaction's start) is older than the count's clock, yet the count did not see
    # them, so they are not this call's to cancel, whatever the filter.
    counted_ids = await _enqueue(store, "parked", 3)
    engine = make_engine(store, parked)
    late = [new_instance(parked, EnqueueRequest(name="parked")) for _ in range(2)]
    counted = store.bulk_match

    async def count_while_an_enqueue_is_open(*args: Any, **kwargs: Any) -> BulkMatch:
        async with store.connection() as conn, conn.transaction():
            await store._enqueue_on(conn, late)  # the store's own insert: rows and events
            return await counted(*args, **kwargs)  # counted before that transaction commits

    monkeypatch.setattr(store, "bulk_match", count_while_an_enqueue_is_open)
    result = await engine.cancel_many(where)
    assert (result.matched, result.changed) == (3, 3)
    assert [await _status(engine, i) for i in counted_ids] == [Status.CANCELLED] * 3
    assert [await _status(engine, n.instance_id) for n in late] == [Status.PENDING] * 2


def _after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch, then: Callable[[], Awaitable[object]]
) -> None:
    """Make the next bulk call run `then` (real engine calls) once it has counted."""
    counted = store.bulk_match

    async def count_then(*args: Any, **kwargs: Any) -> BulkMatch:
        match = await counted(*args, **kwargs)
        await then()
        return match

    monkeypatch.setattr(store, "bulk_match", count_then)


async def test_bulk_cancel_leaves_an_instance_a_retry_brought_back_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Failed when counted, so not matched; pending again by the time the walk reaches it.
    engine = make_engine(store, failing)
    failed = (await engine.enqueue("failing")).instance_id
    assert await engine.tick() == 1
    waiting = (await engine.enqueue("failing", delay_ms=3_600_000)).instance_id
    _after_the_count(store, monkeypatch, lambda: engine.retry(failed))
    result = await engine.cancel_many(InstanceFilter(name="failing"))
    assert (result.matched, result.changed) == (1, 1)
    assert await _status(engine, waiting) == Status.CANCELLED
    assert await _status(engine, failed) == Status.PENDING


async def test_bulk_cancel_by_status_takes_what_was_in_that_status_at_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The filter's statuses select as of the count, as its other fields do: one paused then and
    # pending since was not matched; one pending then and paused since was, and is not ended.
    engine = make_engine(store, parks)
    early, late = await _one_rests_now_one_after_the_count(engine, store, "parks", monkeypatch)
    run_the_late_one = store.bulk_match  # counts, then runs the late one to its pause

    async def count_then_resume_the_early_one(*args: Any, **kwargs: Any) -> BulkMatch:
        match = await run_the_late_one(*args, **kwargs)
        await engine.resume(early)
        return match

    monkeypatch.setattr(store, "bulk_match", count_then_resume_the_early_one)
    result = await engine.cancel_many(InstanceFilter(name="parks", statuses=(Status.PENDING,)))
    assert (result.matched, result.changed, result.sample_ids) == (1, 1, [late])
    assert await _status(engine, late) == Status.CANCELLED
    assert await _status(engine, early) == Status.PENDING
