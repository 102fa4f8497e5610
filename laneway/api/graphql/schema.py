"""The Strawberry schema: the contract's naming, its protection extensions, error policy.

Owns how the schema is assembled: the `…ID` name converter, the depth/alias/token limits,
error codes and masking, logging of unexpected errors, and the SDL export. Resolvers live in
query.py, mutation.py and subscription.py.
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
from strawberry.schema.name_converter import NameConverter
from strawberry.types import ExecutionContext
from strawberry.types.execution import ExecutionResult

from laneway.api.graphql.errors import MASKED_MESSAGE, add_code, is_expected
from laneway.api.graphql.mutation import Mutation
from laneway.api.graphql.query import Query
from laneway.api.graphql.subscription import Subscription

logger = logging.getLogger(__name__)

MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000


class LanewayNames(NameConverter):
    """snake_case → camelCase, with a trailing `Id` spelled `ID` (instanceID, afterEventID)."""

    def apply_naming_config(self, name: str) -> str:
        camel = super().apply_naming_config(name)
        return camel[:-2] + "ID" if camel.endswith("Id") else camel


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


def build_schema(*, introspection: bool = True) -> strawberry.Schema:
    """The Laneway schema, with every extension registered as a class or factory.

    `introspection=False` is for deployments without GraphiQL (LANEWAY_GRAPHIQL=0):
    `__schema` and `__type` are refused, `__typename` still works.
    """
    extensions: list[Callable[[], SchemaExtension] | type[SchemaExtension]] = [
        lambda: QueryDepthLimiter(max_depth=MAX_DEPTH),
        lambda: MaxAliasesLimiter(max_alias_count=MAX_ALIASES),
        lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
        ErrorCodes,
        lambda: MaskErrors(should_mask_error=should_mask_error, error_message=MASKED_MESSAGE),
    ]
    if not introspection:
        extensions.append(DisableIntrospection)
    return LanewaySchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        config=StrawberryConfig(
            name_converter=LanewayNames(),
            disable_field_suggestions=True,
            scalar_map={
                JSON: strawberry.scalar(
                    name="JSON",
                    serialize=lambda value: value,
                    parse_value=lambda value: value,
                )
            },
        ),
        extensions=extensions,
    )


schema = build_schema()


def export_schema() -> str:
    """The schema as SDL, exactly as schema.graphql holds it."""
    return print_schema(schema) + "\n"
