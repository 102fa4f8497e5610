"""WebSocketLimits: the limits of /graphql websockets that Strawberry does not keep.

Owns three of them, in a pure ASGI middleware that reads the client's frames before the
GraphQL view does:

- handshakes per client IP (LANEWAY_WS_HANDSHAKES_PER_MINUTE): over it, the handshake is
  answered HTTP 429 with a Retry-After (403 on a server without ASGI denial responses);
- open connections per client (LANEWAY_WS_CONNECTIONS_PER_TOKEN; the client is its valid
  token, from the `connection_init` payload's "authorization" in any case, else its IP): a
  connection over it is closed with 4429 at its `connection_init`, and a place frees when any
  connection ends, however it ends;
- `subscribe` messages spend from the same buckets as HTTP requests (http/rate_limits.py) at the
  same cost; over the limit, that operation gets an `error` message with code RATE_LIMITED
  and the socket stays open. A `subscribe` before `connection_init` spends nothing: the view
  closes the socket with 4401; nor does one whose id is running (OperationIds): the view
  closes the socket with 4409.

Frames are judged by their decoded `type`, as the view acts on them, never by their text
(`"\\u0073ubscribe"` is a subscribe too); the view's decode_json takes the value decoded
here (`decoded`) instead of decoding the frame again.

Also `refuse_handshake`, the HTTP answer instead of an upgrade that the host allow-list
(hosts.py) sends too, and the log filter that keeps uvicorn from calling each such answer an
error (RefusedHandshakes).
"""

import contextvars
import json
import logging
from collections.abc import Container, Iterable
from typing import Any

from laneway.api.auth import credential_of
from laneway.api.graphql.errors import RATE_LIMITED, error_body
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send, route_path
from laneway.api.http.rate_limits import (
    RATE_LIMITED_MESSAGE,
    RateLimiter,
    client_key,
    retry_after,
    root_field_cost,
    size_cost,
)
from laneway.api.http.refusals import refusal_headers
from laneway.api.http.strict_json import MAX_REQUEST_DEPTH, strict_json_loads

TOO_MANY_CONNECTIONS = 4429
HANDSHAKES_REFUSED = "Too many websocket handshakes; slow down."
_DENIAL_EXTENSION = "websocket.http.response"
UNFINISHED_HANDSHAKE = "ASGI callable returned without completing handshake."
"""What uvicorn's websockets-sansio implementation logs, at ERROR, after any app that did not
accept: an HTTP answer instead of the upgrade (a denial response) included."""
_REFUSED = contextvars.ContextVar("laneway_handshake_refused", default=False)
"""Set in the connection's task by refuse_handshake, which uvicorn's log line comes after."""
_DECODED: contextvars.ContextVar[tuple[str, object] | None] = contextvars.ContextVar(
    "laneway_decoded_frame", default=None
)
"""The frame just handed to the view, and its value: set in the task that reads the frames."""


class RefusedHandshakes(logging.Filter):
    """Drops uvicorn's ERROR line for a handshake refused here on purpose (its 400, 403 or 429
    is the answer, and its own INFO line says why): an expected refusal is no error, and log
    alerts fired on each (an outside audit counted 23 in 70 s from two surplus dashboard
    tabs). An app's handshake that ends unanswered for any other reason is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_REFUSED.get() and record.getMessage() == UNFINISHED_HANDSHAKE)


REFUSED_HANDSHAKES = RefusedHandshakes()
"""The one filter server_config puts on uvicorn's error logger (once, however many servers)."""


class OperationIds:
    """The ids of the operations a websocket's view is running, as the view itself keeps them.

    WebSocketLimits puts one in the connection's scope under OPERATION_IDS, and Laneway's
    handler (websocket.py) shows it its own table of operations: the view decides when an
    operation ends (its `complete` or `error`, the client's `complete`), so no second copy
    is kept here. Under a host's own view it stays empty.
    """

    def __init__(self) -> None:
        self.running: Container[str] = ()


OPERATION_IDS = "laneway.operation_ids"


def _frame(text: object) -> dict[str, Any] | None:
    """A client text frame, decoded as the view decodes it; None if it is no JSON object.

    Every frame is decoded: a cheaper look at its text for the types that matter here let
    a `type` spelled with escapes through, exempt from the connection cap and the rate limit.
    """
    _DECODED.set(None)
    if not isinstance(text, str):
        return None
    try:
        frame = strict_json_loads(text, max_depth=MAX_REQUEST_DEPTH)
        _DECODED.set((text, frame))
    except ValueError:
        # Laneway's view closes the socket with 4400; a host's own view may decode it as
        # Strawberry does, with json.loads, and act on it: judged as that decodes it.
        try:
            frame = json.loads(text)
        except (ValueError, RecursionError):
            return None
    return frame if isinstance(frame, dict) else None


def decoded(data: str | bytes) -> object:
    """`data`, a request body or a websocket frame, as the API decodes it (strict_json_loads);
    a frame that WebSocketLimits has just decoded on its way to the view is not decoded again.

    Raises:
        json.JSONDecodeError: as strict_json_loads does.
    """
    last = _DECODED.get()
    if last is not None and last[0] is data:  # that very text, read by the view's task
        _DECODED.set(None)
        return last[1]
    return strict_json_loads(data, max_depth=MAX_REQUEST_DEPTH)


def _rate_limited_frame(operation_id: str, wait: float) -> str:
    error = {
        "message": RATE_LIMITED_MESSAGE,
        "extensions": {"code": RATE_LIMITED, "retryAfter": int(retry_after(wait))},
    }
    return json.dumps({"id": operation_id, "type": "error", "payload": [error]})


class WebSocketLimits:
    """Pure ASGI middleware for websockets on `path`; each limiter None (or 0) is off."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter | None,
        handshakes: RateLimiter | None,
        connections_per_client: int,
        tokens: tuple[str, ...],
        limit_local: bool = True,
        path: str = "/graphql",
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.handshakes = handshakes
        self.connections_per_client = connections_per_client
        self.tokens = tokens
        self.limit_local = limit_local
        self.path = path
        self.open_connections: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or route_path(scope).rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        address = client_key(None, (), scope.get("client"), limit_local=self.limit_local)
        if self.handshakes is not None and address is not None:
            wait = self.handshakes.take(address)
            if wait:
                await _refuse_handshake(scope, receive, send, wait)
                return
        scope[OPERATION_IDS] = operation_ids = OperationIds()
        connection = _Connection(self, scope, receive, send, operation_ids)
        try:
            await self.app(scope, connection.receive, send)
        finally:
            connection.release()

    def admit(self, key: str | None) -> bool:
        """Count one more open connection for `key`, unless it already has its maximum."""
        if key is None:
            return True
        count = self.open_connections.get(key, 0)
        if self.connections_per_client and count >= self.connections_per_client:
            return False
        self.open_connections[key] = count + 1
        return True

    def release(self, key: str) -> None:
        count = self.open_connections.get(key, 0) - 1
        if count > 0:
            self.open_connections[key] = count
        else:
            self.open_connections.pop(key, None)


async def refuse_handshake(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    message: str,
    code: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Answer a websocket handshake with `status` and an error document instead of the
    upgrade (ASGI's websocket denial response); on a server without it, close with 1008
    before accepting, which the client sees as HTTP 403. Nothing else runs."""
    _REFUSED.set(True)  # this connection's task only: uvicorn logs after the app returns
    await receive()  # websocket.connect
    if _DENIAL_EXTENSION not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = error_body(message, code)
    start = refusal_headers(scope, body, headers)
    await send({"type": "websocket.http.response.start", "status": status, "headers": start})
    await send({"type": "websocket.http.response.body", "body": body})


async def _refuse_handshake(scope: Scope, receive: Receive, send: Send, wait: float) -> None:
    headers = [(b"retry-after", retry_after(wait).encode())]
    await refuse_handshake(scope, receive, send, 429, HANDSHAKES_REFUSED, RATE_LIMITED, headers)


class _Connection:
    """One websocket's view of the limits: whom it counts against, and its frames."""

    def __init__(
        self,
        limits: WebSocketLimits,
        scope: Scope,
        receive: Receive,
        send: Send,
        operation_ids: OperationIds,
    ):
        self.limits = limits
        self.operation_ids = operation_ids
        self.client = scope.get("client")
        self._receive = receive
        self._send = send
        self.key = client_key(None, (), self.client, limit_local=limits.limit_local)
        self.counted: str | None = None
        self.initialised = False

    async def receive(self) -> Message:
        while True:
            message = await self._receive()
            frame = _frame(message.get("text")) if message["type"] == "websocket.receive" else None
            if frame is None:
                return message
            if frame.get("type") == "connection_init" and not self.initialised:
                self.initialised = True
                if not self._admit(frame.get("payload")):
                    await self._send(
                        {
                            "type": "websocket.close",
                            "code": TOO_MANY_CONNECTIONS,
                            "reason": "Too many connections",
                        }
                    )
                    return {"type": "websocket.disconnect", "code": TOO_MANY_CONNECTIONS}
            elif (
                frame.get("type") == "subscribe"
                and self.initialised  # before connection_init, the view closes with 4401
                and not await self._may_subscribe(frame)
            ):
                continue
            return message

    def _admit(self, payload: object) -> bool:
        credential = credential_of(payload)
        self.key = client_key(
            credential, self.limits.tokens, self.client, limit_local=self.limits.limit_local
        )
        if not self.limits.admit(self.key):
            return False
        self.counted = self.key
        return True

    async def _may_subscribe(self, frame: dict[str, Any]) -> bool:
        operation_id = frame.get("id")
        payload = frame.get("payload")
        if self.limits.limiter is None or self.key is None or not isinstance(operation_id, str):
            return True
        if operation_id in self.operation_ids.running:
            # A duplicate, which the view closes with 4409: an `error` for it would end, to
            # the client, an operation that goes on sending `next`. The view judges it as soon
            # as this returns (no await that suspends comes between), with the id still
            # running: a duplicate always closes the socket, so passing it costs nothing.
            return True
        query = payload.get("query") if isinstance(payload, dict) else None
        name = payload.get("operationName") if isinstance(payload, dict) else None
        # Refused before its document is parsed when the bucket cannot pay for its size.
        wait = self.limits.limiter.wait(self.key, size_cost(query))
        if not wait:
            wait = self.limits.limiter.take(self.key, root_field_cost(query, name))
        if not wait:
            return True
        text = _rate_limited_frame(operation_id, wait)
        await self._send({"type": "websocket.send", "text": text})
        return False

    def release(self) -> None:
        if self.counted is not None:
            self.limits.release(self.counted)
            self.counted = None
