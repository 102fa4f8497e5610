"""The dashboard in a phone-sized window (the set-up of test_dashboard.py): wide tables scroll
inside their own box, and the page itself never scrolls sideways."""

import uuid

import asyncpg
import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, LiveServer
from tests.api.test_dashboard import TIMEOUT_MS, enqueue_keyed, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)


@pytest.mark.parametrize("width", [320, 375])
async def test_a_phone_never_scrolls_the_page_sideways_with_a_waiting_row(
    server: LiveServer, browser: Browser, width: int
) -> None:
    # A row's waiting reason carries its message for screen readers in a visually hidden
    # span, absolutely positioned. The table's scroll box was not positioned, so the span
    # was laid out against the page: the page grew to the table's width (383 px).
    delayed = await enqueue_keyed(server, "hello", {"name": "later"}, "tenant", 600_000)
    async with open_dashboard(browser, server, viewport={"width": width, "height": 700}) as dash:
        page = dash.page
        badge = dash.row(delayed).get_by_test_id("waiting-reason")
        await expect(badge).to_have_attribute("data-code", "DELAYED")
        await expect(badge.locator(".visually-hidden")).to_have_count(1)
        widths = await page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
            " document.querySelector('[data-testid=instances]').closest('.table-wrap')"
            ".scrollWidth]"
        )
        page_width, window_width, table_width = widths
        assert window_width <= width
        assert page_width <= window_width, widths
        assert table_width > window_width  # the table does need to scroll, in its own box
        assert dash.problems == []


ENQUEUE_IN_QUEUE = """mutation ($queue: String!) {
  enqueueWorkflow(name: "hello", params: {name: "long"}, queue: $queue) { instanceID }
}"""
# The right edges of the row's status badge, of the table's scroll box and of the Queue
# filter, the window's width and the page's.
EDGES = """(id) => {
  const row = document.querySelector(`tr[data-instance-id='${id}']`);
  const right = (node) => node.getBoundingClientRect().right;
  return [right(row.querySelector("[data-testid=row-status]")), right(row.closest(".table-wrap")),
          right(document.querySelector("[data-testid=filter-queue]")),
          document.documentElement.clientWidth, document.documentElement.scrollWidth];
}"""


async def test_a_long_queue_name_leaves_every_rows_status_in_the_window(
    server: LiveServer, browser: Browser
) -> None:
    # The longest name a queue may have, with no place to break: the Queue column grew to fit
    # it on one line and the Queue filter's <select> to its option, so at 1366 px the Status
    # column was past the window's right edge (and the table's scroll box) on every row.
    queue = "Q" * 64
    body = await server.graphql(ENQUEUE_IN_QUEUE, queue=queue)
    instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
    async with open_dashboard(browser, server, viewport={"width": 1366, "height": 768}) as dash:
        page = dash.page
        status = dash.row(instance_id).get_by_test_id("row-status")
        await expect(status).to_be_visible()
        option = page.get_by_test_id("filter-queue").locator(f'option[value="{queue}"]')
        await expect(option).to_have_count(1)
        # As the list is, and with the instance page open beside it (the list's column narrower).
        for opened in (False, True):
            if opened:
                await dash.open_instance(instance_id)
            edges = await page.evaluate(EDGES, instance_id)
            badge_right, wrap_right, select_right, window_width, page_width = edges
            assert badge_right <= wrap_right <= window_width, (opened, edges)
            assert select_right <= window_width / 2, (opened, edges)  # a filter, not a banner
            assert page_width <= window_width, (opened, edges)
        assert dash.problems == []


LONG_STATUS_LINE = (
    "Downloading part 3 of 12 from https://files.example.com/exports/2026/customers.csv"
)
SET_PROGRESS = "UPDATE laneway.instances SET progress = $2, message = $3 WHERE instance_id = $1"
# The right edges of the instance panel, of its status line and of its facts, the window's
# width and the page's.
PANEL_EDGES = """() => {
  const right = (node) => node.getBoundingClientRect().right;
  const panel = document.querySelector("[data-testid=instance-panel]");
  return [right(panel), right(document.querySelector("[data-testid=instance-message]")),
          right(document.querySelector("#instance-facts")),
          document.documentElement.clientWidth, document.documentElement.scrollWidth];
}"""


async def test_a_long_status_line_wraps_inside_the_instance_panel(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    # The Progress row holds the bar and the handler's status line on one line (white-space:
    # nowrap), and the facts' value column (1fr) grew to fit it: at 1400 × 900 the panel's
    # content was 866 px wide in a 478 px panel, and the page scrolled sideways.
    delayed = await enqueue_keyed(server, "hello", {"name": "later"}, "tenant", 600_000)
    await admin.execute(SET_PROGRESS, uuid.UUID(delayed), 0.25, LONG_STATUS_LINE)
    async with open_dashboard(browser, server, viewport={"width": 1400, "height": 900}) as dash:
        page = dash.page
        await dash.open_instance(delayed)
        message = page.get_by_test_id("instance-message")
        await expect(message).to_have_text(LONG_STATUS_LINE)
        await expect(dash.panel.locator("progress")).to_have_attribute("value", "0.25")
        edges = await page.evaluate(PANEL_EDGES)
        panel_right, message_right, facts_right, window_width, page_width = edges
        assert message_right <= panel_right, edges
        assert facts_right <= panel_right, edges
        assert page_width <= window_width, edges
        # The list's row keeps its bar on one line, the line in its title.
        row_progress = dash.row(delayed).locator(".progress")
        await expect(row_progress).to_have_attribute("title", LONG_STATUS_LINE)
        await expect(row_progress).to_have_css("white-space", "nowrap")
        assert dash.problems == []
