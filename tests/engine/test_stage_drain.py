"""A process's drain as its handlers see it (HandlerContext.draining), and a template's
sequential stage then: it starts no further operation, writes what finished and is handed back
at once; the next process runs only what is left (stage_run.py, runner.py, presence.py).

The first engine runs until a gated operation (or handler) is in flight, then stops with a
long grace; the test waits for the drain to begin (its log line), opens the gate, and a second
engine resumes the instance. Waits are events and polls with deadlines.
"""

import asyncio
import logging
from uuid import UUID

import pytest

from laneway.engine import Done, Engine, HandlerContext, Next, Workflow
from laneway.model import InstanceRecord, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine

LONG_GRACE = 60.0  # far longer than any wait below: a prompt hand-back never reaches it


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


async def handed_back(store: Store, instance_id: UUID) -> InstanceRecord:
    found = await store.get_instance(instance_id)
    assert found is not None
    return found


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
    stopped = await handed_back(store, enqueued.instance_id)
    assert (stopped.status, stopped.next_action) == (Status.PENDING, "second")
