"""Engine benchmark: enqueue rate, processing rate, idle enqueue→start latency, commits.

Run with `make bench` (or `.venv/bin/python bench/engine_bench.py [--rounds 3] [--count 10000]`).
It uses DATABASE_URL when set, else a throwaway embedded PostgreSQL with its default
(durable) settings. Each scenario gets a fresh database; rounds are interleaved and the
table shows medians with min–max. Not part of `make test`.
"""

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg

from laneway.config import Settings
from laneway.engine import Done, EnqueueRequest, HandlerContext, Next, Workflow
from laneway.model import Status
from laneway.services import Services, open_services
from laneway.store.databases import create_database, drop_database, throwaway_server


async def _finish(ctx: HandlerContext, params: object) -> Done:
    return Done()


async def _step_one(ctx: HandlerContext, params: object) -> Next:
    return Next("two")


async def _step_two(ctx: HandlerContext, params: object) -> Next:
    return Next("three")


one_step = Workflow("bench_one", handlers={"one": _finish}, initial="one")
three_steps = Workflow(
    "bench_three",
    handlers={"one": _step_one, "two": _step_two, "three": _finish},
    initial="one",
)
WORKFLOWS = (one_step, three_steps)


@asynccontextmanager
async def fresh_services(server_url: str, concurrency: int) -> AsyncIterator[Services]:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    url = await create_database(server_url, name)
    try:
        settings = Settings(
            database_url=url,
            worker_concurrency=concurrency,
            poll_interval_seconds=1.0,
            pool_size=10,
        )
        async with open_services(settings, workflows=WORKFLOWS) as services:
            yield services
    finally:
        await drop_database(server_url, name)


async def commits(services: Services) -> int:
    async with services.store.connection() as conn:
        value = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    return int(value)


async def enqueue_one_by_one(services: Services, count: int) -> dict[str, float]:
    started = time.perf_counter()
    for i in range(count):
        await services.engine.enqueue("bench_one", {"i": i})
    elapsed = time.perf_counter() - started
    return {"enqueue one by one /s": count / elapsed}


async def enqueue_batched(services: Services, count: int) -> dict[str, float]:
    started = time.perf_counter()
    for offset in range(0, count, 1000):
        batch = [
            EnqueueRequest(name="bench_one", params={"i": i})
            for i in range(offset, min(offset + 1000, count))
        ]
        await services.engine.enqueue_many(batch)
    elapsed = time.perf_counter() - started
    return {"enqueue batched /s": count / elapsed}


def process(workflow: str) -> Callable[[Services, int], Awaitable[dict[str, float]]]:
    async def scenario(services: Services, count: int) -> dict[str, float]:
        engine = services.engine
        for offset in range(0, count, 1000):
            await engine.enqueue_many(
                [EnqueueRequest(name=workflow) for _ in range(min(1000, count - offset))]
            )
        before = await commits(services)
        async with engine.running():
            async with asyncio.timeout(600):
                while True:
                    queues = await services.store.queues(workflow)
                    if queues and queues[0].counts.get(Status.COMPLETED, 0) == count:
                        break
                    await asyncio.sleep(0.05)
        after = await commits(services)
        async with services.store.connection() as conn:
            span = await conn.fetchval(
                "SELECT EXTRACT(EPOCH FROM max(at) FILTER (WHERE type = 'completed')"
                " - min(at) FILTER (WHERE type = 'started')) FROM laneway.events"
            )
        return {
            f"{workflow} processed /s": count / float(span),
            f"{workflow} commits/instance": (after - before) / count,
        }

    return scenario


async def idle_latency(services: Services, count: int) -> dict[str, float]:
    samples = []
    async with services.engine.running():
        await asyncio.sleep(0.2)  # let the loop go idle before measuring
        for i in range(min(count, 200)):
            enqueued = await services.engine.enqueue("bench_one", {"i": i})
            await services.engine.wait(enqueued.instance_id, timeout=30)
        async with services.store.connection() as conn:
            rows = await conn.fetch(
                "SELECT EXTRACT(EPOCH FROM e.at - i.created_at) * 1000 AS ms"
                "  FROM laneway.events e JOIN laneway.instances i USING (instance_id)"
                " WHERE e.type = 'started'"
            )
    samples = sorted(float(r["ms"]) for r in rows)

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))]

    return {
        "idle enqueue→start p50 ms": pct(0.50),
        "idle enqueue→start p95 ms": pct(0.95),
        "idle enqueue→start p99 ms": pct(0.99),
    }


SCENARIOS: dict[str, Callable[[Services, int], Awaitable[dict[str, float]]]] = {
    "enqueue-one": enqueue_one_by_one,
    "enqueue-batch": enqueue_batched,
    "process-1-step": process("bench_one"),
    "process-3-step": process("bench_three"),
    "idle-latency": idle_latency,
}


async def main(args: argparse.Namespace) -> int:
    figures: dict[str, list[float]] = {}
    # Durable settings as the server has them: honest figures, not a tuned throwaway.
    given = args.database_url or os.environ.get("DATABASE_URL")
    with throwaway_server(given, tune=False) as url:
        admin = await asyncpg.connect(url)
        settings = {
            row["name"]: row["setting"]
            for row in await admin.fetch(
                "SELECT name, setting FROM pg_settings"
                " WHERE name IN ('fsync', 'synchronous_commit', 'server_version')"
            )
        }
        await admin.close()
        print(
            f"PostgreSQL {settings.get('server_version')}, fsync={settings.get('fsync')},"
            f" synchronous_commit={settings.get('synchronous_commit')}; "
            f"{args.count} instances, concurrency {args.concurrency}, {args.rounds} rounds"
        )
        for round_number in range(args.rounds):
            for name in args.scenarios:
                async with fresh_services(url, args.concurrency) as services:
                    result = await SCENARIOS[name](services, args.count)
                for key, value in result.items():
                    figures.setdefault(key, []).append(value)
                print(
                    f"  round {round_number + 1} {name}: "
                    + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()),
                    file=sys.stderr,
                )
    width = max(len(k) for k in figures)
    print(f"{'figure'.ljust(width)}  {'median':>10}  {'min':>10}  {'max':>10}")
    for key, values in figures.items():
        print(
            f"{key.ljust(width)}  {statistics.median(values):>10,.1f}"
            f"  {min(values):>10,.1f}  {max(values):>10,.1f}"
        )
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--database-url")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    return parser.parse_args(argv)


if __name__ == "__main__":
    import uvloop  # what `laneway worker` and `laneway serve` run on

    sys.exit(uvloop.run(main(parse(sys.argv[1:]))))
