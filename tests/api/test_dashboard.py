"""The dashboard at / in a real browser: Debian's Chromium, headless, driven by Playwright.

Each test serves the app with uvicorn on 127.0.0.1 (the example workflows, the engine on)
and opens / in a fresh browser context. Waits are Playwright expectations with timeouts,
never sleeps. Without /usr/bin/chromium every test is skipped, and no browser is ever
downloaded (`playwright install` is not part of this project).
"""

import asyncio
import dataclasses
import json
import os
import re
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, Locator, Page, ViewportSize, expect

from app import host
from laneway.services import open_services
from tests.api.conftest import (
    CHROMIUM,
    TOKEN,
    LiveServer,
    live_server,
    make_settings,
    running_services,
    wait_until,
)

TIMEOUT_MS = 20_000
INSTANCE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ENQUEUE_HELLO = """mutation ($name: String!) {
  enqueueWorkflow(name: "hello", params: {name: $name}) { instanceID }
}"""
STATUS = "query ($id: ID!) { workflowInstance(instanceID: $id) { status } }"
HISTORY = (
    "query ($after: ID) { workflowEventHistory(afterEventID: $after, limit: 500) { eventID } }"
)
OF_INSTANCE = "query ($id: ID) { workflowEventHistory(instanceID: $id) { eventID } }"
ENQUEUE_KEYED = """mutation ($name: String!, $params: JSON, $delayMs: Float, $key: String) {
  enqueueWorkflow(name: $name, params: $params, delayMs: $delayMs, concurrencyKey: $key) {
    instanceID
  }
}"""
ONE_KEY_AT_A_TIME = """mutation {
  configureQueue(name: "countdown", concurrency: 5, keyConcurrency: 1) { keyConcurrency }
}"""
CANCEL = "mutation ($id: ID!) { cancelWorkflow(instanceID: $id) { status } }"
WAITING = (
    "query ($id: ID!) { workflowInstance(instanceID: $id) { waitingReason { code message } } }"
)

expect.set_options(timeout=TIMEOUT_MS)

# Checked before any fixture runs, so a machine without Chromium starts no server for nothing.
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: `apt-get install chromium` to run the dashboard's browser "
    "tests (.ci/run installs it)",
)


@dataclass
class Dashboard:
    """One open dashboard page and what it did: console errors, requests, websocket frames."""

    page: Page
    origin: str
    problems: list[str] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    frames_sent: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)
    posted: list[str] = field(default_factory=list)  # the bodies of its POSTs, in order

    @property
    def connection(self) -> Locator:
        return self.page.get_by_test_id("connection-state")

    @property
    def panel(self) -> Locator:
        return self.page.get_by_test_id("instance-panel")

    def row(self, instance_id: str) -> Locator:
        return self.page.locator(f'tr[data-instance-id="{instance_id}"]')

    async def enqueue(self, workflow: str, params: dict[str, Any]) -> str:
        """Enqueue through the page's form; the new instance's id."""
        await self.page.get_by_test_id("enqueue-workflow").select_option(workflow)
        await self.page.get_by_test_id("enqueue-params").fill(json.dumps(params))
        await self.page.get_by_role("button", name="Enqueue", exact=True).click()
        result = self.page.get_by_test_id("enqueue-result")
        await expect(result).to_have_attribute("data-instance-id", INSTANCE_ID)
        instance_id = await result.get_attribute("data-instance-id")
        assert instance_id is not None
        return instance_id

    async def open_instance(self, instance_id: str) -> None:
        await self.row(instance_id).get_by_role("link").click()
        await expect(self.panel).to_have_attribute("data-instance-id", instance_id)

    async def received_event_ids(self) -> list[str]:
        ids: list[str] = await self.page.evaluate("window.lanewayDashboard.receivedEventIDs()")
        return ids


@asynccontextmanager
async def open_dashboard(
    browser: Browser,
    server: LiveServer,
    *,
    live: bool = True,
    viewport: ViewportSize | None = None,
    token: str | None = None,
    fake_clock: bool = False,
    running_clock: bool = False,
) -> AsyncIterator[Dashboard]:
    """Open the dashboard (/, or the prefix a host mounts Laneway at) in a fresh context
    (with a window of `viewport`'s size, else Playwright's 1280 × 720); with `live`, wait
    until its event stream is connected. `token`: in the tab's session storage before the
    page loads, as if entered earlier. `fake_clock`: the page's clock stands still from
    before it loads, and its timers fire only as the test moves it (`page.clock.run_for`).
    `running_clock`: the page's clock runs in real time, and the test can jump it forward
    (`page.clock.fast_forward`)."""
    context = await browser.new_context(viewport=viewport)
    context.set_default_timeout(TIMEOUT_MS)
    if token is not None:
        await context.add_init_script(
            f"sessionStorage.setItem('laneway.apiToken', {json.dumps(token)})"
        )
    page = await context.new_page()
    if fake_clock:
        await page.clock.install()
        await page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))
    elif running_clock:
        await page.clock.install()
    dashboard = Dashboard(page=page, origin=f"http://127.0.0.1:{server.port}")

    def on_console(message: Any) -> None:
        if message.type == "error":
            dashboard.problems.append(f"console error: {message.text}")

    def on_request(request: Any) -> None:
        dashboard.requests.append((request.url, request.headers))
        if request.method == "POST":
            dashboard.posted.append(request.post_data or "")

    def on_websocket(socket: Any) -> None:
        dashboard.sockets.append(socket.url)
        socket.on("framesent", lambda payload: dashboard.frames_sent.append(str(payload)))

    page.on("console", on_console)
    page.on("pageerror", lambda error: dashboard.problems.append(f"page error: {error}"))
    page.on("request", on_request)
    page.on("websocket", on_websocket)
    try:
        await page.goto(f"{dashboard.origin}{server.prefix}/")
        if live:
            await expect(dashboard.connection).to_have_attribute("data-state", "connected")
        yield dashboard
    finally:
        await context.close()


@asynccontextmanager
async def token_protected_dashboard(
    database_url: str, browser: Browser
) -> AsyncIterator[Dashboard]:
    """The dashboard of a server that needs TOKEN, opened without one (not live yet)."""
    settings = make_settings(database_url, api_tokens=(TOKEN,))
    async with (
        live_server(settings) as secured,
        open_dashboard(browser, secured, live=False) as dashboard,
    ):
        yield dashboard


async def enqueue_hello(server: LiveServer, name: str) -> str:
    body = await server.graphql(ENQUEUE_HELLO, token=_token(server), name=name)
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def enqueue_keyed(
    server: LiveServer, name: str, params: dict[str, Any], key: str, delay_ms: float | None = None
) -> str:
    body = await server.graphql(
        ENQUEUE_KEYED, token=_token(server), name=name, params=params, delayMs=delay_ms, key=key
    )
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def waiting_message(server: LiveServer, instance_id: str, code: str) -> str:
    """The server's waiting-reason message for the instance, which must be waiting on `code`."""
    body = await server.graphql(WAITING, token=_token(server), id=instance_id)
    reason = body["data"]["workflowInstance"]["waitingReason"]
    assert reason is not None
    assert reason["code"] == code
    message: str = reason["message"]
    return message


def _token(server: LiveServer) -> str | None:
    return server.settings.api_tokens[0] if server.settings.api_tokens else None


async def assert_page_saw_every_event(dashboard: Dashboard, server: LiveServer) -> None:
    """The page received every event after the cursor it started from, once each, in order."""
    start = await dashboard.page.evaluate("window.lanewayDashboard.startCursor")
    assert start is not None

    async def expected() -> list[str]:
        body = await server.graphql(HISTORY, token=_token(server), after=start)
        return [e["eventID"] for e in body["data"]["workflowEventHistory"]]

    async def caught_up() -> bool:
        history = await expected()
        cursor = await dashboard.page.evaluate("window.lanewayDashboard.cursor")
        return bool(history) and cursor == history[-1]

    await wait_until(caught_up)
    assert await dashboard.received_event_ids() == await expected()


async def test_page_loads_with_no_console_errors_and_only_its_own_assets(
    server: LiveServer, browser: Browser
) -> None:
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await expect(page).to_have_title("Laneway dashboard")
        await expect(page.get_by_role("heading", name="Laneway", exact=True)).to_be_visible()
        workflows = page.get_by_test_id("enqueue-workflow")
        await expect(workflows.locator('option[value="hello"]')).to_have_count(1)
        await expect(
            page.locator('[data-testid="queue-card"][data-queue="report"]')
        ).to_be_visible()
        await expect(page.get_by_test_id("instances-empty")).to_be_visible()
        graphiql = page.get_by_role("link", name="GraphiQL")
        await expect(graphiql).to_have_attribute("href", "graphql")  # relative to the page
        assert await graphiql.evaluate("a => a.href") == f"{dashboard.origin}/graphql"
        assert dashboard.problems == []
        assert dashboard.requests
        outside = [url for url, _ in dashboard.requests if not url.startswith(dashboard.origin)]
        assert outside == []


async def test_hello_enqueued_from_the_page_completes_live(
    server: LiveServer, browser: Browser
) -> None:
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await page.evaluate("window.sameDocument = true")
        instance_id = await dashboard.enqueue("hello", {"name": "Browser"})
        row = dashboard.row(instance_id)
        await expect(row).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("instance-row").first).to_have_attribute(
            "data-instance-id", instance_id
        )
        hello_queue = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        await expect(hello_queue.get_by_test_id("count-completed")).to_have_text("1")
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("instance-result")).to_contain_text("Hello, Browser!")
        await expect(page.get_by_test_id("instance-workflow")).to_have_text("hello (version 1)")
        timeline = page.get_by_test_id("timeline-event")
        await expect(timeline).to_have_count(3)
        assert await timeline.evaluate_all("items => items.map(i => i.dataset.type)") == [
            "enqueued",
            "started",
            "completed",
        ]
        assert await page.evaluate("window.sameDocument") is True  # live, not reloaded
        assert dashboard.problems == []


async def test_countdown_cancelled_from_the_page_ends_cancelled(
    server: LiveServer, browser: Browser
) -> None:
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        instance_id = await dashboard.enqueue("countdown", {"n": 50, "delayMs": 200})
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "running")
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "running")
        await page.get_by_test_id("action-cancel").click()
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "cancelled")
        await expect(dashboard.panel).to_have_attribute("data-status", "cancelled")
        await expect(
            page.locator('[data-testid="timeline-event"][data-type="cancelled"]')
        ).to_have_count(1)
        await expect(page.get_by_test_id("action-cancel")).to_be_disabled()
        body = await server.graphql(STATUS, id=instance_id)
        assert body["data"]["workflowInstance"]["status"] == "cancelled"
        assert dashboard.problems == []


async def test_report_paused_at_data_ready_is_resumed_from_the_page_and_completes(
    server: LiveServer, browser: Browser
) -> None:
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        instance_id = await dashboard.enqueue("report", {"review": True})
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "paused")
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "paused")
        await expect(page.get_by_test_id("instance-checkpoint")).to_have_text("data_ready")
        collect = page.locator('[data-testid="operation-row"][data-operation="collect"]')
        await expect(collect).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("action-retry")).to_be_disabled()
        await page.get_by_test_id("action-resume").click()
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "completed")
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("operation-row")).to_have_count(5)
        await expect(
            page.locator('[data-testid="timeline-event"][data-type="resumed"]')
        ).to_have_count(1)
        # The chained `hello` child is the newest instance: it appears at the top of the table.
        newest = page.get_by_test_id("instance-row").first
        await expect(newest.locator("td").nth(1)).to_have_text("hello")
        await expect(newest).to_have_attribute("data-status", "completed")
        assert dashboard.problems == []


async def test_a_killed_listener_connection_loses_no_row_update(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    async with open_dashboard(browser, server) as dashboard:
        before = await enqueue_hello(server, "before")
        await expect(dashboard.row(before)).to_have_attribute("data-status", "completed")
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
        )
        assert killed == 1
        after = await enqueue_hello(server, "after")
        await expect(dashboard.row(after)).to_have_attribute("data-status", "completed")
        await expect(dashboard.connection).to_have_attribute("data-state", "connected")
        await assert_page_saw_every_event(dashboard, server)

        async def listening() -> bool:
            listener: object = (await server.health())["listener"]
            return listener == "ok"

        await wait_until(listening)
        assert dashboard.problems == []


async def test_page_resubscribes_after_its_event_id_when_the_server_drops_the_socket(
    database_url: str, browser: Browser
) -> None:
    settings = make_settings(database_url)
    async with AsyncExitStack() as pages:
        async with live_server(settings) as first:
            port = first.port
            dashboard = await pages.enter_async_context(open_dashboard(browser, first))
            before = await enqueue_hello(first, "before")
            await expect(dashboard.row(before)).to_have_attribute("data-status", "completed")
        # The server is gone (its shutdown closed the page's websocket): the page shows it.
        await expect(dashboard.connection).to_have_attribute("data-state", "reconnecting")
        # An instance runs from start to end while the page has no socket at all.
        async with running_services(settings) as services:
            enqueued = await services.engine.enqueue("hello", {"name": "offline"})
            finished = await services.engine.wait(enqueued.instance_id)
            assert finished.status == "completed"
        offline = str(enqueued.instance_id)
        async with live_server(settings, port=port) as second:
            await expect(dashboard.connection).to_have_attribute("data-state", "connected")
            await expect(dashboard.row(offline)).to_have_attribute("data-status", "completed")
            # Its events reached the page only through the replay after the page's cursor.
            await assert_page_saw_every_event(dashboard, second)
            history = await second.graphql(OF_INSTANCE, id=offline)
            offline_events = [e["eventID"] for e in history["data"]["workflowEventHistory"]]
            assert len(offline_events) == 3
            assert set(offline_events) <= set(await dashboard.received_event_ids())
            live = await enqueue_hello(second, "after the restart")
            await expect(dashboard.row(live)).to_have_attribute("data-status", "completed")


async def test_a_server_back_with_other_tokens_is_no_longer_said_to_be_unreachable(
    database_url: str, browser: Browser
) -> None:
    # The notice of a load that failed while the server was down stayed once it was back and
    # refused the page's token: only a load that succeeded cleared it, and the loads waited on
    # the token dialog.
    old = make_settings(database_url, api_tokens=("tok-new-456",))
    async with AsyncExitStack() as pages:
        async with live_server(old) as first:
            port = first.port
            dashboard = await pages.enter_async_context(
                open_dashboard(browser, first, token="tok-new-456")
            )
        page = dashboard.page
        notice = page.get_by_test_id("notice")
        await expect(notice).to_have_text("The server cannot be reached.")
        new = make_settings(database_url, api_tokens=("tok-good-123",))
        async with live_server(new, port=port):
            await expect(page.get_by_test_id("token-dialog")).to_be_visible()
            await expect(page.get_by_test_id("token-reason")).to_contain_text("refused")
            await expect(notice).to_be_hidden()
            await page.get_by_test_id("token-input").fill("tok-good-123")
            await page.get_by_test_id("token-submit").click()
            await expect(dashboard.connection).to_have_attribute("data-state", "connected")
            await expect(notice).to_be_hidden()


async def test_token_protected_server_makes_the_page_ask_for_a_token(
    database_url: str, browser: Browser
) -> None:
    async with token_protected_dashboard(database_url, browser) as dashboard:
        page = dashboard.page
        dialog = page.get_by_test_id("token-dialog")
        await expect(dialog).to_be_visible()
        await expect(dashboard.connection).to_have_attribute("data-state", "needs-token")
        await page.get_by_test_id("token-input").fill("guess")
        await page.get_by_test_id("token-submit").click()
        await expect(page.get_by_test_id("token-reason")).to_contain_text("refused")
        await expect(dialog).to_be_visible()
        await page.get_by_test_id("token-input").fill(TOKEN)
        await page.get_by_test_id("token-submit").click()
        await expect(dialog).to_be_hidden()
        await expect(dashboard.connection).to_have_attribute("data-state", "connected")
        assert await page.evaluate("sessionStorage.getItem('laneway.apiToken')") == TOKEN
        instance_id = await dashboard.enqueue("hello", {"name": "Token"})
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "completed")
    graphql_headers = [h for url, h in dashboard.requests if url.endswith("/graphql")]
    assert {"authorization": f"Bearer {TOKEN}"}.items() <= graphql_headers[-1].items()
    inits = [json.loads(f) for f in dashboard.frames_sent if '"connection_init"' in f]
    assert inits[-1]["payload"] == {"authorization": f"Bearer {TOKEN}"}


async def test_dashboard_works_where_a_host_mounts_laneway(
    database_url: str, browser: Browser
) -> None:
    """app.host mounts the whole app at /laneway: the page, its fetches, its websocket and
    its links all stay under /laneway/, and its token reaches the mounted app's check."""
    settings = make_settings(database_url, api_tokens=(TOKEN,))
    app = host.build(settings)
    async with (
        live_server(settings, app=app, prefix=host.LANEWAY_PREFIX) as mounted,
        open_dashboard(browser, mounted, live=False) as dashboard,
    ):
        page = dashboard.page
        await expect(page).to_have_title("Laneway dashboard")
        await page.get_by_test_id("token-input").fill(TOKEN)
        await page.get_by_test_id("token-submit").click()
        await expect(dashboard.connection).to_have_attribute("data-state", "connected")
        await expect(
            page.get_by_test_id("enqueue-workflow").locator('option[value="hello"]')
        ).to_have_count(1)
        instance_id = await dashboard.enqueue("hello", {"name": "Mounted"})
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "completed")
        await dashboard.open_instance(instance_id)
        await expect(page.get_by_test_id("instance-result")).to_contain_text("Hello, Mounted!")
        graphiql = page.get_by_role("link", name="GraphiQL")
        assert await graphiql.evaluate("a => a.href") == f"{dashboard.origin}/laneway/graphql"
        assert dashboard.problems == []
    base = f"{dashboard.origin}/laneway/"
    assert dashboard.requests
    assert [url for url, _ in dashboard.requests if not url.startswith(base)] == []
    assert f"{base}graphql" in [url for url, _ in dashboard.requests]
    assert dashboard.sockets
    assert set(dashboard.sockets) == {f"ws://127.0.0.1:{mounted.port}/laneway/graphql"}


async def test_workers_panel_lists_live_processes_as_they_come_and_go(
    database_url: str, browser: Browser
) -> None:
    settings = make_settings(database_url, owner_id="dash-serve", worker_concurrency=9)
    worker_settings = dataclasses.replace(
        settings, owner_id="dash-worker", worker_concurrency=4, workflow_modules=("app.examples",)
    )
    async with live_server(settings) as server, open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        serving = page.locator('[data-testid="worker-row"][data-owner-id="dash-serve"]')
        await expect(serving).to_have_attribute("data-role", "serve")
        await expect(serving.get_by_test_id("worker-role")).to_have_text("serve")
        await expect(serving.get_by_test_id("worker-host")).to_have_text(socket.gethostname())
        await expect(serving.get_by_test_id("worker-pid")).to_have_text(str(os.getpid()))
        await expect(serving.get_by_test_id("worker-running")).to_have_text("0 / 9")
        await expect(serving.get_by_test_id("worker-last-seen")).not_to_have_text("—")
        await expect(page.get_by_test_id("workers-empty")).to_be_hidden()

        # Another process starts, then stops: the panel follows without a reload or an event.
        working = page.locator('[data-testid="worker-row"][data-owner-id="dash-worker"]')
        async with open_services(worker_settings, role="worker") as services:
            stopping = asyncio.Event()
            task = asyncio.create_task(services.engine.run(stopping))
            try:
                await expect(working.get_by_test_id("worker-role")).to_have_text("worker")
                await expect(working.get_by_test_id("worker-running")).to_have_text("0 / 4")
                await expect(page.get_by_test_id("worker-row")).to_have_count(2)
            finally:
                stopping.set()
                await task
        await expect(working).to_have_count(0)
        await expect(page.get_by_test_id("worker-row")).to_have_count(1)
        assert dashboard.problems == []


QUEUE_HISTORY_MINUTES = """
SELECT (extract(epoch FROM m.minute) * 1000)::bigint AS at, m.minute
  FROM generate_series(1, $1::integer) AS k,
       LATERAL (SELECT date_trunc('minute', now()) - k * interval '1 minute' AS minute) AS m
 ORDER BY m.minute
"""
INSERT_HISTORY = """
INSERT INTO laneway.queue_history (queue, minute, started, completed, failed)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (queue, minute) DO UPDATE
   SET started = EXCLUDED.started, completed = EXCLUDED.completed, failed = EXCLUDED.failed
"""


async def test_queue_card_charts_the_last_hour_and_follows_new_history(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    # The last five closed minutes of queue hello, written as the roll-up would: the chart
    # sums them and draws a bar per minute of the hour (zeros included).
    minutes = await admin.fetch(QUEUE_HISTORY_MINUTES, 5)
    written = {m["at"]: (10 * (i + 1), i % 2) for i, m in enumerate(minutes)}  # at: (done, failed)
    for m in minutes:
        completed, failed = written[m["at"]]
        await admin.execute(INSERT_HISTORY, "hello", m["minute"], completed, completed, failed)
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        chart = card.get_by_test_id("queue-history")
        await expect(chart).to_have_attribute("aria-label", "last 60 min: 150 completed, 2 failed")
        await expect(chart).to_have_attribute("role", "img")
        await expect(card.get_by_test_id("queue-history-summary")).to_have_text(
            "last 60 min: 150 completed, 2 failed"
        )
        bars = chart.get_by_test_id("history-minute")
        await expect(bars).to_have_count(60)
        drawn = await bars.evaluate_all(
            "gs => gs.map(g => [Number(g.dataset.at), Number(g.dataset.completed),"
            " Number(g.dataset.failed)])"
        )
        ats = [at for at, _, _ in drawn]
        assert ats == sorted(ats)  # oldest first
        assert len(set(ats)) == 60  # one per minute
        assert {at: (done, failed) for at, done, failed in drawn if done or failed} == written
        # Another queue's card has its own (empty) chart.
        report = page.locator('[data-testid="queue-card"][data-queue="report"]')
        await report.scroll_into_view_if_needed()
        await expect(report.get_by_test_id("queue-history")).to_have_attribute(
            "aria-label", "last 60 min: 0 completed, 0 failed"
        )

        # A new minute rolled up; the page regaining focus re-fetches it without a reload.
        newest = minutes[-1]
        await admin.execute(INSERT_HISTORY, "hello", newest["minute"], 90, 90, 7)
        await page.evaluate("window.sameDocument = true")
        await page.evaluate("window.dispatchEvent(new Event('focus'))")
        await expect(chart).to_have_attribute("aria-label", "last 60 min: 190 completed, 9 failed")
        bar = chart.locator(f'[data-testid="history-minute"][data-at="{newest["at"]}"]')
        await expect(bar).to_have_attribute("data-completed", "90")
        await expect(bar).to_have_attribute("data-failed", "7")
        await expect(bar.locator("title")).to_contain_text("90 completed, 7 failed")
        assert await page.evaluate("window.sameDocument") is True
        # Bounded: a request asks for at most ten queues, each once, each a card's.
        queues = await page.get_by_test_id("queue-card").evaluate_all(
            "cards => cards.map(c => c.dataset.queue)"
        )
        history_bodies = [body for body in dashboard.posted if "queueHistory" in body]
        assert history_bodies
        for body in history_bodies:
            asked = list(json.loads(body)["variables"].values())
            assert 0 < len(asked) <= 10
            assert len(set(asked)) == len(asked)
            assert set(asked) <= set(queues)
        assert dashboard.problems == []


async def test_rows_and_the_instance_page_say_why_an_instance_waits_until_it_starts(
    server: LiveServer, browser: Browser
) -> None:
    body = await server.graphql(ONE_KEY_AT_A_TIME)
    assert body["data"]["configureQueue"]["keyConcurrency"] == 1
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        card = page.locator('[data-testid="queue-card"][data-queue="countdown"]')
        await expect(card.locator(".caps")).to_have_text(
            "concurrency 5 · no rate limit · 1 per key"
        )
        delayed = await enqueue_keyed(server, "hello", {"name": "later"}, "tenant-a", 600_000)
        # Tenant b may run one instance at a time: the second waits until the first ends.
        first = await enqueue_keyed(server, "countdown", {"n": 600, "delayMs": 200}, "tenant-b")
        await expect(dashboard.row(first)).to_have_attribute("data-status", "running")
        second = await enqueue_keyed(server, "countdown", {"n": 1, "delayMs": 0}, "tenant-b")
        done = await enqueue_hello(server, "now")

        badge = dashboard.row(delayed).get_by_test_id("waiting-reason")
        await expect(badge).to_have_attribute("data-code", "DELAYED")
        await expect(badge).to_have_attribute(
            "title", await waiting_message(server, delayed, "DELAYED")
        )
        await expect(badge.locator("time")).to_have_text(re.compile(r"^in (9|10)m$"))
        key_full = dashboard.row(second).get_by_test_id("waiting-reason")
        await expect(key_full).to_have_attribute("data-code", "KEY_FULL")
        key_full_message = await waiting_message(server, second, "KEY_FULL")
        await expect(key_full).to_have_attribute("title", key_full_message)
        await expect(key_full.locator("time")).to_have_count(0)  # no time is known
        # Running and finished rows have no reason.
        await expect(dashboard.row(done)).to_have_attribute("data-status", "completed")
        await expect(dashboard.row(done).get_by_test_id("waiting-reason")).to_have_count(0)
        await expect(dashboard.row(first).get_by_test_id("waiting-reason")).to_have_count(0)

        await dashboard.open_instance(delayed)
        reason = page.get_by_test_id("instance-waiting-reason")
        await expect(reason.locator(".reason")).to_have_attribute("data-code", "DELAYED")
        await expect(reason).to_contain_text(await waiting_message(server, delayed, "DELAYED"))
        await expect(page.get_by_test_id("instance-concurrency-key")).to_have_text("tenant-a")
        await dashboard.open_instance(done)
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("instance-waiting-reason")).to_have_count(0)
        await expect(page.get_by_test_id("instance-concurrency-key")).to_have_count(0)

        await dashboard.open_instance(second)
        await expect(reason.locator(".reason")).to_have_attribute("data-code", "KEY_FULL")
        await expect(reason).to_contain_text(key_full_message)
        await expect(page.get_by_test_id("instance-concurrency-key")).to_have_text("tenant-b")
        # The first ends, the second starts: its reason goes from the row and the page live.
        await page.evaluate("window.sameDocument = true")
        await server.graphql(CANCEL, id=first)
        await expect(dashboard.row(second)).to_have_attribute("data-status", "completed")
        await expect(dashboard.row(second).get_by_test_id("waiting-reason")).to_have_count(0)
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("instance-waiting-reason")).to_have_count(0)
        await expect(dashboard.row(delayed).get_by_test_id("waiting-reason")).to_have_attribute(
            "data-code", "DELAYED"
        )
        assert await page.evaluate("window.sameDocument") is True
        assert dashboard.problems == []


async def _hello_and_countdown(server: LiveServer) -> tuple[str, str]:
    """A `hello` and a `countdown` instance, enqueued over GraphQL: two workflows to filter."""
    hello = await enqueue_hello(server, "filtered")
    body = await server.graphql(
        'mutation { enqueueWorkflow(name: "countdown", params: {n: 1, delayMs: 0}) { instanceID } }'
    )
    return hello, body["data"]["enqueueWorkflow"]["instanceID"]


async def test_an_address_that_changes_the_filters_shows_their_rows(
    server: LiveServer, browser: Browser
) -> None:
    # One hash navigation fires hashchange and popstate: the second used to replace the
    # filters with an equal object, and the first's answer was dropped as stale, so the rows
    # of the previous filters stayed under the new ones (until some event came).
    hello, countdown = await _hello_and_countdown(server)
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        for instance_id in (hello, countdown):
            await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "completed")
        for shown, hidden, name in ((hello, countdown, "hello"), (countdown, hello, "countdown")):
            await page.evaluate("name => { location.hash = '#name=' + name; }", name)
            await expect(page.get_by_test_id("filter-name")).to_have_value(name)
            await expect(dashboard.row(hidden)).to_have_count(0)
            await expect(dashboard.row(shown)).to_be_visible()
        assert dashboard.problems == []


async def test_an_address_with_an_unknown_status_shows_any_status_and_its_rows(
    server: LiveServer, browser: Browser
) -> None:
    # The status was sent as is: the server refused it, the select said "Any status" and the
    # rows of the previous filters stayed listed (none at all when the page was opened there).
    hello, countdown = await _hello_and_countdown(server)
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await page.evaluate("() => { location.hash = '#name=hello'; }")
        await expect(dashboard.row(hello)).to_have_attribute("data-status", "completed")
        await page.evaluate("() => { location.hash = '#name=countdown&status=bogus'; }")
        await expect(page.get_by_test_id("filter-name")).to_have_value("countdown")
        await expect(page.get_by_test_id("filter-status")).to_have_value("")
        await expect(dashboard.row(countdown)).to_have_attribute("data-status", "completed")
        await expect(dashboard.row(hello)).to_have_count(0)
        await expect(page.get_by_test_id("notice")).to_have_text("")
        await page.reload()  # opened at that address
        await expect(page.get_by_test_id("filter-status")).to_have_value("")
        await expect(dashboard.row(countdown)).to_have_attribute("data-status", "completed")
        await expect(dashboard.row(hello)).to_have_count(0)
        await expect(page.get_by_test_id("notice")).to_have_text("")
        assert dashboard.problems == []


async def test_an_address_with_no_instance_id_says_no_instance_has_it(
    server: LiveServer, browser: Browser
) -> None:
    # Not an id at all (typed, or cut short): the panel says so, where its error used to go to
    # a notice that the next list load cleared, leaving an empty panel.
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        for address in ("#instance=bad-id-0", "#instance=00000000-0000-7000-8000-000000000000"):
            await page.evaluate("hash => { location.hash = hash; }", address)
            await expect(dashboard.panel).to_be_visible()
            await expect(page.locator("#instance-missing")).to_be_visible()
            await expect(page.locator("#instance-missing")).to_have_text("No instance has this id.")


async def test_a_cancelled_token_prompt_is_not_reopened_by_the_pages_own_polls(
    database_url: str, browser: Browser
) -> None:
    # It came back at every poll (every few seconds), so the page could not be read past it.
    # The polls now say what they need in the notice; the person's own actions (mutations,
    # the token button) still ask.
    async with token_protected_dashboard(database_url, browser) as dashboard:
        page = dashboard.page
        dialog = page.get_by_test_id("token-dialog")
        await expect(dialog).to_be_visible()
        await page.get_by_test_id("token-cancel").click()
        await expect(dialog).to_be_hidden()
        # A poll after the cancel answered UNAUTHENTICATED, and it was not a prompt: its
        # error reached the notice (a prompt would hold the request open instead).
        async with page.expect_response(lambda r: r.url.endswith("/graphql")):
            pass
        await expect(page.get_by_test_id("notice")).to_contain_text("needs an `Authorization")
        await expect(dialog).to_be_hidden()
        await page.get_by_test_id("token-button").click()  # the person asks: it opens
        await expect(dialog).to_be_visible()
        await page.get_by_test_id("token-input").fill(TOKEN)
        await page.get_by_test_id("token-submit").click()
        await expect(dialog).to_be_hidden()
        hello = page.get_by_test_id("enqueue-workflow").locator('option[value="hello"]')
        await expect(hello).to_have_count(1)  # the page reads with the token now
