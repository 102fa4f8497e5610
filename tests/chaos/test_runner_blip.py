"""A database blip does not strand runs (issue #20, point 6): PostgreSQL restarted (`fast`,
about a second down) under running instances. A runner whose write fails because the database
went away hands its instance back as soon as the database answers, so every instance makes its
next checkpoint within seconds of the restart, not after its 30 s lease, and all complete."""

import asyncio
import logging
from datetime import datetime
from uuid import UUID

import pytest

from laneway.engine import Done, HandlerContext, Next, Workflow
from laneway.model import Status
from laneway.store import open_store
from tests.chaos.postgres import PostgresControl
from tests.engine.helpers import eventually, make_engine, until_status

pytestmark = pytest.mark.e2e

STEPS = 40
STEP_SECONDS = 0.1
LEASE_SECONDS = 30.0
BOUND_SECONDS = 5.0  # far below the lease a stranded run would wait out


async def _step(ctx: HandlerContext, params: object) -> Next | Done:
    done = int(ctx.state.get("done") or 0)
    if done >= STEPS:
        return Done({"steps": done})
    await asyncio.sleep(STEP_SECONDS)  # the work of one step
    ctx.state["done"] = done + 1
    return Next("step")


stepper = Workflow("stepper", handlers={"step": _step}, initial="step")


async def test_runs_go_on_within_seconds_of_a_restart(
    private_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    control = await PostgresControl.of(private_database_url)
    async with open_store(private_database_url) as store:
        engine = make_engine(
            store, stepper, lease_seconds=LEASE_SECONDS, poll_interval_seconds=0.05
        )
        ids = [(await engine.enqueue("stepper")).instance_id for _ in range(4)]

        async def checkpoints_after(moment: datetime) -> dict[UUID, int]:
            async with store.connection() as conn:
                rows = await conn.fetch(
                    "SELECT instance_id, count(*) AS n FROM laneway.events"
                    " WHERE type IN ('checkpoint', 'completed') AND at > $1"
                    " GROUP BY instance_id",
                    moment,
                )
            return {row["instance_id"]: row["n"] for row in rows}

        with caplog.at_level(logging.INFO, logger="laneway"):
            async with engine.running():
                started = await store.now()
                await eventually(
                    lambda: checkpoints_after(started),
                    lambda seen: len(seen) == len(ids) and min(seen.values()) >= 2,
                    timeout=30,
                )
                await control.restart("fast")
                back = await eventually(store.now, lambda _: True, timeout=30)
                # Every instance checkpoints again soon after the server is back.
                await eventually(
                    lambda: checkpoints_after(back),
                    lambda seen: len(seen) == len(ids),
                    timeout=BOUND_SECONDS,
                )
                for instance_id in ids:
                    done = await until_status(
                        store, instance_id, Status.COMPLETED, Status.FAILED, timeout=60
                    )
                    assert done.status == Status.COMPLETED
                    assert done.result == {"steps": STEPS}
        messages = [record.getMessage() for record in caplog.records]
        assert "runner crashed" not in messages
        assert "lease expired, instance recovered" not in messages
