"""RequestIds: a request id for every request, and 503 when the database was down.

Owns the outermost pure ASGI middleware. Every HTTP response and websocket handshake gets an
`X-Request-ID` header (the caller's, when it is sane, else a fresh one), and the id is the
current Trace while the request runs. A /graphql answer that found the database unavailable
(errors.py marks the trace) goes out as 503 with a Retry-After, unless it holds data or a root
mutation field of it completed (Trace.nothing_done): GraphQL over HTTP answers non-null data
with a 2xx, and a retry would repeat a write, so it stays 200 with its errors. On a websocket,
masked errors in `next` and `error` frames get the connection's id as `extensions.requestId`,
as they do over HTTP (Strawberry masks websocket results after errors.py has seen them).
"""

import json

from laneway.api.graphql.errors import MASKED_MESSAGE, UNAVAILABLE_RETRY_AFTER_SECONDS
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send, route_path
from laneway.api.request_trace import (
    REQUEST_ID_HEADER,
    Trace,
    request_id_for,
    tag_log_records,
    traced,
)

# Loggers whose records are about one request: the resolver-error log among them.
TRACED_LOGGERS = (
    "laneway.api.graphql.schema",
    "laneway.api.graphql.errors",
    "laneway.api.websocket",
    "laneway.api.http.body_limits",
    "laneway.api.http.rate_limits",
    "laneway.api.routes",
    "laneway.engine.queue_calls",  # an operator's pause or resume of a queue
)
_STARTS = frozenset(("http.response.start", "websocket.accept", "websocket.http.response.start"))
_HEADER = REQUEST_ID_HEADER.encode()
_SCOPE_KEY = "laneway.trace"  # the request's Trace, for a RequestIds inside the first


def _incoming_request_id(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == _HEADER:
            return bytes(value).decode("latin-1")
    return None


def _with_header(message: Message, header: tuple[bytes, bytes]) -> Message:
    """The message with one more header; the sender's own list is left as it was."""
    return {**message, "headers": [*message.get("headers", ()), header]}


def _unavailable(message: Message) -> Message:
    headers = list(message.get("headers", ()))
    headers.append((b"retry-after", str(UNAVAILABLE_RETRY_AFTER_SECONDS).encode()))
    return {**message, "status": 503, "headers": headers}


def with_masked_request_ids(text: str, request_id: str) -> str:
    """A graphql-transport-ws frame whose masked errors carry `requestId`."""
    try:
        frame = json.loads(text)
    except ValueError:
        return text
    if not isinstance(frame, dict):
        return text
    payload = frame.get("payload")
    errors = payload if isinstance(payload, list) else None
    if isinstance(payload, dict) and isinstance(payload.get("errors"), list):
        errors = payload["errors"]
    changed = False
    for error in errors or ():
        if isinstance(error, dict) and error.get("message") == MASKED_MESSAGE:
            error["extensions"] = {**(error.get("extensions") or {}), "requestId": request_id}
            changed = True
    return json.dumps(frame) if changed else text


class RequestIds:
    """Pure ASGI middleware: request ids everywhere, and the 503 of an unavailable database."""

    def __init__(self, app: ASGIApp, *, path: str = "/graphql") -> None:
        self.app = app
        self.path = path
        tag_log_records(*TRACED_LOGGERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        # Inside another RequestIds (a host's stack around a mounted Laneway app; a Mount
        # copies the scope): its trace and its header serve, one id per request. Not the
        # current trace: uvicorn may start a connection's next request in the task of the
        # one before, whose trace it then still sees.
        enclosing: Trace | None = scope.get(_SCOPE_KEY)
        trace = enclosing or Trace(
            request_id=request_id_for(_incoming_request_id(scope)),
            completed=[] if scope["type"] == "http" else None,
        )
        scope[_SCOPE_KEY] = trace
        header = (_HEADER, trace.request_id.encode())
        is_graphql = route_path(scope).rstrip("/") == self.path

        async def traced_send(message: Message) -> None:
            kind = message["type"]
            if kind in _STARTS:
                if enclosing is None:
                    message = _with_header(message, header)
                if (
                    is_graphql
                    and trace.database_unavailable
                    and message.get("status") == 200
                    and trace.nothing_done()
                ):
                    message = _unavailable(message)
            elif (
                enclosing is None
                and kind == "websocket.send"
                and MASKED_MESSAGE in (message.get("text") or "")
            ):
                text = with_masked_request_ids(message["text"], trace.request_id)
                message = {**message, "text": text}
            await send(message)

        with traced(trace):
            await self.app(scope, receive, traced_send)
