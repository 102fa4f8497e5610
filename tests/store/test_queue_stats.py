"""queries.QUEUE_STATS (Store.queues, and the metrics' cluster-wide snapshot): every queue's
instances counted per status, right, in at most one pass over laneway.instances however many
queues there are. The plan is read with EXPLAIN ANALYZE, nothing is timed: how often each scan of
the table ran, and through which index."""

import json
from collections.abc import Iterator

import asyncpg
import pytest

from laneway.model import JSONValue, Status
from laneway.store import Store, queries

# The partial indexes that hold live rows only: pending (claims) and running (caps).
LIVE_INDEXES = {
    "instances_claimable",
    "instances_claimable_keyed",
    "instances_claimable_keyed_order",
    "instances_running",
}

# Mostly finished rows, as retention keeps them, and a few of every status, with and without
# a concurrency key, spread over the queues q00..q11; q_empty has none.
FILL = """
INSERT INTO laneway.queues (name) SELECT 'q' || lpad(g::text, 2, '0') FROM generate_series(0, 11) g;
INSERT INTO laneway.queues (name) VALUES ('q_empty');
INSERT INTO laneway.instances (instance_id, name, queue, status, concurrency_key, owner_id)
SELECT gen_random_uuid(), 'w', 'q' || lpad((g % 12)::text, 2, '0'), s,
       CASE WHEN g % 2 = 0 THEN 'k' END, CASE WHEN s = 'running' THEN 'owner' END
  FROM (SELECT g, CASE WHEN g % 50 = 1 THEN 'pending' WHEN g % 50 = 2 THEN 'running'
                       WHEN g % 50 = 3 THEN 'paused' WHEN g % 50 = 4 THEN 'waiting'
                       WHEN g % 50 = 5 THEN 'failed' WHEN g % 50 = 6 THEN 'cancelled'
                       ELSE 'completed' END AS s
          FROM generate_series(1, 20000) g) AS rows;
"""

TRUTH = "SELECT queue, status, count(*) AS n FROM laneway.instances GROUP BY queue, status"


def _nodes(node: dict[str, JSONValue]) -> Iterator[dict[str, JSONValue]]:
    yield node
    children = node.get("Plans", [])
    assert isinstance(children, list)
    for child in children:
        assert isinstance(child, dict)
        yield from _nodes(child)


def _index_of(scan: dict[str, JSONValue]) -> JSONValue:
    """The index a scan of the table reads: its own (an index scan), or its Bitmap Index Scan's
    (a bitmap heap scan, which PostgreSQL 16 prefers here where 15 scans the index)."""
    return next((node["Index Name"] for node in _nodes(scan) if "Index Name" in node), None)


async def _filled(admin: asyncpg.Connection) -> None:
    await admin.execute(FILL)
    await admin.execute("VACUUM ANALYZE laneway.instances")


async def test_queue_stats_count_every_status_of_every_queue(
    store: Store, admin: asyncpg.Connection
) -> None:
    await _filled(admin)
    truth = {(row["queue"], Status(row["status"])): row["n"] for row in await admin.fetch(TRUTH)}
    queues = await store.queues()
    assert [queue.name for queue in queues] == [f"q{n:02}" for n in range(12)] + ["q_empty"]
    counted = {(q.name, status): n for q in queues for status, n in q.counts.items()}
    assert counted == truth
    assert {status for _, status in truth} == set(Status)  # every status was there to count
    (one,) = await store.queues("q03")
    assert one.counts == {status: n for (queue, status), n in truth.items() if queue == "q03"}
    (empty,) = await store.queues("q_empty")
    assert empty.counts == {}


# asyncpg keeps the statement prepared, so after a few calls PostgreSQL may plan it once for any
# $1 (generic): both plans must keep to one pass.
@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_queue_stats_read_the_instances_once_whatever_the_number_of_queues(
    admin: asyncpg.Connection, plan_cache_mode: str
) -> None:
    await _filled(admin)
    # Without parallel workers a node's loops are how often it ran, not how many processes ran it.
    await admin.execute("SET max_parallel_workers_per_gather = 0")
    await admin.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    explained = await admin.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.QUEUE_STATS}", None)
    plan = (explained if isinstance(explained, list) else json.loads(explained))[0]["Plan"]
    nodes = list(_nodes(plan))
    scans = [node for node in nodes if node.get("Relation Name") == "instances"]
    # No scan runs once per queue (a correlated subquery per queue would show as a SubPlan
    # whose scan ran 13 times).
    assert not [node for node in nodes if node.get("Parent Relationship") == "SubPlan"]
    assert [node["Actual Loops"] for node in scans] == [1] * len(scans)
    # Pending and running rows through their partial indexes; all the other statuses in one
    # pass.
    through_live = {_index_of(node) for node in scans} & LIVE_INDEXES
    assert "instances_claimable" in through_live
    assert "instances_running" in through_live
    assert through_live & {"instances_claimable_keyed", "instances_claimable_keyed_order"}
    passes = [node for node in scans if _index_of(node) not in LIVE_INDEXES]
    assert len(passes) == 1, [node["Node Type"] for node in passes]
