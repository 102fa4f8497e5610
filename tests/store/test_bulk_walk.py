"""The bulk walk on a real PostgreSQL: each batch reads the rows after the last one read, and
no more than a batch of them, and across many batches changes exactly what was counted."""

import json
from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

import pytest

from laneway.engine import Done, HandlerContext, Workflow
from laneway.engine.bulk_calls import CANCELLABLE
from laneway.engine.requests import EnqueueRequest
from laneway.errors import BulkStoppedError
from laneway.model import EventType, InstanceFilter, JSONValue, NewEvent, Status
from laneway.store import Store, queries
from laneway.store.bulk import BATCH_SIZE, BulkCandidate, BulkMatch, bulk_batch_args
from tests.engine.helpers import make_engine


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


parked = Workflow("parked", handlers={"run": _done}, initial="run", queue="parked")
other = Workflow("other", handlers={"run": _done}, initial="run", queue="other")


async def _enqueue_mixed(
    store: Store, rounds: int, per_round: dict[str, int]
) -> dict[str, set[UUID]]:
    """Instances of each name, enqueued together in each round, so that in (created_at,
    instance_id) order they come mixed."""
    engine = make_engine(store, parked, other)
    ids: dict[str, set[UUID]] = {name: set() for name in per_round}
    for _ in range(rounds):
        requests = [EnqueueRequest(name=n) for n, count in per_round.items() for _ in range(count)]
        for request, result in zip(requests, await engine.enqueue_many(requests), strict=True):
            ids[request.name].add(result.instance_id)
    return ids


async def _ids(store: Store, sql: str, *args: object) -> set[UUID]:
    async with store.connection() as conn:
        return {row[0] for row in await conn.fetch(sql, *args)}


def _fail_after_the_count(
    store: Store, monkeypatch: pytest.MonkeyPatch, changed_since: Iterable[UUID]
) -> None:
    """Each bulk action's count is followed at once by a `failed` event of each of
    `changed_since`: rows that changed after the count, which the walk must not take."""
    counted = store.bulk_match

    async def count_then_change(*args: Any, **kwargs: Any) -> BulkMatch:
        match = await counted(*args, **kwargs)
        events = [
            NewEvent(instance_id=i, name="parked", type=EventType.FAILED, status=Status.FAILED)
            for i in changed_since
        ]
        async with store.connection() as conn, conn.transaction():
            await store._append_events(conn, events)
        return match

    monkeypatch.setattr(store, "bulk_match", count_then_change)


async def test_a_cancel_among_many_others_changes_exactly_its_rows_over_many_batches(
    store: Store,
) -> None:
    ids = await _enqueue_mixed(store, 3, {"parked": 150, "other": 250})
    ended = set(sorted(ids["parked"])[::3])  # a third of them ended already
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'completed', finished_at = now()"
            " WHERE instance_id = ANY($1::uuid[])",
            list(ended),
        )
    result = await make_engine(store, parked, other).cancel_many(InstanceFilter(queue="parked"))
    left = ids["parked"] - ended
    assert (result.matched, result.changed) == (len(left), len(left))
    assert len(left) > 2 * BATCH_SIZE
    cancelled = "SELECT instance_id FROM laneway.instances WHERE status = 'cancelled'"
    assert await _ids(store, cancelled) == left
    pending = "SELECT instance_id FROM laneway.instances WHERE status = 'pending'"
    assert await _ids(store, pending) == ids["other"]
    completed = "SELECT instance_id FROM laneway.instances WHERE status = 'completed'"
    assert await _ids(store, completed) == ended


async def test_a_retry_walks_past_rows_it_does_not_take_and_takes_each_counted_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Half the failed instances change after the count: batches then read rows they do not
    # take, and the walk goes on from the last row read, not the last one taken.
    ids = await _enqueue_mixed(store, 2, {"parked": 200, "other": 100})
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
            " last_error = 'RuntimeError: boom', finished_at = now()"
        )
    ordered = sorted(ids["parked"])
    changed_since = set(ordered[::2])
    _fail_after_the_count(store, monkeypatch, changed_since)
    result = await make_engine(store, parked, other).retry_many(InstanceFilter(name="parked"))
    taken = ids["parked"] - changed_since
    assert (result.matched, result.changed) == (len(ids["parked"]), len(taken))
    pending = "SELECT instance_id FROM laneway.instances WHERE status = 'pending'"
    assert await _ids(store, pending) == taken
    failed = "SELECT instance_id FROM laneway.instances WHERE status = 'failed'"
    assert await _ids(store, failed) == changed_since | ids["other"]


async def test_a_walk_past_its_time_stops_only_after_a_batch_that_took_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first batch reads only rows that changed since the count: a call stopped there
    # would change nothing, and the same call again would stop there again.
    ids = await _enqueue_mixed(store, 1, {"parked": 300})
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
            " last_error = 'RuntimeError: boom', finished_at = now()"
        )
    ordered = sorted(ids["parked"])  # one transaction's: one created_at, in instance_id order
    changed_since = ordered[:150]
    _fail_after_the_count(store, monkeypatch, changed_since)
    engine = make_engine(store, parked)
    with pytest.raises(BulkStoppedError) as stopped:
        await engine.retry_many(InstanceFilter(name="parked"), stop_at=0.0)
    assert (stopped.value.matched, stopped.value.changed) == (300, 50)
    pending = "SELECT instance_id FROM laneway.instances WHERE status = 'pending'"
    assert await _ids(store, pending) == set(ordered[150:200])


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def test_a_batch_deep_in_the_walk_reads_only_its_rows(store: Store) -> None:
    # Just enqueued, not yet analyzed: the planner guesses that few rows match, and left to
    # its estimates it sorted every row after the cursor (and probed each one's events) to keep
    # a batch: a walk cost the square of its rows. The batch is a walk over the index from the
    # cursor that stops at the batch's last row.
    ids = await _enqueue_mixed(store, 1, {"parked": 1000})
    match = await store.bulk_match(InstanceFilter(queue="parked"), CANCELLABLE)
    async with store.connection() as conn:
        row = await conn.fetchrow(
            "SELECT instance_id, created_at FROM laneway.instances"
            " ORDER BY created_at, instance_id OFFSET 600 LIMIT 1"
        )
        assert row is not None
        after = BulkCandidate(
            instance_id=row["instance_id"],
            created_at=row["created_at"],
            checkpoint=None,
            input_schema=None,
        )
        args = bulk_batch_args(
            InstanceFilter(queue="parked"), CANCELLABLE, match, after, BATCH_SIZE, unchanged=False
        )
        async with conn.transaction(readonly=True):
            await conn.execute(queries.BULK_WALK_PLANS)
            explained = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + queries.BULK_BATCH, *args
            )
    if isinstance(explained, str):  # without the store's json codec
        explained = json.loads(explained)
    plan = explained[0]["Plan"]
    nodes = list(_nodes(plan))
    assert plan["Actual Rows"] == BATCH_SIZE
    assert "Sort" not in [n["Node Type"] for n in nodes]
    scans = [n for n in nodes if n.get("Relation Name") == "instances"]
    assert [n["Node Type"] for n in scans] == ["Index Scan"]
    assert scans[0]["Actual Rows"] + scans[0].get("Rows Removed by Filter", 0) <= BATCH_SIZE
    assert len(ids["parked"]) == 1000
