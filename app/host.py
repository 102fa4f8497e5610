"""A host application that embeds Laneway the two documented ways (the shipped example).

The host keeps its own Starlette app, its own Strawberry schema and its own context:

- its /graphql serves one schema: its own `hello` next to Laneway's queries, mutations and
  `workflowEvents` (LanewayQuery, LanewayMutation, LanewaySubscription), over HTTP and its own
  websocket route. Its context, HostContext, carries Laneway's part as `laneway`
  (`laneway_context`), and HostPermission, not Laneway's bearer tokens, decides who may
  write: the user named by the `X-User` header "admin". That header stands in for the
  host's real authentication (its session, a verified JWT) so the example stays short: any
  client can send `X-User: admin`, so a real host must never trust it as it comes;
- /laneway is the whole Laneway app (dashboard, /laneway/graphql, /laneway/healthz), with its
  own bearer tokens.

The host's /graphql keeps the limits Laneway's app keeps (`http_protections`: request ids,
the host allow-list, body, rate and websocket limits, the operation deadline).

Its lifespan runs Laneway once, `laneway_app.running()`, and both ways share those services.
A host that wants only the schema enters `running(settings)` instead (`mount=False`).
Serve it with `uvicorn --factory app.host:create`.
"""

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import strawberry
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from app.main import EXAMPLES
from laneway import Services, Settings
from laneway.api import (
    Caller,
    Decision,
    LanewayContext,
    LanewayMutation,
    LanewayQuery,
    LanewaySchema,
    LanewaySubscription,
    LanewayTransportWSHandler,
    create_app,
    http_protections,
    laneway_context,
    running,
    schema_extensions,
)

LANEWAY_PREFIX = "/laneway"
# A stand-in for the host's real authentication, never to be trusted as is: any client can
# send this header with any name, "admin" too. A real host takes its user from what it has
# verified itself (its session cookie, a JWT whose signature it checked), never from a header
# the client chose (unless a proxy of its own sets it and strips the client's).
USER_HEADER = "x-user"
ADMIN = "admin"


@dataclass
class HostContext:
    """The host's own context: its user, and Laneway's part under `laneway`.

    `connection_params` is where Strawberry stores a websocket's `connection_init` payload.
    """

    user: str
    laneway: LanewayContext
    connection_params: dict[str, object] | None = None


@strawberry.type
class Query(LanewayQuery):
    @strawberry.field
    def hello(self, info: strawberry.Info[HostContext, None]) -> str:
        return f"hello {info.context.user}"


schema = LanewaySchema(
    query=Query,
    mutation=LanewayMutation,
    subscription=LanewaySubscription,
    extensions=schema_extensions(),
)


class HostPermission:
    """The host's rule: everyone may read; only its admin may write.

    Only as sound as the user in the context: here `X-User`, which the client sends (see
    USER_HEADER); a real host decides with a user it authenticated.
    """

    async def may_read(self, caller: Caller) -> Decision:
        return Decision.ALLOW

    async def may_write(self, caller: Caller) -> Decision:
        context = caller.context
        if isinstance(context, HostContext) and context.user == ADMIN:
            return Decision.ALLOW
        return Decision.FORBIDDEN


def user_of(connection: HTTPConnection) -> str:
    """The caller's name as the client claims it (the example's stand-in for a session)."""
    return connection.headers.get(USER_HEADER) or "guest"


class HostGraphQL(GraphQL[HostContext, None]):
    """The host's GraphQL view: its context, with Laneway's services from the lifespan state,
    and Laneway's websocket handler (a subscriber that leaves mid-stream is not an error)."""

    permission = HostPermission()
    graphql_transport_ws_handler_class = LanewayTransportWSHandler

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> HostContext:
        services: Services = request.state.laneway_services
        return HostContext(
            user=user_of(request),
            laneway=await laneway_context(services, request, self.permission),
        )


def build(settings: Settings, *, mount: bool = True) -> Starlette:
    """The host app: its schema at /graphql, and (with `mount`) Laneway's app at /laneway."""
    view = HostGraphQL(schema, subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,))
    routes: list[BaseRoute] = [Route("/graphql", view), WebSocketRoute("/graphql", view)]
    laneway_app = create_app(settings)
    if mount:
        routes.append(Mount(LANEWAY_PREFIX, laneway_app))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Services]]:
        laneway = laneway_app.running() if mount else running(settings)
        async with laneway as services:
            yield {"laneway_services": services}

    # The limits Laneway's own app keeps (docs/limits.md), in front of the host's /graphql;
    # the mounted app keeps its own in front of /laneway/graphql.
    return Starlette(routes=routes, middleware=http_protections(settings), lifespan=lifespan)


def create() -> Starlette:
    """The host app for this process's environment (`uvicorn --factory app.host:create`);
    the examples are its workflows unless LANEWAY_WORKFLOWS names others."""
    settings = Settings.from_env(os.environ)
    return build(replace(settings, workflow_modules=settings.workflow_modules or (EXAMPLES,)))
