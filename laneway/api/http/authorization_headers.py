"""OneAuthorization: a request or websocket handshake that carries more than one
`Authorization` header is refused before anything reads a credential from it.

Owns that one rule, on the routes that read tokens (the GraphQL route, /metrics). Every reader
takes the first header (Starlette's `headers.get`, the rate limiter), but a proxy or a cache in
front of the server may take the last or join them, so two headers let a request be judged by
one credential here and another there; with `Bearer good` then `Bearer bad` the first counted,
reversed it was FORBIDDEN. Refused as a second `Host` is (hosts.py): 400, BAD_REQUEST, nothing
runs. Does not check the credential itself (auth.py).
"""

import logging

from laneway.api.graphql.errors import BAD_REQUEST
from laneway.api.http.asgi import ASGIApp, Receive, Scope, Send, route_path
from laneway.api.http.refusals import send_error
from laneway.api.http.websocket_limits import refuse_handshake

logger = logging.getLogger(__name__)

SEVERAL_AUTHORIZATIONS = (
    "The request has more than one Authorization header; send one credential, in one header."
)


class OneAuthorization:
    """Pure ASGI middleware: 400 for a request or websocket handshake on one of `paths` with
    more than one `Authorization` header; every other passes through untouched."""

    def __init__(self, app: ASGIApp, *, paths: frozenset[str]) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or route_path(scope).rstrip("/") not in self.paths:
            await self.app(scope, receive, send)
            return
        count = sum(1 for key, _ in scope["headers"] if key == b"authorization")
        if count <= 1:
            await self.app(scope, receive, send)
            return
        logger.info("several authorization headers refused", extra={"count": count})
        if kind == "http":
            await send_error(scope, send, 400, SEVERAL_AUTHORIZATIONS, BAD_REQUEST)
        else:
            await refuse_handshake(scope, receive, send, 400, SEVERAL_AUTHORIZATIONS, BAD_REQUEST)
