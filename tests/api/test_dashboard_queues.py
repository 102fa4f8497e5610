"""The dashboard's queue cards in a real browser (the set-up of test_dashboard.py): many
queues each get their history chart, in requests within the server's document limits, and a
history that cannot be read says so on its cards, not in the notice that the list's own
errors use; a card pauses its queue (after a confirmation) and resumes it, asking for a token
where the server needs one."""

import json

import pytest
from playwright.async_api import Browser, Route, expect

from laneway.api.graphql.schema import MAX_ALIASES
from tests.api.conftest import CHROMIUM, TOKEN, LiveServer, live_server, make_settings
from tests.api.test_dashboard import (
    TIMEOUT_MS,
    enqueue_hello,
    open_dashboard,
)

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

CONFIGURE = """mutation ($name: String!) {
  configureQueue(name: $name, concurrency: 2) { name }
}"""
BY_NAME = """query ($name: String) {
  workflowInstancesConnection(name: $name, first: 50) { pageInfo { hasNextPage } }
}"""
TOO_LONG_NAME = "x" * 65  # names are at most 64 characters
QUEUES_PAUSED = "{ queues { name paused } }"
EMPTY_HOUR = "last 60 min: 0 completed, 0 failed"
HISTORY_DOWN = "History is resting."


def history_requests(posted: list[str]) -> list[list[str]]:
    """The queue names each queueHistory request of the page asked for, in order."""
    asked = []
    for body in posted:
        request = json.loads(body)
        if "queueHistory" in request["query"]:
            asked.append(list(request["variables"].values()))
    return asked


@pytest.mark.parametrize("extra", [16, 40])
async def test_every_queue_card_charts_its_history_when_there_are_many_queues(
    server: LiveServer, browser: Browser, extra: int
) -> None:
    # One request with an alias per queue was refused past 15 queues (the alias limit; past
    # about a hundred, the token limit): every card stayed on "Loading history…" and the
    # refusal came back in the notice at each refresh.
    for i in range(extra):
        await server.graphql(CONFIGURE, name=f"x{i:02d}")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        cards = page.get_by_test_id("queue-card")
        await expect(page.locator('[data-testid="queue-card"][data-queue^="x"]')).to_have_count(
            extra
        )
        names = await cards.evaluate_all("cards => cards.map(c => c.dataset.queue)")
        for name in names:
            card = page.locator(f'[data-testid="queue-card"][data-queue="{name}"]')
            await card.scroll_into_view_if_needed()
            await expect(card.get_by_test_id("queue-history-summary")).to_have_text(EMPTY_HOUR)
            await expect(card.get_by_test_id("queue-history")).to_have_attribute(
                "aria-label", EMPTY_HOUR
            )
        await expect(page.get_by_test_id("notice")).to_be_hidden()
        asked = history_requests(dashboard.posted)
        assert asked
        assert max(len(queues) for queues in asked) < MAX_ALIASES
        assert {queue for queues in asked for queue in queues} == set(names)
        assert dashboard.problems == []


async def test_a_history_that_cannot_be_read_leaves_the_lists_error_in_the_notice(
    server: LiveServer, browser: Browser
) -> None:
    # The history's error went to the notice the instance list uses: it replaced the list's
    # own error (here a name in the address longer than a name can be) at each history refresh.
    body = await server.graphql(BY_NAME, name=TOO_LONG_NAME)
    list_error = body["errors"][0]["message"]
    assert "64" in list_error

    async def history_down(route: Route) -> None:
        if "queueHistory" in (route.request.post_data or ""):
            await route.fulfill(json={"errors": [{"message": HISTORY_DOWN}]})
        else:
            await route.fallback()

    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        await expect(card.get_by_test_id("queue-history-summary")).to_have_text(EMPTY_HOUR)
        await page.route("**/graphql", history_down)
        await page.evaluate("name => { location.hash = '#name=' + name; }", TOO_LONG_NAME)
        notice = page.get_by_test_id("notice")
        await expect(notice).to_have_text(list_error)
        async with page.expect_response(
            lambda response: "queueHistory" in (response.request.post_data or "")
        ):
            await page.evaluate("window.dispatchEvent(new Event('focus'))")
        await expect(card.get_by_test_id("queue-history-summary")).to_contain_text(HISTORY_DOWN)
        await expect(card.get_by_test_id("queue-history")).to_have_attribute(
            "aria-label", f"History not loaded: {HISTORY_DOWN}"
        )
        await expect(notice).to_have_text(list_error)
        # The chart drawn before stays: the error says the numbers may be old.
        await expect(card.get_by_test_id("history-minute")).to_have_count(60)

        # The history comes back with the next refresh, and the card says it again.
        await page.unroute("**/graphql", history_down)
        await page.evaluate("window.dispatchEvent(new Event('focus'))")
        await expect(card.get_by_test_id("queue-history-summary")).to_have_text(EMPTY_HOUR)
        await expect(notice).to_have_text(list_error)


async def _paused(server: LiveServer, name: str) -> bool:
    body = await server.graphql(QUEUES_PAUSED, token=TOKEN)
    (queue,) = [q for q in body["data"]["queues"] if q["name"] == name]
    return bool(queue["paused"])


async def test_a_queue_card_pauses_its_queue_after_asking_and_resumes_it(
    database_url: str, browser: Browser
) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,), open_reads=True)
    async with (
        live_server(settings) as server,
        open_dashboard(browser, server, token=TOKEN) as dashboard,
    ):
        page = dashboard.page
        card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        toggle = card.get_by_test_id("queue-toggle")
        confirm = card.get_by_test_id("queue-pause-confirm")
        badge = card.locator('h3 .status[data-status="paused"]')
        await expect(toggle).to_have_text("Pause…")
        await expect(toggle).to_have_accessible_name("Pause queue hello")
        await expect(badge).to_be_hidden()
        await expect(confirm).to_be_hidden()

        await toggle.click()  # asks first; keeping it running changes nothing
        await expect(confirm).to_be_visible()
        await expect(card.get_by_test_id("queue-pause-go")).to_be_focused()
        await card.get_by_test_id("queue-pause-keep").click()
        await expect(confirm).to_be_hidden()
        assert await _paused(server, "hello") is False

        await toggle.click()
        await card.get_by_test_id("queue-pause-go").click()
        await expect(badge).to_be_visible()
        await expect(card).to_have_attribute("data-paused", "true")
        await expect(toggle).to_have_text("Resume")
        await expect(card.get_by_test_id("queue-action-result")).to_have_text(
            "Paused: what runs finishes, nothing else starts."
        )
        assert await _paused(server, "hello") is True

        instance_id = await enqueue_hello(server, "held")
        reason = dashboard.row(instance_id).get_by_test_id("waiting-reason")
        await expect(reason).to_have_attribute("data-code", "QUEUE_PAUSED")
        await expect(card.get_by_test_id("count-pending")).to_have_text("1")

        await toggle.click()  # a resume does not ask
        await expect(badge).to_be_hidden()
        await expect(toggle).to_have_text("Pause…")
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "completed")
        await expect(reason).to_have_count(0)
        assert await _paused(server, "hello") is False
        assert dashboard.problems == []


async def test_a_page_without_a_token_is_asked_for_one_when_it_pauses_a_queue(
    database_url: str, browser: Browser
) -> None:
    # Reads are open, so the page shows everything without a token; a pause is a write.
    settings = make_settings(database_url, api_tokens=(TOKEN,), open_reads=True)
    async with (
        live_server(settings) as server,
        open_dashboard(browser, server) as dashboard,
    ):
        page = dashboard.page
        dialog = page.get_by_test_id("token-dialog")
        card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        toggle = card.get_by_test_id("queue-toggle")
        result = card.get_by_test_id("queue-action-result")
        await toggle.click()
        await card.get_by_test_id("queue-pause-go").click()
        await expect(dialog).to_be_visible()
        await expect(page.get_by_test_id("token-reason")).to_have_text(
            "This server needs an API token."
        )
        await page.get_by_test_id("token-cancel").click()  # declined: the pause fails, saying so
        await expect(result).to_contain_text("Pause failed:")
        await expect(result).to_have_class("message error")
        await expect(toggle).to_have_text("Pause…")
        assert await _paused(server, "hello") is False

        await toggle.click()
        await card.get_by_test_id("queue-pause-go").click()
        await page.get_by_test_id("token-input").fill(TOKEN)
        await page.get_by_test_id("token-submit").click()
        await expect(toggle).to_have_text("Resume")
        await expect(result).to_have_class("message")
        assert await _paused(server, "hello") is True
        assert dashboard.problems == []


async def test_escape_in_a_queue_cards_pause_question_keeps_it_running(
    server: LiveServer, browser: Browser
) -> None:
    # The question stayed open on Escape, which closes the token dialog: by keyboard, only
    # Tab to "Keep it running" and Enter closed it.
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        card = page.locator('[data-testid="queue-card"][data-queue="hello"]')
        toggle = card.get_by_test_id("queue-toggle")
        confirm = card.get_by_test_id("queue-pause-confirm")
        await toggle.focus()
        for focused_on in ("queue-pause-go", "queue-pause-keep"):
            await page.keyboard.press("Enter")
            await expect(confirm).to_be_visible()
            await expect(card.get_by_test_id("queue-pause-go")).to_be_focused()
            if focused_on == "queue-pause-keep":
                await page.keyboard.press("Tab")
                await expect(card.get_by_test_id(focused_on)).to_be_focused()
            await page.keyboard.press("Escape")
            await expect(confirm).to_be_hidden()
            await expect(toggle).to_be_focused()
        assert await _paused(server, "hello") is False
        await expect(toggle).to_have_text("Pause…")
        assert dashboard.problems == []
