"""The dashboard through a network path that goes silent (the set-up of test_dashboard.py):
a laptop that changes networks, or a NAT that forgets its connections, leaves every open TCP
connection hanging with no FIN or RST. The page must notice, reconnect and load afresh, not
wait forever on what it had asked before.

The page runs on Playwright's clock, running in real time, and the test jumps it forward past
the websocket's ping timeout and a request's time limit, so nothing waits for them to pass.
"""

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, live_server, make_settings, wait_until
from tests.api.test_dashboard import TIMEOUT_MS, enqueue_hello, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

# The page's timings (dashboard.html): a ping every 15 s, answered within 10 s, and a request
# given 20 s.
PING_EVERY_MS = 15_000
PONG_WITHIN_MS = 10_000
REQUEST_TIMEOUT_MS = 20_000


@dataclasses.dataclass
class Connection:
    frozen: bool
    tasks: list["asyncio.Task[None]"] = dataclasses.field(default_factory=list)
    writers: list[asyncio.StreamWriter] = dataclasses.field(default_factory=list)


class FreezingProxy:
    """A TCP proxy to 127.0.0.1:`target` whose path can go silent: blackhole() holds every
    byte of the connections open then and of those opened until restore(), closing nothing;
    after restore() new connections are carried again, while the frozen ones stay frozen, as
    their state was lost with the old network."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self.holding = False
        self.connections: list[Connection] = []
        self._server: asyncio.Server | None = None

    def blackhole(self) -> None:
        self.holding = True
        for connection in self.connections:
            connection.frozen = True

    def restore(self) -> None:
        self.holding = False

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: Connection
    ) -> None:
        try:
            while data := await reader.read(65536):
                if connection.frozen:
                    await asyncio.Event().wait()  # held until the test ends
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        if not connection.frozen:
            writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        connection = Connection(frozen=self.holding, writers=[client_w, server_w])
        self.connections.append(connection)
        connection.tasks = [
            asyncio.create_task(self._pipe(client_r, server_w, connection)),
            asyncio.create_task(self._pipe(server_r, client_w, connection)),
        ]

    @asynccontextmanager
    async def running(self) -> AsyncIterator["FreezingProxy"]:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            for connection in self.connections:
                for task in connection.tasks:
                    task.cancel()
                for writer in connection.writers:
                    writer.close()
            await asyncio.gather(
                *(t for c in self.connections for t in c.tasks), return_exceptions=True
            )
            await self._server.wait_closed()


async def test_after_a_network_blip_the_list_shows_what_was_enqueued_after_it(
    database_url: str, browser: Browser
) -> None:
    # The websocket noticed the blip by its ping timeout, reconnected and said "Live", but
    # the list's request that hung at the blip had no time limit: the list's refresher waited
    # for it forever, taking every later refresh (the reconnect's among them) for one already
    # running. The list never showed an instance enqueued after the blip, and the queue cards
    # stayed as they were.
    # The page's address is the proxy's port, which the server allows as any port of itself.
    settings = make_settings(database_url, engine_enabled=False, allowed_hosts=("127.0.0.1",))
    async with live_server(settings) as server, FreezingProxy(server.port).running() as proxy:
        before = await enqueue_hello(server, "before")
        through_proxy = dataclasses.replace(server, port=proxy.port)
        async with open_dashboard(browser, through_proxy, running_clock=True) as dash:
            page = dash.page
            await expect(dash.row(before)).to_have_attribute("data-status", "pending")
            card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
            await expect(card.get_by_test_id("count-pending")).to_have_text("1")

            proxy.blackhole()
            asked = len(dash.posted)
            await page.get_by_test_id("filter-name").select_option("hello")

            async def list_asked() -> bool:
                return any("workflowInstancesConnection" in body for body in dash.posted[asked:])

            await wait_until(list_asked)  # and its answer will never come
            proxy.restore()

            # The ping goes unanswered; its timeout drops the socket, and the page reconnects.
            await page.clock.fast_forward(PING_EVERY_MS + 1000)
            await page.clock.fast_forward(PONG_WITHIN_MS + 1000)
            await expect(dash.connection).to_have_attribute("data-state", "connected")
            assert len(dash.sockets) == 2

            after = await enqueue_hello(server, "after")
            row = dash.row(after)
            # A request the page sends on a connection the blip froze (Chromium keeps idle
            # ones for reuse) is given up at its time limit, and the load tried again.
            for _ in range(8):
                try:
                    await expect(row).to_have_attribute("data-status", "pending", timeout=2_000)
                    break
                except AssertionError:
                    await page.clock.fast_forward(REQUEST_TIMEOUT_MS)
            await expect(row).to_have_attribute("data-status", "pending")
            await expect(card.get_by_test_id("count-pending")).to_have_text("2")
            await expect(dash.connection).to_have_attribute("data-state", "connected")
