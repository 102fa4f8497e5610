"""create_app(): Laneway's own Starlette application — routes, middleware, GraphQL view.

Owns the process's HTTP/websocket surface when Laneway is the whole app, or a part a host
mounts under a prefix. A LanewayApp runs its services with `running()` (lifespan.py): its own
lifespan does, and a host that mounts it enters `laneway_app.running()` in the host's
lifespan, since Starlette runs no lifespan of a mounted app. Also the uvicorn settings `serve`
and the tests share.
"""

import contextlib
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types.unset import UNSET, UnsetType

from laneway.api import lifespan
from laneway.api.auth import BearerTokens, Decision, Permission
from laneway.api.graphql.context import LanewayContext, laneway_context
from laneway.api.graphql.permissions import Action, decide
from laneway.api.graphql.schema import build_schema, schema
from laneway.api.http.stack import middleware_for
from laneway.api.http.strict_json import strict_json_loads
from laneway.api.routes import healthz, home
from laneway.api.websocket import EventRenderer, LanewayTransportWSHandler
from laneway.config import Settings
from laneway.engine import Workflow
from laneway.services import Services

WS_MAX_MESSAGE_BYTES = 64 * 1024
MAX_SUBSCRIPTIONS_PER_CONNECTION = 20
CONNECTION_INIT_TIMEOUT = timedelta(seconds=5)
NO_ACK_PAYLOAD: UnsetType = UNSET


class LanewayGraphQL(GraphQL[LanewayContext, None]):
    """Strawberry's ASGI view with Laneway's context, the websocket connect check, strict
    JSON, and event fan-out that renders each event once per selection (websocket.py)."""

    graphql_transport_ws_handler_class = LanewayTransportWSHandler
    event_renderer: EventRenderer | None = None
    permission: Permission | None = None

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> LanewayContext:
        return await laneway_context(lifespan.services_of(request), request, self.permission)

    async def on_ws_connect(self, context: LanewayContext) -> UnsetType | dict[str, object] | None:
        """A websocket opens only for a caller who may read (4403 otherwise)."""
        if await decide(context, Action.READ) is not Decision.ALLOW:
            raise ConnectionRejectionError()
        return NO_ACK_PAYLOAD

    def decode_json(self, data: str | bytes) -> object:
        return strict_json_loads(data)


def graphql_view(settings: Settings, permission: Permission | None = None) -> LanewayGraphQL:
    chosen = schema if settings.graphiql else build_schema(introspection=False)
    view = LanewayGraphQL(
        chosen,
        graphql_ide="graphiql" if settings.graphiql else None,
        # Only graphql-transport-ws: the legacy graphql-ws protocol is unmaintained, no client
        # of ours speaks it, and it had a vulnerability of its own (CVE-2026-35526).
        subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        connection_init_wait_timeout=CONNECTION_INIT_TIMEOUT,
        max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
    )
    view.event_renderer = EventRenderer(chosen)
    # The default is decided once per app, not once per request.
    view.permission = permission or BearerTokens.from_settings(settings)
    return view


class LanewayApp(Starlette):
    """Laneway's app: the dashboard at /, /healthz, /graphql (HTTP and websocket).

    `services` is set while `running()` is active, None otherwise.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        workflows: Iterable[Workflow] = (),
        permission: Permission | None = None,
    ) -> None:
        view = graphql_view(settings, permission)
        super().__init__(
            routes=[
                Route("/", home),
                Route("/healthz", healthz),
                Route("/graphql", view),
                WebSocketRoute("/graphql", view),
            ],
            middleware=middleware_for(settings),
            lifespan=_own_lifespan,
        )
        self.settings = settings
        self.workflows = tuple(workflows)
        self.services: Services | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Services]:
        """Run this app's services and engine for the block (lifespan.running), recording the
        services on the app, which its routes and view read.

        Raises:
            RuntimeError: the app is running already.
        """
        if self.services is not None:
            raise RuntimeError("this Laneway app is running already")
        async with lifespan.running(self.settings, workflows=self.workflows) as services:
            self.services = services
            try:
                yield services
            finally:
                self.services = None


@contextlib.asynccontextmanager
async def _own_lifespan(app: Starlette) -> AsyncIterator[None]:
    assert isinstance(app, LanewayApp)
    async with app.running():
        yield


def create_app(
    settings: Settings,
    *,
    workflows: Iterable[Workflow] = (),
    permission: Permission | None = None,
) -> LanewayApp:
    """The Laneway ASGI app for `settings`; `workflows` are registered besides the modules';
    `permission` decides who may read and write (None: BearerTokens from the settings)."""
    return LanewayApp(settings, workflows=workflows, permission=permission)


def server_config(app: Starlette, *, host: str, port: int) -> uvicorn.Config:
    """The uvicorn settings of `laneway serve` (the tests use the same)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        ws_max_size=WS_MAX_MESSAGE_BYTES,
        # Compressing every frame cost about as much CPU as everything else a delivery does,
        # for payloads of a few hundred bytes; it is also an attack surface (OWASP WS).
        ws_per_message_deflate=False,
        lifespan="on",
        log_config=None,
        timeout_graceful_shutdown=10,
    )
