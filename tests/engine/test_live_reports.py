"""A template's report moves while its stage runs: the write of operation outcomes made
mid-stage (engine/runner_tools.py) carries the running stage's name, progress and status line
to the instance (migration 0037), so `workflowInstance { stage progress message }` does not
show the stage before's end until this one ends."""

import asyncio
from collections.abc import Awaitable, Callable
from uuid import UUID

import pytest

from laneway.engine import Engine
from laneway.engine.template import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    completed,
    failed,
)
from laneway.engine.template_interpreter import compile_template
from laneway.model import InstanceRecord, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, types_of

Handler = Callable[[OperationContext], Awaitable[OperationResult]]


async def _quick(ctx: OperationContext) -> OperationResult:
    return completed()


async def _refused(ctx: OperationContext) -> OperationResult:
    return failed("refused")


def _held(started: asyncio.Event, release: asyncio.Event) -> Handler:
    async def held(ctx: OperationContext) -> OperationResult:
        started.set()
        await release.wait()
        return completed()

    return held


def _engine(store: Store, template: Template, handlers: dict[str, Handler]) -> Engine:
    return make_engine(store, compile_template(template, OperationRegistry(handlers)))


async def _shown(engine: Engine, instance_id: UUID) -> InstanceRecord:
    found = await engine.get(instance_id)
    assert found is not None
    return found


async def test_a_sequence_reports_each_operation_done_while_its_stage_runs(
    store: Store,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    template = Template(
        type="live_sequence",
        stages=[
            Stage(name="first", operations=[Operation(type="quick")]),
            Stage(
                name="analyze",
                operations=[
                    Operation(type="quick"),
                    Operation(type="held"),
                    Operation(type="quick"),
                ],
            ),
        ],
    )
    engine = _engine(store, template, {"quick": _quick, "held": _held(started, release)})
    enqueued = await engine.enqueue("live_sequence")
    tick = asyncio.create_task(engine.tick())
    try:
        await asyncio.wait_for(started.wait(), timeout=10)
        # The first operation's outcome was written before the second started, and its write
        # carried the stage's report: no wait for a timer here.
        shown = await _shown(engine, enqueued.instance_id)
        assert (shown.status, shown.stage, shown.message) == (
            Status.RUNNING,
            "analyze",
            "analyze: 1 of 3 operations done",
        )
        # Between the stage's start (1 of 2 stages done) and its end, a third of the way.
        assert shown.progress == pytest.approx((1 + 1 / 3) / 2)
        assert not tick.done()
    finally:
        release.set()
        await asyncio.wait_for(tick, timeout=10)
    done = await _shown(engine, enqueued.instance_id)
    assert (done.status, done.stage, done.progress, done.message) == (
        Status.COMPLETED,
        "analyze",
        1.0,
        "analyze: 3 of 3 operations done",
    )
    # A report is not an event: the stage's operations wrote none of their own.
    assert [str(t) for t in await types_of(store, enqueued.instance_id)] == [
        "enqueued",
        "started",
        "checkpoint",
        "completed",
    ]


async def test_a_parallel_stage_reports_the_operations_done_while_one_still_runs(
    store: Store,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    template = Template(
        type="live_fan",
        stages=[
            Stage(name="gather", operations=[Operation(type="quick")]),
            Stage(
                name="fan",
                parallel=True,
                operations=[
                    Operation(type="quick"),
                    Operation(type="held"),
                    Operation(type="quick"),
                ],
            ),
            Stage(name="last", operations=[Operation(type="quick")]),
        ],
    )
    engine = _engine(store, template, {"quick": _quick, "held": _held(started, release)})
    enqueued = await engine.enqueue("live_fan")
    tick = asyncio.create_task(engine.tick())
    try:
        await asyncio.wait_for(started.wait(), timeout=10)
        # Written on their own soon after they finished (the siblings' timer), with the report.
        shown = await eventually(
            lambda: _shown(engine, enqueued.instance_id),
            lambda found: found.message == "fan: 2 of 3 operations done",
            timeout=5,
        )
        assert (shown.status, shown.stage) == (Status.RUNNING, "fan")
        assert shown.progress == pytest.approx((1 + 2 / 3) / 3)
        assert not tick.done()
    finally:
        release.set()
        await asyncio.wait_for(tick, timeout=10)
    done = await _shown(engine, enqueued.instance_id)
    assert (done.status, done.stage, done.message) == (
        Status.COMPLETED,
        "last",
        "last: 1 of 1 operations done",
    )


async def test_a_failed_operation_that_is_not_critical_shows_in_the_report_mid_stage(
    store: Store,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    template = Template(
        type="live_failed",
        stages=[
            Stage(
                name="check",
                operations=[
                    Operation(type="quick"),
                    Operation(type="refused", critical=False, max_attempts=1),
                    Operation(type="held"),
                ],
            ),
        ],
    )
    engine = _engine(
        store,
        template,
        {"quick": _quick, "refused": _refused, "held": _held(started, release)},
    )
    enqueued = await engine.enqueue("live_failed")
    tick = asyncio.create_task(engine.tick())
    try:
        await asyncio.wait_for(started.wait(), timeout=10)
        shown = await _shown(engine, enqueued.instance_id)
        assert (shown.stage, shown.message) == (
            "check",
            "check: 1 of 3 operations done (1 failed)",
        )
        # The bar counts the operations done, not the failed one (as a failed stage's does).
        assert shown.progress == pytest.approx(1 / 3)
    finally:
        release.set()
        await asyncio.wait_for(tick, timeout=10)
    done = await _shown(engine, enqueued.instance_id)
    assert (done.status, done.progress, done.message) == (
        Status.COMPLETED,
        1.0,
        "check: 2 of 3 operations done (1 failed)",
    )


async def test_a_fix_cycle_shows_in_the_report_mid_stage(store: Store) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def flaky(ctx: OperationContext) -> OperationResult:
        calls.append("flaky")
        return completed() if len(calls) > 1 else failed("not yet")

    template = Template(
        type="live_fix",
        stages=[
            Stage(
                name="build",
                operations=[Operation(type="flaky", max_attempts=1), Operation(type="held")],
                fix_operations=[Operation(type="quick")],
            ),
        ],
    )
    engine = _engine(
        store, template, {"flaky": flaky, "quick": _quick, "held": _held(started, release)}
    )
    enqueued = await engine.enqueue("live_fix")
    tick = asyncio.create_task(engine.tick())
    try:
        await asyncio.wait_for(started.wait(), timeout=10)
        shown = await _shown(engine, enqueued.instance_id)
        assert shown.message == "build: 1 of 2 operations done (fix cycle 1)"
    finally:
        release.set()
        await asyncio.wait_for(tick, timeout=10)
    done = await _shown(engine, enqueued.instance_id)
    assert (done.status, done.message) == (
        Status.COMPLETED,
        "build: 2 of 2 operations done (fix cycle 1)",
    )
