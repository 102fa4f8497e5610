"""The dashboard and durable waits, in a real browser (the set-up of test_dashboard.py).

A checkpoint with an input schema gets a resume form whose rejected input is shown where it
applies; a sleeping instance shows the status `waiting` and why; a wait for a signal can be
given one from the page. Waits are Playwright expectations or GraphQL polls with deadlines.
"""

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Route, expect

from tests.api.conftest import CHROMIUM, LiveServer
from tests.api.test_dashboard import TIMEOUT_MS, Dashboard, open_dashboard, waiting_message
from tests.api.test_waits_api import instance, until_status

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

ENQUEUE = """mutation ($name: String!, $params: JSON) {
  enqueueWorkflow(name: $name, params: $params) { instanceID instance { queue } }
}"""


async def enqueue(server: LiveServer, name: str, params: dict[str, Any]) -> tuple[str, str]:
    """Enqueue over GraphQL; the instance's id and queue."""
    body = await server.graphql(ENQUEUE, name=name, params=params)
    enqueued = body["data"]["enqueueWorkflow"]
    return enqueued["instanceID"], enqueued["instance"]["queue"]


@asynccontextmanager
async def review_open(server: LiveServer, browser: Browser) -> AsyncIterator[tuple[Dashboard, str]]:
    """A `review` instance, paused at its checkpoint, open on the dashboard; and its id."""
    instance_id, _ = await enqueue(server, "review", {})
    async with open_dashboard(browser, server) as dashboard:
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "paused")
        await dashboard.open_instance(instance_id)
        await expect(dashboard.panel).to_have_attribute("data-status", "paused")
        yield dashboard, instance_id


async def tag_of(page: Page, testid: str) -> str:
    tag: str = await page.get_by_test_id(testid).evaluate("e => e.tagName.toLowerCase()")
    return tag


async def test_review_input_is_checked_inline_then_resumes_the_instance(
    server: LiveServer, browser: Browser
) -> None:
    async with review_open(server, browser) as (dashboard, instance_id):
        page = dashboard.page
        form = page.get_by_test_id("resume-input-form")
        await expect(form).to_be_visible()
        await expect(page.get_by_test_id("action-resume")).to_be_hidden()
        decision = page.get_by_test_id("input-field-decision")
        comment = page.get_by_test_id("input-field-comment")
        assert await tag_of(page, "input-field-decision") == "select"
        options = await decision.locator("option").all_text_contents()
        assert options[1:] == ["approve", "reject"]
        await expect(decision).to_have_attribute("aria-required", "true")
        assert await tag_of(page, "input-field-comment") == "input"
        await expect(comment).to_have_attribute("type", "text")
        await expect(comment).not_to_have_attribute("aria-required", "true")

        # No decision: the server names what is missing at `$`, with the property's name in
        # its message: shown next to that field, as the README promises.
        await comment.fill("first try")
        await page.get_by_test_id("resume-input-submit").click()
        above = page.get_by_test_id("input-errors")
        missing = page.get_by_test_id("input-error-decision")
        await expect(missing).to_have_text('"decision" is a required property')
        await expect(missing).to_have_attribute("data-path", "$.decision")
        await expect(decision).to_have_attribute("aria-invalid", "true")
        await expect(above).to_have_text("")
        assert (await instance(server, instance_id))["status"] == "paused"

        # An input from a form that drifted from the schema: the server's answer about
        # `$.decision` appears next to that field.
        async def drift(route: Route) -> None:
            body = json.loads(route.request.post_data or "{}")
            if "resumeWorkflow" in body.get("query", ""):
                body["variables"]["input"] = {"decision": "maybe"}
            await route.continue_(post_data=json.dumps(body))

        await page.route("**/graphql", drift)
        await decision.select_option("approve")
        await page.get_by_test_id("resume-input-submit").click()
        field_error = page.get_by_test_id("input-error-decision")
        await expect(field_error).to_contain_text('"maybe" is not one of')
        await expect(field_error).to_have_attribute("data-path", "$.decision")
        await expect(decision).to_have_attribute("aria-invalid", "true")
        await expect(above).to_have_text("")
        await page.unroute("**/graphql", drift)
        assert (await instance(server, instance_id))["status"] == "paused"
        await expect(form).to_be_visible()
        await expect(comment).to_have_value("first try")  # the refreshes kept the input

        await comment.fill("Looks good")
        await page.get_by_test_id("resume-input-submit").click()
        finished = await until_status(server, instance_id, "completed")
        assert finished["result"] == {"decision": "approve", "comment": "Looks good"}
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        await expect(form).to_be_hidden()
        await expect(
            page.locator('[data-testid="timeline-event"][data-type="resumed"]')
        ).to_have_count(1)
        assert dashboard.problems == []


async def test_the_review_forms_fields_follow_the_schemas_order(
    server: LiveServer, browser: Browser
) -> None:
    # The schema came back from its jsonb column with the shorter names first: comment was
    # listed above decision.
    async with review_open(server, browser) as (dashboard, _):
        fields = dashboard.page.locator('#resume-input-fields [data-testid^="input-field-"]')
        await expect(fields).to_have_count(2)
        names = await fields.evaluate_all("controls => controls.map((c) => c.name)")
        assert names == ["decision", "comment"]  # REVIEW_INPUT_SCHEMA's order
        assert dashboard.problems == []


async def test_review_resumed_without_a_comment_leaves_it_out(
    server: LiveServer, browser: Browser
) -> None:
    instance_id, _ = await enqueue(server, "review", {})
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "paused")
        await dashboard.open_instance(instance_id)
        await page.get_by_test_id("input-field-decision").select_option("reject")
        await page.get_by_test_id("resume-input-submit").click()
        finished = await until_status(server, instance_id, "completed")
        assert finished["result"] == {"decision": "reject", "comment": None}
        assert dashboard.problems == []


async def test_a_sleeping_instance_is_waiting_with_its_colour_and_reason(
    server: LiveServer, browser: Browser
) -> None:
    instance_id, queue = await enqueue(server, "nap", {"seconds": 3600})
    await until_status(server, instance_id, "waiting")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        row = dashboard.row(instance_id)
        await expect(row).to_have_attribute("data-status", "waiting")
        badge = row.get_by_test_id("row-status")
        await expect(badge).to_have_text("waiting")
        colours = await badge.evaluate(
            """badge => {
              const probe = document.createElement("span");
              document.body.append(probe);
              const colour = (name) => {
                probe.style.backgroundColor = `var(--${name}-bg)`;
                return getComputedStyle(probe).backgroundColor;
              };
              const found = {
                badge: getComputedStyle(badge).backgroundColor,
                waiting: colour("waiting"), paused: colour("paused"), pending: colour("pending"),
              };
              probe.remove();
              return found;
            }"""
        )
        assert colours["badge"] == colours["waiting"]
        assert colours["waiting"] not in (colours["paused"], colours["pending"])
        reason = row.get_by_test_id("waiting-reason")
        await expect(reason).to_have_attribute("data-code", "SLEEPING")
        await expect(reason).to_have_attribute(
            "title", await waiting_message(server, instance_id, "SLEEPING")
        )
        await expect(reason.locator("time")).to_have_text(re.compile(r"^in (59|60)m$"))
        card = page.locator(f'[data-testid="queue-card"][data-queue="{queue}"]')
        await expect(card.get_by_test_id("count-waiting")).to_have_text("1")

        # The status filter lists `waiting`, alone and among the active statuses.
        status_filter = page.get_by_test_id("filter-status")
        await status_filter.select_option("paused")
        await expect(row).to_have_count(0)
        await status_filter.select_option("waiting")
        await expect(row).to_have_attribute("data-status", "waiting")
        await status_filter.select_option("active")
        await expect(row).to_have_attribute("data-status", "waiting")
        assert "waiting" in (await status_filter.locator('option[value="active"]').inner_text())

        await dashboard.open_instance(instance_id)
        await expect(page.get_by_test_id("instance-status")).to_have_attribute(
            "data-status", "waiting"
        )
        waiting = page.get_by_test_id("instance-waiting-reason")
        await expect(waiting.locator(".reason")).to_have_attribute("data-code", "SLEEPING")
        await expect(waiting).to_contain_text(
            await waiting_message(server, instance_id, "SLEEPING")
        )
        await expect(
            page.locator('[data-testid="timeline-event"][data-type="waiting"]')
        ).to_have_count(1)
        await expect(page.get_by_test_id("action-cancel")).to_be_enabled()
        await expect(page.get_by_test_id("action-resume")).to_be_disabled()
        await expect(page.get_by_test_id("signal-form")).to_be_hidden()
        assert dashboard.problems == []


async def test_a_long_countdown_keeps_its_minutes_and_hours(
    server: LiveServer, browser: Browser
) -> None:
    # 7,000 s is 1 h 56 m 40 s, 200,000 s is 2 d 7 h 33 m: not "in 2h" and "in 2d".
    hours_id, _ = await enqueue(server, "nap", {"seconds": 7000})
    days_id, _ = await enqueue(server, "nap", {"seconds": 200_000})
    await until_status(server, hours_id, "waiting")
    await until_status(server, days_id, "waiting")
    async with open_dashboard(browser, server) as dashboard:
        hours = dashboard.row(hours_id).get_by_test_id("waiting-reason").locator("time")
        await expect(hours).to_have_text(re.compile(r"^in 1h 5[56]m$"))
        days = dashboard.row(days_id).get_by_test_id("waiting-reason").locator("time")
        await expect(days).to_have_text("in 2d 7h")
        assert dashboard.problems == []


async def test_a_wait_for_a_signal_is_signalled_from_the_page(
    server: LiveServer, browser: Browser
) -> None:
    instance_id, _ = await enqueue(server, "approval", {"timeoutSeconds": 3600})
    await until_status(server, instance_id, "waiting")
    async with open_dashboard(browser, server) as dashboard:
        page = dashboard.page
        await expect(dashboard.row(instance_id)).to_have_attribute("data-status", "waiting")
        await dashboard.open_instance(instance_id)
        waiting = page.get_by_test_id("instance-waiting-reason")
        await expect(waiting.locator(".reason")).to_have_attribute("data-code", "AWAITING_SIGNAL")
        waited = page.locator('[data-testid="timeline-event"][data-type="waiting"]')
        await expect(waited).to_contain_text("signal approve")
        form = page.get_by_test_id("signal-form")
        await expect(form).to_be_visible()
        await expect(page.get_by_test_id("signal-name")).to_have_value("approve")

        await page.get_by_test_id("signal-payload").fill("{not json")
        await page.get_by_test_id("signal-submit").click()
        await expect(page.get_by_test_id("signal-errors")).to_contain_text("not valid JSON")
        assert (await instance(server, instance_id))["status"] == "waiting"

        await page.get_by_test_id("signal-payload").fill('{"by": "the browser"}')
        await page.get_by_test_id("signal-submit").click()
        finished = await until_status(server, instance_id, "completed")
        assert finished["result"] == {"approved": True, "payload": {"by": "the browser"}}
        await expect(dashboard.panel).to_have_attribute("data-status", "completed")
        signalled = page.locator('[data-testid="timeline-event"][data-type="signalled"]')
        await expect(signalled).to_contain_text("signal approve")
        await expect(form).to_be_hidden()
        assert dashboard.problems == []
