"""LanewayHttpProtocol: uvicorn's httptools protocol with slow-client timers and a connection cap.

Owns what happens to a connection before the app sees a request: its headers must arrive in
time and within a size, its declared body in time too, and a process keeps at most so many
connections open (websockets included); a request the parser refuses is answered in JSON.
Does not parse HTTP (httptools and uvicorn do), time the app's own work (deadline.py) or
police websocket frames (websocket_limits.py).
"""

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from laneway.api.graphql.errors import BAD_REQUEST, SERVICE_UNAVAILABLE, TIMEOUT, error_body
from laneway.api.http.asgi import Receive, Scope, Send
from laneway.api.http.refusals import refusal_headers, send_error

logger = logging.getLogger(__name__)

OVER_CAPACITY_MESSAGE = "Too many open connections; try again shortly."
RETRY_AFTER_SECONDS = 1
_OVER_CAPACITY_HEADERS = (
    (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
    (b"connection", b"close"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """What one process allows a connection; 0 turns a limit off.

    `header_timeout_seconds` runs from the connection (or from the first byte of a later
    request on a keep-alive connection) to the end of the request's headers;
    `body_timeout_seconds` from the end of the headers to the end of the declared body;
    `max_connections` counts every open connection of the server, websockets included;
    `max_header_bytes` bounds a request's target and headers together (names and values, as
    received): uvicorn keeps every header in memory until the request is parsed, with no cap
    of its own, so headers of hundreds of megabytes, sent within the header timeout, grew the
    process by as much (an outside audit: 4 such connections took it from 324 MB to 1.1 GB).
    """

    header_timeout_seconds: float = 5.0
    body_timeout_seconds: float = 10.0
    max_connections: int = 1000
    max_header_bytes: int = 64 * 1024


async def over_capacity(scope: Scope, receive: Receive, send: Send) -> None:
    """The app a connection over the cap is served instead of the real one: 503, Retry-After."""
    await send_error(
        scope, send, 503, OVER_CAPACITY_MESSAGE, SERVICE_UNAVAILABLE, _OVER_CAPACITY_HEADERS
    )


class LanewayHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that drops slow clients and refuses connections over the cap.

    uvicorn builds one instance per connection; `http_protocol(limits)` makes the class a
    server is configured with. A connection over the cap is still read, so that its client
    gets the 503 rather than a reset: each of its requests (and a websocket upgrade) is
    answered 503 with Retry-After and the connection closed. A timer that runs out while
    uvicorn itself has stopped reading (a pipelined request waiting, a large body not yet
    consumed) starts again: the client is not late then.
    """

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    _refused = False
    _header_bytes = 0  # of the request being parsed: its target and headers so far
    _headers_too_large = False
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.limits.max_connections
        # `connections` holds this one already, and uvicorn moves an upgraded connection
        # to its websocket protocol, so websockets count until they close.
        if cap and len(self.connections) > cap:
            self._refused = True
            self.app = over_capacity
            logger.warning("connection over the cap refused", extra={"max_connections": cap})
        self._header_timer = self._later(self.limits.header_timeout_seconds, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timers()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._header_bytes = 0
        super().on_message_begin()
        # The first request's clock started with the connection; a later one's starts here,
        # with its first byte (idle keep-alive in between is uvicorn's timeout_keep_alive).
        if self._header_timer is None:
            self._header_timer = self._later(self.limits.header_timeout_seconds, self._headers_late)

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value))
        super().on_header(name, value)

    def _count_header_bytes(self, size: int) -> None:
        """Refuse a request whose target and headers pass the cap, before keeping more of
        them: raising here stops the parser, and uvicorn answers through send_400_response."""
        self._header_bytes += size
        cap = self.limits.max_header_bytes
        if cap and self._header_bytes > cap:
            self._headers_too_large = True
            raise ValueError("request headers over the cap")

    def send_400_response(self, msg: str) -> None:
        """The answer to a request the parser refused (or whose headers passed the cap), in
        JSON with its code as every other error is: uvicorn's own is text/plain, no code."""
        self._stop_timers()
        if self._headers_too_large:
            cap = self.limits.max_header_bytes
            logger.info("request headers over the cap refused", extra={"max_header_bytes": cap})
            message = f"The request's target and headers are over {cap} bytes."
            self._answer_and_close(431, error_body(message, BAD_REQUEST))
            return
        self._answer_and_close(400, error_body("The request is not valid HTTP.", BAD_REQUEST))

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # an HTTP request, not a websocket upgrade
            self._body_timer = self._later(self.limits.body_timeout_seconds, self._body_late)

    def on_message_complete(self) -> None:
        self._cancel_body_timer()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        # From here the websocket protocol owns the connection: no timer of ours may touch it.
        self._stop_timers()
        if self._refused:
            body = error_body(OVER_CAPACITY_MESSAGE, SERVICE_UNAVAILABLE)
            self._answer_and_close(503, body, _OVER_CAPACITY_HEADERS)
            return
        super().handle_websocket_upgrade()

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.flow.read_paused:
            self._header_timer = self._later(self.limits.header_timeout_seconds, self._headers_late)
            return
        logger.info("slow client dropped", extra={"waiting_for": "headers"})
        self.transport.close()

    def _body_late(self) -> None:
        self._body_timer = None
        if self.flow.read_paused:
            self._body_timer = self._later(self.limits.body_timeout_seconds, self._body_late)
            return
        logger.info("slow client dropped", extra={"waiting_for": "body"})
        cycle = self.cycle
        if cycle.response_started:
            self.transport.close()
        else:
            seconds = self.limits.body_timeout_seconds
            message = f"The request body did not arrive within {seconds:g} s."
            self._answer_and_close(408, error_body(message, TIMEOUT))
        # The app may be waiting for the rest of the body: it reads a disconnect now, and
        # what it sends is dropped, as when a client goes away.
        cycle.disconnected = True
        cycle.message_event.set()

    def _answer_and_close(
        self, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        """Write a whole response outside any request cycle and close (as uvicorn's 400 does),
        in the media type the request's headers read so far prefer (refusals.py)."""
        content = [STATUS_LINE[status]]
        kept = ((name, value) for name, value in headers if name != b"connection")
        # uvicorn's scope of the request being parsed (None before the first one began): its
        # headers as far as they were read.
        scope = cast("Scope | None", self.scope)
        for name, value in (
            *self.server_state.default_headers,
            *refusal_headers(scope, body, [(b"connection", b"close"), *kept]),
        ):
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([b"\r\n", body])
        self.transport.write(b"".join(content))
        self.transport.close()

    def _later(self, seconds: float, callback: Callable[[], None]) -> asyncio.TimerHandle | None:
        return self.loop.call_later(seconds, callback) if seconds else None

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _stop_timers(self) -> None:
        self._cancel_header_timer()
        self._cancel_body_timer()


def http_protocol(limits: ConnectionLimits) -> type[LanewayHttpProtocol]:
    """The protocol class for uvicorn's `Config(http=...)`, bound to `limits`."""

    class Limited(LanewayHttpProtocol):
        pass

    Limited.limits = limits
    return Limited
