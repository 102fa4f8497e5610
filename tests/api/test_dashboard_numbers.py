"""The dashboard and integers past JavaScript's 2**53 in a real browser (the set-up of
test_dashboard.py): what a person types is sent with its digits, and what the server answers
is shown with them. The server reads and stores JSON integers exactly; a browser's numbers
are doubles, exact only up to Number.MAX_SAFE_INTEGER (9007199254740991)."""

import pytest
from playwright.async_api import Browser, expect

from tests.api.conftest import CHROMIUM, LiveServer
from tests.api.test_dashboard import INSTANCE_ID, TIMEOUT_MS, open_dashboard
from tests.api.test_waits_api import SIGNAL, until_status

expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `apt-get install chromium`"
)

ENQUEUE = """mutation ($name: String!, $params: JSON) {
  enqueueWorkflow(name: $name, params: $params) { instanceID }
}"""
# 2**53 + 1, which a double rounds to 2**53, and one a double holds only as 1.2345...e+29.
PAST_2_53 = 9007199254740993
THIRTY_DIGITS = 123456789012345678901234567890
NUMBERS = {"accountId": PAST_2_53, "big": THIRTY_DIGITS, "small": -42}
# What a person types, spaced as they like: the page sends this text.
PARAMS = "query ($id: ID!) { workflowInstance(instanceID: $id) { status params } }"
TYPED = '{"accountId": 9007199254740993,\n "big": 123456789012345678901234567890, "small": -42}'


def stored_exactly(value: object) -> bool:
    """`value` is NUMBERS, with integers (Python reads a JSON float as a float)."""
    return value == NUMBERS and all(type(v) is int for v in NUMBERS.values())


async def test_integers_past_2_53_are_shown_with_all_their_digits(
    server: LiveServer, browser: Browser
) -> None:
    # The page showed 9007199254740992 and 123456789012345680000000000000.
    body = await server.graphql(ENQUEUE, name="noop", params=NUMBERS)
    in_params = body["data"]["enqueueWorkflow"]["instanceID"]
    body = await server.graphql(ENQUEUE, name="approval", params={"timeoutSeconds": 3600})
    in_result = body["data"]["enqueueWorkflow"]["instanceID"]
    await until_status(server, in_result, "waiting")
    await server.graphql(SIGNAL, id=in_result, name="approve", payload=NUMBERS)
    done = await until_status(server, in_result, "completed")
    assert stored_exactly(done["result"]["payload"])
    async with open_dashboard(browser, server) as dash:
        page = dash.page
        for instance_id, testid in ((in_params, "instance-params"), (in_result, "instance-result")):
            await dash.open_instance(instance_id)
            await expect(dash.panel).to_have_attribute("data-status", "completed")
            shown = page.get_by_test_id(testid)
            await expect(shown).to_contain_text('"accountId": 9007199254740993')
            await expect(shown).to_contain_text('"big": 123456789012345678901234567890')
            await expect(shown).to_contain_text('"small": -42')
        assert dash.problems == []


async def test_integers_past_2_53_typed_into_the_enqueue_form_are_enqueued_as_typed(
    server: LiveServer, browser: Browser
) -> None:
    # The form stored 9007199254740992, and the 30-digit integer as a float.
    async with open_dashboard(browser, server) as dash:
        page = dash.page
        await page.get_by_test_id("enqueue-workflow").select_option("noop")
        await page.get_by_test_id("enqueue-params").fill(TYPED)
        await page.get_by_role("button", name="Enqueue", exact=True).click()
        result = page.get_by_test_id("enqueue-result")
        await expect(result).to_have_attribute("data-instance-id", INSTANCE_ID)
        instance_id = await result.get_attribute("data-instance-id")
        assert instance_id is not None
        stored = (await server.graphql(PARAMS, id=instance_id))["data"]["workflowInstance"]
        assert stored_exactly(stored["params"]), stored["params"]
        # Still refused when it is not JSON, before anything is sent.
        await page.get_by_test_id("enqueue-params").fill('{"big": 12345678901234567890123,}')
        await page.get_by_role("button", name="Enqueue", exact=True).click()
        await expect(result).to_contain_text("Params are not valid JSON")
        await expect(page.get_by_test_id("enqueue-params")).to_have_attribute(
            "aria-invalid", "true"
        )
        assert dash.problems == []


async def test_integers_past_2_53_in_a_signals_payload_are_sent_as_typed(
    server: LiveServer, browser: Browser
) -> None:
    body = await server.graphql(ENQUEUE, name="approval", params={"timeoutSeconds": 3600})
    instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
    await until_status(server, instance_id, "waiting")
    async with open_dashboard(browser, server) as dash:
        page = dash.page
        await dash.open_instance(instance_id)
        await expect(page.get_by_test_id("signal-form")).to_be_visible()
        await page.get_by_test_id("signal-payload").fill(TYPED)
        await page.get_by_test_id("signal-submit").click()
        done = await until_status(server, instance_id, "completed")
        assert stored_exactly(done["result"]["payload"]), done["result"]
        await expect(dash.panel).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("instance-result")).to_contain_text(
            '"big": 123456789012345678901234567890'
        )
        assert dash.problems == []
