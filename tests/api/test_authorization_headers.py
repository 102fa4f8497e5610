"""Several `Authorization` headers on one request or websocket handshake, over a real uvicorn
server (http/authorization_headers.py): refused 400 before any credential is read, in both
orders, on /graphql and /metrics; one header is judged as before.
"""

import json
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from laneway.api.http.authorization_headers import SEVERAL_AUTHORIZATIONS
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings

PROTOCOL = Subprotocol("graphql-transport-ws")
ENQUEUE = 'mutation { enqueueWorkflow(name: "hello", params: {name: "x"}) { instanceID } }'
COUNT = "{ workflowInstances { instanceID } }"
GOOD = f"Bearer {TOKEN}"
BAD = "Bearer not-the-token-at-all"


@pytest.fixture
async def guarded(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(database_url, engine_enabled=False, api_tokens=(TOKEN,))
    async with live_server(settings) as server:
        yield server


def assert_refused(status: int, body: bytes | bytearray) -> None:
    assert status == 400, body
    error = json.loads(body)["errors"][0]
    assert error["message"] == SEVERAL_AUTHORIZATIONS
    assert "Authorization" in error["message"]
    assert error["extensions"]["code"] == "BAD_REQUEST"


@pytest.mark.parametrize("order", [(GOOD, BAD), (BAD, GOOD), (GOOD, GOOD)])
async def test_several_authorization_headers_are_refused_400_and_nothing_runs(
    guarded: LiveServer, order: tuple[str, str]
) -> None:
    headers = [("authorization", value) for value in order]
    response = await guarded.client.post("/graphql", json={"query": ENQUEUE}, headers=headers)
    assert_refused(response.status_code, response.content)
    assert "x-request-id" in response.headers
    metrics = await guarded.client.get("/metrics", headers=headers)
    assert_refused(metrics.status_code, metrics.content)
    count = await guarded.graphql(COUNT, token=TOKEN)
    assert count["data"]["workflowInstances"] == []


async def test_one_authorization_header_is_judged_as_before(guarded: LiveServer) -> None:
    good = await guarded.client.post(
        "/graphql", json={"query": ENQUEUE}, headers={"authorization": GOOD}
    )
    assert good.status_code == 200, good.text
    assert good.json()["data"]["enqueueWorkflow"]["instanceID"]
    bad = await guarded.client.post(
        "/graphql", json={"query": COUNT}, headers={"authorization": BAD}
    )
    assert bad.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert (
        await guarded.client.get("/metrics", headers={"authorization": GOOD})
    ).status_code == 200
    # Other routes read no token: a second header there changes nothing.
    twice = [("authorization", GOOD), ("authorization", BAD)]
    assert (await guarded.client.get("/healthz", headers=twice)).status_code == 200


async def test_a_websocket_handshake_with_several_authorization_headers_is_refused_400(
    guarded: LiveServer,
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(
            guarded.ws_url,
            subprotocols=[PROTOCOL],
            additional_headers=[("Authorization", BAD), ("Authorization", GOOD)],
            proxy=None,
        ):
            pass
    response = refused.value.response
    assert_refused(response.status_code, response.body)
    # One header is no reason to refuse the handshake.
    async with connect(
        guarded.ws_url,
        subprotocols=[PROTOCOL],
        additional_headers=[("Authorization", GOOD)],
        proxy=None,
    ) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": GOOD}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
