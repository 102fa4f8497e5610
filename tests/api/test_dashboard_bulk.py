"""The dashboard's bulk actions in a real browser: a filtered list offers "Cancel all n" after a
dry run's count, asks, then runs and says how many changed."""

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, LiveServer, live_server, make_settings
from tests.api.test_dashboard import TIMEOUT_MS, open_dashboard

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

ENQUEUE = """mutation ($name: String!, $params: JSON) {
  enqueueWorkflow(name: $name, params: $params) { instanceID }
}"""
STATUSES = "{ workflowInstances(limit: 50) { name status } }"
STATUS = "query ($id: ID!) { workflowInstance(instanceID: $id) { status } }"


@pytest.fixture
async def idle(database_url: str) -> AsyncIterator[LiveServer]:
    """A server whose engine does not run: what is enqueued stays pending."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


async def _enqueue(server: LiveServer, name: str, params: dict[str, object]) -> str:
    body = await server.graphql(ENQUEUE, name=name, params=params)
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def test_cancel_all_of_a_filtered_list_counts_asks_then_cancels(
    idle: LiveServer, browser: Browser
) -> None:
    hellos = [await _enqueue(idle, "hello", {"name": f"n{i}"}) for i in range(3)]
    other = await _enqueue(idle, "countdown", {"n": 1, "delayMs": 1})
    async with open_dashboard(browser, idle) as dash:
        page = dash.page
        bulk = page.get_by_test_id("bulk")
        await expect(dash.row(other)).to_have_attribute("data-status", "pending")
        await expect(bulk).to_be_hidden()  # no filter: nothing to act on as a whole
        await page.get_by_test_id("filter-name").select_option("hello")
        await expect(bulk).to_be_visible()
        await expect(dash.row(other)).to_have_count(0)

        # Retry: the dry run finds nothing failed here, and nothing is asked.
        await page.get_by_test_id("bulk-retry").click()
        await expect(page.get_by_test_id("bulk-result")).to_have_text("No instance here to retry.")
        await expect(page.get_by_test_id("bulk-confirm")).to_be_hidden()

        # Cancel: the count first, then "Keep them" changes nothing.
        await page.get_by_test_id("bulk-cancel").click()
        go = page.get_by_test_id("bulk-go")
        await expect(go).to_have_text("Cancel all 3")
        await expect(page.get_by_test_id("bulk-question")).to_have_text(
            "3 instances here are not ended yet."
        )
        await page.get_by_test_id("bulk-keep").click()
        await expect(page.get_by_test_id("bulk-confirm")).to_be_hidden()
        listed = (await idle.graphql(STATUSES))["data"]["workflowInstances"]
        assert {row["status"] for row in listed} == {"pending"}

        await page.get_by_test_id("bulk-cancel").click()
        await go.click()
        await expect(page.get_by_test_id("bulk-result")).to_have_text("Cancelled 3 of 3.")
        for instance_id in hellos:
            await expect(dash.row(instance_id)).to_have_attribute("data-status", "cancelled")
        assert dash.problems == []
    listed = (await idle.graphql(STATUSES))["data"]["workflowInstances"]
    by_name = {(row["name"], row["status"]) for row in listed}
    assert by_name == {("hello", "cancelled"), ("countdown", "pending")}


async def test_a_status_filter_offers_only_the_actions_that_can_change_its_instances(
    idle: LiveServer, browser: Browser
) -> None:
    # An outside audit: "Cancel all…" was offered on a list of failed instances, where its
    # count could only ever be 0.
    await _enqueue(idle, "hello", {"name": "one"})
    async with open_dashboard(browser, idle) as dash:
        page = dash.page
        await page.get_by_test_id("filter-name").select_option("hello")
        offered = {
            "": ("bulk-cancel", "bulk-retry", "bulk-resume"),
            "failed": ("bulk-retry",),
            "paused": ("bulk-cancel", "bulk-resume"),
            "completed": (),
            "active": ("bulk-cancel", "bulk-resume"),
        }
        for status, buttons in offered.items():
            await page.get_by_test_id("filter-status").select_option(status)
            for button in ("bulk-cancel", "bulk-retry", "bulk-resume"):
                shown = expect(page.get_by_test_id(button))
                await (shown.to_be_visible() if button in buttons else shown.to_be_hidden())
        assert dash.problems == []


async def test_escape_in_the_bulk_question_keeps_them_and_goes_back_to_its_button(
    idle: LiveServer, browser: Browser
) -> None:
    # The question stayed open on Escape, which closes the token dialog.
    await _enqueue(idle, "hello", {"name": "kept"})
    async with open_dashboard(browser, idle) as dash:
        page = dash.page
        confirm = page.get_by_test_id("bulk-confirm")
        await page.get_by_test_id("filter-name").select_option("hello")
        for opener, focused_on in (("bulk-cancel", "bulk-go"), ("bulk-cancel", "bulk-keep")):
            await page.get_by_test_id(opener).focus()
            await page.keyboard.press("Enter")
            await expect(confirm).to_be_visible()
            await expect(page.get_by_test_id("bulk-go")).to_be_focused()
            if focused_on == "bulk-keep":
                await page.keyboard.press("Tab")
                await expect(page.get_by_test_id(focused_on)).to_be_focused()
            await page.keyboard.press("Escape")
            await expect(confirm).to_be_hidden()
            await expect(page.get_by_test_id(opener)).to_be_focused()
        # "Keep them" goes back to the button that asked as well.
        await page.get_by_test_id("bulk-cancel").click()
        await page.get_by_test_id("bulk-keep").click()
        await expect(confirm).to_be_hidden()
        await expect(page.get_by_test_id("bulk-cancel")).to_be_focused()
        assert dash.problems == []
    listed = (await idle.graphql(STATUSES))["data"]["workflowInstances"]
    assert {row["status"] for row in listed} == {"pending"}


async def test_cancel_all_n_cancels_the_n_counted_not_those_enqueued_after_the_count(
    idle: LiveServer, browser: Browser
) -> None:
    # The confirm ran the list's filter again: "Cancel all 5" cancelled 25, the 20 enqueued
    # between the count and the click among them.
    counted = [await _enqueue(idle, "hello", {"name": f"n{i}"}) for i in range(5)]
    async with open_dashboard(browser, idle) as dash:
        page = dash.page
        await page.get_by_test_id("filter-name").select_option("hello")
        await page.get_by_test_id("filter-status").select_option("active")
        await page.get_by_test_id("bulk-cancel").click()
        go = page.get_by_test_id("bulk-go")
        await expect(go).to_have_text("Cancel all 5")
        later = [await _enqueue(idle, "hello", {"name": f"later{i}"}) for i in range(20)]
        await expect(dash.row(later[-1])).to_have_attribute("data-status", "pending")
        await expect(go).to_have_text("Cancel all 5")
        await go.click()
        await expect(page.get_by_test_id("bulk-result")).to_have_text(
            "Cancelled 5 of 5. 20 created after the count were left."
        )
        for instance_id in counted:  # ended: out of the list of active ones
            await expect(dash.row(instance_id)).to_have_count(0)
        await expect(dash.row(later[0])).to_have_attribute("data-status", "pending")
        assert dash.problems == []
    statuses = {}
    for instance_id in counted + later:
        body = await idle.graphql(STATUS, id=instance_id)
        statuses[instance_id] = body["data"]["workflowInstance"]["status"]
    assert [statuses[i] for i in counted] == ["cancelled"] * 5
    assert [statuses[i] for i in later] == ["pending"] * 20
