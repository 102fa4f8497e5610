"""Request ids on every response and on every masked error, so a client's report finds the log.

A resolver is made to fail with an unexpected exception (the store method behind `queues`
raises), so the answer is the masked "Unexpected error.", with the code INTERNAL_SERVER_ERROR
as every error has one. Its `extensions.requestId` must be the response's X-Request-ID and the
`request_id` of the log record with the traceback.
"""

import json
import logging
import re
from typing import Any, NoReturn

import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from laneway.store import Store
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer

PROTOCOL = Subprotocol("graphql-transport-ws")
GENERATED = re.compile(r"[0-9a-f]{32}")


async def test_responses_carry_an_x_request_id_and_honour_a_sane_one(server: LiveServer) -> None:
    query = {"query": "{ workflows { name } }"}
    generated = await server.client.post("/graphql", json=query)
    assert GENERATED.fullmatch(generated.headers["x-request-id"])
    again = await server.client.post("/graphql", json=query)
    assert again.headers["x-request-id"] != generated.headers["x-request-id"]
    for given in ("abc-DEF-123", "x" * 64):
        response = await server.client.post("/graphql", json=query, headers={"x-request-id": given})
        assert response.headers["x-request-id"] == given
    for insane in ("x" * 65, "has space", "semi;colon", "under_score", ""):
        response = await server.client.get("/healthz", headers={"x-request-id": insane})
        assert GENERATED.fullmatch(response.headers["x-request-id"]), insane
    too_large = await server.client.post("/graphql", content=b"{" * (2 * 1024 * 1024))
    assert too_large.status_code == 413
    assert GENERATED.fullmatch(too_large.headers["x-request-id"])
    assert GENERATED.fullmatch((await server.client.get("/")).headers["x-request-id"])


def boom(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("boom: SELECT password FROM secrets")


def failure_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "unexpected error in resolver"]


async def test_a_masked_error_carries_the_request_id_of_its_log_record(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Store, "queues", boom)
    caplog.set_level(logging.ERROR, logger="laneway.api.graphql.schema")
    response = await server.client.post(
        "/graphql",
        json={"query": "{ queues { name } workflows { name } }"},
        headers={"x-request-id": "trace-me-42"},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["data"] is None
    error = body["errors"][0]
    assert error["message"] == "Unexpected error."
    assert error["extensions"] == {"code": "INTERNAL_SERVER_ERROR", "requestId": "trace-me-42"}
    for word in FORBIDDEN_TEXT:
        assert word not in response.text
    records = failure_records(caplog)
    assert [getattr(r, "request_id", None) for r in records] == ["trace-me-42"]
    assert records[0].exc_info is not None
    # Expected errors are not masked and carry no request id.
    missing = await server.graphql(
        "query ($id: ID!) { workflowInstance(instanceID: $id) { name } }", id="nope"
    )
    assert missing["errors"][0]["extensions"] == {"code": "BAD_USER_INPUT"}


async def test_a_masked_error_over_a_websocket_carries_the_connections_request_id(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Store, "queues", boom)
    caplog.set_level(logging.ERROR, logger="laneway.api.graphql.schema")
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        assert ws.response is not None
        request_id = ws.response.headers["x-request-id"]
        assert GENERATED.fullmatch(request_id)
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        frame = {"id": "q", "type": "subscribe", "payload": {"query": "{ queues { name } }"}}
        await ws.send(json.dumps(frame))
        reply = json.loads(await ws.recv())
    assert reply["type"] == "next"
    error = reply["payload"]["errors"][0]
    assert error["message"] == "Unexpected error."
    assert error["extensions"] == {"code": "INTERNAL_SERVER_ERROR", "requestId": request_id}
    assert "boom" not in json.dumps(reply)
    assert [getattr(r, "request_id", None) for r in failure_records(caplog)] == [request_id]
