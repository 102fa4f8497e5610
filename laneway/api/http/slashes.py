"""SlashRedirect: a path with a stray trailing slash (or missing one) is redirected by path.

Owns the redirect Starlette's router makes between `/graphql/` and `/graphql`, written as a
path (`Location: /graphql`, RFC 9110 allows a relative reference) where Starlette writes an
absolute URL built from the request's `Host` header. With tokens and no host allow-list any
`Host` is served (hosts.py), so a client (or a cache in front) could be sent to any name the
request claimed; a path stays on the server that answered.
"""

from starlette.datastructures import URL
from starlette.responses import RedirectResponse
from starlette.routing import Match, Router

from laneway.api.http.asgi import ASGIApp, Receive, Scope, Send


class SlashRedirect:
    """The router's fallback when no route matched: the redirect by path, else `default`."""

    def __init__(self, router: Router, default: ASGIApp) -> None:
        self._router = router
        self._default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if scope["type"] == "http" and path not in ("", "/"):
            other = dict(scope, path=path.rstrip("/") if path.endswith("/") else path + "/")
            if any(route.matches(other)[0] is not Match.NONE for route in self._router.routes):
                url = URL(scope=other)
                location = url.path + (f"?{url.query}" if url.query else "")
                await RedirectResponse(location)(scope, receive, send)
                return
        await self._default(scope, receive, send)


def redirect_by_path(router: Router) -> None:
    """Make `router` redirect between slash spellings by path, not by absolute URL."""
    router.redirect_slashes = False
    router.default = SlashRedirect(router, router.default)
