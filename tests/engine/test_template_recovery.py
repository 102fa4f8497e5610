"""A template instance whose worker is lost mid-stage: the next worker resumes the stage from
its operation rows, running only what had not finished (stage_run.py, fix_cycles.py).

A worker is "lost" as in test_template_interpreter.py: its operation blocks on a gate, the
test expires its lease, and a second engine (its own store) recovers and runs the instance;
the first engine's late writes are then fenced out. Waits are events and polls with deadlines.
"""

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow
from laneway.engine.template_interpreter import (
    FIX_POSITION_BASE,
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
from laneway.model import EventType, JSONValue, OperationRecord, Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine

Rows = list[OperationRecord]


def fast(operation_type: str, **options: Any) -> Operation:
    """An operation whose in-stage retries do not wait."""
    return Operation(type=operation_type, retry_base_ms=0, retry_max_ms=0, **options)


class Gate:
    """Blocks the first engine's operation until the second engine has run the instance."""

    def __init__(self) -> None:
        self.entered, self.opened = asyncio.Event(), asyncio.Event()

    def blocking(self, handler: OperationHandler, *, at_call: int = 1) -> OperationHandler:
        """`handler`, whose `at_call`-th call (of this wrapper) blocks before it runs."""
        calls = 0

        async def handle(ctx: OperationContext) -> OperationResult:
            nonlocal calls
            calls += 1
            if calls == at_call:
                self.entered.set()
                await self.opened.wait()
            return await handler(ctx)

        return handle


def counted(calls: Counter[str], handler: OperationHandler) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        calls[ctx.operation_type] += 1
        return await handler(ctx)

    return handle


async def lose_worker_and_recover(
    store: Store,
    database_url: str,
    instance_id: UUID,
    first_run: "asyncio.Task[int]",
    gate: Gate,
    template: Template,
    operations: OperationRegistry,
    rows_written: Callable[[Rows], bool],
) -> None:
    """Once the first engine is blocked and `rows_written` holds for the stored rows, expire its
    lease, let a second engine (`operations`) recover and run the instance, then let the first
    engine's blocked operation go on (its writes are fenced out)."""
    await asyncio.wait_for(gate.entered.wait(), timeout=10)
    await eventually(lambda: store.operations(instance_id), rows_written)
    async with store.connection() as conn:  # the first worker "dies": its lease runs out
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
            " WHERE instance_id = $1",
            instance_id,
        )
    async with open_store(database_url) as other_store:
        second = make_engine(other_store, compile_template(template, operations), owner_id="second")
        assert await second.tick() == 1  # recovers the expired lease, claims, runs
    gate.opened.set()
    await asyncio.wait_for(first_run, timeout=10)


def slot(rows: Rows, stage: str, position: int) -> OperationRecord:
    (row,) = [r for r in rows if (r.stage, r.position) == (stage, position)]
    return row


async def _always_fails(ctx: OperationContext) -> OperationResult:
    return failed(f"unavailable at attempt {ctx.attempt}")


async def _done(ctx: OperationContext) -> OperationResult:
    return completed({"done": True})


async def test_a_non_critical_failure_already_recorded_is_not_run_again_after_a_lost_worker(
    store: Store, database_url: str
) -> None:
    template = Template(
        type="optional_first",
        stages=[
            Stage(
                name="s",
                operations=[
                    fast("optional", critical=False, max_attempts=2),
                    fast("slow", timeout_seconds=30),
                ],
            )
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    gate = Gate()
    first_calls: Counter[str] = Counter()
    first = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry(
                {
                    "optional": counted(first_calls, _always_fails),
                    "slow": counted(first_calls, gate.blocking(_done)),
                }
            ),
        ),
        owner_id="first",
    )
    enqueued = await first.enqueue("optional_first")
    first_run = asyncio.create_task(first.tick())
    second_calls: Counter[str] = Counter()
    second_operations = OperationRegistry(
        {"optional": counted(second_calls, _always_fails), "slow": counted(second_calls, _done)}
    )
    await lose_worker_and_recover(
        store,
        database_url,
        enqueued.instance_id,
        first_run,
        gate,
        template,
        second_operations,
        lambda rows: [(r.position, r.status, r.attempts) for r in rows] == [(0, "failed", 2)],
    )
    assert first_calls == {"optional": 2, "slow": 1}
    # The optional operation's outcome (failed after its 2 attempts) stands: only `slow`,
    # which had not finished, runs again.
    assert second_calls == {"slow": 1}
    done = await store.get_instance(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert done.message == "s: 1 of 2 operations done (1 failed)"
    rows = await store.operations(enqueued.instance_id)
    optional = slot(rows, "s", 0)
    assert (optional.status, optional.attempts, optional.error) == (
        "failed",
        2,
        "unavailable at attempt 2",
    )
    assert slot(rows, "s", 1).status == "completed"


def _self_healing(max_fix_cycles: int, *, parallel: bool = False) -> Template:
    return Template(
        type="self_healing",
        stages=[
            Stage(
                name="s",
                operations=[fast("verify", max_attempts=1, timeout_seconds=30)],
                parallel=parallel,
                fix_operations=[fast("fixit")],
                max_fix_cycles=max_fix_cycles,
            )
        ],
        retry=RetryPolicy(max_attempts=3),
    )


def _verifier(seen: list[dict[str, object]]) -> OperationHandler:
    async def verify(ctx: OperationContext) -> OperationResult:
        seen.append(dict(ctx.context))
        return completed({"verified": True}) if ctx.context.get("fixed") else failed("not fixed")

    return verify


async def _fixit(ctx: OperationContext) -> OperationResult:
    return completed({"fixed": True})


def _fix_written(rows: Rows) -> bool:
    return any(r.type == "fixit" and r.status == "completed" for r in rows)


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_lost_worker_mid_verify_resumes_the_fix_cycle_with_the_fix_data(
    store: Store, database_url: str, parallel: bool
) -> None:
    template = _self_healing(max_fix_cycles=2, parallel=parallel)
    gate = Gate()
    first_calls: Counter[str] = Counter()
    first_seen: list[dict[str, object]] = []
    first = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry(
                {
                    # The second verify (cycle 1's, after the fix) is where the worker is lost.
                    "verify": counted(first_calls, gate.blocking(_verifier(first_seen), at_call=2)),
                    "fixit": counted(first_calls, _fixit),
                }
            ),
        ),
        owner_id="first",
    )
    enqueued = await first.enqueue("self_healing", {"ticket": 7})
    first_run = asyncio.create_task(first.tick())
    second_calls: Counter[str] = Counter()
    second_seen: list[dict[str, object]] = []
    second_operations = OperationRegistry(
        {
            "verify": counted(second_calls, _verifier(second_seen)),
            "fixit": counted(second_calls, _fixit),
        }
    )
    await lose_worker_and_recover(
        store,
        database_url,
        enqueued.instance_id,
        first_run,
        gate,
        template,
        second_operations,
        _fix_written,
    )
    assert first_calls == {"verify": 2, "fixit": 1}
    # The fix completed: it is not run again, and the verify that had not finished runs with
    # its data, in the fix cycle the stage had reached.
    assert second_calls == {"verify": 1}
    assert second_seen == [{"ticket": 7, "fixed": True}]
    done = await store.get_instance(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert done.result == {"context": {"ticket": 7, "fixed": True, "verified": True}}
    assert done.message == "s: 1 of 1 operations done (fix cycle 1)"
    rows = await store.operations(enqueued.instance_id)
    fix = slot(rows, "s", FIX_POSITION_BASE)
    assert (fix.status, fix.attempts, fix.fix_cycle) == ("completed", 1, 1)
    verify = slot(rows, "s", 0)
    assert (verify.status, verify.fix_cycle) == ("completed", 1)


async def _never_fixed(ctx: OperationContext) -> OperationResult:
    return failed(f"still broken (fixed {ctx.context.get('fixes', 0)} times)")


async def _count_fix(ctx: OperationContext) -> OperationResult:
    fixes = ctx.context.get("fixes", 0)
    assert isinstance(fixes, int)
    return completed({"fixes": fixes + 1})


async def test_fix_cycles_stay_within_max_fix_cycles_across_a_lost_worker(
    store: Store, database_url: str
) -> None:
    template = _self_healing(max_fix_cycles=2)
    gate = Gate()
    first_calls: Counter[str] = Counter()
    first = make_engine(
        store,
        compile_template(
            template,
            OperationRegistry(
                {
                    # The third verify (cycle 2's, the last one allowed) is where it is lost.
                    "verify": counted(first_calls, gate.blocking(_never_fixed, at_call=3)),
                    "fixit": counted(first_calls, _count_fix),
                }
            ),
        ),
        owner_id="first",
    )
    enqueued = await first.enqueue("self_healing")
    first_run = asyncio.create_task(first.tick())
    second_calls: Counter[str] = Counter()
    second_operations = OperationRegistry(
        {"verify": counted(second_calls, _never_fixed), "fixit": counted(second_calls, _count_fix)}
    )
    await lose_worker_and_recover(
        store,
        database_url,
        enqueued.instance_id,
        first_run,
        gate,
        template,
        second_operations,
        _fix_written,
    )
    assert first_calls == {"verify": 3, "fixit": 2}
    # Cycle 2's verify runs once more and fails: no third cycle, nor cycles counted afresh.
    assert second_calls == {"verify": 1}
    failed_instance = await store.get_instance(enqueued.instance_id)
    assert failed_instance is not None
    assert failed_instance.status == Status.FAILED
    assert failed_instance.last_error == (
        "StageFailedError: stage 's': operation 'verify' (#0) failed after 1 attempt(s) and "
        "2 fix cycle(s): still broken (fixed 2 times)"
    )


@pytest.mark.parametrize(
    ("lost_in", "named"),
    [
        ("s2", "s2"),  # s1's checkpoint saved "s1" as the instance's stage
        ("s2, before its outcomes", "s2"),  # and none of s2's reported since
        ("s1, after an outcome", "s1"),
        # Lost before any outcome of the instance was written: nothing tells a template from a
        # handler map, whose stage is its last report's (none yet).
        ("s1, before any outcome", None),
    ],
)
async def test_a_lost_worker_is_recorded_in_the_stage_that_was_running(
    store: Store, lost_in: str, named: str | None
) -> None:
    template = Template(
        type="staged",
        stages=[
            Stage(
                name="s1",
                parallel=True,
                operations=[fast("one", timeout_seconds=30), fast("quick")],
            ),
            Stage(
                name="s2",
                parallel=True,
                operations=[fast("two", timeout_seconds=30), fast("three")],
            ),
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    gate = Gate()
    handlers = {"one": _done, "quick": _done, "two": _done, "three": _done}
    overrides = {"two" if lost_in.startswith("s2") else "one": gate.blocking(_done)}
    if lost_in == "s1, before any outcome":
        overrides["quick"] = _after(gate)  # its sibling finishes only once the worker is lost
    if lost_in == "s2, before its outcomes":
        overrides["three"] = _after(gate)
    first = make_engine(
        store,
        compile_template(template, OperationRegistry({**handlers, **overrides})),
        owner_id="first",
    )
    enqueued = await first.enqueue("staged")
    first_run = asyncio.create_task(first.tick())
    await asyncio.wait_for(gate.entered.wait(), timeout=10)
    if lost_in in ("s2", "s1, after an outcome"):  # the outcomes of the stage so far are written
        stage = lost_in[:2]
        await eventually(
            lambda: store.operations(enqueued.instance_id),
            lambda rows: any(row.stage == stage for row in rows),
        )
    async with store.connection() as conn:  # the first worker "dies": its lease runs out
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
            " WHERE instance_id = $1",
            enqueued.instance_id,
        )
    # Any process recovers an expired lease, whether it runs the workflow or not.
    other = make_engine(
        store, Workflow("other", handlers={"run": _other}, initial="run"), owner_id="second"
    )
    await other.claim_loop.maintain()
    gate.opened.set()
    await asyncio.wait_for(first_run, timeout=10)  # its late writes are fenced out
    failures = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert [(f.type, f.stage, f.operation) for f in failures] == [("WorkerLost", named, None)]
    events = await store.instance_events_after(enqueued.instance_id, 0, 100)
    [retrying] = [e for e in events if e.type == EventType.RETRYING]
    assert retrying.stage == named
    record = await store.get_instance(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.stage) == (Status.PENDING, named)
    if lost_in == "s2":  # s2's report as far as it got, written with its outcome, stands
        assert (record.message, record.progress) == ("s2: 1 of 2 operations done", 0.75)
    if lost_in == "s2, before its outcomes":  # s1's no longer stands: s2 is where it is
        assert (record.message, record.progress) == (None, 0.5)


def _after(gate: Gate) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        await gate.opened.wait()
        return completed()

    return handle


async def _other(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()
