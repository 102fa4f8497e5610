"""The middleware stack in front of the routes, outermost first, built from Settings.

Laneway's own app puts it in front of its routes, the host allow-list in front of every one;
a host that serves its own schema puts it in front of its own (`http_protections`, exported
by laneway.api), with the path of its GraphQL route, and every layer then looks at that route
only.

Owns the order: RequestIds (request ids, 503) sees every answer, including the 400 of the
host allow-list (hosts.py), of the refusal of several Authorization headers
(authorization_headers.py) and the 413, 429 and 504 of the ones inside it; RequestLimits
decodes a body once, before RateLimits charges it; WebSocketLimits polices websocket frames;
OperationDeadline times only what runs. A layer whose limits are all off is left out, so an
honest request passes through no more layers than it needs.
"""

from starlette.middleware import Middleware

from laneway.api.graphql.schema import MAX_TOKENS
from laneway.api.http.authorization_headers import OneAuthorization
from laneway.api.http.body_limits import MAX_BODY_BYTES, RequestLimits
from laneway.api.http.deadline import OperationDeadline
from laneway.api.http.hosts import host_allow_list
from laneway.api.http.rate_limits import RateLimiter, RateLimits
from laneway.api.http.request_ids import RequestIds
from laneway.api.http.websocket_limits import WebSocketLimits
from laneway.config import Settings

SECONDS_PER_MINUTE = 60.0


def http_protections(settings: Settings, *, path: str = "/graphql") -> list[Middleware]:
    """The stack for one app whose GraphQL route (HTTP and websocket) is `path`: request ids,
    the host allow-list, one Authorization header at most, body and token limits, rate
    limits, websocket limits and the operation deadline, each as `settings` set it
    (docs/limits.md), for that route only: the app's other routes pass through. For
    Starlette's `middleware=`; its limiters live as long as the app does."""
    return protections(settings, path=path, hosts_on_every_route=False)


def protections(settings: Settings, *, path: str, hosts_on_every_route: bool) -> list[Middleware]:
    """http_protections, with the host allow-list in front of every route when
    `hosts_on_every_route` (Laneway's own app: its dashboard, /metrics and /healthz too),
    and then one Authorization header at most on /metrics too (which reads a token)."""
    path = path.rstrip("/")  # as each layer compares it with the request's
    token_paths = frozenset({path, "/metrics"} if hosts_on_every_route else {path})
    requests = None
    if settings.rate_limit_per_second > 0:
        requests = RateLimiter(settings.rate_limit_per_second, settings.rate_burst)
    handshakes = None
    if settings.ws_handshakes_per_minute > 0:
        per_minute = settings.ws_handshakes_per_minute
        handshakes = RateLimiter(per_minute / SECONDS_PER_MINUTE, per_minute)
    stack = [
        Middleware(RequestIds, path=path),
        # Before anything else runs: on every route, or on the GraphQL route only.
        *host_allow_list(settings, path=None if hosts_on_every_route else path),
        Middleware(OneAuthorization, paths=token_paths),
        Middleware(
            RequestLimits,
            max_body_bytes=MAX_BODY_BYTES,
            max_tokens=MAX_TOKENS,
            path=path,
            # With rate limits, RateLimits checks the operation, after it charged the request.
            check_operations=requests is None,
        ),
    ]
    if requests is not None:
        stack.append(
            Middleware(
                RateLimits,
                limiter=requests,
                tokens=settings.api_tokens,
                limit_local=settings.limit_local_clients,
                path=path,
            )
        )
    if requests is not None or handshakes is not None or settings.ws_connections_per_token:
        stack.append(
            Middleware(
                WebSocketLimits,
                limiter=requests,
                handshakes=handshakes,
                connections_per_client=settings.ws_connections_per_token,
                tokens=settings.api_tokens,
                limit_local=settings.limit_local_clients,
                path=path,
            )
        )
    if settings.operation_timeout_seconds > 0:
        stack.append(
            Middleware(OperationDeadline, seconds=settings.operation_timeout_seconds, path=path)
        )
    return stack
