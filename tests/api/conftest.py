"""API test fixtures: settings and services on the per-test database, a real uvicorn server.

Workflows come from app.examples and tests.workflows. The server runs inside the test's own
event loop on 127.0.0.1 with port 0, with the same uvicorn settings as `laneway serve`.
"""

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from strawberry.types import ExecutionResult

from laneway.api.app import create_app, server_config
from laneway.api.auth import BearerTokens
from laneway.api.graphql.context import LanewayContext
from laneway.api.graphql.schema import schema
from laneway.config import Settings
from laneway.services import Services, open_services

if TYPE_CHECKING:
    from playwright.async_api import Browser

WORKFLOW_MODULES = ("app.examples", "tests.workflows")
FORBIDDEN_TEXT = ("Traceback", "asyncpg", "SELECT", "password")
TOKEN = "s3cret-token"


def make_settings(database_url: str, **changes: Any) -> Settings:
    """Test settings. Rate limits, handshake and connection caps are off: tests poll fast
    and open many sockets from one address (tests/api/test_security_*.py turn them on)."""
    base = Settings(
        database_url=database_url,
        workflow_modules=WORKFLOW_MODULES,
        lease_seconds=5.0,
        poll_interval_seconds=0.05,
        rate_limit_per_second=0.0,
        ws_handshakes_per_minute=0,
        ws_connections_per_token=0,
        max_connections=0,
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
def settings(database_url: str) -> Settings:
    return make_settings(database_url)


@asynccontextmanager
async def running_services(settings: Settings) -> AsyncIterator[Services]:
    """Services with the engine loop running (unless the settings turn it off), as the API's
    process has them."""
    async with open_services(settings, role="serve") as services:
        stopping = asyncio.Event()
        task = None
        if settings.engine_enabled:
            task = asyncio.create_task(services.engine.run(stopping))
        try:
            yield services
        finally:
            stopping.set()
            if task is not None:
                await task


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with running_services(settings) as opened:
        yield opened


Execute = Callable[..., Awaitable[ExecutionResult]]


def executor(services: Services, authorization: str | None = None) -> Execute:
    """`await run(query, **variables)` through the real schema with a real LanewayContext."""

    async def run(query: str, **variables: Any) -> ExecutionResult:
        context = LanewayContext(
            services=services,
            permission=BearerTokens.from_settings(services.settings),
            authorization=authorization,
        )
        result = await schema.execute(query, variable_values=variables, context_value=context)
        assert_clean(result)
        return result

    return run


@pytest.fixture
def run(services: Services) -> Execute:
    return executor(services)


def assert_clean(result: object) -> None:
    """No internals in what a client would see."""
    errors = getattr(result, "errors", None) or []
    text = " ".join(str(getattr(e, "formatted", e)) for e in errors)
    for word in FORBIDDEN_TEXT:
        assert word not in text, text


def codes(result: ExecutionResult) -> list[str | None]:
    return [(e.extensions or {}).get("code") for e in result.errors or []]


async def wait_until(check: Callable[[], Awaitable[bool]], seconds: float = 15.0) -> None:
    """Poll `check` until it holds, failing after `seconds`."""
    async with asyncio.timeout(seconds):
        while True:
            if await check():
                return
            await asyncio.sleep(0.02)


def escaped(frame: dict[str, Any]) -> str:
    """A graphql-transport-ws `frame` as JSON with its `type` key and value spelled with
    escapes ("\\u0074ype"): the same message to any JSON decoder, but not the same text."""
    text = json.dumps(frame)
    kind = frame["type"]
    spelled = f'"\\u0074ype": "\\u{ord(kind[0]):04x}{kind[1:]}"'
    assert f'"type": "{kind}"' in text
    return text.replace(f'"type": "{kind}"', spelled)


@dataclasses.dataclass
class LiveServer:
    """A real uvicorn server running create_app(settings) (or another app) in this event loop;
    `prefix` is where Laneway's app is mounted in it ("" when it is the app)."""

    settings: Settings
    port: int
    client: httpx.AsyncClient
    prefix: str = ""

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.prefix}/graphql"

    async def graphql(
        self, query: str, token: str | None = None, **variables: Any
    ) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        response = await self.client.post(
            f"{self.prefix}/graphql", json={"query": query, "variables": variables}, headers=headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert_clean(body.get("errors"))
        for word in FORBIDDEN_TEXT:
            assert word not in response.text
        return body

    async def health(self) -> dict[str, Any]:
        body: dict[str, Any] = (await self.client.get(f"{self.prefix}/healthz")).json()
        return body

    async def wait_for_subscribers(self, count: int) -> None:
        async def registered() -> bool:
            return bool((await self.health())["subscribers"] >= count)

        await wait_until(registered)


@asynccontextmanager
async def live_server(
    settings: Settings,
    port: int = 0,
    *,
    app: Any = None,
    prefix: str = "",
    ws_ping: tuple[float, float] | None = None,
) -> AsyncIterator[LiveServer]:
    """uvicorn with create_app(settings) on 127.0.0.1 (`port` 0: any free port; a chosen
    port lets a restarted server come back where clients are looking). `app`: serve that
    instead, with Laneway's app mounted at `prefix` in it. `ws_ping`: the websocket
    keepalive's ping interval and pong timeout in seconds, instead of uvicorn's 20 and 20."""
    served = create_app(settings) if app is None else app
    config = server_config(served, host="127.0.0.1", port=port)
    if ws_ping is not None:
        config.ws_ping_interval, config.ws_ping_timeout = ws_ping
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("server stopped during start-up")
                await asyncio.sleep(0.01)
            # The engine's start-up writes (its queues) land before the test looks.
            services = getattr(served, "services", None)
            while services is not None and settings.engine_enabled:
                if services.engine.is_ready:
                    break
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield LiveServer(settings=settings, port=port, client=client, prefix=prefix)
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[LiveServer]:
    async with live_server(settings) as live:
        yield live


# The dashboard's browser tests drive Debian's Chromium, never a downloaded browser.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
async def browser() -> "AsyncIterator[Browser]":
    """A headless Chromium for one test (Playwright is imported only by the tests that use it)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()
