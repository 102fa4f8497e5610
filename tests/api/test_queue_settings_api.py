"""Where a queue's settings came from, over GraphQL on a real uvicorn server (issue #18,
point 6): `queues { settingsSource }`, and an operator's configureQueue surviving a restart
of the server whose template declares other queue settings."""

from typing import Any

from laneway.api.app import create_app
from tests.api.conftest import LiveServer, live_server, make_settings, wait_until
from tests.billing_template import billing

QUEUES = "{ queues { name concurrency ratePerMinute settingsSource } }"
WORKERS = "{ workers { ownerID } }"
CONFIGURE = """mutation ($name: String!, $n: Int!, $rate: Float) {
  configureQueue(name: $name, concurrency: $n, ratePerMinute: $rate) {
    name concurrency ratePerMinute settingsSource } }"""


async def _queues(server: LiveServer) -> dict[str, dict[str, Any]]:
    body = await server.graphql(QUEUES)
    assert "errors" not in body, body
    return {queue["name"]: queue for queue in body["data"]["queues"]}


async def _started(server: LiveServer, owner_id: str) -> None:
    """Until the server's engine registered as a worker: its start, queue settings first, ran."""

    async def registered() -> bool:
        body = await server.graphql(WORKERS)
        return owner_id in {worker["ownerID"] for worker in body["data"]["workers"]}

    await wait_until(registered)


async def test_queues_show_where_settings_came_from_and_an_operators_survive_a_restart(
    database_url: str,
) -> None:
    first = make_settings(database_url, owner_id="deploy-1")
    async with live_server(first, app=create_app(first, workflows=[billing(3, 120.0)])) as server:
        await _started(server, "deploy-1")
        queues = await _queues(server)
        assert queues["billing"] == {
            "name": "billing",
            "concurrency": 3,
            "ratePerMinute": 120.0,
            "settingsSource": "code",
        }
        assert queues["noop"]["settingsSource"] == "default"  # no template declares it

        body = await server.graphql(CONFIGURE, name="billing", n=7, rate=None)
        assert body["data"]["configureQueue"] == {
            "name": "billing",
            "concurrency": 7,
            "ratePerMinute": None,
            "settingsSource": "operator",
        }

    # The next deploy's template declares other settings; the operator's stay.
    second = make_settings(database_url, owner_id="deploy-2")
    async with live_server(second, app=create_app(second, workflows=[billing(5, 30.0)])) as server:
        await _started(server, "deploy-2")
        billing_queue = (await _queues(server))["billing"]
        assert (billing_queue["concurrency"], billing_queue["ratePerMinute"]) == (7, None)
        assert billing_queue["settingsSource"] == "operator"
