"""OperationSpans: one OpenTelemetry span per GraphQL operation, when tracing is on.

Owns the GraphQL side of Laneway's traces (laneway/engine/tracing.py owns the engine's). The
span is a SERVER span named as OpenTelemetry's GraphQL conventions name it (`mutation`,
`mutation EnqueueMany`), with `graphql.operation.type`, `graphql.operation.name` and
`graphql.document`; it is the current span while the operation executes, so the
`laneway.enqueue` spans of an enqueueWorkflow(s) are its children and the instances' steps
belong to its trace. An HTTP request's W3C `traceparent` header (when no span is current
already) makes the span a child of the caller's: the request continues the calling
service's trace. With no tracer provider set and no parent span, no span is made; nor when
the settings of the request's LanewayContext turn tracing off (a context that carries none
is traced, as Settings' default).

What the client wrote reaches the span only in bounded, argument-free form: the document is
the parsed one printed with every literal value as `"*"` (variables stay `$names`; their
values are never read), cut at MAX_DOCUMENT_CHARS; a document that did not parse gets no
`graphql.document`. The operation's name is cut at MAX_NAME_CHARS in the span's name and
attribute.

Strawberry's own OpenTelemetryExtension is not used: its `resolve` hook makes every field of
every object a coroutine with a span decision of its own (which also turns off the one-pass
completion of plain objects, execution.py), and it writes each resolver's arguments into the
span as text: an enqueueWorkflows of 1,000 requests, params included, as one attribute. The
cost was a quarter of a batch mutation's time with no provider set at all.
"""

from collections.abc import Generator, Mapping
from typing import Any

from graphql import (
    DocumentNode,
    Node,
    StringValueNode,
    ValueNode,
    VariableNode,
    Visitor,
    print_ast,
    visit,
)
from strawberry.extensions import SchemaExtension

from laneway.api.graphql.context import LanewayContext, laneway_of
from laneway.engine import tracing

# Each argument is a client's to fill, so none reaches a span: a password inline in `params`
# would otherwise be kept by whatever backend the spans are exported to.
PLACEHOLDER = "*"
MAX_DOCUMENT_CHARS = 4096  # the operation's shape fits; a 1,000-request batch's literals do not
MAX_NAME_CHARS = 100  # a GraphQL name has no length limit of its own
CUT = "…"


class _Literals(Visitor):
    """Replaces every literal value (a scalar, a list, an input object, a variable's default)
    with the placeholder, whole: keys of a JSON object are the client's too."""

    _placeholder = StringValueNode(value=PLACEHOLDER)

    def enter(self, node: Node, *_: object) -> StringValueNode | None:
        if isinstance(node, ValueNode) and not isinstance(node, VariableNode):
            return self._placeholder  # its children are not visited: a big literal costs nothing
        return None


def document_text(document: DocumentNode) -> str:
    """The document as `graphql.document` holds it: printed with no literal values, cut at
    MAX_DOCUMENT_CHARS. `document` is left as it is (a cached one serves other requests)."""
    return capped(print_ast(visit(document, _Literals())), MAX_DOCUMENT_CHARS)


def capped(text: str, limit: int) -> str:
    """`text`, or its first `limit - 1` characters and "…" when it is longer than `limit`."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def _headers_of(laneway: LanewayContext | None) -> Mapping[str, str] | None:
    """The headers of the HTTP request an operation came in (None: a websocket's, whose
    operations come long after its upgrade request, or one executed in the process)."""
    connection = None if laneway is None else laneway.connection
    if connection is None or connection.scope["type"] != "http":
        return None
    return connection.headers


class OperationSpans(SchemaExtension):
    """A span for each operation, current while it executes."""

    _span: Any = None

    def on_operation(self) -> Generator[None, None, None]:
        try:
            laneway: LanewayContext | None = laneway_of(self.execution_context.context)
        except TypeError:  # no LanewayContext: its resolvers will say so
            laneway = None
        # Traced as the process's settings say (Settings.tracing, LANEWAY_TRACING); a context
        # without them is traced, as their default.
        if laneway is None or laneway.settings.tracing:
            self._span = tracing.server_span("GraphQL", _headers_of(laneway))
        try:
            yield
        finally:
            if self._span is not None:
                tracing.finish(self._span, *self._described())

    def on_execute(self) -> Generator[None, None, None]:
        if self._span is None:
            yield
            return
        with tracing.current(self._span):
            yield

    def _described(self) -> tuple[str | None, dict[str, str]]:
        """The span's name and attributes (document, operation type and name), once the
        document is parsed; refused before parsing, it keeps its first name, and no
        document."""
        context = self.execution_context
        if context.graphql_document is None:
            return None, {}
        attributes = {"graphql.document": document_text(context.graphql_document)}
        try:
            kind = context.operation_type.value
        except Exception:  # no operation of that name: graphql-core reports it to the client
            return None, attributes
        attributes["graphql.operation.type"] = kind
        name = capped(context.operation_name or "", MAX_NAME_CHARS)
        if name:
            attributes["graphql.operation.name"] = name
        return (f"{kind} {name}" if name else kind), attributes
