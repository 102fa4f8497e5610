"""Runner writes fenced by owner and lease epoch: the table rule they rely on, and their plan."""

import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import EnqueueRequest
from laneway.store import Store
from laneway.store.store import EVENTS_LOCK_KEY
from tests.engine.helpers import make_engine
from tests.workflows import noop

BATCH = 100  # as many instances as a worker runs at once by default


async def _claimed(store: Store, count: int, *, backlog: int = 0) -> list[tuple[UUID, int]]:
    """Claim `count` new instances, with `backlog` more left pending and as many running for
    another owner when the statistics are taken: they say that an owner has about no rows."""
    engine = make_engine(store, noop)
    await store.configure_queue("noop", 10 * count, None)
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(2 * count + backlog)])
    await store.claim("another-owner", ["noop@1"], count, 60.0)
    async with store.connection() as conn:
        await conn.execute("ANALYZE laneway.instances")
    claimed = await store.claim("fence-test", ["noop@1"], count, 60.0)
    assert len(claimed) == count
    return [(record.instance_id, record.lease_epoch) for record in claimed]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def test_only_a_running_instance_has_an_owner(store: Store) -> None:
    [(running, _)] = await _claimed(store, 1)
    pending = (await make_engine(store, noop).enqueue("noop")).instance_id
    update = "UPDATE laneway.instances SET {} WHERE instance_id = $1"
    async with store.connection() as conn:
        for statement, instance_id in (
            (update.format("owner_id = 'someone'"), pending),
            (update.format("status = 'completed'"), running),
            (update.format("owner_id = NULL"), running),
        ):
            with pytest.raises(asyncpg.CheckViolationError, match="instances_owner_while_running"):
                await conn.execute(statement, instance_id)


@pytest.mark.parametrize("backlog", [0, 5000])
async def test_the_group_commit_plan_reads_its_batch_once(store: Store, backlog: int) -> None:
    # The statement inside laneway.write_runner_batch, planned as the function plans it (a
    # generic plan: no array sizes, no owner). A plan that trusted the owner's one-row estimate
    # read the whole batch again for each of its rows: quadratic in the batch (migrations/0010).
    claimed = await _claimed(store, BATCH, backlog=backlog)
    async with store.connection() as conn:
        function = await conn.fetchrow(
            "SELECT p.prosrc, (SELECT string_agg(format_type(t, NULL), ', ' ORDER BY n)"
            "                    FROM unnest(p.proargtypes) WITH ORDINALITY AS a (t, n))"
            "  FROM pg_proc AS p WHERE p.oid = 'laneway.write_runner_batch'::regproc"
        )
        assert function is not None
        source, types = function
        statement = re.search(r"RETURN QUERY(.*);\s*END;", source, re.DOTALL)
        assert statement is not None
        transaction = conn.transaction()
        await transaction.start()
        prepared = False
        try:  # rolled back: the instances stay as they were
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE fenced ({types}) AS {statement.group(1)}")
            prepared = True
            ids = ",".join(f"'{instance_id}'" for instance_id, _ in claimed)
            epochs = ",".join(str(epoch) for _, epoch in claimed)
            plan = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE fenced ('fence-test', 60, "
                f"{EVENTS_LOCK_KEY}, "
                "'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
                f"ARRAY[{ids}]::uuid[], array_fill('null'::text, ARRAY[{BATCH}]), "
                f"array_fill('{{}}'::text, ARRAY[{BATCH}]), ARRAY[{epochs}]::bigint[], "
                "'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
                # the completions' stages and messages, no operation rows (nor their fix
                # cycles), no span contexts, no failures' reports, no running stages' reports
                + ", ".join(["'{}'"] * 25)
                + ")"
            )
            completed = await conn.fetchval(
                "SELECT count(*) FROM laneway.instances WHERE status = 'completed'"
            )
        finally:
            await transaction.rollback()
            if prepared:  # a prepared statement outlives the transaction
                await conn.execute("DEALLOCATE fenced")
    assert completed == BATCH  # the plan below did complete the whole batch
    [explained] = plan  # the store's connections decode json
    # Rows produced by each unnest of the batch's arrays, over all its scans: the batch once.
    read = [
        node["Actual Rows"] * node["Actual Loops"]
        for node in _nodes(explained["Plan"])
        if node["Node Type"] == "Function Scan"
    ]
    # checkpoints, failures, operation rows and running stages' reports (none), completions
    assert sorted(read) == [0, 0, 0, 0, BATCH]
