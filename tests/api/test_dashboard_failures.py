"""The dashboard's failed attempts, in a real browser (the set-up of test_dashboard.py).

The instance page lists each failed attempt with its traceback collapsed, shows lastError as
the current error only while the instance is failed, and labels what an ended instance's
handler last reported. Waits are Playwright expectations or GraphQL polls with deadlines.
"""

import re

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.api.conftest import CHROMIUM, LiveServer
from tests.api.test_dashboard import TIMEOUT_MS, open_dashboard
from tests.api.test_waits_api import RESUME, enqueue, until_status

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)


def failures(page: Page) -> Locator:
    return page.get_by_test_id("failures").get_by_test_id("failure")


async def test_a_failed_instance_lists_its_attempts_newest_first_with_tracebacks(
    server: LiveServer, browser: Browser
) -> None:
    instance_id = await enqueue(server, "flaky", {"failTimes": 5})
    await until_status(server, instance_id, "failed")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "failed")
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "failed")
        entries = failures(page)
        await expect(entries).to_have_count(3)
        assert [await e.get_attribute("data-attempt") for e in await entries.all()] == [
            "3",
            "2",
            "1",
        ]
        await expect(entries.first).to_contain_text("Attempt 3")
        await expect(entries.first).to_contain_text("RuntimeError: flaky failure 3")
        await expect(entries.last).to_contain_text("RuntimeError: flaky failure 1")
        await expect(entries.first.locator("time")).to_have_attribute(
            "datetime", re.compile(r"^\d{4}-\d\d-\d\dT")
        )
        tracebacks = page.get_by_test_id("failure-traceback")
        await expect(tracebacks).to_have_count(3)
        for traceback in await tracebacks.all():
            await expect(traceback).to_have_js_property("open", False)
            await expect(traceback.locator("pre")).to_be_hidden()

        newest = entries.first.get_by_test_id("failure-traceback")
        await newest.locator("summary").click()
        await expect(newest).to_have_js_property("open", True)
        await expect(newest.locator("pre")).to_be_visible()
        await expect(newest.locator("pre")).to_contain_text("flaky failure 3")
        await expect(newest.locator("pre")).to_contain_text("in _attempt")
        await expect(page.get_by_test_id("failures-empty")).to_be_hidden()

        error = page.get_by_test_id("instance-error")
        await expect(error).to_have_text("RuntimeError: flaky failure 3")
        await expect(error).not_to_have_attribute("data-earlier", "true")

        # Retried from the page (fresh attempts, which fail again): the new failures arrive
        # with the events, newest first, and the traceback opened above stays open.
        await page.get_by_test_id("action-retry").click()
        await expect(entries).to_have_count(6)
        assert [await e.get_attribute("data-attempt") for e in await entries.all()] == [
            "6",
            "5",
            "4",
            "3",
            "2",
            "1",
        ]
        await expect(entries.nth(3).get_by_test_id("failure-traceback")).to_have_js_property(
            "open", True
        )
        await expect(entries.first.get_by_test_id("failure-traceback")).to_have_js_property(
            "open", False
        )
        await expect(dashboard.panel).to_have_attribute("data-status", "failed")
        await expect(error).not_to_have_attribute("data-earlier", "true")
        assert dashboard.problems == []


async def test_a_completed_instance_shows_its_failure_as_an_earlier_attempts(
    server: LiveServer, browser: Browser
) -> None:
    instance_id = await enqueue(server, "flaky", {"failTimes": 1})
    await until_status(server, instance_id, "completed")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        entries = failures(page)
        await expect(entries).to_have_count(1)
        await expect(entries).to_have_attribute("data-attempt", "1")
        await expect(entries).to_contain_text("RuntimeError: flaky failure 1")
        await expect(entries.get_by_test_id("failure-traceback")).to_have_js_property("open", False)
        error = page.get_by_test_id("instance-error")
        await expect(error).to_have_attribute("data-earlier", "true")
        await expect(error).to_have_text("Earlier attempt (1 of 2): RuntimeError: flaky failure 1")
        assert dashboard.problems == []


async def test_an_instance_that_never_failed_says_so_and_labels_its_last_status_line(
    server: LiveServer, browser: Browser
) -> None:
    instance_id = await enqueue(server, "review", {})
    await until_status(server, instance_id, "paused")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "paused")
        message = page.get_by_test_id("instance-message")
        await expect(message).to_have_text("waiting for a decision")
        await expect(message).not_to_have_attribute("data-stale", "true")
        await expect(page.get_by_test_id("failures-empty")).to_have_text("No failed attempts.")
        await expect(failures(page)).to_have_count(0)

        # Resumed elsewhere: the page follows the events, and the handler's line is now the
        # last one it wrote, labelled so.
        await server.graphql(RESUME, id=instance_id, input={"decision": "approve"})
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(message).to_have_attribute("data-stale", "true")
        await expect(message).to_have_text("waiting for a decision")
        await expect(page.locator("#instance-facts")).to_contain_text("Last status line")
        error = page.get_by_test_id("instance-error")
        await expect(error).to_have_text("—")
        await expect(error).not_to_have_attribute("data-earlier", "true")
        assert dashboard.problems == []
