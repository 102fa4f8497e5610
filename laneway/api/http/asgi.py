"""The ASGI callable types the middlewares of laneway/api share (none of Starlette's own are
plain enough for a pure ASGI middleware), and the path they match on."""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def route_path(scope: Scope) -> str:
    """The request's path inside the app: without the `root_path` a host's Mount (or a proxy
    prefix) put in front of it, so /laneway/graphql is /graphql to a mounted Laneway app."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :] or "/"
    return path
