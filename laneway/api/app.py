"""create_app(): Laneway's own Starlette application — routes, middleware, GraphQL view.

Owns the process's HTTP/websocket surface when Laneway is the whole app, or a part a host
mounts under a prefix. A LanewayApp runs its services with `running()` (lifespan.py): its own
lifespan does, and a host that mounts it enters `laneway_app.running()` in the host's
lifespan, since Starlette runs no lifespan of a mounted app. Also the uvicorn settings `serve`
and the tests share.
"""

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import uvicorn
from cross_web import AsyncHTTPRequestAdapter, HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError, MissingQueryError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.base import BaseRequestProtocol
from strawberry.http.types import QueryParams
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UNSET, UnsetType

from laneway.api import lifespan
from laneway.api.auth import BearerTokens, Decision, Permission
from laneway.api.graphql.context import LanewayContext, laneway_context
from laneway.api.graphql.documents import operation_refusal
from laneway.api.graphql.errors import BAD_REQUEST, OPERATION_RESOLUTION_FAILURE
from laneway.api.graphql.permissions import Action, decide
from laneway.api.graphql.schema import MAX_TOKENS, build_schema, schema
from laneway.api.http.body_limits import DECODED_BODY
from laneway.api.http.hosts import ORIGIN_ALLOWED, refuse_foreign_origin
from laneway.api.http.media_type import (
    GRAPHQL_RESPONSE_CONTENT_TYPE,
    is_request_error,
    names_html,
    wants_graphql_response,
)
from laneway.api.http.open_access import OpenAccessNotice
from laneway.api.http.refusals import send_error
from laneway.api.http.server import ConnectionLimits, http_protocol
from laneway.api.http.slashes import redirect_by_path
from laneway.api.http.stack import protections
from laneway.api.http.strict_json import MAX_REQUEST_DEPTH, parse_refusal, strict_json_loads
from laneway.api.http.websocket_limits import REFUSED_HANDSHAKES, decoded
from laneway.api.metrics_route import metrics_endpoint
from laneway.api.routes import graphiql_asset, graphiql_response, healthz, home
from laneway.api.websocket import EventRenderer, LanewayTransportWSHandler
from laneway.config import Settings
from laneway.engine import Workflow
from laneway.services import Services

WS_MAX_MESSAGE_BYTES = 64 * 1024
MAX_SUBSCRIPTIONS_PER_CONNECTION = 20
CONNECTION_INIT_TIMEOUT = timedelta(seconds=5)
NO_ACK_PAYLOAD: UnsetType = UNSET
# What GraphQL over HTTP serves here: queries by GET or POST, mutations by POST only (by GET:
# 405). Subscriptions are the websocket's (graphql-transport-ws); Strawberry would run one sent
# over HTTP as a query, whose stream field cannot be a value: an internal error for bad input.
HTTP_OPERATION_TYPES = {
    "GET": frozenset({OperationType.QUERY}),
    "POST": frozenset({OperationType.QUERY, OperationType.MUTATION}),
}
SUBSCRIPTION_OVER_HTTP = (
    "Subscriptions are served over a websocket at this path (graphql-transport-ws), not over HTTP."
)


class MutationByGetError(HTTPException):
    """A mutation sent with GET: 405, `Allow: POST` (GraphQL over HTTP)."""

    allow = "POST"


class OperationResolutionError(HTTPException):
    """A document without the operation the request names, or with several and no name:
    400, OPERATION_RESOLUTION_FAILURE (any other request error here is BAD_REQUEST)."""


class LanewayGraphQL(GraphQL[LanewayContext, None]):
    """Strawberry's ASGI view with Laneway's context, the websocket connect check, strict
    JSON, and event fan-out that renders each event once per selection (websocket.py).

    Also GraphQL over HTTP as the spec has it: application/graphql-response+json for a client
    that asks for it (http/media_type.py), 405 with `Allow` for a wrong method or a mutation by
    GET, 400 for a subscription (the websocket's), every request error a JSON error document;
    and websocket Origins that the host allow-list admitted (http/hosts.py).
    """

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

    def should_render_graphql_ide(self, request: BaseRequestProtocol) -> bool:
        """GraphiQL's page only where it is on, for a GET with no `query` whose Accept names
        text/html (a browser's): Strawberry's rule served it for `*/*` too, curl's and httpx's
        default, and answered a browser 404 (with code BAD_REQUEST) where GraphiQL is off;
        docs/limits.md answers both 400 BAD_REQUEST (no `query`)."""
        return (
            self.graphql_ide is not None
            and request.method == "GET"
            and request.query_params.get("query") is None
            and names_html(request.headers.get("accept"))
        )

    async def render_graphql_ide(self, request: Request) -> Response:
        """Laneway's own GraphiQL page, whose files it serves itself (routes.py), in place of
        Strawberry's, which loads them from a CDN; shown only with settings.graphiql."""
        return graphiql_response()

    def decode_json(self, data: str | bytes) -> object:
        return decoded(data)  # strict, and each websocket frame decoded once

    def parse_query_params(self, params: QueryParams) -> dict[str, Any]:
        """Strawberry's, with a parameter given as the empty string taken as not given (GraphQL
        over HTTP: `?query=...&variables=` means no variables), and a refusal of JSON that
        names the parameter and the rule it broke."""
        given: dict[str, Any] = {k: v for k, v in params.items() if v != ""}
        for name in ("variables", "extensions"):
            if name in given:
                try:
                    given[name] = strict_json_loads(given[name], max_depth=MAX_REQUEST_DEPTH)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise HTTPException(400, parse_refusal(exc, f"`{name}`")) from exc
        return given

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry's, with the `Allow` header a 405 needs, and a request error answered
        with a JSON error document in the media type the client asked for, as RequestLimits
        answers the errors it finds: BAD_REQUEST, or OPERATION_RESOLUTION_FAILURE."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope=scope, receive=receive)
        try:
            response = await self._posted(request) or await self.run(request)
        except HTTPException as exc:
            headers = []
            if exc.status_code == 405:
                allow = exc.allow if isinstance(exc, MutationByGetError) else "GET, POST"
                headers.append((b"allow", allow.encode()))
            code = (
                OPERATION_RESOLUTION_FAILURE
                if isinstance(exc, OperationResolutionError)
                else BAD_REQUEST
            )
            await send_error(scope, send, exc.status_code, exc.reason, code, headers)
            return
        await response(scope, receive, send)

    async def _posted(self, request: Request) -> Response | None:
        """The answer to an ordinary POST, or None for Strawberry's own path.

        Ordinary: a JSON body RequestLimits has already decoded, holding one operation with
        well-typed fields, and no streaming transport asked for. It is executed as Strawberry's
        view executes it, with the same hooks (context, root value, sub-response, result
        processing, response) and the same request errors (`_execute`), minus what that path
        repeats: reading and decoding the body again and parsing its content type, about a
        third of a trivial query's server CPU. Anything else takes Strawberry's path.
        """
        body = request.scope.get(DECODED_BODY)
        if request.scope["method"] != "POST" or not isinstance(body, dict):
            return None
        query, variables = body.get("query"), body.get("variables")
        name, extensions = body.get("operationName"), body.get("extensions")
        if (
            not isinstance(query, str)
            or not isinstance(variables, dict | None)
            or not isinstance(name, str | None)
            or not isinstance(extensions, dict | None)
            or self._get_stream_transport_from_headers(request.headers) is not None
        ):
            return None
        sub_response = await self.get_sub_response(request)
        context = await self.get_context(request, response=sub_response)
        request_data = GraphQLRequestData(
            query=query, variables=variables, operation_name=name, extensions=extensions
        )
        result = await self._execute("POST", context, request_data)
        response_data = await self.process_result(request, result)
        if result.errors:
            self._handle_errors(result.errors, response_data)
        return self.create_response(response_data, sub_response)

    async def execute_single(
        self,
        request: Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: Response,
        context: LanewayContext,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """Strawberry's, with the operation types HTTP_OPERATION_TYPES allows (`_execute`)."""
        return await self._execute(request_adapter.method, context, request_data)

    async def _execute(
        self, method: str, context: LanewayContext, request_data: GraphQLRequestData
    ) -> ExecutionResult:
        """Execute one operation sent by `method`, as Strawberry's view does, but with the
        operation types HTTP serves here: a mutation by GET is 405 and a subscription 400,
        refused once parsed, before it is validated or runs; and a GET's document must have
        the operation it names, or only one when it names none (Strawberry would run the
        first).

        Raises:
            HTTPException: a request error (nothing has run): no query, no operation to run, or
                an operation type this method does not serve.
        """
        query = request_data.query
        if method == "GET" and query:  # a POST body's was refused by RequestLimits already
            refusal = operation_refusal(query, request_data.operation_name, MAX_TOKENS)
            if refusal is not None:
                raise OperationResolutionError(400, refusal)
        try:
            return await self.schema.execute(
                query,
                root_value=None,  # the view has none: GraphQL[LanewayContext, None]
                variable_values=request_data.variables,
                context_value=context,
                operation_name=request_data.operation_name,
                allowed_operation_types=HTTP_OPERATION_TYPES.get(method, frozenset()),
                operation_extensions=request_data.extensions,
            )
        except CannotGetOperationTypeError as exc:
            raise OperationResolutionError(400, exc.as_http_error_reason()) from exc
        except InvalidOperationTypeError as exc:
            if exc.operation_type is OperationType.SUBSCRIPTION:
                raise HTTPException(400, SUBSCRIPTION_OVER_HTTP) from exc
            raise MutationByGetError(405, exc.as_http_error_reason(method)) from exc
        except MissingQueryError as exc:
            raise HTTPException(400, "No GraphQL query found in the request") from exc

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        sub_response = await super().get_sub_response(request)
        if wants_graphql_response(request.headers.get("accept")):
            sub_response.media_type = GRAPHQL_RESPONSE_CONTENT_TYPE
        return sub_response

    async def process_result(
        self, request: Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        """Strawberry's, without `data` for a request error (nothing ran), in either media
        type: the GraphQL spec's response section leaves `data` out when an error was raised
        before execution began. Its status is create_response's."""
        response = await super().process_result(request, result)
        if is_request_error(result):
            response.pop("data", None)
        return response

    def create_response(
        self,
        response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse],
        sub_response: Response,
    ) -> Response:
        """Strawberry's JSON answer; under application/graphql-response+json, 400 when it has
        no `data` (a request error: nothing ran)."""
        response = super().create_response(response_data, sub_response)
        if sub_response.media_type == GRAPHQL_RESPONSE_CONTENT_TYPE:
            response.headers["content-type"] = GRAPHQL_RESPONSE_CONTENT_TYPE
            if isinstance(response_data, dict) and "data" not in response_data:
                response.status_code = 400
        return response

    async def reject_websocket(self, request: WebSocket) -> WebSocket:
        """A handshake whose Origin Strawberry's same-origin rule refuses (no host list is kept
        where tokens let any host in) is refused as the list refuses one: an error document,
        not an empty 403."""
        origin = request.headers.get("origin", "").encode("latin-1")
        await refuse_foreign_origin(origin, request.scope, request.receive, request.send)
        return request

    def is_websocket_origin_allowed(self, request: WebSocket, origin: str) -> bool:
        """A cross-origin handshake passes when the host allow-list found its Origin among
        the allowed names (not only the request's own Host); else Strawberry's rule."""
        if request.scope.get(ORIGIN_ALLOWED):
            return True
        return super().is_websocket_origin_allowed(request, origin)


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
    """Laneway's app: the dashboard at /, /healthz, /metrics, /graphql (HTTP and websocket),
    and with settings.graphiql the files of GraphiQL's page at /graphiql/{name}.

    `services` is set while `running()` is active, None otherwise.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        workflows: Iterable[Workflow] = (),
        permission: Permission | None = None,
    ) -> None:
        permission = permission or BearerTokens.from_settings(settings)
        view = graphql_view(settings, permission)
        routes = [
            Route("/", home),
            Route("/healthz", healthz),
            Route("/metrics", metrics_endpoint(permission)),
            Route("/graphql", view),
            WebSocketRoute("/graphql", view),
        ]
        if settings.graphiql:
            # The files of GraphiQL's page, which loads them relative to graphql.
            routes.append(Route("/graphiql/{name}", graphiql_asset))
        super().__init__(
            routes=routes,
            middleware=protections(settings, path="/graphql", hosts_on_every_route=True),
            lifespan=_own_lifespan,
        )
        redirect_by_path(self.router)
        self.settings = settings
        self.workflows = tuple(workflows)
        self.services: Services | None = None
        self.open_access = OpenAccessNotice(settings, permission)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Starlette's, after a look at the client while the app may still have to warn that
        it is open (http/open_access.py): one flag per request after that."""
        if self.open_access.pending:
            self.open_access.seen(scope)
        await super().__call__(scope, receive, send)

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


def server_config(
    app: Starlette, *, host: str, port: int, settings: Settings | None = None
) -> uvicorn.Config:
    """The uvicorn settings of `laneway serve` (the tests use the same).

    The connection limits (http/server.py) come from `settings`, else from the app's own when
    it is a LanewayApp, else from the defaults (a host's app embedding Laneway).
    """
    if settings is None:
        settings = app.settings if isinstance(app, LanewayApp) else Settings()
    limits = ConnectionLimits(
        header_timeout_seconds=settings.header_timeout_seconds,
        body_timeout_seconds=settings.operation_timeout_seconds,
        max_connections=settings.max_connections,
    )
    # uvicorn calls each handshake Laneway refuses on purpose an error (websocket_limits.py).
    logging.getLogger("uvicorn.error").addFilter(REFUSED_HANDSHAKES)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # httptools, not h11: the C parser costs a fraction of h11's time per request.
        http=http_protocol(limits),
        server_header=False,
        # uvicorn's access log makes a record per request (~50 µs each, even unhandled);
        # failures are logged by Laneway itself (schema.py, the middlewares).
        access_log=False,
        ws_max_size=WS_MAX_MESSAGE_BYTES,
        # Compressing every frame cost about as much CPU as everything else a delivery does,
        # for payloads of a few hundred bytes; it is also an attack surface (OWASP WS).
        ws_per_message_deflate=False,
        lifespan="on",
        log_config=None,
        timeout_graceful_shutdown=10,
    )
