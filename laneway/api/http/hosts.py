"""HostAllowList: a request or websocket runs only when it is addressed to a name we answer for.

Owns the defence against DNS rebinding: a page on a name its owner points at 127.0.0.1 sends
its own name as `Host` (and as a websocket's `Origin`), so a refused name keeps that page from
reading or writing a local Laneway. Without LANEWAY_API_TOKENS the names are the loopback ones
at the served port and the address `serve` binds to; LANEWAY_ALLOWED_HOSTS adds to them; with
tokens and no list, any name (a page cannot act without a token). A websocket's `Origin` must
name an allowed host too. Refusals: 400 for the Host, 403 for the Origin; nothing runs.

Not Starlette's TrustedHostMiddleware: it ignores the port, knows neither the loopback
default nor the served port, answers plain text, and does not look at a websocket's Origin.
"""

import logging

from starlette.middleware import Middleware

from laneway.api.graphql.errors import BAD_REQUEST, ForbiddenError
from laneway.api.http.asgi import ASGIApp, Receive, Scope, Send, route_path
from laneway.api.http.refusals import send_error
from laneway.api.http.websocket_limits import refuse_handshake
from laneway.config import Settings, split_host
from laneway.host_names import AllowedHosts

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
FORBIDDEN = ForbiddenError.code
# Set on the scope of a websocket whose Origin names an allowed host; the GraphQL view then
# accepts it even when it is not the request's own Host (app.py).
ORIGIN_ALLOWED = "laneway.origin_allowed"
UNKNOWN_HOST = (
    "Unknown host: this server does not answer for that name (see LANEWAY_ALLOWED_HOSTS)."
)
FOREIGN_ORIGIN = "This origin may not open a websocket here (see LANEWAY_ALLOWED_HOSTS)."


def origin_host(origin: str) -> tuple[str, int] | None:
    """An Origin's name and port (the scheme's default when it names none); None for "null"
    and anything else that is not scheme://host[:port]."""
    scheme, separator, rest = origin.partition("://")
    default = DEFAULT_PORTS.get(scheme.lower())
    if not separator or default is None:
        return None
    parsed = split_host(rest)
    if parsed is None:
        return None
    name, port = parsed
    return name, default if port is None else port


class HostAllowList:
    """Pure ASGI middleware: 400 for a request whose Host is not allowed, 403 for a websocket
    whose Origin is not; neither reaches the app. `path`: only the requests and websockets of
    that route are looked at (a host's other routes are its own); None: every one."""

    def __init__(self, app: ASGIApp, *, hosts: AllowedHosts, path: str | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (
            self.path is not None and route_path(scope).rstrip("/") != self.path
        ):
            await self.app(scope, receive, send)
            return
        hosts: list[bytes] = []
        origin: bytes | None = None
        for key, value in scope["headers"]:
            if key == b"host":
                hosts.append(value)
            elif key == b"origin":
                origin = value
        served = scope.get("server")
        if len(hosts) != 1 or not self._allows_host(hosts[0], scope.get("scheme", "http"), served):
            logger.info("unknown host refused", extra={"host": _shown(hosts)})
            if kind == "http":
                await send_error(scope, send, 400, UNKNOWN_HOST, BAD_REQUEST)
            else:
                await refuse_handshake(scope, receive, send, 400, UNKNOWN_HOST, BAD_REQUEST)
            return
        if origin is not None and kind == "websocket":
            found = origin_host(origin.decode("latin-1"))
            if found is None or not self.hosts.allows(*found, served):
                await refuse_foreign_origin(origin, scope, receive, send)
                return
            scope[ORIGIN_ALLOWED] = True
        await self.app(scope, receive, send)

    def _allows_host(
        self, value: bytes, scheme: str, served: tuple[str, int | None] | None
    ) -> bool:
        return self.hosts.allows_header(
            value.decode("latin-1"), served, DEFAULT_PORTS.get(scheme, 80)
        )


async def refuse_foreign_origin(origin: bytes, scope: Scope, receive: Receive, send: Send) -> None:
    """Refuse a websocket handshake from `origin`, a page this server does not serve: 403 with
    FOREIGN_ORIGIN (the list's rule, or Strawberry's same-origin one where no list is kept)."""
    logger.info("foreign origin refused", extra={"origin": _shown([origin])})
    await refuse_handshake(scope, receive, send, 403, FOREIGN_ORIGIN, FORBIDDEN)


def _shown(values: list[bytes]) -> str:
    return ", ".join(value.decode("latin-1")[:100] for value in values)


def host_allow_list(settings: Settings, *, path: str | None = None) -> list[Middleware]:
    """The allow-list's place in the stack, for the route at `path` (None: every route);
    none when any host is allowed."""
    hosts = AllowedHosts.from_settings(settings)
    return [] if hosts is None else [Middleware(HostAllowList, hosts=hosts, path=path)]
