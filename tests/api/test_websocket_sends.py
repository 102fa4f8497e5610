"""A websocket client that stops reading (laneway/api/websocket_sends.py), over real sockets;
and close reasons cut to what a close frame carries (pure).

The client is a raw TCP socket with a small receive buffer, speaking the websocket protocol
through websockets' sans-I/O client: it subscribes to every event, then never reads again
while more are written than every buffer on the way holds. The send bound is shortened; time
passes only while the test waits, under a deadline, for the server to let the client go.
"""

import asyncio
import json
import logging
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import pytest
from strawberry.http.async_base_view import AsyncWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected
from websockets.client import ClientProtocol
from websockets.frames import Frame
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from laneway.api import websocket_sends
from laneway.engine import Engine, EnqueueRequest, WorkflowRegistry
from laneway.store import Store
from tests.api.conftest import LiveServer, live_server, make_settings, wait_until
from tests.workflows import noop

PROTOCOL = Subprotocol("graphql-transport-ws")
BATCH = 1000  # events written at a time: about 760 kB of `next` messages
RECEIVE_BUFFER = 4096
ALIASES = " ".join(f"i{n}: instanceID" for n in range(15))  # a large message per event
DIRECT = f'subscription {{ workflowEvents(afterEventID: "0") {{ {ALIASES} }} }}'
EXECUTED = f"""subscription {{ workflowEvents(afterEventID: "0") {{ ...many }} }}
fragment many on WorkflowEvent {{ {ALIASES} }}"""


@pytest.fixture
async def api_only(database_url: str) -> AsyncIterator[LiveServer]:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


class StalledClient:
    """A websocket client on a raw socket that reads only until it has subscribed."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.setblocking(False)
        self.protocol = ClientProtocol(parse_uri(server.ws_url), subprotocols=[PROTOCOL])
        self.port = 0  # the client's own port, once connected
        self.received: list[object] = []

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, ("127.0.0.1", self.server.port))
        self.port = self.sock.getsockname()[1]
        self.protocol.send_request(self.protocol.connect())
        await self._flush()
        response = await self._receive()
        assert isinstance(response, Response)
        assert response.status_code == 101
        await self.send({"type": "connection_init", "payload": {}})
        ack = await self._receive()
        assert isinstance(ack, Frame)
        assert json.loads(bytes(ack.data))["type"] == "connection_ack"

    async def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        await self._flush()

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        for data in self.protocol.data_to_send():
            await loop.sock_sendall(self.sock, data)

    async def _receive(self) -> object:
        """The next handshake response or frame."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(15):
            while not self.received:
                self.protocol.receive_data(await loop.sock_recv(self.sock, 1024))
                self.received += self.protocol.events_received()
        return self.received.pop(0)

    def close(self) -> None:
        self.sock.close()


def holds_a_socket_to(port: int) -> bool:
    """Whether this process has a TCP socket whose peer is at `port` on 127.0.0.1 (Linux)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return any(int(row[2].split(":")[1], 16) == port and row[9] in inodes for row in rows)


async def write_events(store: Store, count: int) -> None:
    engine = Engine(store, WorkflowRegistry([noop]))
    await engine.enqueue_many([EnqueueRequest(name="noop")] * count)


@pytest.mark.parametrize("document", [DIRECT, EXECUTED], ids=["direct", "executed"])
async def test_a_client_that_stops_reading_is_dropped_and_its_subscription_ends(
    api_only: LiveServer,
    store: Store,
    document: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(websocket_sends, "SEND_TIMEOUT_SECONDS", 0.5)
    await write_events(store, BATCH)
    client = StalledClient(api_only)
    try:
        await client.connect()
        await client.send({"id": "1", "type": "subscribe", "payload": {"query": document}})
        await api_only.wait_for_subscribers(1)
        # More events until the server's buffers are full, however large the kernel lets its
        # send buffer grow (tcp_wmem): then a send waits, and the bound runs out.
        async with asyncio.timeout(60):
            while (await api_only.health())["subscribers"]:
                await write_events(store, BATCH)

        async def let_go() -> bool:
            return not holds_a_socket_to(client.port)

        await wait_until(let_go, seconds=10)
    finally:
        client.close()
    dropped = [r for r in caplog.records if r.getMessage() == "websocket client stopped reading"]
    assert len(dropped) == 1
    assert dropped[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("Forbidden", "Forbidden"),
        ("x" * 123, "x" * 123),
        ("x" * 124, "x" * 120 + "…"),
        ("é" * 62, "é" * 60 + "…"),  # 124 bytes; 120 of room holds 60 whole characters
        ("x" + "€" * 41, "x" + "€" * 39 + "…"),  # a cut inside a three-byte character
        ("id \ud800", "id ?"),
    ],
    ids=["short", "123 bytes", "124 bytes", "two-byte", "three-byte", "lone surrogate"],
)
def test_a_close_reason_is_valid_utf8_of_at_most_123_bytes(reason: str, expected: str) -> None:
    cut = websocket_sends.close_reason(reason)
    assert cut == expected
    assert len(cut.encode()) <= websocket_sends.MAX_CLOSE_REASON_BYTES


class _ClosedByTheServer(AsyncWebSocketAdapter):
    """A websocket the server has sent its close on: uvicorn refuses a send after that."""

    def __init__(self) -> None:
        super().__init__(view=None)  # type: ignore[arg-type]

    def iter_json(self, *, ignore_parsing_errors: bool = False) -> AsyncGenerator[object, None]:
        raise NotImplementedError

    async def send_json(self, message: Mapping[str, object]) -> None:
        raise RuntimeError(
            "Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."
        )

    async def close(self, code: int, reason: str) -> None:
        raise NotImplementedError


class _Transport:
    def __init__(self, closing: bool) -> None:
        self.closing = closing

    def abort(self) -> None:
        raise AssertionError("not aborted: it is closing already")

    def is_closing(self) -> bool:
        return self.closing


async def _nothing() -> None:
    return None


async def test_a_send_after_the_server_closed_the_socket_is_a_disconnect_not_an_error() -> None:
    # A soak audit: after uvicorn's keepalive timeout closed a socket, the next event's send
    # raised its RuntimeError, which was logged as "event stream failed" (ERROR, a traceback).
    sends = websocket_sends.BoundedSends(_ClosedByTheServer(), _nothing)
    sends._transport = _Transport(closing=True)
    with pytest.raises(WebSocketDisconnected):
        await sends.send_json({"type": "next"})
    sends._transport = _Transport(closing=False)  # open: another fault, raised as it is
    with pytest.raises(RuntimeError):
        await sends.send_json({"type": "next"})
