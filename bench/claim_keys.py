"""Claim benchmark: what one `store.claim` costs with a backlog spread over concurrency keys.

Run with `make bench-claim-keys` (or `.venv/bin/python bench/claim_keys.py [--markdown]`). It
uses DATABASE_URL when set, else a throwaway embedded PostgreSQL with its default (durable)
settings, and a fresh database per case. Not part of `make test`.

Every case holds a backlog of `--rows` (100,000) pending instances of one workflow in one
queue whose concurrency (1,000,000) never binds:

- no keys: the unkeyed lane alone (the claim's branch without keys);
- keys: the same backlog over `--keys` (1,000) concurrency keys, `--rows / --keys` each;
- keys, keyConcurrency 2: the same with the queue's per-key cap set; nothing runs, so the cap
  is read by every claim but never binds;
- keys, keyConcurrency 2, half full: the same, with 2 instances running (held by another
  owner, never finished) on every other key, so half the keys are at their cap and every
  claim has to pass over them.

The backlog is seeded with INSERT ... SELECT generate_series (the keys' queue_keys rows made
first with laneway.hold_key, as an enqueue makes them), then VACUUM ANALYZE, as autovacuum
would after a load. Per case, claims of limit 1, 10 and 50 (the most the engine's loop takes
at its default concurrency of 100) alternate, so drift on the machine hits all three alike;
`--warmup` of each first, then `--claims` timed. Timed: the `store.claim` call from the bench
process (one round trip, the rows decoded). Not timed: after each claim the claimed instances
are marked completed and as many new pending instances of the same keys are inserted, so the
backlog stays at `--rows` and nothing the bench claimed stays running.

After each case's claims, five claims per limit under EXPLAIN ANALYZE (rolled back) give the
server's own execution time (their median), without the round trip and the decoding.
`--rounds` (3) repeats every case on a fresh database, the cases in turn; the table pools
every round's samples (median, p95) and shows the spread of the rounds' medians.

Every claim must return exactly `limit` instances; with keys, from `limit` distinct keys (the
turns across lanes); with half the keys full, none of a full key. A claim that does not is
an error, not a figure.
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg
from tables import print_rows

from laneway.model import InstanceRecord
from laneway.store import Store, open_store, queries
from laneway.store.base import EVENTS_LOCK_KEY
from laneway.store.databases import create_database, drop_database, throwaway_server

WORKFLOW = "bench_claim"
QUEUE = "bench_claim"
QUEUE_CONCURRENCY = 1_000_000  # never binds: the figure is the claim, not a cap
LEASE_SECONDS = 300.0
LIMITS = (1, 10, 50)
HOLDER = "claim-bench-holder"  # owns the running rows of the full keys; never finishes them

# $1 rows, $2 keys (0: no key). Row g has key g mod $2, so the keys interleave in claim order
# as they would when many tenants enqueue at once.
SEED = """
WITH held AS (
    SELECT count(laneway.hold_key($3, 'tenant-' || lpad(k::text, 5, '0'))) AS n
      FROM generate_series(0, $2::integer - 1) AS k
)
INSERT INTO laneway.instances (instance_id, name, queue, status, max_attempts, run_after,
    params, next_action, concurrency_key)
SELECT gen_random_uuid(), $4, $3, 'pending', 1, now() - interval '1 minute',
       jsonb_build_object('i', g), 'one',
       CASE WHEN $2::integer > 0 THEN 'tenant-' || lpad((g % $2::integer)::text, 5, '0') END
  FROM generate_series(0, $1::integer - 1) AS g
 WHERE (SELECT held.n FROM held) >= 0
"""

# $1 keys, $2 running per full key: every other key (the even ones) gets $2 running rows.
SEED_FULL_KEYS = """
INSERT INTO laneway.instances (instance_id, name, queue, status, attempts, max_attempts,
    run_after, params, next_action, concurrency_key, owner_id, lease_epoch, claimed_at,
    lease_renewed_at, lease_expires_at)
SELECT gen_random_uuid(), $4, $3, 'running', 1, 1, now() - interval '1 minute',
       '{}'::jsonb, 'one', 'tenant-' || lpad(k::text, 5, '0'), $5, 1, now(), now(),
       now() + interval '1 day'
  FROM generate_series(0, $1::integer - 1, 2) AS k, generate_series(1, $2::integer) AS n
"""

# $1 the claimed ids: completed, and as many new pending rows of the same keys made (their
# queue_keys rows held first, as an enqueue holds them), so the backlog stays as seeded.
COMPLETE_AND_REPLENISH = """
WITH done AS (
    UPDATE laneway.instances
       SET status = 'completed', owner_id = NULL, lease_expires_at = NULL, progress = 1,
           updated_at = now(), finished_at = now()
     WHERE instance_id = ANY($1::uuid[])
    RETURNING name, queue, concurrency_key
),
held AS (
    SELECT count(laneway.hold_key(k.queue, k.concurrency_key)) AS n
      FROM (SELECT DISTINCT done.queue, done.concurrency_key
              FROM done
             WHERE done.concurrency_key IS NOT NULL
             ORDER BY done.queue, done.concurrency_key) AS k
)
INSERT INTO laneway.instances (instance_id, name, queue, status, max_attempts, run_after,
    params, next_action, concurrency_key)
SELECT gen_random_uuid(), done.name, done.queue, 'pending', 1, now() - interval '1 minute',
       '{}'::jsonb, 'one', done.concurrency_key
  FROM done
 WHERE (SELECT held.n FROM held) >= 0
"""


@dataclass(frozen=True)
class Case:
    """One database's backlog and queue settings."""

    label: str
    keys: int  # 0: no concurrency keys
    key_concurrency: int | None = None
    full_keys: bool = False  # every other key holds key_concurrency running rows


def cases(keys: int) -> list[Case]:
    return [
        Case("no keys", 0),
        Case(f"{keys:,} keys", keys),
        Case(f"{keys:,} keys, keyConcurrency 2", keys, key_concurrency=2),
        Case(
            f"{keys:,} keys, keyConcurrency 2, half full", keys, key_concurrency=2, full_keys=True
        ),
    ]


@asynccontextmanager
async def fresh_store(server_url: str) -> AsyncIterator[Store]:
    name = f"bench_claim_{uuid.uuid4().hex[:10]}"
    url = await create_database(server_url, name)
    try:
        async with open_store(url, pool_size=2) as store:
            yield store
    finally:
        await drop_database(server_url, name)


async def seed(store: Store, case: Case, rows: int) -> float:
    """The backlog of `case`, vacuumed and analyzed; returns the seconds the load took."""
    await store.configure_queue(QUEUE, QUEUE_CONCURRENCY, None, case.key_concurrency, None)
    started = time.perf_counter()
    async with store.connection() as conn:
        async with conn.transaction():
            await conn.execute(SEED, rows, case.keys, QUEUE, WORKFLOW)
            if case.full_keys:
                assert case.key_concurrency is not None
                await conn.execute(
                    SEED_FULL_KEYS, case.keys, case.key_concurrency, QUEUE, WORKFLOW, HOLDER
                )
        took = time.perf_counter() - started
        for table in ("instances", "queues", "queue_keys"):
            await conn.execute(f"VACUUM (ANALYZE) laneway.{table}")
        pending = await conn.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE status = 'pending'"
        )
    if pending != rows:
        raise RuntimeError(f"seeded {pending} pending instances, not {rows}")
    return took


def full_key(key: str | None) -> bool:
    """An even key: one SEED_FULL_KEYS filled."""
    return key is not None and int(key.removeprefix("tenant-")) % 2 == 0


def check(case: Case, limit: int, claimed: Sequence[InstanceRecord]) -> None:
    if len(claimed) != limit:
        raise RuntimeError(f"{case.label}: a claim of {limit} took {len(claimed)}")
    if case.keys == 0:
        return
    keys = [c.concurrency_key for c in claimed]
    if None in keys or len(set(keys)) != limit:
        raise RuntimeError(f"{case.label}: a claim of {limit} took keys {sorted(map(str, keys))}")
    if case.full_keys and any(full_key(k) for k in keys):
        raise RuntimeError(f"{case.label}: a claim took a key at its cap: {keys}")


async def measure(store: Store, case: Case, claims: int, warmup: int) -> dict[int, list[float]]:
    """Milliseconds per claim, by limit, the limits taking turns."""
    owner = f"claim-bench-{os.getpid()}"
    samples: dict[int, list[float]] = {limit: [] for limit in LIMITS}
    for i in range(warmup + claims):
        for limit in LIMITS:
            started = time.perf_counter()
            claimed = await store.claim(owner, [f"{WORKFLOW}@1"], limit, LEASE_SECONDS)
            elapsed = time.perf_counter() - started
            check(case, limit, claimed)
            async with store.connection() as conn:
                await conn.execute(COMPLETE_AND_REPLENISH, [c.instance_id for c in claimed])
            if i >= warmup:
                samples[limit].append(elapsed * 1000.0)
    return samples


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def server_ms(store: Store, limit: int, times: int = 5) -> float:
    """Median execution time of a claim in the server (EXPLAIN ANALYZE, rolled back)."""
    took = []
    async with store.connection() as conn:
        for _ in range(times):
            transaction = conn.transaction()
            await transaction.start()
            try:
                plan = await conn.fetchval(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.CLAIM}",
                    "claim-bench-explain",
                    [WORKFLOW],
                    limit,
                    LEASE_SECONDS,
                    EVENTS_LOCK_KEY,
                )
            finally:
                await transaction.rollback()
            plan = json.loads(plan) if isinstance(plan, str) else plan
            took.append(float(plan[0]["Execution Time"]))
    return statistics.median(took)


@dataclass
class Figures:
    """One case and limit over every round."""

    samples: list[float] = field(default_factory=list)
    round_medians: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)


def print_table(figures: dict[tuple[str, int], Figures], markdown: bool) -> None:
    header = (
        "backlog",
        "limit",
        "median ms",
        "p95 ms",
        "round medians ms",
        "server ms",
        "ms per instance",
    )
    lines = []
    for (label, limit), f in figures.items():
        median = statistics.median(f.samples)
        lines.append(
            (
                label,
                str(limit),
                f"{median:.2f}",
                f"{percentile(f.samples, 0.95):.2f}",
                f"{min(f.round_medians):.2f}–{max(f.round_medians):.2f}",
                f"{statistics.median(f.server):.2f}",
                f"{median / limit:.3f}",
            )
        )
    print_rows(header, lines, markdown)


async def main(args: argparse.Namespace) -> int:
    given = args.database_url or os.environ.get("DATABASE_URL")
    # Durable settings as a server has them: honest figures, not a tuned throwaway.
    with throwaway_server(given, tune=False) as url:
        admin = await asyncpg.connect(url)
        version = await admin.fetchval("SHOW server_version")
        fsync = await admin.fetchval("SHOW fsync")
        await admin.close()
        print(
            f"PostgreSQL {version}, fsync={fsync}; {args.rows:,} pending instances,"
            f" {args.keys:,} keys, {args.claims} timed claims per limit ({args.warmup} warm-up),"
            f" {args.rounds} rounds",
            file=sys.stderr,
        )
        figures: dict[tuple[str, int], Figures] = {}
        for round_number in range(1, args.rounds + 1):
            for case in cases(args.keys):
                async with fresh_store(url) as store:
                    took = await seed(store, case, args.rows)
                    started = time.perf_counter()
                    samples = await measure(store, case, args.claims, args.warmup)
                    elapsed = time.perf_counter() - started
                    for limit, values in samples.items():
                        f = figures.setdefault((case.label, limit), Figures())
                        f.samples.extend(values)
                        f.round_medians.append(statistics.median(values))
                        f.server.append(await server_ms(store, limit))
                print(
                    f"  round {round_number} {case.label}: seeded in {took:.1f} s,"
                    f" claims took {elapsed:.1f} s; median ms "
                    + ", ".join(
                        f"limit {limit} {statistics.median(v):.2f}" for limit, v in samples.items()
                    ),
                    file=sys.stderr,
                )
    print_table(figures, args.markdown)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000, help="pending instances")
    parser.add_argument("--keys", type=int, default=1_000, help="concurrency keys (even)")
    parser.add_argument("--claims", type=int, default=200, help="timed claims per limit")
    parser.add_argument("--warmup", type=int, default=20, help="untimed claims per limit first")
    parser.add_argument("--rounds", type=int, default=3, help="fresh databases per case")
    parser.add_argument("--database-url")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    if args.keys < 2 * max(LIMITS) or args.keys % 2:
        parser.error(f"--keys must be even and at least {2 * max(LIMITS)}")
    if args.rows < args.keys:
        parser.error("--rows must be at least --keys")
    return args


if __name__ == "__main__":
    import uvloop  # what `laneway worker` and `laneway serve` run on

    sys.exit(uvloop.run(main(parse(sys.argv[1:]))))
