"""DBOS Transact contestant for bench/compare.py; runs with bench/.venv.

Variants (no-op queued workflows; see common.py for the phases and how they are timed):

  one-step    a workflow that calls one no-op step
  three-step  a workflow that calls three no-op steps in sequence

  one-step-wc100  one-step on a queue with worker_concurrency=100 (not in the default run)

Workflows and steps are `async def` (on 2,000-job trials they ran faster than the same
functions as plain `def`), decorated with @DBOS.workflow() / @DBOS.step(). The worker is a
launched DBOS application (DBOS(config=...), DBOS.launch()) that dequeues from a queue
registered with DBOS.register_queue(QUEUE) with DBOS's defaults: no concurrency limit and
a 1 s polling interval. worker_concurrency=100 (Laneway's default concurrency) caps DBOS
at about 100 dequeues per poll, i.e. below 100 workflows/s, so the default run gives DBOS
its faster, unlimited setting; the -wc100 variant shows the other. The producer is a
DBOSClient (DBOS's API for enqueueing from outside the application): enqueue-one calls
client.enqueue(...) per workflow. DBOS has no multi-row enqueue; enqueue-batch uses
client.enqueue_in_transaction(...) with 1000 enqueues per SQLAlchemy transaction, its
documented way to enqueue many workflows in one commit. Setup is DBOS.migrate() (what
`dbos migrate` runs) and DBOSClient.register_queue(QUEUE). Completed = dbos.workflow_status
rows with status 'SUCCESS'.

By hand: bench/.venv/bin/python bench/runners/dbos_runner.py setup --database-url URL
"""

import argparse
import asyncio
import contextlib
import logging
import sys
import time

import common
import sqlalchemy
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

VARIANTS = ("one-step", "three-step", "one-step-wc100", "three-step-wc100")
APP = "laneway_bench"
QUEUE = "bench"
COUNT_SQL = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
starts = common.Starts()


@DBOS.step(name="noop_step")
async def noop_step() -> None:
    return None


@DBOS.workflow(name="bench_one")
async def one_step(i: int) -> None:
    starts.mark(i)
    await noop_step()
    starts.finish()


@DBOS.workflow(name="bench_three")
async def three_steps(i: int) -> None:
    starts.mark(i)
    await noop_step()
    await noop_step()
    await noop_step()
    starts.finish()


WORKFLOW_NAMES = {"one-step": "bench_one", "three-step": "bench_three"}


def _config(url: str) -> DBOSConfig:
    return {"name": APP, "system_database_url": url, "log_level": "WARNING"}


async def _launch(
    url: str, stack: contextlib.AsyncExitStack, worker_concurrency: int | None = None
) -> None:
    """Launch the DBOS application (migrating its system database) with the bench queue."""
    DBOS(config=_config(url))
    await asyncio.to_thread(DBOS.launch)
    stack.callback(DBOS.destroy, workflow_completion_timeout_sec=10)
    await DBOS.register_queue_async(QUEUE, worker_concurrency=worker_concurrency)


def _install(url: str) -> None:
    """Create DBOS's system tables and the bench queue, as `dbos migrate` and a client do."""
    DBOS.migrate(url)
    client = DBOSClient(system_database_url=url, application_name=APP)
    try:
        client.register_queue(QUEUE)
    finally:
        client.destroy()


def _client(url: str, stack: contextlib.AsyncExitStack) -> DBOSClient:
    client = DBOSClient(system_database_url=url, application_name=APP)
    stack.callback(client.destroy)
    return client


def _enqueue_one_by_one(client: DBOSClient, options: EnqueueOptions, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        client.enqueue(options, i)
    return time.perf_counter() - started


def _enqueue_batches(client: DBOSClient, url: str, options: EnqueueOptions, count: int) -> float:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect():  # open the first connection before the clock starts
            pass
        started = time.perf_counter()
        for offset in range(0, count, common.BATCH_SIZE):
            with engine.begin() as conn:
                for i in range(offset, min(offset + common.BATCH_SIZE, count)):
                    client.enqueue_in_transaction(conn, options, i)
        return time.perf_counter() - started
    finally:
        engine.dispose()


async def run(args: argparse.Namespace) -> dict[str, object]:
    url = args.database_url
    options: EnqueueOptions = {
        "queue_name": QUEUE,
        "workflow_name": WORKFLOW_NAMES[args.variant.removesuffix("-wc100")],
    }
    async with contextlib.AsyncExitStack() as stack:
        if args.setup or args.phase == "setup":
            await asyncio.to_thread(_install, url)
        if args.phase == "setup":
            return {}
        client = _client(url, stack)
        # The client's API is synchronous: the loops run in one thread, timed inside it.
        if args.phase == "enqueue-one":
            seconds = await asyncio.to_thread(_enqueue_one_by_one, client, options, args.count)
            return {"seconds": seconds}
        if args.phase == "enqueue-batch":
            seconds = await asyncio.to_thread(_enqueue_batches, client, url, options, args.count)
            return {"seconds": seconds}
        monitor = await common.Monitor.open(url, COUNT_SQL)
        stack.push_async_callback(monitor.close)
        await _launch(url, stack, 100 if args.variant.endswith("-wc100") else None)
        if args.phase == "process":
            return await common.process_phase(args, starts, monitor)
        return await common.latency_phase(
            args, starts, monitor, lambda i: client.enqueue_async(options, i)
        )
    raise AssertionError("unreachable")


def main() -> int:
    logging.getLogger("dbos").setLevel(logging.WARNING)
    return common.main(run, VARIANTS, use_uvloop=False)


if __name__ == "__main__":
    sys.exit(main())
