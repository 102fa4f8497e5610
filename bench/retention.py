"""Retention of a large event log: finished instances older than the limit, and their events.

bench/compare.py runs this after the contestants (`make bench`; --retention-events 0 skips
it), on the same PostgreSQL; by hand: `.venv/bin/python bench/retention.py [--events N]
[--database-url URL]`. It writes bench/results/retention.json, which the targets table reads.

In a fresh database with Laneway's schema: --events events (10,000,000 by default) of
finished instances, 100 events each, spread over ten past days that lie beyond the
retention limit (seven days), so ten daily partitions of them; plus 1,000 instances that
finished today, with 100 events each, which retention keeps. Then what the engine's upkeep
does, timed: prune_finished (the instances' rows, in batches of 5,000) until none is left,
then retire_event_partitions (detach and drop each past partition whose instances are all
gone). Meanwhile a writer appends one event every 2 ms through the store's own append
(an enqueue's statement), and its slowest append says how long anything waited on
retention's locks.

The target is met when every old event is gone with its partition (no event row deleted),
the kept instances keep all their events, the retire step costs about the same per
partition (not per row: its slowest partition within twice its median), no append waited
over 100 ms, and the event log has no dead rows afterwards (nothing for vacuum).
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for `laneway`

from laneway.model import NewInstance
from laneway.store import Store, open_store
from laneway.store.databases import create_database, drop_database, throwaway_server

RESULT = Path(__file__).resolve().parent / "results" / "retention.json"
DEFAULT_EVENTS = 10_000_000
EVENTS_PER_INSTANCE = 100
PAST_DAYS = 10  # days of old events, each its own partition
RETENTION_DAYS = 7
KEPT_INSTANCES = 1_000
APPEND_EVERY_SECONDS = 0.002
MAX_APPEND_MS = 100.0

# $1 instances, $2 the first day back, $3 days: finished instances spread evenly over the days
# (each finished `days back` ago, at a random time of that day), 100 events each in its day.
SEED_INSTANCES = """
INSERT INTO laneway.instances (instance_id, name, queue, status, attempts, created_at,
                               updated_at, finished_at)
SELECT gen_random_uuid(), 'old', 'old', 'completed', 1, ended, ended, ended
  FROM (SELECT date_trunc('day', now()) - (($2 + n % $3) || ' days')::interval
               + random() * interval '23 hours' AS ended
          FROM generate_series(0, $1 - 1) AS n) AS t
"""
SEED_EVENTS = """
INSERT INTO laneway.events (instance_id, name, type, status, at, attempt)
SELECT i.instance_id, i.name, 'checkpoint', 'running', i.finished_at - k * interval '1 ms', 1
  FROM laneway.instances AS i
 CROSS JOIN generate_series(1, $2) AS k
 WHERE i.name = $1
"""
KEPT = """
INSERT INTO laneway.instances (instance_id, name, queue, status, attempts, finished_at)
SELECT gen_random_uuid(), 'kept', 'kept', 'completed', 1, now()
  FROM generate_series(1, $1)
"""
COUNT_EVENTS = "SELECT count(*) FROM laneway.events WHERE name = $1"
DEAD_ROWS = """
SELECT COALESCE(sum(n_dead_tup), 0)::bigint
  FROM pg_stat_user_tables
 WHERE schemaname = 'laneway' AND relname LIKE 'events%'
"""


def log(message: str) -> None:
    print(f"[retention] {message}", file=sys.stderr, flush=True)


async def _add_past_partitions(conn: asyncpg.Connection, days: int, first_back: int) -> None:
    for back in range(first_back + days - 1, first_back - 1, -1):
        await conn.execute(
            "SELECT laneway.add_event_partition("
            " date_trunc('day', now()) - $1 * interval '1 day',"
            " date_trunc('day', now()) - ($1 - 1) * interval '1 day')",
            back,
        )


async def _seed(url: str, events: int) -> int:
    """The old and the kept instances and their events; returns how many old instances."""
    instances = max(events // EVENTS_PER_INSTANCE, PAST_DAYS)
    conn = await asyncpg.connect(url, command_timeout=None)  # seeding takes minutes
    try:
        await _add_past_partitions(conn, PAST_DAYS, RETENTION_DAYS + 1)
        await conn.execute(SEED_INSTANCES, instances, RETENTION_DAYS + 1, PAST_DAYS)
        await conn.execute(SEED_EVENTS, "old", EVENTS_PER_INSTANCE)
        await conn.execute(KEPT, KEPT_INSTANCES)
        await conn.execute(SEED_EVENTS, "kept", EVENTS_PER_INSTANCE)
        await conn.execute("VACUUM (ANALYZE) laneway.events")
        await conn.execute("VACUUM (ANALYZE) laneway.instances")
    finally:
        await conn.close()
    return instances


async def _writer(url: str, stop: asyncio.Event, waits: list[float], warmed: asyncio.Event) -> None:
    """Append one event at a time (an enqueue), every APPEND_EVERY_SECONDS, timing each;
    `warmed` is set after the first ten."""
    async with open_store(url, pool_size=1) as store:
        while not stop.is_set():
            started = time.perf_counter()
            await store.enqueue(
                NewInstance(
                    instance_id=uuid.uuid4(),
                    name="w",
                    queue="w",
                    priority=0,
                    max_attempts=1,
                    delay_ms=0.0,
                    params_json="null",
                    first_action="run",
                )
            )
            waits.append((time.perf_counter() - started) * 1000)
            if len(waits) == 10:
                warmed.set()
            await asyncio.sleep(APPEND_EVERY_SECONDS)


async def measure(server_url: str, events: int) -> dict[str, object]:
    name = f"retention_{uuid.uuid4().hex[:8]}"
    url = await create_database(server_url, name, migrate=True)
    try:
        started = time.monotonic()
        instances = await _seed(url, events)
        seeded_s = time.monotonic() - started
        log(f"seeded {instances * EVENTS_PER_INSTANCE:,} old events in {seeded_s:.0f} s")
        waits: list[float] = []
        stop = asyncio.Event()
        async with open_store(url, pool_size=2) as store:
            old_before = await _count(store, "old")
            partitions_before = len(await store.event_partitions())
            warmed = asyncio.Event()
            writer = asyncio.create_task(_writer(url, stop, waits, warmed))
            async with asyncio.timeout(30):  # the writer's first appends, before retention
                await warmed.wait()
            started = time.perf_counter()
            pruned = 0
            while batch := await store.prune_finished(RETENTION_DAYS * 86_400.0):
                pruned += batch
            prune_s = time.perf_counter() - started
            retire_times: list[float] = []
            retired: list[str] = []
            started = time.perf_counter()
            for partition in await store.event_partitions():
                one = time.perf_counter()
                # One at a time, for the per-partition cost: the upkeep's call does them all.
                gone = await _retire_one(store, partition.name)
                if gone:
                    retired.append(partition.name)
                    retire_times.append(time.perf_counter() - one)
            retire_s = time.perf_counter() - started
            stop.set()
            await writer
            old_after = await _count(store, "old")
            kept_after = await _count(store, "kept")
            async with store.connection() as conn:
                await conn.execute("SELECT pg_stat_force_next_flush()")
                dead = await conn.fetchval(DEAD_ROWS)
    finally:
        await drop_database(server_url, name)
    slowest_append = max(waits) if waits else float("inf")
    per_partition = statistics.median(retire_times) if retire_times else float("inf")
    even = bool(retire_times) and max(retire_times) <= 2 * per_partition + 0.05
    met = (
        old_after == 0
        and len(retired) == PAST_DAYS
        and kept_after == KEPT_INSTANCES * EVENTS_PER_INSTANCE
        and slowest_append <= MAX_APPEND_MS
        and dead == 0
        and even
    )
    measured = (
        f"{old_before:,} events: {pruned:,} instances pruned in {prune_s:.1f} s, "
        f"{len(retired)} of {partitions_before} partitions dropped in {retire_s:.1f} s "
        f"({per_partition * 1000:.0f} ms each), {old_after:,} old events left, "
        f"{dead:,} dead event rows, slowest append meanwhile {slowest_append:.0f} ms"
    )
    return {
        "measured": measured,
        "met": met,
        "events": old_before,
        "instances_pruned": pruned,
        "prune_seconds": round(prune_s, 3),
        "partitions_dropped": len(retired),
        "retire_seconds": round(retire_s, 3),
        "retire_seconds_each": [round(t, 3) for t in retire_times],
        "old_events_left": old_after,
        "kept_events": kept_after,
        "dead_event_rows": dead,
        "slowest_append_ms": round(slowest_append, 1),
        "appends": len(waits),
        "seed_seconds": round(seeded_s, 1),
    }


async def _retire_one(store: Store, name: str) -> bool:
    async with store.connection() as conn:
        return bool(await conn.fetchval("SELECT laneway.retire_event_partition($1)", name))


async def _count(store: Store, name: str) -> int:
    async with store.connection() as conn:
        await conn.execute("SET statement_timeout = 0")
        return int(await conn.fetchval(COUNT_EVENTS, name))


def run(server_url: str, events: int, result: Path = RESULT) -> dict[str, object]:
    """Measure and write `result`; returns what was written."""
    outcome = asyncio.run(measure(server_url, events))
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(outcome, indent=2) + "\n")
    log(str(outcome["measured"]))
    return outcome


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    parser.add_argument("--database-url", help="default: DATABASE_URL, else embedded")
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    given = args.database_url or os.environ.get("DATABASE_URL")
    with throwaway_server(given, tune=False) as url:
        outcome = run(url, args.events, args.result)
    return 0 if outcome["met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
