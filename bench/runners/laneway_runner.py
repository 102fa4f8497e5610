"""Laneway contestant for bench/compare.py; runs with the project's .venv.

Variants (each a no-op workflow; see common.py for the phases and how they are timed):

  one-step        handlers {"one": -> Done}
  three-step      handlers {"one": -> Next("two"), "two": -> Next("three"), "three": -> Done}
  one-step-c10    one-step on a queue of concurrency 10 (Engine.configure_queue): a lane
  three-step-c10  three-step on that queue
  template-3x1    a compiled Template of three stages with one no-op Operation each
  template-par3   a compiled Template of one stage of three parallel no-op Operations

Laneway runs with its defaults (Settings(): worker concurrency 100, pool of 10, poll every
2 s) on the given database; a capped variant's queue is configured once with the schema
(--setup), so every later phase finds it. enqueue-one uses Engine.enqueue, enqueue-batch
Engine.enqueue_many with 1000 requests per call, enqueue-graphql the service's
`enqueueWorkflows` mutation (graphql_enqueue.py). The latency client is a second
open_services() in the same process, so its enqueue wakes the worker through PostgreSQL
(NOTIFY), not in-process.

By hand: .venv/bin/python bench/runners/laneway_runner.py setup --database-url URL
"""

import argparse
import contextlib
import sys
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, for `app`

import common
import graphql_enqueue

from laneway import (
    Done,
    EnqueueRequest,
    HandlerContext,
    Next,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Settings,
    Stage,
    Template,
    Workflow,
    compile_template,
    completed,
    open_services,
)
from laneway.model import JSONValue

VARIANTS = (
    "one-step",
    "three-step",
    "one-step-c10",
    "three-step-c10",
    "template-3x1",
    "template-par3",
)
LANE, LANE_CONCURRENCY = "lane_c10", 10
"""The capped variants' queue: at most 10 instances in flight, as PgQueuer's c10."""
starts = common.Starts()
parallel_done: dict[UUID, int] = {}
"""Per template-par3 instance, how many of its three operations have returned."""


def _key(params: JSONValue) -> int:
    assert isinstance(params, dict)
    value = params["i"]
    assert isinstance(value, int)
    return value


async def _first_and_done(ctx: HandlerContext, params: JSONValue) -> Done:
    starts.mark(_key(params))
    starts.finish()
    return Done()


async def _first(ctx: HandlerContext, params: JSONValue) -> Next:
    starts.mark(_key(params))
    return Next("two")


async def _second(ctx: HandlerContext, params: JSONValue) -> Next:
    return Next("three")


async def _last(ctx: HandlerContext, params: JSONValue) -> Done:
    starts.finish()
    return Done()


async def _first_operation(ctx: OperationContext) -> OperationResult:
    starts.mark(_key(ctx.context))
    return completed()


async def _middle_operation(ctx: OperationContext) -> OperationResult:
    return completed()


async def _last_operation(ctx: OperationContext) -> OperationResult:
    starts.finish()
    return completed()


async def _parallel_operation(ctx: OperationContext) -> OperationResult:
    """One of three at once: the first to start marks the instance started (mark keeps only
    the first time), the third to return finishes it."""
    starts.mark(_key(ctx.context))
    done = parallel_done.get(ctx.instance_id, 0) + 1
    parallel_done[ctx.instance_id] = done
    if done == 3:
        del parallel_done[ctx.instance_id]
        starts.finish()
    return completed()


def _three_step(queue: str | None) -> Workflow:
    return Workflow(
        "bench_three",
        handlers={"one": _first, "two": _second, "three": _last},
        initial="one",
        queue=queue,
    )


WORKFLOWS: dict[str, Workflow] = {
    "one-step": Workflow("bench_one", handlers={"one": _first_and_done}, initial="one"),
    "three-step": _three_step(None),
    "one-step-c10": Workflow(
        "bench_one", handlers={"one": _first_and_done}, initial="one", queue=LANE
    ),
    "three-step-c10": _three_step(LANE),
    "template-3x1": compile_template(
        Template(
            type="bench_template",
            stages=[
                Stage(name="first", operations=[Operation(type="op_first")]),
                Stage(name="second", operations=[Operation(type="op_second")]),
                Stage(name="third", operations=[Operation(type="op_third")]),
            ],
        ),
        OperationRegistry(
            {
                "op_first": _first_operation,
                "op_second": _middle_operation,
                "op_third": _last_operation,
            }
        ),
    ),
    "template-par3": compile_template(
        Template(
            type="bench_parallel",
            stages=[
                Stage(
                    name="only",
                    parallel=True,
                    operations=[Operation(type=f"op_{n}") for n in ("a", "b", "c")],
                )
            ],
        ),
        OperationRegistry({f"op_{n}": _parallel_operation for n in ("a", "b", "c")}),
    ),
}
COUNT_SQL = "SELECT count(*) FROM laneway.instances WHERE status = 'completed'"


async def run(args: argparse.Namespace) -> dict[str, object]:
    workflow = WORKFLOWS[args.variant]
    name = workflow.name
    settings = Settings(database_url=args.database_url)
    if args.phase == "enqueue-graphql":
        # The service's own start migrates the database (--setup), before the clock.
        return await graphql_enqueue.phase(args.database_url, workflow, args.count)
    async with contextlib.AsyncExitStack() as stack:
        services = await stack.enter_async_context(open_services(settings, workflows=[workflow]))
        engine = services.engine
        if (args.setup or args.phase == "setup") and workflow.queue == LANE:
            await engine.configure_queue(LANE, concurrency=LANE_CONCURRENCY)
        if args.phase == "setup":  # open_services migrated the database
            return {}
        if args.phase == "enqueue-one":
            seconds = await common.timed_loop(args.count, lambda i: engine.enqueue(name, {"i": i}))
            return {"seconds": seconds}
        if args.phase == "enqueue-batch":
            seconds = await common.timed_batches(
                args.count,
                lambda ids: engine.enqueue_many(
                    [EnqueueRequest(name=name, params={"i": i}) for i in ids]
                ),
            )
            return {"seconds": seconds}
        monitor = await common.Monitor.open(args.database_url, COUNT_SQL)
        stack.push_async_callback(monitor.close)
        if args.phase == "process":
            async with engine.running():
                return await common.process_phase(args, starts, monitor)
        client = await stack.enter_async_context(open_services(settings, workflows=[workflow]))
        async with engine.running():
            return await common.latency_phase(
                args, starts, monitor, lambda i: client.engine.enqueue(name, {"i": i})
            )
    raise AssertionError("unreachable")


def main() -> int:
    return common.main(run, VARIANTS, use_uvloop=True)


if __name__ == "__main__":
    sys.exit(main())
