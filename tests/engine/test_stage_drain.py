"""A process's drain as its handlers see it (HandlerContext.draining), and a template's
sequential stage then: it starts no further operation, writes what finished and is handed back
at once; the next process runs only what is left (stage_run.py, runner.py, presence.py).

The first engine runs until a gated operation (or handler) is in flight, then stops with a
long grace; the test waits for the drain to begin (its log line), opens the gate, and a second
engine resumes the instance. Waits are events and polls with deadlines.
"""

import asyncio
import logging
from collections import Counter
from typing import Any
from uuid import UUID

import pytest

from laneway.engine import Done, Engine, HandlerContext, Next, RetryPolicy, Workflow
from laneway.engine.template_interpreter import (
    Operation,
    OperationContext,
    OperationHandler,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    compile_template,
    completed,
    failed,
)
from laneway.model import EventType, InstanceRecord, Status
from laneway.store import Store
from tests.engine.helpers import events_of, eventually, make_engine

LONG_GRACE = 60.0  # far longer than any wait below: a prompt hand-back never reaches it
RELEASED_AT_SHUTDOWN = "released: worker shutting down"  # the hand-back's `retrying` event


def counted(calls: Counter[str], handler: OperationHandler) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        calls[ctx.operation_type] += 1
        return await handler(ctx)

    return handle


def gated(entered: asyncio.Event, opened: asyncio.Event, data: str) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        entered.set()
        await opened.wait()
        return completed({data: True})

    return handle


def done(data: str) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        return completed({data: True})

    return handle


def three_in_sequence(name: str = "three_in_sequence") -> Template:
    return Template(
        type=name,
        stages=[Stage(name="s", operations=[Operation(type=t) for t in ("a1", "a2", "a3")])],
        retry=RetryPolicy(max_attempts=3),
    )


async def drain_begun(caplog: pytest.LogCaptureFixture) -> None:
    """Until the stopping engine says it drains: its runs know it by then (Presence.drain)."""

    async def messages() -> list[str]:
        return [record.getMessage() for record in caplog.records]

    await eventually(messages, lambda seen: "draining" in seen)


async def stop_while_gated(
    engine: Engine, entered: asyncio.Event, opened: asyncio.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """Run `engine` until its gated operation is in flight, stop it, and open the gate once it
    drains; return when it has stopped (well within LONG_GRACE, or the test fails)."""
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    stopping.set()
    await drain_begun(caplog)
    opened.set()
    await asyncio.wait_for(running, timeout=10)


async def instance_of(store: Store, instance_id: UUID) -> InstanceRecord:
    found = await store.get_instance(instance_id)
    assert found is not None
    return found


async def test_a_sequential_stage_starts_no_operation_while_its_process_drains(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by an upgrade audit: a draining worker started the stage's next operation with
    # little grace left; the grace's end cut it off and another process ran it again in full.
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    template = three_in_sequence()
    entered, opened = asyncio.Event(), asyncio.Event()
    first_calls: Counter[str] = Counter()
    # Another instance's long step keeps the drain going: the stage's is released as it stops.
    slow_entered, slow_gate = asyncio.Event(), asyncio.Event()

    async def hold(ctx: HandlerContext, params: object) -> Done:
        slow_entered.set()
        await slow_gate.wait()
        return Done()

    first = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry(
                {
                    "a1": counted(first_calls, done("a1")),
                    "a2": counted(first_calls, gated(entered, opened, "a2")),
                    "a3": counted(first_calls, done("a3")),
                }
            ),
        ),
        Workflow("slow", handlers={"hold": hold}, initial="hold"),
        owner_id="first",
        shutdown_grace_seconds=LONG_GRACE,
    )
    enqueued = await first.enqueue("three_in_sequence", {"ticket": 7})
    await first.enqueue("slow")
    stopping = asyncio.Event()
    running = asyncio.create_task(first.run(stopping))
    await asyncio.wait_for(asyncio.gather(entered.wait(), slow_entered.wait()), timeout=10)
    stopping.set()
    await drain_begun(caplog)
    opened.set()
    stopped = await eventually(
        lambda: instance_of(store, enqueued.instance_id),
        lambda found: found.status != Status.RUNNING,
    )
    assert (stopped.status, stopped.owner_id) == (Status.PENDING, None)
    assert not running.done()  # the slow step still runs, in its grace
    slow_gate.set()
    await asyncio.wait_for(running, timeout=10)
    assert first_calls == {"a1": 1, "a2": 1}  # a3 never started under the drain
    rows = await store.operations(enqueued.instance_id)
    assert [(r.type, r.status) for r in rows] == [("a1", "completed"), ("a2", "completed")]
    assert stopped.message == "s: 2 of 3 operations done"  # the stage's report as it stopped
    # As a hand-back, not a failure: the attempt is given back to the step's budget.
    assert (stopped.attempts, stopped.step_attempt, stopped.last_error) == (1, 0, None)
    events = await events_of(store, enqueued.instance_id)
    assert [(e.type, e.error) for e in events] == [
        (EventType.ENQUEUED, None),
        (EventType.STARTED, None),
        (EventType.RETRYING, RELEASED_AT_SHUTDOWN),
    ]
    assert (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id] == []

    second_calls: Counter[str] = Counter()
    second = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry({t: counted(second_calls, done(t)) for t in ("a1", "a2", "a3")}),
        ),
        owner_id="second",
    )
    assert await second.tick() == 1
    assert second_calls == {"a3": 1}  # each operation ran once in all
    finished = await instance_of(store, enqueued.instance_id)
    assert finished.status == Status.COMPLETED, finished.last_error
    assert finished.result == {"context": {"ticket": 7, "a1": True, "a2": True, "a3": True}}
    assert finished.step_attempt == 1  # the resumed step's first attempt
    assert [e.type for e in await events_of(store, enqueued.instance_id)][3:] == [
        EventType.STARTED,
        EventType.COMPLETED,
    ]


def _hand_back_fields(record: InstanceRecord) -> tuple[object, ...]:
    return (
        record.status,
        record.owner_id,
        record.attempts,
        record.attempt_base,
        record.next_action,
        record.last_error,
    )


async def test_a_stop_between_operations_is_recorded_as_a_hand_back_at_the_grace_end(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    # One instance stops between operations (its gate opens during the drain); the other's
    # gate never opens: the grace's end cancels its operation and hands it back.
    entered, opened = asyncio.Event(), asyncio.Event()
    early = make_engine(
        store,
        compile_template(
            three_in_sequence(),
            OperationRegistry(
                {"a1": done("a1"), "a2": gated(entered, opened, "a2"), "a3": done("a3")}
            ),
        ),
        owner_id="early",
        shutdown_grace_seconds=LONG_GRACE,
    )
    stopped_early = await early.enqueue("three_in_sequence")
    await stop_while_gated(early, entered, opened, caplog)
    late_entered, never = asyncio.Event(), asyncio.Event()
    # Another workflow, which the first instance's pending row is not (its engine never
    # claims it).
    late = make_engine(
        store,
        compile_template(
            three_in_sequence("cut_off"),
            OperationRegistry(
                {"a1": done("a1"), "a2": gated(late_entered, never, "a2"), "a3": done("a3")}
            ),
        ),
        owner_id="late",
        shutdown_grace_seconds=0.2,
    )
    cut_off = await late.enqueue("cut_off")
    stopping = asyncio.Event()
    running = asyncio.create_task(late.run(stopping))
    await asyncio.wait_for(late_entered.wait(), timeout=10)
    stopping.set()
    await asyncio.wait_for(running, timeout=10)
    records = [await instance_of(store, e.instance_id) for e in (stopped_early, cut_off)]
    assert _hand_back_fields(records[0]) == _hand_back_fields(records[1])
    histories = [
        [(e.type, e.status, e.attempt, e.error) for e in await events_of(store, e.instance_id)]
        for e in (stopped_early, cut_off)
    ]
    assert histories[0] == histories[1]


def _self_healing() -> Template:
    return Template(
        type="self_healing",
        stages=[
            Stage(
                name="s",
                operations=[Operation(type="verify", max_attempts=1)],
                fix_operations=[Operation(type="fix1"), Operation(type="fix2")],
                max_fix_cycles=2,
            )
        ],
        retry=RetryPolicy(max_attempts=3),
    )


async def _verify(ctx: OperationContext) -> OperationResult:
    fixed = ctx.context.get("fix1") and ctx.context.get("fix2")
    return completed({"verified": True}) if fixed else failed("not fixed")


def _self_healing_engine(
    store: Store,
    calls: Counter[str],
    owner_id: str,
    *,
    verify: OperationHandler = _verify,
    fix1: OperationHandler | None = None,
    **options: Any,
) -> Engine:
    """An engine of `_self_healing` whose operations count their calls in `calls`."""
    operations = {"verify": verify, "fix1": fix1 or done("fix1"), "fix2": done("fix2")}
    registry = OperationRegistry({k: counted(calls, h) for k, h in operations.items()})
    return make_engine(
        store, compile_template(_self_healing(), registry), owner_id=owner_id, **options
    )


async def test_a_fix_cycle_of_a_sequential_stage_stops_between_its_operations(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    entered, opened = asyncio.Event(), asyncio.Event()
    first_calls: Counter[str] = Counter()
    first = _self_healing_engine(
        store,
        first_calls,
        "first",
        fix1=gated(entered, opened, "fix1"),
        shutdown_grace_seconds=LONG_GRACE,
    )
    enqueued = await first.enqueue("self_healing")
    await stop_while_gated(first, entered, opened, caplog)
    assert first_calls == {"verify": 1, "fix1": 1}  # fix2 never started under the drain
    stopped = await instance_of(store, enqueued.instance_id)
    assert (stopped.status, stopped.step_attempt) == (Status.PENDING, 0)
    second_calls: Counter[str] = Counter()
    second = _self_healing_engine(store, second_calls, "second")
    assert await second.tick() == 1
    # The fix cycle goes on where it stopped: fix1's outcome stands, then the verify pass.
    assert second_calls == {"fix2": 1, "verify": 1}
    finished = await instance_of(store, enqueued.instance_id)
    assert finished.status == Status.COMPLETED, finished.last_error


async def test_a_fix_cycle_begun_under_the_drain_runs_its_first_operation(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Stopped before it, the cycle would have no row yet: the next process would go back to the
    # first pass and run its failed operation again. So the first fix runs, then it stops.
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    entered, opened = asyncio.Event(), asyncio.Event()
    first_calls: Counter[str] = Counter()

    async def failing_verify(ctx: OperationContext) -> OperationResult:
        entered.set()
        await opened.wait()  # fails once the process drains
        return await _verify(ctx)

    first = _self_healing_engine(
        store, first_calls, "first", verify=failing_verify, shutdown_grace_seconds=LONG_GRACE
    )
    enqueued = await first.enqueue("self_healing")
    await stop_while_gated(first, entered, opened, caplog)
    assert first_calls == {"verify": 1, "fix1": 1}
    second_calls: Counter[str] = Counter()
    second = _self_healing_engine(store, second_calls, "second")
    assert await second.tick() == 1
    assert second_calls == {"fix2": 1, "verify": 1}  # the failed verify is not run again
    finished = await instance_of(store, enqueued.instance_id)
    assert finished.status == Status.COMPLETED, finished.last_error


async def test_a_parallel_stage_finishes_its_operations_while_its_process_drains(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Its operations have all started: the step ends in its grace, as any step does.
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    template = Template(
        type="side_by_side",
        stages=[
            Stage(name="s", operations=[Operation(type="p1"), Operation(type="p2")], parallel=True)
        ],
    )
    entered, opened = asyncio.Event(), asyncio.Event()
    calls: Counter[str] = Counter()
    engine = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry(
                {
                    "p1": counted(calls, gated(entered, opened, "p1")),
                    "p2": counted(calls, done("p2")),
                }
            ),
        ),
        shutdown_grace_seconds=LONG_GRACE,
    )
    enqueued = await engine.enqueue("side_by_side")
    await stop_while_gated(engine, entered, opened, caplog)
    assert calls == {"p1": 1, "p2": 1}
    finished = await instance_of(store, enqueued.instance_id)
    assert finished.status == Status.COMPLETED, finished.last_error


async def test_a_handler_can_wait_for_its_process_to_drain(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # HandlerContext.draining: a long handler may end its step early (a checkpoint), and the
    # instance is handed back at it.
    caplog.set_level(logging.INFO, logger="laneway.engine.presence")
    entered = asyncio.Event()

    async def first(ctx: HandlerContext, params: object) -> Next:
        entered.set()
        await ctx.draining.wait()
        return Next("second")

    async def second(ctx: HandlerContext, params: object) -> Done:
        return Done()

    workflow = Workflow("long", handlers={"first": first, "second": second}, initial="first")
    engine = make_engine(store, workflow, shutdown_grace_seconds=LONG_GRACE)
    enqueued = await engine.enqueue("long")
    await stop_while_gated(engine, entered, asyncio.Event(), caplog)
    stopped = await instance_of(store, enqueued.instance_id)
    assert (stopped.status, stopped.next_action) == (Status.PENDING, "second")
