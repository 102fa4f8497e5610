"""A running template's report moves on the dashboard while its stage runs (the set-up of
test_dashboard.py, a server with its own template).

The write of an operation's outcome mid-stage moves the instance's stage, progress and status
line with no event (tests/engine/test_live_reports.py), and the page refreshed only on events:
the bar and the line stood at the stage before's end until the stage ended. The operations
here wait on events the test sets, so what runs when is the test's, not the machine's speed.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from playwright.async_api import Browser, expect

from laneway.api.app import create_app
from laneway.config import Settings
from laneway.engine.template_interpreter import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    compile_template,
    completed,
)
from tests.api.conftest import CHROMIUM, LiveServer, live_server, wait_until
from tests.api.test_dashboard import OF_INSTANCE, TIMEOUT_MS, open_dashboard
from tests.api.test_waits_api import until_status

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

ENQUEUE = 'mutation { enqueueWorkflow(name: "live_dash") { instanceID } }'
Handler = Callable[[OperationContext], Awaitable[OperationResult]]
PERIOD_MS = 1500  # the page's RUNNING_REFRESH_MS


@dataclass
class Gate:
    """An operation that starts, then waits until the test lets it finish."""

    started: asyncio.Event
    release: asyncio.Event

    def handler(self) -> Handler:
        async def held(ctx: OperationContext) -> OperationResult:
            self.started.set()
            await self.release.wait()
            return completed()

        return held


async def _quick(ctx: OperationContext) -> OperationResult:
    return completed()


@asynccontextmanager
async def gated_server(settings: Settings) -> AsyncIterator[tuple[LiveServer, Gate, Gate]]:
    """A server with `live_dash`: a quick stage `first`, then `analyze`, whose first and
    second operations are held by the two gates; and the gates. Both are opened on the way
    out, so that the server's engine can stop."""
    one = Gate(asyncio.Event(), asyncio.Event())
    two = Gate(asyncio.Event(), asyncio.Event())
    template = Template(
        type="live_dash",
        stages=[
            Stage(name="first", operations=[Operation(type="quick")]),
            Stage(
                name="analyze",
                operations=[
                    Operation(type="one"),
                    Operation(type="two"),
                    Operation(type="quick"),
                ],
            ),
        ],
    )
    workflow = compile_template(
        template, OperationRegistry({"quick": _quick, "one": one.handler(), "two": two.handler()})
    )
    app = create_app(settings, workflows=[workflow])
    async with live_server(settings, app=app) as server:
        try:
            yield server, one, two
        finally:
            one.release.set()
            two.release.set()


async def event_ids(server: LiveServer, instance_id: str) -> list[str]:
    body = await server.graphql(OF_INSTANCE, id=instance_id)
    return [event["eventID"] for event in body["data"]["workflowEventHistory"]]


async def test_a_running_stages_progress_moves_on_the_page_with_no_event(
    settings: Settings, browser: Browser
) -> None:
    async with gated_server(settings) as (server, one, two):
        body = await server.graphql(ENQUEUE)
        instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
        await asyncio.wait_for(one.started.wait(), timeout=TIMEOUT_MS / 1000)
        async with open_dashboard(browser, server) as dashboard:
            page = dashboard.page
            row = dashboard.row(instance_id)
            await expect(row).to_have_attribute("data-status", "running")
            await dashboard.open_instance(instance_id)
            panel = dashboard.panel
            message = page.get_by_test_id("instance-message")
            bar = panel.locator("#instance-facts progress")
            row_bar = row.locator("progress")
            # `analyze` has started, none of its operations done: the stage before's end.
            await expect(panel).to_have_attribute("data-status", "running")
            await expect(message).to_have_text("first: 1 of 1 operations done")
            await expect(bar).to_have_attribute("value", "0.5")
            await expect(row_bar).to_have_attribute("value", "0.5")
            await expect(row.locator(".progress")).to_have_attribute(
                "title", "first: 1 of 1 operations done"
            )
            events_before = await event_ids(server, instance_id)
            received_before = await dashboard.received_event_ids()

            # The first operation ends; the second holds the stage. Only the report moves.
            one.release.set()
            await asyncio.wait_for(two.started.wait(), timeout=TIMEOUT_MS / 1000)
            await expect(message).to_have_text("analyze: 1 of 3 operations done")
            third = str((1 + 1 / 3) / 2)  # as the page writes the number it was given
            await expect(bar).to_have_attribute("value", third)
            await expect(panel.get_by_test_id("instance-stage")).to_have_text("analyze")
            await expect(row_bar).to_have_attribute("value", third)
            await expect(row.locator(".progress")).to_have_attribute(
                "title", "analyze: 1 of 3 operations done"
            )
            await expect(row).to_contain_text("analyze")
            await expect(panel).to_have_attribute("data-status", "running")
            assert not two.release.is_set()
            # No event came in between: the page read the report on its own.
            assert await event_ids(server, instance_id) == events_before
            assert await dashboard.received_event_ids() == received_before

            two.release.set()
            await until_status(server, instance_id, "completed")
            await expect(panel).to_have_attribute("data-status", "completed")
            await expect(message).to_have_text("analyze: 3 of 3 operations done")
            await expect(row).to_have_attribute("data-status", "completed")
            assert dashboard.problems == []


def reads(posted: list[str], operation: str) -> int:
    """How many of the page's POSTs ran the named query (`Instance`: the panel's, `Instances`:
    the table's)."""
    return sum(f"query {operation}(" in body for body in posted)


HIDE = """() => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
  document.dispatchEvent(new Event("visibilitychange"));
}"""
SHOW = """() => {
  delete document.visibilityState;
  document.dispatchEvent(new Event("visibilitychange"));
}"""


async def test_a_hidden_page_lets_its_reads_pass_and_a_visible_one_reads_once_a_period(
    settings: Settings, browser: Browser
) -> None:
    # The page's clock stands still: its timers fire only as the test moves it, so every
    # read counted here is one a timer made (no event comes while the stage is held).
    async with gated_server(settings) as (server, one, two):
        body = await server.graphql(ENQUEUE)
        instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
        await asyncio.wait_for(one.started.wait(), timeout=TIMEOUT_MS / 1000)
        async with open_dashboard(browser, server, fake_clock=True) as dashboard:
            page, posted = dashboard.page, dashboard.posted
            row = dashboard.row(instance_id)
            await expect(row).to_have_attribute("data-status", "running")
            await dashboard.open_instance(instance_id)
            message = page.get_by_test_id("instance-message")
            await expect(message).to_have_text("first: 1 of 1 operations done")

            # Hidden, the page lets its periods pass while the report moves.
            await page.evaluate(HIDE)
            panel_reads, table_reads = reads(posted, "Instance"), reads(posted, "Instances")
            one.release.set()
            await asyncio.wait_for(two.started.wait(), timeout=TIMEOUT_MS / 1000)
            for _ in range(3):
                await page.clock.run_for(PERIOD_MS)
            # Visible again: one read of each, at once, with no timer run.
            await page.evaluate(SHOW)
            await expect(message).to_have_text("analyze: 1 of 3 operations done")
            await expect(row.locator(".progress")).to_have_attribute(
                "title", "analyze: 1 of 3 operations done"
            )
            assert (reads(posted, "Instance"), reads(posted, "Instances")) == (
                panel_reads + 1,
                table_reads + 1,
            )

            # Then one of each a period, while it runs.
            await page.clock.run_for(PERIOD_MS)

            async def read_again() -> bool:
                counted = (reads(posted, "Instance"), reads(posted, "Instances"))
                return counted == (panel_reads + 2, table_reads + 2)

            await wait_until(read_again)
            assert dashboard.problems == []
