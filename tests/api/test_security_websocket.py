"""Websocket limits over real websockets: connections per token, protocol misuse.

Raw `websockets` clients against uvicorn, since close codes are the point. The cases
test_websocket.py already covers (4403, 4406, 4408, 4400 for a non-JSON frame, 1009, the
21st subscription, a mutation without a token under open reads) are not repeated here.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from tests.api.conftest import (
    TOKEN,
    LiveServer,
    escaped,
    live_server,
    make_settings,
    wait_until,
)

PROTOCOL = Subprotocol("graphql-transport-ws")
OTHER_TOKEN = "another-token"
EVENTS = "subscription { workflowEvents { eventID } }"


async def closed_with(ws: ClientConnection, *frames: dict[str, Any]) -> int:
    """Send `frames`, then read until the server closes; its close code."""
    return (await close_of(ws, *map(json.dumps, frames)))[0]


async def close_of(ws: ClientConnection, *texts: str) -> tuple[int, str]:
    """Send `texts`, then read until the server closes; its close code and reason (1006 and
    no reason when it sent no close frame)."""
    try:
        async with asyncio.timeout(10):
            for text in texts:
                await ws.send(text)
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return (closed.rcvd.code, closed.rcvd.reason) if closed.rcvd is not None else (1006, "")


def init(token: str | None = None) -> dict[str, Any]:
    payload = {"authorization": f"Bearer {token}"} if token else {}
    return {"type": "connection_init", "payload": payload}


async def open_acked(server: LiveServer, token: str | None = None) -> ClientConnection:
    """A socket whose connection_init was acknowledged (closed by the caller)."""
    ws = await connect(server.ws_url, subprotocols=[PROTOCOL])
    await ws.send(json.dumps(init(token)))
    async with asyncio.timeout(10):
        reply = json.loads(await ws.recv())
    assert reply["type"] == "connection_ack", reply
    return ws


async def init_outcome(server: LiveServer, token: str, *, escape: bool = False) -> str:
    """ "ack", or the close code the server answered connection_init with."""
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send(escaped(init(token)) if escape else json.dumps(init(token)))
        try:
            async with asyncio.timeout(10):
                return str(json.loads(await ws.recv())["type"])
        except ConnectionClosed as closed:
            return str(closed.rcvd.code if closed.rcvd is not None else 1006)


@pytest.fixture
async def capped(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(
        database_url,
        engine_enabled=False,
        api_tokens=(TOKEN, OTHER_TOKEN),
        ws_connections_per_token=5,
    )
    async with live_server(settings) as server:
        yield server


async def test_a_sixth_connection_per_token_is_closed_with_4429_until_one_ends(
    capped: LiveServer,
) -> None:
    sockets = [await open_acked(capped, TOKEN) for _ in range(5)]
    try:
        assert await init_outcome(capped, TOKEN) == "4429"
        # Judged by the message, not its spelling: an escaped `type` is no way around the cap.
        assert await init_outcome(capped, TOKEN, escape=True) == "4429"
        other = await open_acked(capped, OTHER_TOKEN)  # each token has its own five
        await other.close()
        await sockets.pop().close()

        async def admitted() -> bool:
            return await init_outcome(capped, TOKEN) == "connection_ack"

        await wait_until(admitted, seconds=10)
        # A connection that dies without a close handshake frees its place too.
        sockets.append(await open_acked(capped, TOKEN))
        assert await init_outcome(capped, TOKEN) == "4429"
        sockets.pop().transport.abort()
        await wait_until(admitted, seconds=10)
    finally:
        for ws in sockets:
            await ws.close()


async def test_subscribe_before_the_ack_closes_with_4401(capped: LiveServer) -> None:
    async with connect(capped.ws_url, subprotocols=[PROTOCOL]) as ws:
        frame = {"id": "1", "type": "subscribe", "payload": {"query": EVENTS}}
        assert await closed_with(ws, frame) == 4401


async def test_a_second_connection_init_closes_with_4429(capped: LiveServer) -> None:
    ws = await open_acked(capped, TOKEN)
    async with ws:
        assert await closed_with(ws, init(TOKEN)) == 4429


async def test_a_duplicate_subscription_id_closes_with_4409(capped: LiveServer) -> None:
    ws = await open_acked(capped, TOKEN)
    async with ws:
        frame = {"id": "same", "type": "subscribe", "payload": {"query": EVENTS}}
        await ws.send(json.dumps(frame))
        assert await closed_with(ws, frame) == 4409


@pytest.mark.parametrize(
    ("operation_id", "reason"),
    [
        ([1], "expects 'id' to be a string, got array"),
        ({}, "expects 'id' to be a string, got object"),
        (5, "expects 'id' to be a string, got number"),
        (None, "expects 'id' to be a string, got null"),
        ("", "requires a non-empty 'id'"),
    ],
)
async def test_a_complete_whose_id_is_not_a_string_closes_with_4400_and_says_why(
    capped: LiveServer, operation_id: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    ws = await open_acked(capped, TOKEN)
    async with ws:
        closed = await close_of(ws, json.dumps({"type": "complete", "id": operation_id}))
    assert closed == (4400, f'"complete" message {reason}')
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_complete_ends_its_operation_and_an_unknown_id_is_ignored(
    capped: LiveServer,
) -> None:
    ws = await open_acked(capped, TOKEN)
    async with ws:
        frame = {"id": "s", "type": "subscribe", "payload": {"query": EVENTS}}
        await ws.send(json.dumps(frame))
        await capped.wait_for_subscribers(1)
        await ws.send(json.dumps({"type": "complete", "id": "s"}))
        await ws.send(json.dumps({"type": "complete", "id": "never-subscribed"}))

        async def unsubscribed() -> bool:
            return bool((await capped.health())["subscribers"] == 0)

        await wait_until(unsubscribed, seconds=10)
        # The id is free again, and the socket still answers.
        await ws.send(json.dumps(frame))
        await capped.wait_for_subscribers(1)
        await ws.send(json.dumps({"type": "ping"}))
        async with asyncio.timeout(10):
            assert json.loads(await ws.recv()) == {"type": "pong"}


def subscribe(operation_id: str, query: str = EVENTS) -> str:
    return json.dumps({"id": operation_id, "type": "subscribe", "payload": {"query": query}})


@pytest.mark.parametrize(
    ("first", "then", "code", "start"),
    [
        (subscribe("x" * 200), subscribe("x" * 200), 4409, "Subscriber for xxx"),
        (subscribe("é" * 100), subscribe("é" * 100), 4409, "Subscriber for éé"),
        (subscribe("\ud800"), subscribe("\ud800"), 4409, "Subscriber for ? already exists"),
        (json.dumps({"type": "t" * 200}), None, 4400, "Unknown message type: ttt"),
        (subscribe("1", "x" * 200), None, 4400, "Syntax Error: Unexpected Name 'xxx"),
    ],
    ids=["duplicate id", "duplicate id of two-byte characters", "lone surrogate", "type", "syntax"],
)
async def test_a_close_reason_built_from_a_long_client_string_is_cut_to_123_bytes(
    capped: LiveServer, first: str, then: str | None, code: int, start: str
) -> None:
    ws = await open_acked(capped, TOKEN)
    async with ws:
        closed = await close_of(ws, first, *([then] if then else []))
    assert closed[0] == code, closed
    assert closed[1].startswith(start), closed
    assert len(closed[1].encode()) <= 123
