"""The Strawberry schema: its protection extensions, error policy and configuration.

Owns how the schema is assembled: the depth/alias/token limits, error codes and masking,
logging of unexpected errors, and the SDL export. A host application building its own schema
from LanewayQuery, LanewayMutation and LanewaySubscription takes the same protection with
`extensions=schema_extensions()`, and `config=schema_config()` if it wants Laneway's JSON
scalar and no field suggestions; Laneway's field names come out right without either (they
are explicit, see types.py and arguments.py). Resolvers live in query.py, mutation.py and
subscription.py.
"""

import logging
from collections.abc import Callable, Iterator

import strawberry
from graphql import GraphQLError
from strawberry.extensions import (
    DisableIntrospection,
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.printer import print_schema
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext
from strawberry.types.execution import ExecutionResult

from laneway.api.graphql.errors import MASKED_MESSAGE, add_code, is_expected
from laneway.api.graphql.mutation import LanewayMutation
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.subscription import LanewaySubscription

logger = logging.getLogger(__name__)

MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000


class ErrorCodes(SchemaExtension):
    """Attach `extensions.code` to errors raised as mapped LanewayErrors (see errors.py)."""

    def on_operation(self) -> Iterator[None]:
        yield
        for error in getattr(self.execution_context.result, "errors", None) or ():
            add_code(error)

    def on_stream_result(self, result: ExecutionResult) -> Iterator[None]:  # type: ignore[override]
        for error in result.errors or ():
            add_code(error)
        yield


class LanewaySchema(strawberry.Schema):
    """A Schema that logs only unexpected errors, once each, with their traceback."""

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        for error in errors:
            if is_expected(error):
                continue
            logger.error(
                "unexpected error in resolver",
                exc_info=error.original_error,
                extra={"path": ".".join(str(p) for p in error.path or ())},
            )


def should_mask_error(error: GraphQLError) -> bool:
    return not is_expected(error)


Extension = Callable[[], SchemaExtension] | type[SchemaExtension]


def schema_extensions() -> list[Extension]:
    """The protection of Laneway's schema, for a host's schema too: depth, alias and token
    limits, error codes (SERVICE_UNAVAILABLE, request ids) and masking of unexpected errors."""
    return [
        lambda: QueryDepthLimiter(max_depth=MAX_DEPTH),
        lambda: MaxAliasesLimiter(max_alias_count=MAX_ALIASES),
        lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
        ErrorCodes,
        lambda: MaskErrors(should_mask_error=should_mask_error, error_message=MASKED_MESSAGE),
    ]


def schema_config() -> StrawberryConfig:
    """Laneway's schema configuration: no "Did you mean …?" field suggestions (a schema
    hint), and the JSON scalar without Strawberry's description, as schema.graphql has it."""
    return StrawberryConfig(
        disable_field_suggestions=True,
        scalar_map={
            JSON: strawberry.scalar(
                name="JSON",
                serialize=lambda value: value,
                parse_value=lambda value: value,
            )
        },
    )


def build_schema(*, introspection: bool = True) -> strawberry.Schema:
    """The Laneway schema, with every extension registered as a class or factory.

    `introspection=False` is for deployments without GraphiQL (LANEWAY_GRAPHIQL=0):
    `__schema` and `__type` are refused, `__typename` still works.
    """
    chosen = schema_extensions()
    if not introspection:
        chosen.append(DisableIntrospection)
    return LanewaySchema(
        query=LanewayQuery,
        mutation=LanewayMutation,
        subscription=LanewaySubscription,
        config=schema_config(),
        extensions=chosen,
    )


schema = build_schema()


def export_schema() -> str:
    """The schema as SDL, exactly as schema.graphql holds it."""
    return print_schema(schema) + "\n"
