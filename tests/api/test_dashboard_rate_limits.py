"""The dashboard on a server whose rate limit it runs into (the set-up of test_dashboard.py):
a refused subscribe is waited out on the open socket and sent again from the last event, and
a refused read is tried again, where the page used to reconnect several times a second.

The server's rate limiter runs on a clock the test holds (ServerClock): its bucket stays
empty until the test lets time pass for it, so what the page is refused does not depend on
how fast the machine is. The page's own clock is the real one.
"""

import functools
import json
import re
import time
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, expect

from laneway.api.http import stack
from laneway.api.http.rate_limits import RateLimiter
from tests.api.conftest import CHROMIUM, live_server, make_settings, running_services, wait_until
from tests.api.test_dashboard import TIMEOUT_MS, Dashboard, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

READ = {"query": "{ workflows { name } }"}
EVENTS_AFTER = "SELECT event_id::text FROM laneway.events WHERE event_id > $1 ORDER BY event_id"


class ServerClock:
    """The rate limiter's clock: it stands still (no bucket refills) until `run()`, then runs
    `speed` times as fast as the real one."""

    def __init__(self) -> None:
        self.stopped_at = time.monotonic()
        self.started: tuple[float, float] | None = None  # (real time then, speed)

    def __call__(self) -> float:
        if self.started is None:
            return self.stopped_at
        since, speed = self.started
        return self.stopped_at + (time.monotonic() - since) * speed

    def run(self, speed: float) -> None:
        self.started = (time.monotonic(), speed)


@pytest.fixture
def server_clock(monkeypatch: pytest.MonkeyPatch) -> ServerClock:
    clock = ServerClock()
    monkeypatch.setattr(stack, "RateLimiter", functools.partial(RateLimiter, clock=clock))
    return clock


def subscribes(dashboard: Dashboard) -> int:
    return sum(json.loads(frame).get("type") == "subscribe" for frame in dashboard.frames_sent)


async def test_a_rate_limited_subscription_waits_on_its_socket_and_resumes_from_its_cursor(
    database_url: str, browser: Browser, admin: asyncpg.Connection, server_clock: ServerClock
) -> None:
    # Each `subscribe` refused with RATE_LIMITED made the page drop its socket and reconnect
    # at once (its connection_ack had reset the backoff), 4 to 5 times a second, with "Live"
    # on the badge; each reconnect read everything again over HTTP (refused too), keeping the
    # bucket empty itself, and a refused read was never tried again.
    settings = make_settings(
        database_url,
        engine_enabled=False,
        limit_local_clients=True,
        rate_limit_per_second=1.0,
        rate_burst=3,
    )
    async with live_server(settings) as server:
        statuses = [(await server.client.post("/graphql", json=READ)).status_code for _ in "1234"]
        assert statuses == [200, 200, 200, 429]  # the bucket is empty, and stays so
        async with open_dashboard(browser, server, live=False) as dash:
            page = dash.page
            connection = dash.connection
            await expect(connection).to_have_attribute("data-state", "rate-limited")
            await expect(connection).to_have_text(re.compile(r"^Rate limited; retrying in \d+ s…$"))
            await expect(connection).to_have_attribute("title", "Too many requests; slow down.")
            await expect(connection).to_have_attribute("data-retry-at", re.compile(r"^\d+$"))
            await expect(page.get_by_test_id("notice")).to_contain_text(
                re.compile(r"Too many requests; slow down\. Trying again in \d+ s\.")
            )
            start = await page.evaluate("window.lanewayDashboard.startCursor")
            assert start is not None

            # Written while the page is refused: it must come with the replay.
            async with running_services(settings) as services:
                missed = await services.engine.enqueue("hello", {"name": "missed"})

            # The page subscribes again on the same socket, and again, each time refused.
            async def subscribed_thrice() -> bool:
                return subscribes(dash) >= 3

            await wait_until(subscribed_thrice)
            assert len(dash.sockets) == 1, dash.sockets
            await expect(connection).to_have_attribute("data-state", "rate-limited")
            assert not await page.evaluate("window.lanewayDashboard.receivedEventIDs()")

            # The limit allows again: the page goes live on that socket, replays what it
            # missed, and reads what it was refused (the workflows come with no event).
            server_clock.run(speed=5.0)
            await expect(connection).to_have_attribute("data-state", "connected")
            await expect(connection).to_have_text("Live")
            await expect(connection).not_to_have_attribute("data-retry-at", re.compile("."))
            await expect(dash.row(str(missed.instance_id))).to_have_attribute(
                "data-status", "pending"
            )
            workflows = page.get_by_test_id("enqueue-workflow")
            await expect(workflows.locator('option[value="hello"]')).to_have_count(1)
            await expect(page.get_by_test_id("notice")).to_be_hidden()

            async with running_services(settings) as services:
                live = await services.engine.enqueue("hello", {"name": "live"})
            await expect(dash.row(str(live.instance_id))).to_have_attribute(
                "data-status", "pending"
            )
            expected = [row[0] for row in await admin.fetch(EVENTS_AFTER, int(start))]

            async def caught_up() -> bool:
                received: Any = await page.evaluate("window.lanewayDashboard.receivedEventIDs()")
                return bool(received == expected)

            await wait_until(caught_up)
            assert len(expected) == 2
            assert len(dash.sockets) == 1, dash.sockets
            # Chromium logs each refused read (an HTTP 429) as an error; nothing else.
            assert [p for p in dash.problems if "status of 429" not in p] == []
