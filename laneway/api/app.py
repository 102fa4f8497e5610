"""create_app(): the Starlette application — routes, middleware, and the lifespan.

Owns the process's HTTP/websocket surface and its start/stop order: the lifespan builds the
services once, runs the engine loop in a TaskGroup (unless LANEWAY_ENGINE=0), and on
shutdown stops the engine before it closes the services. Also the uvicorn settings `serve`
and the tests share.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

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

from laneway.api.auth import Access
from laneway.api.graphql.context import RequestContext, get_context
from laneway.api.graphql.schema import build_schema, schema
from laneway.api.http.stack import middleware_for
from laneway.api.http.strict_json import strict_json_loads
from laneway.api.routes import healthz, home
from laneway.api.websocket import EventRenderer, LanewayTransportWSHandler
from laneway.config import Settings
from laneway.engine import Workflow
from laneway.services import open_services

logger = logging.getLogger(__name__)

WS_MAX_MESSAGE_BYTES = 64 * 1024
MAX_SUBSCRIPTIONS_PER_CONNECTION = 20
CONNECTION_INIT_TIMEOUT = timedelta(seconds=5)
NO_ACK_PAYLOAD: UnsetType = UNSET


class LanewayGraphQL(GraphQL[RequestContext, None]):
    """Strawberry's ASGI view with our context, websocket auth, strict JSON, and event fan-out
    that renders each event once per selection (websocket.py)."""

    graphql_transport_ws_handler_class = LanewayTransportWSHandler
    event_renderer: EventRenderer | None = None

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> RequestContext:
        return await get_context(request)

    async def on_ws_connect(self, context: RequestContext) -> UnsetType | dict[str, object] | None:
        access = context.access
        if access.is_allowed or (access is Access.MISSING and context.settings.open_reads):
            return NO_ACK_PAYLOAD
        raise ConnectionRejectionError()

    def decode_json(self, data: str | bytes) -> object:
        return strict_json_loads(data)


def graphql_view(settings: Settings) -> LanewayGraphQL:
    chosen = schema if settings.graphiql else build_schema(introspection=False)
    view = LanewayGraphQL(
        chosen,
        graphql_ide="graphiql" if settings.graphiql else None,
        # The legacy graphql-ws protocol stays off (STACK P11): only graphql-transport-ws.
        subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        connection_init_wait_timeout=CONNECTION_INIT_TIMEOUT,
        max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
    )
    view.event_renderer = EventRenderer(chosen)
    return view


def create_app(settings: Settings, *, workflows: Iterable[Workflow] = ()) -> Starlette:
    """The Laneway ASGI app for `settings`; `workflows` are registered besides the modules'."""
    extra_workflows = tuple(workflows)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with open_services(settings, workflows=extra_workflows) as services:
            # Listening from the start: /healthz reports the listener, and the first
            # subscriber does not wait for it.
            await services.hub.start()
            stopping = asyncio.Event()
            async with asyncio.TaskGroup() as group:
                if settings.engine_enabled:
                    group.create_task(services.engine.run(stopping), name="laneway-engine")
                logger.info(
                    "api started",
                    extra={
                        "engine": settings.engine_enabled,
                        "workflows": services.engine.registry.names(),
                    },
                )
                try:
                    yield {"services": services}
                finally:
                    # The engine stops first (and hands its instances back) while the
                    # store and hub it writes through are still open.
                    stopping.set()
        logger.info("api stopped")

    view = graphql_view(settings)
    return Starlette(
        routes=[
            Route("/", home),
            Route("/healthz", healthz),
            Route("/graphql", view),
            WebSocketRoute("/graphql", view),
        ],
        middleware=middleware_for(settings),
        lifespan=lifespan,
    )


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
