"""The dashboard's instance list pages with cursors, in a real browser (the set-up of
test_dashboard.py): Older and Newer walk workflowInstancesConnection's pages through a stack of
cursors; an older page keeps its rows while new instances arrive above it, and its rows still
change live; an address with a cursor opens that page.
"""

import asyncpg
import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, LiveServer, wait_until
from tests.api.test_dashboard import ENQUEUE_HELLO, STATUS, TIMEOUT_MS, Dashboard, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

# 60 instances of hello, one second apart, the newest a minute ago; all completed but the
# 31st newest (the sixth row of the second page of 25), which is paused and can be cancelled.
SEED = """
INSERT INTO laneway.instances (instance_id, name, queue, status, finished_at, created_at,
                               updated_at)
SELECT gen_random_uuid(), 'hello', 'hello', CASE WHEN g = 31 THEN 'paused' ELSE 'completed' END,
       CASE WHEN g = 31 THEN NULL ELSE now() END,
       now() - interval '1 minute' - g * interval '1 second', now()
  FROM generate_series(1, 60) AS g
"""
NEWEST_FIRST = (
    "SELECT instance_id FROM laneway.instances ORDER BY created_at DESC, instance_id DESC"
)
CANCEL = "mutation ($id: ID!) { cancelWorkflow(instanceID: $id) { status } }"


async def seeded(admin: asyncpg.Connection) -> list[str]:
    await admin.execute(SEED)
    return [str(row["instance_id"]) for row in await admin.fetch(NEWEST_FIRST)]


async def shows(dashboard: Dashboard, ids: list[str], info: str) -> None:
    """The table shows exactly these rows, in this order, and the pager says `info`."""
    rows = dashboard.page.get_by_test_id("instance-row")
    await expect(rows).to_have_count(len(ids))
    await expect(dashboard.page.get_by_test_id("page-info")).to_have_text(info)
    shown = await rows.evaluate_all("rows => rows.map(r => r.dataset.instanceId)")
    assert shown == ids


async def test_older_and_newer_walk_the_pages_by_cursor(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    every = await seeded(admin)
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        newer, older = page.get_by_test_id("page-prev"), page.get_by_test_id("page-next")
        await page.get_by_test_id("filter-limit").select_option("25")
        await shows(dashboard, every[:25], "1–25")
        await expect(newer).to_be_disabled()
        await older.click()
        await shows(dashboard, every[25:50], "26–50")
        assert "after=" in await page.evaluate("location.hash")
        await older.click()
        await shows(dashboard, every[50:], "51–60")
        await expect(older).to_be_disabled()
        await newer.click()
        await shows(dashboard, every[25:50], "26–50")
        await newer.click()
        await shows(dashboard, every[:25], "1–25")
        await expect(newer).to_be_disabled()
        assert "after=" not in await page.evaluate("location.hash")
        assert dashboard.problems == []


async def test_an_older_page_keeps_its_rows_and_their_live_changes(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    every = await seeded(admin)
    paused = every[30]
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await page.get_by_test_id("filter-limit").select_option("25")
        await shows(dashboard, every[:25], "1–25")
        await page.get_by_test_id("page-next").click()
        await shows(dashboard, every[25:50], "26–50")

        # A new instance arrives above the page: with offsets the page would shift by one.
        body = await server.graphql(ENQUEUE_HELLO, name="Newest")
        newest = body["data"]["enqueueWorkflow"]["instanceID"]

        async def completed() -> bool:
            status = await server.graphql(STATUS, id=newest)
            return bool(status["data"]["workflowInstance"]["status"] == "completed")

        await wait_until(completed)
        # A row of this page changes: the table follows it live (its event comes after the
        # new instance's, so the page has had those by now).
        await server.graphql(CANCEL, id=paused)
        await expect(dashboard.row(paused)).to_have_attribute("data-status", "cancelled")
        await shows(dashboard, every[25:50], "26–50")

        await page.get_by_test_id("page-prev").click()
        await shows(dashboard, [newest, *every[:24]], "1–25")
        await expect(dashboard.row(newest)).to_have_attribute("data-status", "completed")
        assert dashboard.problems == []


async def test_an_address_with_a_cursor_opens_that_page(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    every = await seeded(admin)
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await page.get_by_test_id("filter-limit").select_option("25")
        await shows(dashboard, every[:25], "1–25")
        await page.get_by_test_id("page-next").click()
        await shows(dashboard, every[25:50], "26–50")
        address = page.url
    async with open_dashboard(browser, server) as reopened:
        page = reopened.page
        await page.goto(address)
        await page.reload()
        # Where the page is in the list is not known from the address alone.
        await shows(reopened, every[25:50], "25 older instances")
        await page.get_by_test_id("page-prev").click()
        await shows(reopened, every[:25], "1–25")
        await page.goto(address.replace("after=", "after=%25%25"))
        await page.reload()
        await shows(reopened, every[:25], "1–25")  # not a cursor: the newest page
        assert reopened.problems == []
