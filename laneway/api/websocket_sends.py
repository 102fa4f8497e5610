"""BoundedSends: a websocket whose every send must complete in time, or the client is dropped.

Owns what happens to a graphql-transport-ws connection whose client stops reading. Its sends
fill the socket's buffers, then each next one waits for them to drain, which they never do:
unbounded, the operations stay subscribed for good (their events pile up behind the stalled
send), and uvicorn's keepalive ping, queued behind the same buffers, never reaches the
client; when it goes unanswered uvicorn only asks the transport to close once it has drained.
Here a send (or close) that does not complete within SEND_TIMEOUT_SECONDS drops the
connection: its transport is aborted, since a close frame would wait behind what the client
did not read, and every operation on it ends. Also cuts every close reason to what a close
frame can carry (close_reason). Does not decide what is sent (websocket.py).
"""

import asyncio
import inspect
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Protocol

from starlette.websockets import WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.http.async_base_view import AsyncWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected

from laneway.engine import time_limit

logger = logging.getLogger(__name__)

# As long as uvicorn waits for the answer to its ping: a client that cannot take one message
# for that long is treated as one that does not answer.
SEND_TIMEOUT_SECONDS = 20.0
MAX_CLOSE_REASON_BYTES = 123  # a close frame's payload is 125 bytes at most, 2 of them the code
ELLIPSIS = "…"


class Abortable(Protocol):
    def abort(self) -> None: ...

    def is_closing(self) -> bool: ...


class BoundedSends(AsyncWebSocketAdapter):
    """Strawberry's websocket adapter with every send and close bounded by SEND_TIMEOUT_SECONDS.

    Built in the connection's ASGI task, where it finds the transport to abort. Once the
    client is dropped, `on_drop` is awaited (the handler ends its operations there, so their
    subscriptions end even where no transport could be aborted), and every later send or
    close raises WebSocketDisconnected at once.
    """

    def __init__(
        self, websocket: AsyncWebSocketAdapter, on_drop: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(websocket.view)
        self._websocket = websocket
        self._on_drop = on_drop
        self._transport = _connection_transport()
        self.dropped = False

    def iter_json(self, *, ignore_parsing_errors: bool = False) -> AsyncGenerator[object, None]:
        return self._websocket.iter_json(ignore_parsing_errors=ignore_parsing_errors)

    async def send_json(self, message: Mapping[str, object]) -> None:
        await self._within_bound(lambda: self._websocket.send_json(message))

    async def send_text(self, text: str) -> None:
        """A text frame as it is (the direct path's pre-rendered messages)."""
        websocket = self._websocket
        assert isinstance(websocket, ASGIWebSocketAdapter)  # the view is Strawberry's ASGI one
        await self._within_bound(lambda: websocket.ws.send_text(text))

    async def close(self, code: int, reason: str) -> None:
        """Close with `reason` cut to fit (close_reason): Strawberry builds reasons from what
        the client sent (a duplicate id, an unknown type, a syntax error quoting a token)."""
        reason = close_reason(reason)
        await self._within_bound(lambda: self._websocket.close(code, reason))

    async def _within_bound(self, send: Callable[[], Awaitable[None]]) -> None:
        if self.dropped:
            raise WebSocketDisconnected
        seconds = SEND_TIMEOUT_SECONDS
        try:
            # A send that finds room in the buffers finishes without waiting, and then arms no
            # timer (time_limit.within): this runs for every event of every subscriber.
            await time_limit.within(send(), seconds)
        except WebSocketDisconnect as exc:
            raise WebSocketDisconnected from exc
        except RuntimeError as exc:
            # The server closed it meanwhile (uvicorn's keepalive timeout sends the close
            # itself): a send after that is refused with a RuntimeError, not a disconnect.
            if self._transport is not None and self._transport.is_closing():
                raise WebSocketDisconnected from exc
            raise
        except time_limit.TimeLimitExceededError:
            await self._drop(seconds)
            raise WebSocketDisconnected from None

    async def _drop(self, seconds: float) -> None:
        if self.dropped:
            return
        self.dropped = True
        logger.warning(
            "websocket client stopped reading",
            extra={"seconds": seconds, "aborted": self._transport is not None},
        )
        if self._transport is not None:
            self._transport.abort()
        await self._on_drop()


def close_reason(reason: str) -> str:
    """`reason` as a close frame can carry it: valid UTF-8 (a lone surrogate, which JSON's
    "\\ud800" decodes to, becomes "?") of at most MAX_CLOSE_REASON_BYTES, cut on a character
    boundary and ending in an ellipsis where cut. A longer one made the websocket library
    fail the connection without a close frame (the client saw 1006)."""
    encoded = reason.encode(errors="replace")
    if len(encoded) <= MAX_CLOSE_REASON_BYTES:
        return encoded.decode()
    room = MAX_CLOSE_REASON_BYTES - len(ELLIPSIS.encode())
    # Only the character cut in two is ignored: the rest is valid UTF-8 by construction.
    return encoded[:room].decode(errors="ignore") + ELLIPSIS


def _connection_transport() -> Abortable | None:
    """The transport of the connection whose ASGI task is running, if the server is uvicorn.

    ASGI gives an application no way to abort its connection, and a close frame cannot
    overtake what the client did not read. uvicorn runs each websocket's application in a
    task of its protocol's `run_asgi()`, and that protocol holds the transport: it is read
    from the coroutine's locals. Under another server (or a task of another kind) None: the
    connection's operations still end, and the socket stays until the server lets it go.
    """
    task = asyncio.current_task()
    coroutine = task.get_coro() if task is not None else None
    if not inspect.iscoroutine(coroutine) or coroutine.cr_frame is None:
        return None
    server_protocol = inspect.getcoroutinelocals(coroutine).get("self")
    transport = getattr(server_protocol, "transport", None)
    usable = all(callable(getattr(transport, name, None)) for name in ("abort", "is_closing"))
    return transport if usable else None
