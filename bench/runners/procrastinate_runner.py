"""Procrastinate contestant for bench/compare.py; runs with bench/.venv.

Variants (a no-op async task; see common.py for the phases and how they are timed):

  c100      worker concurrency 100, Laneway's default (Procrastinate's own default is 1)
  defaults  App.run_worker_async() with its defaults (concurrency 1)

Both use PsycopgConnector with its default pool. The schema is applied with
SchemaManager.apply_schema_async(). The producer is an App of its own (its own pool):
enqueue-one calls configure_task(name).defer_async(i=...), enqueue-batch
batch_defer_async() with 1000 jobs a call. Completed = procrastinate_jobs rows with status
'succeeded' (the worker keeps finished jobs: delete_jobs defaults to "never").

By hand: bench/.venv/bin/python bench/runners/procrastinate_runner.py setup --database-url URL
"""

import argparse
import asyncio
import contextlib
import logging
import sys

import common
from procrastinate import App, PsycopgConnector

VARIANTS = ("c100", "defaults")
TASK = "noop"
COUNT_SQL = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
starts = common.Starts()


async def _open_app(url: str, stack: contextlib.AsyncExitStack) -> App:
    app = App(connector=PsycopgConnector(conninfo=url))
    await app.open_async()
    stack.push_async_callback(app.close_async)
    return app


async def _worker(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> None:
    """Start a worker in the background; stop it (cancel: a graceful stop) when `stack` closes."""
    app = await _open_app(args.database_url, stack)

    @app.task(name=TASK)
    async def noop(i: int) -> None:
        starts.mark(i)
        starts.finish()

    options = {"concurrency": 100} if args.variant == "c100" else {}
    task = asyncio.create_task(app.run_worker_async(install_signal_handlers=False, **options))

    async def stop() -> None:
        task.cancel()
        async with asyncio.timeout(30):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    stack.push_async_callback(stop)


async def run(args: argparse.Namespace) -> dict[str, object]:
    async with contextlib.AsyncExitStack() as stack:
        producer = await _open_app(args.database_url, stack)
        if args.setup or args.phase == "setup":
            await producer.schema_manager.apply_schema_async()
        if args.phase == "setup":
            return {}
        deferrer = producer.configure_task(TASK)
        if args.phase == "enqueue-one":
            seconds = await common.timed_loop(args.count, lambda i: deferrer.defer_async(i=i))
            return {"seconds": seconds}
        if args.phase == "enqueue-batch":
            seconds = await common.timed_batches(
                args.count, lambda ids: deferrer.batch_defer_async(*({"i": i} for i in ids))
            )
            return {"seconds": seconds}
        monitor = await common.Monitor.open(args.database_url, COUNT_SQL)
        stack.push_async_callback(monitor.close)
        await _worker(args, stack)
        if args.phase == "process":
            return await common.process_phase(args, starts, monitor)
        return await common.latency_phase(
            args, starts, monitor, lambda i: deferrer.defer_async(i=i)
        )
    raise AssertionError("unreachable")


def _not_about_main_module(record: logging.LogRecord) -> bool:
    # The worker runs in this process with the task registered on its App, so the advice
    # about apps defined in __main__ (for workers importing tasks by path) does not apply.
    return getattr(record, "action", None) != "app_defined_in___main__"


def main() -> int:
    logging.getLogger("procrastinate.blueprints").addFilter(_not_about_main_module)
    return common.main(run, VARIANTS, use_uvloop=False)


if __name__ == "__main__":
    sys.exit(main())
