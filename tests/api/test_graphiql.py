"""GraphiQL at /graphql with no internet: every file from Laneway, under a strict policy.

The browser tests open the page in Debian's Chromium (headless, driven by Playwright) with
every request to a host other than 127.0.0.1 aborted, then type a query into the editor, run
it and read the answer; once on Laneway's own app, once on a host that mounts it at /laneway
with bearer tokens (typed into the headers editor). Waits are Playwright expectations, never
sleeps. The HTTP tests read the page's policy and files without a browser.
"""

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser, Page, Route, expect

from app import host
from laneway.api.routes import GRAPHIQL, graphiql_assets
from tests.api.conftest import CHROMIUM, TOKEN, LiveServer, live_server, make_settings

TIMEOUT_MS = 20_000
LOCAL_HOST = "127.0.0.1"
HTML = {"accept": "text/html"}

expect.set_options(timeout=TIMEOUT_MS)

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: `apt-get install chromium` to run the browser tests",
)


@dataclass
class IDE:
    """One open GraphiQL page and what it did: requests, refused ones, console errors."""

    page: Page
    origin: str
    requests: list[tuple[str, str]] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    async def type_into(self, editor: str, text: str) -> None:
        """Replace an editor's text by typing it, as a person would (its brackets and quotes
        close themselves and are typed over)."""
        await self.page.locator(f"{editor} .CodeMirror").first.click()
        await self.page.keyboard.press("Control+A")
        await self.page.keyboard.press("Delete")
        await self.page.keyboard.type(text)

    async def run(self, query: str) -> None:
        await self.type_into(".graphiql-query-editor", query)
        await self.page.locator(".graphiql-execute-button").click()

    @property
    def response(self) -> Any:
        return self.page.locator(".graphiql-response")


@asynccontextmanager
async def open_graphiql(browser: Browser, server: LiveServer) -> AsyncIterator[IDE]:
    """Open graphql (under the server's prefix) in a fresh context that reaches no other host,
    and wait until the editors are on the page."""
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    ide = IDE(page=page, origin=f"http://{LOCAL_HOST}:{server.port}")

    async def only_local(route: Route) -> None:
        url = route.request.url
        if urlsplit(url).hostname == LOCAL_HOST:
            await route.continue_()
        else:
            ide.blocked.append(url)
            await route.abort()

    def on_console(message: Any) -> None:
        if message.type == "error":
            ide.problems.append(f"console error: {message.text}")

    await page.route("**/*", only_local)
    page.on("console", on_console)
    page.on("pageerror", lambda error: ide.problems.append(f"page error: {error}"))
    page.on("request", lambda request: ide.requests.append((request.method, request.url)))
    try:
        await page.goto(f"{ide.origin}{server.prefix}/graphql")
        await expect(page.locator(".graphiql-query-editor .CodeMirror")).to_be_visible()
        yield ide
    finally:
        await context.close()


@needs_chromium
async def test_graphiql_runs_a_query_with_every_other_host_blocked(
    browser: Browser, server: LiveServer
) -> None:
    async with open_graphiql(browser, server) as ide:
        await ide.run("{ workflows { name } }")
        await expect(ide.response).to_contain_text('"name": "hello"')
        # The schema was fetched too: the docs explorer lists the root type's fields.
        await ide.page.get_by_role("button", name=re.compile("documentation", re.I)).click()
        await expect(ide.page.locator(".graphiql-doc-explorer")).to_contain_text("Query")
        assert ide.blocked == []
        assert ide.problems == []
        assert {urlsplit(url).netloc for _, url in ide.requests} == {f"{LOCAL_HOST}:{server.port}"}
        posts = {url for method, url in ide.requests if method == "POST"}
        assert posts == {f"{ide.origin}/graphql"}
        loaded = {urlsplit(url).path for _, url in ide.requests if "/graphiql/" in url}
        assert loaded == {f"/graphiql/{name}" for name in graphiql_assets()}


@needs_chromium
async def test_graphiql_under_a_hosts_prefix_talks_to_the_mounted_endpoint(
    browser: Browser, database_url: str
) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,))
    app = host.build(settings)
    async with (
        live_server(settings, app=app, prefix=host.LANEWAY_PREFIX) as server,
        open_graphiql(browser, server) as ide,
    ):
        await ide.page.locator('button[data-name="headers"]').click()
        await ide.type_into(
            ".graphiql-editor-tool .graphiql-editor:visible",
            f'{{"Authorization": "Bearer {TOKEN}"}}',
        )
        await ide.run("{ queues { name } }")
        await expect(ide.response).to_contain_text('"name": "hello"')
        # The token stays with this tab (sessionStorage, as the dashboard keeps it): never in
        # localStorage, where any later visit, a ?q= link's mutation included, would send it.
        stored = "storage => JSON.stringify(Object.assign({}, window[storage]))"
        assert TOKEN not in await ide.page.evaluate(stored, "localStorage")
        assert TOKEN in await ide.page.evaluate(stored, "sessionStorage")
        assert ide.blocked == []
        posts = {url for method, url in ide.requests if method == "POST"}
        assert posts == {f"{ide.origin}/laneway/graphql"}
        assets = {urlsplit(url).path for _, url in ide.requests if "/graphiql/" in url}
        assert assets == {f"/laneway/graphiql/{name}" for name in graphiql_assets()}


async def test_graphiql_page_admits_only_its_own_files(server: LiveServer) -> None:
    page = await server.client.get("/graphql", headers=HTML)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self';" in policy
    nonce = re.search(r"style-src 'self' 'nonce-([\w-]+)';", policy)
    assert nonce is not None
    assert f'<meta name="style-nonce" content="{nonce[1]}">' in page.text
    again = await server.client.get("/graphql", headers=HTML)
    assert nonce[1] not in again.headers["content-security-policy"]
    assert "connect-src 'self';" in policy
    assert "unsafe" not in policy
    assert "<script>" not in page.text  # no inline script: the policy would refuse it
    assert "<style>" not in page.text
    assert "//" not in re.sub(r"<!--.*?-->", "", page.text, flags=re.DOTALL)  # no other host
    references = re.findall(
        r'(?:src|href)="graphiql/([\w.-]+)\?v=\w+" integrity="sha384-', page.text
    )
    assert sorted(references) == sorted(graphiql_assets())
    for name in references:
        asset = await server.client.get(f"/graphiql/{name}")
        assert asset.status_code == 200
        assert asset.content == (GRAPHIQL / name).read_bytes()
        assert asset.headers["x-content-type-options"] == "nosniff"
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        assert asset.headers["content-type"] == f"{kind}; charset=utf-8"


BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.mark.parametrize("graphiql", [True, False])
async def test_only_a_client_that_asks_for_html_gets_the_page(
    database_url: str, graphiql: bool
) -> None:
    """An outside audit: `GET /graphql` with `Accept: */*` (curl's, httpx's default) got the
    page, where docs/limits.md says a request without `query` is 400 BAD_REQUEST."""
    settings = make_settings(database_url, graphiql=graphiql, engine_enabled=False)
    async with live_server(settings) as server:
        page = await server.client.get("/graphql", headers=BROWSER)
        assert page.status_code == (200 if graphiql else 400)
        for accept, media_type in (
            ({"accept": "*/*"}, "application/json"),
            ({}, "application/json"),  # httpx's default: */*
            ({"accept": "application/json"}, "application/json"),
            ({"accept": "text/html;q=0, */*"}, "application/json"),
            (
                {"accept": "application/graphql-response+json"},
                "application/graphql-response+json; charset=utf-8",
            ),
        ):
            refused = await server.client.get("/graphql", headers=accept)
            assert refused.status_code == 400, (accept, refused.text)
            assert refused.headers["content-type"] == media_type
            [error] = refused.json()["errors"]
            assert error["extensions"]["code"] == "BAD_REQUEST"
            assert "query" in error["message"]


async def test_only_graphiqls_scripts_and_styles_are_served(server: LiveServer) -> None:
    for name in ("index.html", "README.md", "LICENSE.react", "missing.js", "..%2Fdashboard.html"):
        response = await server.client.get(f"/graphiql/{name}")
        assert response.status_code == 404, name


async def test_without_graphiql_neither_page_nor_files_are_served(database_url: str) -> None:
    settings = make_settings(database_url, graphiql=False, engine_enabled=False)
    async with live_server(settings) as server:
        # A request without `query` (was 404, with the code BAD_REQUEST)
        refused = await server.client.get("/graphql", headers=HTML)
        assert refused.status_code == 400, refused.text
        assert refused.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
        assert (await server.client.get("/graphiql/graphiql.min.js")).status_code == 404
        page = await server.client.get("/")
        assert page.status_code == 200
        assert 'data-testid="token-button"' in page.text  # the dashboard itself
        assert 'data-testid="graphiql-link"' not in page.text  # and no link to a 404


async def test_the_dashboard_links_to_graphiql_where_it_is_served(server: LiveServer) -> None:
    page = await server.client.get("/")
    assert 'data-testid="graphiql-link"' in page.text
    assert (await server.client.get("/graphql", headers=HTML)).status_code == 200


def test_vendored_files_are_a_few_megabytes_with_their_licences() -> None:
    files = {path.name: path.stat().st_size for path in GRAPHIQL.iterdir()}
    assert sum(files.values()) < 3_000_000
    for licence in ("LICENSE.graphiql", "LICENSE.react", "LICENSE.react-dom"):
        assert files[licence] > 0
    # The README's table names what was vendored: each version is the one installed.
    third_party = (GRAPHIQL / "THIRD_PARTY_LICENSES.txt").read_text(encoding="utf-8")
    readme = (GRAPHIQL / "README.md").read_text(encoding="utf-8")
    pinned = re.findall(r"^\| (@?[\w/.-]+) \| (\d+\.\d+\.\d+) \|", readme, flags=re.MULTILINE)
    assert {name for name, _ in pinned} == {
        "graphiql",
        "@graphiql/plugin-explorer",
        "react",
        "react-dom",
    }
    for name, version in pinned:
        assert f"\n{name}@{version} (MIT)\n" in third_party
    assert re.search(r"\ncodemirror@5\.[\d.]+ \(MIT\)\n", third_party)


@needs_chromium
async def test_graphiqls_dialog_and_panels_open_within_the_policy(
    browser: Browser, server: LiveServer
) -> None:
    """The settings dialog adds a style element (react-remove-scroll), admitted by the
    page's nonce; the explorer and history panels open; nothing is refused."""
    async with open_graphiql(browser, server) as ide:
        page = ide.page
        await page.get_by_role("button", name=re.compile("settings", re.I)).click()
        await expect(page.get_by_role("dialog")).to_be_visible()
        await expect(page.locator("style[nonce]")).not_to_have_count(0)
        await page.keyboard.press("Escape")
        await expect(page.get_by_role("dialog")).to_have_count(0)
        explorer = page.get_by_role("button", name=re.compile("show graphiql explorer", re.I))
        await explorer.first.click()
        await expect(page.locator(".graphiql-plugin")).to_contain_text("Explorer")
        await page.get_by_role("button", name=re.compile("history", re.I)).first.click()
        await expect(page.locator(".graphiql-plugin")).to_contain_text("History")
        assert ide.problems == []
        assert ide.blocked == []
