"""The Strawberry schema: its protection extensions, error policy and configuration.

Owns how the schema is assembled: the depth/alias/token limits and the result-size cap
(judged once per distinct document, documents.py; the estimate is result_size.py's), error
codes and masking, logging of unexpected errors, the refusal of every operation once a newer
release migrated the database under the process, and the SDL export. A host application
building its own schema from LanewayQuery, LanewayMutation and LanewaySubscription takes the
same protection with `extensions=schema_extensions()`, and `config=schema_config()` if it
wants Laneway's JSON scalar and no field suggestions; Laneway's field names come out right
without either (they are explicit, see types.py and arguments.py). Resolvers live in
query.py, mutation.py and subscription.py.
"""

import dataclasses
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Any, cast

import strawberry
from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import GraphQLError
from graphql.validation import ASTValidationRule, OverlappingFieldsCanBeMergedRule
from strawberry.extensions import (
    DisableIntrospection,
    MaskErrors,
    MaxAliasesLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.printer import print_schema
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext
from strawberry.types.execution import ExecutionResult
from strawberry.types.scalar import ScalarDefinition

from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.documents import DocumentCache
from laneway.api.graphql.errors import (
    INTERNAL_SERVER_ERROR,
    MASKED_MESSAGE,
    add_code,
    add_request_code,
    is_expected,
)
from laneway.api.graphql.execution import LanewayExecutor
from laneway.api.graphql.fragment_expansion import (
    BoundedFieldMerging,
    FragmentExpansionLimit,
    guarded,
)
from laneway.api.graphql.hooks import LeanExtensionsRunner
from laneway.api.graphql.input_guard import InputGuard
from laneway.api.graphql.json_literal import json_literal
from laneway.api.graphql.mutation import LanewayMutation
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.result_size import ResultSizeGuard, ResultSizeLimit
from laneway.api.graphql.spans import OperationSpans
from laneway.api.graphql.subscription import LanewaySubscription
from laneway.api.request_trace import current_trace
from laneway.engine import tracing
from laneway.errors import DatabaseNewerError

logger = logging.getLogger(__name__)

MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000
# The depth, alias and result-size rules, built once: a cached verdict (documents.py) is keyed
# by the rule classes, and QueryDepthLimiter and MaxAliasesLimiter build new ones for every
# operation. The token limit and these rules are applied by DocumentCache; ResultSizeGuard
# counts an operation's variables, which a rule cannot see (result_size.py).
# A document whose fragments expand past a limit is refused first, and the depth and alias
# limiters, which expand every spread anew, never run on it (fragment_expansion.py).
LIMIT_RULES: tuple[type[ASTValidationRule], ...] = (
    FragmentExpansionLimit,
    *(guarded(rule) for rule in QueryDepthLimiter(max_depth=MAX_DEPTH).validation_rules),
    *(guarded(rule) for rule in MaxAliasesLimiter(max_alias_count=MAX_ALIASES).validation_rules),
    ResultSizeLimit,
)


class ErrorCodes(MaskErrors):
    """Mask unexpected errors as MASKED_MESSAGE, and attach `extensions.code` to errors raised
    as mapped LanewayErrors, to the request's own (parse, validation, variables: it knows
    whether execution had begun) and the request id to masked ones (see errors.py).

    Also refuses to execute anything once a newer release migrated the database under this
    process (Store.newer_release): SERVICE_UNAVAILABLE with `data` null, before any resolver
    runs, since this process's SQL may no longer fit the schema (an old release's enqueue
    ignored the newer one's idempotency bindings). A subscription, which Strawberry starts
    whatever this sets, is refused by the event hub instead (api/lifespan.py).

    One extension for all, so an operation pays for one hook, not three: an operation's
    errors are masked first and then given their codes, a streamed result's the other way
    round, as when they were two extensions in that order. A request's own error is never
    masked, so its code comes first either way.
    """

    def __init__(self) -> None:
        super().__init__(should_mask_error=should_mask_error, error_message=MASKED_MESSAGE)
        self.executing = False

    def anonymise_error(self, error: GraphQLError) -> GraphQLError:
        """MaskErrors' masked error, with the code INTERNAL_SERVER_ERROR."""
        masked = super().anonymise_error(error)
        masked.extensions = {"code": INTERNAL_SERVER_ERROR}
        return masked

    def on_execute(self) -> Iterator[None]:
        # Strawberry executes only a document that parsed and validated: an error at no path
        # from here on is graphql-core's refusal of the variables (errors.add_request_code).
        self.executing = True
        newer = newer_release(self.execution_context.context)
        if newer is not None:
            # A result set here is the answer: Strawberry does not execute the operation.
            refusal = GraphQLError(str(newer), original_error=newer)
            self.execution_context.result = GraphQLExecutionResult(data=None, errors=[refusal])
        yield

    def on_operation(self) -> Iterator[None]:
        # MaskErrors' hook is a generator function, typed as an Iterator.
        masking = cast(Generator[None, None, None], super().on_operation())
        next(masking)
        yield
        result = self.execution_context.result
        if isinstance(result, GraphQLExecutionResult | ExecutionResult) and not result.errors:
            masking.close()  # nothing to mask: spare MaskErrors' protocol checks
            return
        errors = getattr(result, "errors", None) or ()
        for error in errors:
            add_request_code(error, executing=self.executing)
        next(masking, None)  # MaskErrors masks what it must, and ends
        for error in getattr(result, "errors", None) or ():
            add_code(error)
        trace = current_trace()
        if trace is not None and getattr(result, "data", None) is not None:
            trace.answered_data = True  # an answer with data is not a 503 (http/request_ids.py)

    def on_stream_result(self, result: ExecutionResult) -> Iterator[None]:  # type: ignore[override]
        for error in result.errors or ():
            add_request_code(error, executing=self.executing)
            add_code(error)
        yield from super().on_stream_result(result)


class LanewaySchema(strawberry.Schema):
    """A Schema that logs only unexpected errors, once each, with their traceback, and runs
    its extensions' hooks with LeanExtensionsRunner (hooks.py).

    Its JSON scalar is Laneway's whatever `config` a host gives (none: schema_config()): with
    Strawberry's, an unset variable in a params literal reached the enqueue as graphql-core's
    Undefined and failed it ("Object of type UndefinedType is not JSON serializable").
    """

    def __init__(self, query: type, **options: Any) -> None:
        config: StrawberryConfig | None = options.get("config")
        if config is None:
            config = schema_config()
        elif JSON not in config.scalar_map:
            config = dataclasses.replace(
                config, scalar_map={**config.scalar_map, JSON: laneway_json()}
            )
        super().__init__(query, **{**options, "config": config})

    def create_extensions_runner(
        self, execution_context: ExecutionContext, extensions: list[SchemaExtension]
    ) -> SchemaExtensionsRunner:
        return LeanExtensionsRunner(execution_context=execution_context, extensions=extensions)

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


def newer_release(context: object) -> DatabaseNewerError | None:
    """The store's `newer_release` of the services an operation's context carries; None for a
    context that carries none (a Laneway field there fails on its own, as it always has)."""
    try:
        return laneway_of(context).services.store.newer_release
    except TypeError:
        return None


def should_mask_error(error: GraphQLError) -> bool:
    return not is_expected(error)


Extension = Callable[[], SchemaExtension] | type[SchemaExtension]


def schema_extensions() -> list[Extension]:
    """The protection of Laneway's schema, for a host's schema too: depth, alias, token and
    field-merging limits (fragment_expansion.py), the argument guard (input_guard.py), the
    result-size cap (result_size.py), error codes (SERVICE_UNAVAILABLE, request ids) and
    masking of unexpected errors, the refusal of every operation once a newer release
    migrated the database (ErrorCodes); and OpenTelemetry spans when the otel extra is
    installed (laneway/engine/tracing.py), made for the operations whose settings trace."""
    extensions: list[Extension] = [
        lambda: DocumentCache(
            max_tokens=MAX_TOKENS,
            rules=LIMIT_RULES,
            replacing={OverlappingFieldsCanBeMergedRule: BoundedFieldMerging},
        ),
        InputGuard,
        ResultSizeGuard,
        ErrorCodes,
    ]
    if tracing.AVAILABLE:
        # A span per operation, current while it executes, so an enqueueWorkflow's span is
        # the parent of the instance's steps (spans.py).
        extensions.append(OperationSpans)
    return extensions


def schema_config() -> StrawberryConfig:
    """Laneway's schema configuration: no "Did you mean …?" field suggestions (a schema
    hint), and Laneway's JSON scalar (laneway_json)."""
    return StrawberryConfig(disable_field_suggestions=True, scalar_map={JSON: laneway_json()})


def laneway_json() -> ScalarDefinition:
    """The JSON scalar with Laneway's own short description in place of Strawberry's (which
    cites a specification's URL), whose literals read their variables as json_literal.py
    says."""
    return strawberry.scalar(
        name="JSON",
        description="Any JSON value: an object, an array, a string, a number, a boolean or null.",
        serialize=lambda value: value,
        parse_value=lambda value: value,
        parse_literal=json_literal,  # a variable not provided stands for nothing
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
        execution_context_class=LanewayExecutor,  # plain objects in one pass (execution.py)
    )


schema = build_schema()


def export_schema() -> str:
    """The schema as SDL, exactly as schema.graphql holds it."""
    return print_schema(schema) + "\n"
