"""Slow clients and the connection cap (laneway/api/http/server.py) over a real uvicorn server.

Raw asyncio sockets play the slow clients: half-sent headers, a declared body that never
finishes. Time passes only while the test waits for the server to act (an EOF, a closed
socket) under a deadline; a connection that must survive a timeout is checked once another
connection, opened after it, has been dropped by the same timeout.
"""

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import httpx
import pytest
from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from laneway.api.app import create_app, server_config
from laneway.api.http.server import ConnectionLimits, LanewayHttpProtocol
from laneway.config import Settings
from tests.api.conftest import LiveServer, live_server, make_settings, wait_until

PROTOCOL = Subprotocol("graphql-transport-ws")
SHORT = 0.5  # seconds: the header timeout and operation deadline these tests run with
MARGIN = 5.0  # seconds a server may take beyond a timeout on a busy machine


@dataclasses.dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


@asynccontextmanager
async def raw_socket(
    server: LiveServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()


def request_head(server: LiveServer, method: str = "GET", path: str = "/healthz") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()


async def read_until_closed(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection; fails after `seconds`."""
    chunks: list[bytes] = []
    async with asyncio.timeout(seconds):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def parse_response(data: bytes) -> RawResponse:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(status=int(status_line.split()[1]), headers=headers, body=body)


async def read_response(reader: asyncio.StreamReader) -> RawResponse:
    async with asyncio.timeout(MARGIN):
        head = await reader.readuntil(b"\r\n\r\n")
        response = parse_response(head)
        response.body = await reader.readexactly(int(response.headers["content-length"]))
    return response


async def dropped_after(server: LiveServer, sent: bytes, seconds: float) -> float:
    """Open a socket, send `sent`, and wait until the server closes it without answering;
    the seconds that took."""
    began = time.monotonic()
    async with raw_socket(server) as (reader, writer):
        writer.write(sent)
        await writer.drain()
        assert await read_until_closed(reader, seconds + MARGIN) == b""
    return time.monotonic() - began


@pytest.fixture
async def short(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(
        database_url,
        engine_enabled=False,
        header_timeout_seconds=SHORT,
        operation_timeout_seconds=SHORT,
    )
    async with live_server(settings) as server:
        yield server


async def test_half_sent_headers_are_dropped_after_the_header_timeout(short: LiveServer) -> None:
    half = request_head(short, "POST", "/graphql") + b"Content-Type: appl"
    # Several at once, and one that never sends a byte: each is closed on its own clock.
    elapsed = await asyncio.gather(
        *(dropped_after(short, half, SHORT) for _ in range(10)), dropped_after(short, b"", SHORT)
    )
    assert min(elapsed) >= SHORT * 0.9
    assert (await short.client.get("/healthz")).status_code == 200


async def test_a_later_keep_alive_request_with_half_its_headers_is_dropped(
    short: LiveServer,
) -> None:
    async with raw_socket(short) as (reader, writer):
        writer.write(request_head(short) + b"\r\n")
        assert (await read_response(reader)).status == 200
        began = time.monotonic()
        writer.write(request_head(short))
        assert await read_until_closed(reader, SHORT + MARGIN) == b""
    # The header timeout dropped it, not uvicorn's idle keep-alive timeout (5 s).
    assert SHORT * 0.9 <= time.monotonic() - began < 5.0


async def test_a_body_that_never_completes_is_answered_408_and_closed(
    short: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def partial_body() -> tuple[float, bytes]:
        began = time.monotonic()
        async with raw_socket(short) as (reader, writer):
            writer.write(
                request_head(short, "POST", "/graphql")
                + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                + b'{"query": "{ __ty'
            )
            await writer.drain()
            data = await read_until_closed(reader, SHORT + MARGIN)
        return time.monotonic() - began, data

    caplog.set_level(logging.INFO)
    results = await asyncio.gather(*(partial_body() for _ in range(5)))
    for elapsed, data in results:
        assert elapsed >= SHORT * 0.9
        response = parse_response(data)
        assert response.status == 408
        assert response.headers["connection"] == "close"
        assert "server" not in response.headers
        error = json.loads(response.body)["errors"][0]
        assert error["extensions"]["code"] == "TIMEOUT"
        assert f"{SHORT:g} s" in error["message"]
    # The app saw a client that went away: no traceback, no 500 of its own.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (await short.client.get("/healthz")).status_code == 200


async def test_an_honest_keep_alive_client_is_served_across_idle_gaps(short: LiveServer) -> None:
    async with raw_socket(short) as (reader, writer):
        for _ in range(3):
            writer.write(request_head(short) + b"\r\n")
            response = await read_response(reader)
            assert response.status == 200
            assert "server" not in response.headers
            # Idle longer than the header timeout: a connection opened after this request
            # is dropped by it first. Idle keep-alive is uvicorn's (5 s), not ours.
            await dropped_after(short, b"", SHORT)
        body = b'{"query": "{ __typename }"}'
        writer.write(
            request_head(short, "POST", "/graphql")
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        response = await read_response(reader)
        assert response.status == 200
        assert json.loads(response.body) == {"data": {"__typename": "Query"}}


async def open_acked(server: LiveServer) -> ClientConnection:
    ws = await connect(server.ws_url, subprotocols=[PROTOCOL])
    assert ws.response is not None
    assert "Server" not in ws.response.headers
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    async with asyncio.timeout(MARGIN):
        assert json.loads(await ws.recv())["type"] == "connection_ack"
    return ws


async def test_a_websocket_outlives_the_header_timeout_and_operation_deadline(
    short: LiveServer,
) -> None:
    ws = await open_acked(short)
    try:
        # A connection opened after the websocket is dropped by the header timeout first
        # (the operation deadline is as short).
        await dropped_after(short, request_head(short), SHORT)
        await ws.send(json.dumps({"type": "ping"}))
        async with asyncio.timeout(MARGIN):
            assert json.loads(await ws.recv()) == {"type": "pong"}
    finally:
        await ws.close()


async def test_over_the_connection_cap_answers_503_with_retry_after_until_one_closes(
    database_url: str,
) -> None:
    settings = make_settings(
        database_url, engine_enabled=False, max_connections=3, header_timeout_seconds=30.0
    )
    async with live_server(settings) as server:

        async def fresh_get() -> httpx.Response:
            # A client of its own: a new connection per call.
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
                return await client.get("/healthz")

        sockets = [await open_acked(server) for _ in range(2)]
        try:
            async with raw_socket(server) as (reader, writer):
                writer.write(request_head(server) + b"\r\n")
                assert (await read_response(reader)).status == 200  # the third: kept alive
                refused = await fresh_get()
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "1"
                assert "server" not in refused.headers
                error = refused.json()["errors"][0]
                assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE"
                with pytest.raises(InvalidStatus) as handshake:
                    await connect(server.ws_url, subprotocols=[PROTOCOL])
                assert handshake.value.response.status_code == 503
                assert handshake.value.response.headers["Retry-After"] == "1"
                assert "Server" not in handshake.value.response.headers
                # The connections inside the cap are still served.
                writer.write(request_head(server) + b"\r\n")
                assert (await read_response(reader)).status == 200
            await sockets.pop().close()

            async def admitted() -> bool:
                return (await fresh_get()).status_code == 200

            await wait_until(admitted, seconds=MARGIN)
        finally:
            for ws in sockets:
                await ws.close()


async def test_no_server_header_on_http_answers_or_websocket_handshakes(
    short: LiveServer,
) -> None:
    for response in (
        await short.client.get("/healthz"),
        await short.client.post("/graphql", json={"query": "{ __typename }"}),
        await short.client.post("/graphql", content=b"{"),
    ):
        assert "server" not in response.headers, response.headers
    ws = await open_acked(short)
    await ws.close()
    assert ws.response is not None
    assert "Server" not in ws.response.headers


def test_server_config_serves_httptools_with_the_settings_limits() -> None:
    settings = Settings(header_timeout_seconds=1.5, operation_timeout_seconds=7.0)
    settings = dataclasses.replace(settings, max_connections=12)
    config = server_config(create_app(settings), host="127.0.0.1", port=0)
    assert isinstance(config.http, type)
    assert issubclass(config.http, LanewayHttpProtocol)
    assert issubclass(config.http, HttpToolsProtocol)
    assert config.http.limits == ConnectionLimits(
        header_timeout_seconds=1.5, body_timeout_seconds=7.0, max_connections=12
    )
    assert config.server_header is False
    # A host's own app: the defaults, unless the settings are passed.
    host = Starlette()
    default = server_config(host, host="127.0.0.1", port=0).http
    assert isinstance(default, type)
    assert issubclass(default, LanewayHttpProtocol)
    assert default.limits == ConnectionLimits()
    chosen = server_config(host, host="127.0.0.1", port=0, settings=settings).http
    assert isinstance(chosen, type)
    assert issubclass(chosen, LanewayHttpProtocol)
    assert chosen.limits.max_connections == 12


def test_settings_read_the_header_timeout_and_connection_cap() -> None:
    settings = Settings.from_env({"LANEWAY_HEADER_TIMEOUT": "2.5", "LANEWAY_MAX_CONNECTIONS": "0"})
    assert (settings.header_timeout_seconds, settings.max_connections) == (2.5, 0)
    defaults = Settings.from_env({})
    assert (defaults.header_timeout_seconds, defaults.max_connections) == (5.0, 1000)


async def _answer_to(server: LiveServer, sent: bytes) -> RawResponse:
    """The server's answer to `sent` on a fresh socket, which it then closes; sending stops
    where the server stopped reading."""
    async with raw_socket(server) as (reader, writer):
        with suppress(ConnectionError):
            writer.write(sent)
            await writer.drain()
        return parse_response(await read_until_closed(reader, MARGIN))


async def test_headers_over_the_cap_are_refused_431_before_they_are_all_kept(
    short: LiveServer,
) -> None:
    # Found by an outside audit: uvicorn keeps every header with no cap of its own, and 200 MB
    # of them, sent within the header timeout, were answered 200 (the process grew as much).
    cap = ConnectionLimits().max_header_bytes
    pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(cap // 1000 + 1))
    for sent in (request_head(short) + pad + b"\r\n", b"GET /" + b"a" * cap + b" HTTP/1.1\r\n"):
        refused = await _answer_to(short, sent)
        assert refused.status == 431
        assert refused.headers["content-type"] == "application/json"
        (error,) = json.loads(refused.body)["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST"
        assert error["message"] == f"The request's target and headers are over {cap} bytes."
    under = request_head(short) + pad[: cap // 2] + b"\r\n"
    assert (await _answer_to(short, under + b"Connection: close\r\n\r\n")).status == 200


async def test_a_request_that_is_not_http_is_answered_400_in_json_with_a_code(
    short: LiveServer,
) -> None:
    # uvicorn's own answer was text/plain "Invalid HTTP request received." with no code.
    refused = await _answer_to(short, b"NOT AN HTTP REQUEST\r\n\r\n")
    assert (refused.status, refused.headers["content-type"]) == (400, "application/json")
    (error,) = json.loads(refused.body)["errors"]
    assert error == {
        "message": "The request is not valid HTTP.",
        "extensions": {"code": "BAD_REQUEST"},
    }
    assert (await short.client.get("/healthz")).status_code == 200


async def test_answers_outside_the_app_follow_the_accept_header_read_so_far(
    short: LiveServer,
) -> None:
    """The server's own refusals (a body that never came, headers over the cap) answer in the
    media type the client prefers, as every refusal does (http/refusals.py)."""
    accept = b"Accept: application/graphql-response+json\r\n"
    late = await _answer_to(
        short,
        request_head(short, "POST", "/graphql")
        + accept
        + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    cap = ConnectionLimits().max_header_bytes
    pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(cap // 1000 + 1))
    too_large = await _answer_to(short, request_head(short) + accept + pad + b"\r\n")
    for refused, status in ((late, 408), (too_large, 431)):
        assert refused.status == status
        assert refused.headers["content-type"] == "application/graphql-response+json; charset=utf-8"
        assert json.loads(refused.body)["errors"][0]["extensions"]["code"]


async def test_a_body_refused_413_for_its_length_closes_the_connection(database_url: str) -> None:
    """The server will not read a body it refused for its Content-Length: it says so with
    `Connection: close` and closes at once, rather than wait for that body until its body
    timeout (30 s here) while the client waits for the connection."""
    settings = make_settings(database_url, engine_enabled=False, operation_timeout_seconds=30.0)
    async with live_server(settings) as server, raw_socket(server) as (reader, writer):
        writer.write(
            request_head(server, "POST", "/graphql")
            + b"Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"
        )
        await writer.drain()
        response = parse_response(await read_until_closed(reader, MARGIN))
    assert response.status == 413
    assert response.headers["connection"] == "close"
    assert json.loads(response.body)["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
