"""GET /metrics: the process's Prometheus metrics (laneway/metrics.py), in the text format.

Readable under the same rule as GraphQL reads: the app's Permission decides with the request's
`Authorization` header, so with LANEWAY_API_TOKENS set a scraper sends a bearer token
(Prometheus's `authorization` setting), and LANEWAY_OPEN_READS opens it as it opens queries.
The cluster-wide series come from a snapshot read at most every few seconds, however often
this is scraped, and a scrape waits for that read only so long (Metrics.refresh).
"""

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from laneway.api.auth import Caller, Decision, Permission
from laneway.api.lifespan import services_of
from laneway.metrics import CONTENT_TYPE

_REFUSALS = {
    Decision.UNAUTHENTICATED: (401, "UNAUTHENTICATED", "A bearer token is needed to read this."),
    Decision.FORBIDDEN: (403, "FORBIDDEN", "This token may not read this."),
}


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
            status, code, message = _REFUSALS[decision]
            return JSONResponse(
                {"errors": [{"message": message, "extensions": {"code": code}}]},
                status_code=status,
                headers={"www-authenticate": "Bearer"} if status == 401 else None,
            )
        services = services_of(request)
        await services.metrics.refresh(services.store)
        return Response(services.metrics.render(), media_type=CONTENT_TYPE)

    return metrics
