"""PgQueuer contestant for bench/compare.py; runs with bench/.venv (see requirements-peers.txt).

Variants (a no-op async entrypoint; see common.py for the phases and how they are timed):

  defaults  PgQueuer(...).run() with its defaults: batch_size 10, no cap on concurrent jobs
  c100      the same with max_concurrent_tasks=100, Laneway's default worker concurrency
  c10       max_concurrent_tasks=10, batch_size=5: ten jobs in flight, the cap of Laneway's
            queue of concurrency 10 (the shape issue #22's capped figures were taken with)

As PgQueuer's docs show it: one asyncpg connection for the worker (PgQueuer), another for
the producer (Queries). The schema is installed with Queries.install() (the default,
durable: every table logged). enqueue-one calls Queries.enqueue(entrypoint, payload);
enqueue-batch passes lists of 1000. Completed = rows in pgqueuer_log with status
'successful' (the worker deletes a finished job from the queue table and logs it in the
same statement).

By hand: bench/.venv/bin/python bench/runners/pgqueuer_runner.py setup --database-url URL
"""

import argparse
import asyncio
import contextlib
import sys

import asyncpg
import common
from pgqueuer import Job, PgQueuer, Queries

VARIANTS = ("defaults", "c100", "c10")
RUN_OPTIONS: dict[str, dict[str, int]] = {
    "defaults": {},
    "c100": {"max_concurrent_tasks": 100},
    "c10": {"max_concurrent_tasks": 10, "batch_size": 5},
}
ENTRYPOINT = "noop"
COUNT_SQL = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
starts = common.Starts()


async def _worker(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> None:
    """Start a PgQueuer worker in the background; stop it when `stack` closes."""
    conn = await asyncpg.connect(args.database_url)
    stack.push_async_callback(conn.close)
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        starts.mark(int(job.payload or b"0"))
        starts.finish()

    task = asyncio.create_task(pgq.run(**RUN_OPTIONS[args.variant]))

    async def stop() -> None:
        pgq.shutdown.set()
        async with asyncio.timeout(30):
            await task

    stack.push_async_callback(stop)


async def run(args: argparse.Namespace) -> dict[str, object]:
    async with contextlib.AsyncExitStack() as stack:
        conn = await asyncpg.connect(args.database_url)
        stack.push_async_callback(conn.close)
        queries = Queries.from_asyncpg_connection(conn)
        if args.setup or args.phase == "setup":
            await queries.install()
        if args.phase == "setup":
            return {}
        if args.phase == "enqueue-one":
            seconds = await common.timed_loop(
                args.count, lambda i: queries.enqueue(ENTRYPOINT, str(i).encode())
            )
            return {"seconds": seconds}
        if args.phase == "enqueue-batch":
            seconds = await common.timed_batches(
                args.count,
                lambda ids: queries.enqueue(
                    [ENTRYPOINT] * len(ids), [str(i).encode() for i in ids], [0] * len(ids)
                ),
            )
            return {"seconds": seconds}
        monitor = await common.Monitor.open(args.database_url, COUNT_SQL)
        stack.push_async_callback(monitor.close)
        await _worker(args, stack)
        if args.phase == "process":
            return await common.process_phase(args, starts, monitor)
        return await common.latency_phase(
            args, starts, monitor, lambda i: queries.enqueue(ENTRYPOINT, str(i).encode())
        )
    raise AssertionError("unreachable")


def main() -> int:
    return common.main(run, VARIANTS, use_uvloop=True)


if __name__ == "__main__":
    sys.exit(main())
