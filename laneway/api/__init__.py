"""The GraphQL/HTTP surface of Laneway, and the hooks a host application embeds it with.

Laneway's own app: `create_app(settings)`. A host keeps its own Starlette app, schema and
context and either

- mounts that app, `Mount("/laneway", laneway_app)`, entering `laneway_app.running()` in its
  own lifespan; or
- builds its schema as a LanewaySchema (a strawberry.Schema that logs only unexpected errors)
  from LanewayQuery, LanewayMutation and LanewaySubscription (with
  `extensions=schema_extensions()`), enters `running(settings)` in its lifespan, and puts
  `await laneway_context(services, request, permission)` on its context as `laneway`; its
  Strawberry view takes LanewayTransportWSHandler as its `graphql_transport_ws_handler_class`.

A Permission (default: BearerTokens) decides who may read and write. The limits Laneway's app
keeps in front of its routes (docs/limits.md) are `http_protections(settings)`, a middleware
list for the host's own app, and `server_config` the uvicorn settings of `laneway serve` for
any app. app/host.py shows both ways.
"""

from laneway.api.app import LanewayApp, create_app, server_config
from laneway.api.auth import BearerTokens, Caller, Decision, Permission
from laneway.api.graphql.context import LanewayContext, laneway_context
from laneway.api.graphql.mutation import LanewayMutation
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.schema import LanewaySchema, schema_config, schema_extensions
from laneway.api.graphql.subscription import LanewaySubscription
from laneway.api.http.stack import http_protections
from laneway.api.lifespan import running
from laneway.api.websocket import LanewayTransportWSHandler

__all__ = [
    "BearerTokens",
    "Caller",
    "Decision",
    "LanewayApp",
    "LanewayContext",
    "LanewayMutation",
    "LanewayQuery",
    "LanewaySchema",
    "LanewaySubscription",
    "LanewayTransportWSHandler",
    "Permission",
    "create_app",
    "http_protections",
    "laneway_context",
    "running",
    "schema_config",
    "schema_extensions",
    "server_config",
]
