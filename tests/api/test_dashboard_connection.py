"""The dashboard's live connection when the server turns it away (the set-up of
test_dashboard.py): a tab over its token's connections says so and retries slowly, and failed
handshakes are retried no faster than the server's handshake budget for an address allows.

The page runs on Playwright's clock: each test reads when the page will try again (the
connection state's `data-retry-at`) and moves the clock there, so minutes of retries take no
time and nothing waits for time to pass.
"""

import re

import pytest
from playwright.async_api import Browser, Locator, Page, expect
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from tests.api.conftest import CHROMIUM, TOKEN, live_server, make_settings, wait_until
from tests.api.test_dashboard import TIMEOUT_MS, Dashboard, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

PROTOCOL = Subprotocol("graphql-transport-ws")
MINUTE_MS = 60_000
RETRY_AT = re.compile(r"^\d+$")


async def next_retry(page: Page, connection: Locator, after: str | None) -> tuple[str, int]:
    """Wait until the page has planned a retry other than `after`; its `data-retry-at`, and
    how many ms from now (on the page's clock) it is."""
    if after is not None:
        await expect(connection).not_to_have_attribute("data-retry-at", after)
    await expect(connection).to_have_attribute("data-retry-at", RETRY_AT)
    at = await connection.get_attribute("data-retry-at")
    assert at is not None
    now: int = await page.evaluate("Date.now()")
    return at, int(at) - now


async def handshakes_settle(dashboard: Dashboard, count: int) -> None:
    async def seen() -> bool:
        return len(dashboard.sockets) >= count

    await wait_until(seen)
    assert len(dashboard.sockets) == count


async def test_a_tab_over_its_tokens_connections_says_so_and_retries_slowly(
    database_url: str, browser: Browser
) -> None:
    # Closed with 4429 (the token has its maximum of live connections), the tab said
    # "Reconnecting in 5 s…" and tried again every 5 s, for as long as the other tabs stayed
    # open: each try spent one of its address's handshakes.
    settings = make_settings(database_url, api_tokens=(TOKEN,), ws_connections_per_token=1)
    async with (
        live_server(settings) as server,
        open_dashboard(browser, server, token=TOKEN) as first,
    ):
        second_tab = open_dashboard(browser, server, live=False, token=TOKEN, fake_clock=True)
        async with second_tab as second:
            page = second.page
            connection = second.connection
            await expect(connection).to_have_attribute("data-state", "too-many-connections")
            await expect(connection).to_contain_text("too many live connections for this API token")
            await expect(connection).to_contain_text("Close another tab")
            at, wait = await next_retry(page, connection, None)
            assert MINUTE_MS // 2 <= wait <= MINUTE_MS
            assert len(second.sockets) == 1
            # A second short of its time, it has not tried again.
            await page.clock.run_for(wait - 1000)
            await expect(connection).to_have_attribute("data-retry-at", at)
            assert len(second.sockets) == 1
            await page.clock.run_for(1000)
            await handshakes_settle(second, 2)
            await expect(connection).to_have_attribute("data-state", "too-many-connections")
            at, wait = await next_retry(page, connection, at)
            assert MINUTE_MS // 2 <= wait <= MINUTE_MS

            # Another tab closes: at its next try this one is live.
            await first.page.context.close()

            async def first_gone() -> bool:
                return bool((await server.health())["subscribers"] == 0)

            await wait_until(first_gone)
            await page.clock.run_for(wait)
            await expect(connection).to_have_attribute("data-state", "connected")
            assert len(second.sockets) == 3
            await expect(connection).not_to_have_attribute("data-retry-at", RETRY_AT)
            assert second.problems == []


async def test_refused_handshakes_are_retried_within_the_addresss_budget(
    database_url: str, browser: Browser
) -> None:
    # A handshake refused with HTTP 429 (the address is past its handshakes a minute) is a
    # socket closed with 1006 to the page, like a server that is away. The page retried every
    # 5 s at most: twelve a minute from each tab, past the budget of ten for the address.
    settings = make_settings(database_url, ws_handshakes_per_minute=1, limit_local_clients=True)
    async with live_server(settings) as server:
        async with connect(server.ws_url, subprotocols=[PROTOCOL]):
            pass  # this address's one handshake of the minute
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.ws_url, subprotocols=[PROTOCOL]):
                pass
        assert refused.value.response.status_code == 429
        async with open_dashboard(browser, server, live=False, fake_clock=True) as dashboard:
            page = dashboard.page
            connection = dashboard.connection
            tried = [0]  # when each handshake began, in ms after the first
            at = None
            for attempt in range(1, 15):
                at, wait = await next_retry(page, connection, at)
                await expect(connection).to_have_attribute("data-state", "reconnecting")
                await page.clock.run_for(wait)
                await handshakes_settle(dashboard, attempt + 1)
                tried.append(tried[-1] + wait)
            # At most the address's default budget (ten) in any minute, and once the failures
            # have gone on for a minute, at most three a minute (the 30 s cap, less jitter).
            for start in tried:
                in_minute = [t for t in tried if start <= t < start + MINUTE_MS]
                assert len(in_minute) <= 10, tried
                if start >= MINUTE_MS:
                    assert len(in_minute) <= 3, tried
            assert tried[-1] >= 2 * MINUTE_MS, tried
            await expect(connection).to_contain_text(re.compile(r"Reconnecting in \d+ s"))
