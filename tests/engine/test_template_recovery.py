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

from laneway.engine import RetryPolicy
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
from laneway.model import OperationRecord, Status
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
