"""GET /metrics: the process's Prometheus metrics (laneway/metrics.py), in the text format.

Readable under the same rule as GraphQL reads: the app's Permission decides with the request's
`Authorization` header, so with LANEWAY_API_TOKENS set a scraper sends a bearer token
(Prometheus's `authorization` setting), and LANEWAY_OPEN_READS opens it as it opens queries.
A refusal says what an operation's does, in the media type the client prefers (refusals.py).
The cluster-wide series come from a snapshot read at most every few seconds, however often
this is scraped, and a scrape waits for that read only so long (Metrics.refresh).
"""

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from laneway.api.auth import BearerTokens, Caller, Decision, Permission, refusal_message
from laneway.api.graphql.errors import error_body
from laneway.api.http.refusals import refusal_headers
from laneway.api.lifespan import services_of
from laneway.metrics import CONTENT_TYPE

_REFUSALS = {
    Decision.UNAUTHENTICATED: (401, "UNAUTHENTICATED"),
    Decision.FORBIDDEN: (403, "FORBIDDEN"),
}


def _refusal(request: Request, permission: Permission, decision: Decision) -> Response:
    """The answer to a refused read: what an operation's refusal says (auth.refusal_message),
    `WWW-Authenticate: Bearer` only when BearerTokens wants a bearer token (a host's own
    Permission may want a session or a cookie), in the media type the client prefers."""
    status, code = _REFUSALS[decision]
    body = error_body(refusal_message(permission, decision), code)
    bearer = status == 401 and isinstance(permission, BearerTokens)
    response = Response(body, status_code=status)
    response.raw_headers = refusal_headers(
        request.scope, body, [(b"www-authenticate", b"Bearer")] if bearer else []
    )
    return response


def metrics_endpoint(permission: Permission) -> Callable[[Request], Awaitable[Response]]:
    """The /metrics endpoint of an app whose reads `permission` decides."""

    async def metrics(request: Request) -> Response:
        caller = Caller(
            context=None,
            connection=request,
            credential=request.headers.get("authorization"),
            connection_params=None,
        )
        decision = await permission.may_read(caller)
        if decision is not Decision.ALLOW:
            return _refusal(request, permission, decision)
        services = services_of(request)
        await services.metrics.refresh(services.store)
        return Response(services.metrics.render(), media_type=CONTENT_TYPE)

    return metrics
