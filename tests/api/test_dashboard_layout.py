"""The dashboard in a phone-sized window (the set-up of test_dashboard.py): wide tables scroll
inside their own box, and the page itself never scrolls sideways."""

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
