"""Users' strings on the dashboard's instance page, in a real browser (the set-up of
test_dashboard.py): bidi controls in them (U+202E and its kin) cannot rearrange what is shown
around them, as they do in a Trojan Source spoof.
"""

import uuid

import asyncpg
import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, LiveServer
from tests.api.test_dashboard import TIMEOUT_MS, enqueue_hello, open_dashboard
from tests.api.test_waits_api import until_status

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

NAME = "ü漢字🎉\u202eRTL\u200b"  # a right-to-left override, then a zero-width space
STAGE = "\u202edaolnwod"
SET_STAGE = "UPDATE laneway.events SET stage = $2 WHERE instance_id = $1"
# Where the first timeline entry's stage (in its <bdi>) ends, and where the text after it starts.
AFTER_STAGE = """() => {
  const detail = document.querySelector("[data-testid=timeline-event] .detail");
  const stage = detail.querySelector("bdi");
  const rest = document.createRange();
  rest.setStartAfter(stage);
  rest.setEndAfter(detail.lastChild);
  return [stage.textContent, rest.toString(), getComputedStyle(stage).unicodeBidi,
          stage.getBoundingClientRect().right, rest.getBoundingClientRect().left];
}"""


async def test_bidi_controls_in_params_and_results_are_shown_escaped(
    server: LiveServer, browser: Browser, admin: asyncpg.Connection
) -> None:
    # JSON.stringify leaves U+202E as it is: in the params and the result the override
    # turned the rest of its line around (`"RTL` and the closing quote), so the JSON shown
    # was not the JSON stored.
    instance_id = await enqueue_hello(server, NAME)
    await until_status(server, instance_id, "completed")
    await admin.execute(SET_STAGE, uuid.UUID(instance_id), STAGE)
    async with open_dashboard(browser, server) as dash:
        page = dash.page
        await dash.open_instance(instance_id)
        await expect(dash.panel).to_have_attribute("data-status", "completed")
        params = page.get_by_test_id("instance-params")
        result = page.get_by_test_id("instance-result")
        await expect(result).not_to_have_text("—")
        shown = [await params.text_content(), await result.text_content()]
        assert shown == [
            '{\n  "name": "ü漢字🎉\\u202eRTL\u200b"\n}',
            '{\n  "greeting": "Hello, ü漢字🎉\\u202eRTL\u200b!"\n}',
        ]

        # In a line of other text (the timeline's "stage … · attempt 0"), a user's string is
        # isolated: the override reverses the stage only, not what follows it.
        await expect(page.get_by_test_id("timeline-event").first).to_contain_text("attempt")
        stage, rest, isolation, stage_right, rest_left = await page.evaluate(AFTER_STAGE)
        assert (stage, isolation) == (STAGE, "isolate")
        assert rest.startswith(" · attempt ")
        assert rest_left >= stage_right - 0.5
        assert dash.problems == []
