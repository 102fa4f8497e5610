"""The instance listings read an index newest first, with or without a workflow filter."""

import asyncpg

from app.store.queries import LIST_INSTANCES

ROWS = 20_000


def index_scans(plan: object) -> list[tuple[str, str]]:
    """(scan direction, index name) of every index scan in an EXPLAIN (FORMAT JSON) plan."""
    found: list[tuple[str, str]] = []
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.append((plan.get("Scan Direction", plan["Node Type"]), plan["Index Name"]))
        for value in plan.values():
            found += index_scans(value)
    elif isinstance(plan, list):
        for item in plan:
            found += index_scans(item)
    return found


async def test_listings_scan_the_ascending_indexes_backwards(admin: asyncpg.Connection) -> None:
    # Five common workflows and one rare one, created over time; most finished.
    await admin.execute("INSERT INTO laneway.queues (name) VALUES ('default')")
    await admin.execute(
        """
        INSERT INTO laneway.instances (instance_id, name, queue, status, created_at)
        SELECT gen_random_uuid(), CASE WHEN i % 1000 = 0 THEN 'rare' ELSE 'w' || i % 5 END,
               'default', CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'completed' END,
               now() - ($1 - i) * interval '1 second'
          FROM generate_series(1, $1) AS i
        """,
        ROWS,
    )
    await admin.execute("ANALYZE laneway.instances")

    async def plan(name: str | None) -> list[tuple[str, str]]:
        explained = await admin.fetchval(
            f"EXPLAIN (FORMAT JSON) {LIST_INSTANCES}", name, None, None, None, 50, 0
        )
        return index_scans(explained)  # json, decoded by the connection

    assert await plan(None) == [("Backward", "instances_created")]
    # A rare workflow's few rows: found through its own index (a bitmap scan and a sort, or a
    # backward scan, as the planner likes), not by walking everyone's newest rows.
    assert [index for _, index in await plan("rare")] == ["instances_name_created"]
    newest = await admin.fetch(LIST_INSTANCES, "rare", None, None, None, 3, 0)
    assert [row["created_at"] for row in newest] == sorted(
        (row["created_at"] for row in newest), reverse=True
    )
