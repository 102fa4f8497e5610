"""OperationSpans: one OpenTelemetry span per GraphQL operation, when tracing is on.

Owns the GraphQL side of Laneway's traces (laneway/engine/tracing.py owns the engine's). The
span is a SERVER span named as OpenTelemetry's GraphQL conventions name it (`mutation`,
`mutation EnqueueMany`), with `graphql.operation.type`, `graphql.operation.name` and
`graphql.document`; it is the current span while the operation executes, so the
`laneway.enqueue` spans of an enqueueWorkflow(s) are its children and the instances' steps
belong to its trace. With no tracer provider set and no current span, no span is made.

Strawberry's own OpenTelemetryExtension is not used: its `resolve` hook makes every field of
every object a coroutine with a span decision of its own (which also turns off the one-pass
completion of plain objects, execution.py), and it writes each resolver's arguments into the
span as text: an enqueueWorkflows of 1,000 requests, params included, as one attribute. The
cost was a quarter of a batch mutation's time with no provider set at all.
"""

from collections.abc import Generator
from typing import Any

from strawberry.extensions import SchemaExtension

from laneway.engine import tracing


class OperationSpans(SchemaExtension):
    """A span for each operation, current while it executes."""

    _span: Any = None

    def on_operation(self) -> Generator[None, None, None]:
        query = self.execution_context.query or ""
        self._span = tracing.server_span("GraphQL", {"graphql.document": query})
        try:
            yield
        finally:
            if self._span is not None:
                self._named(self._span)
                self._span.end()

    def on_execute(self) -> Generator[None, None, None]:
        if self._span is None:
            yield
            return
        with tracing.current(self._span):
            yield

    def _named(self, span: Any) -> None:
        """The span's name and operation attributes, once the document is parsed."""
        context = self.execution_context
        if context.graphql_document is None:
            return  # refused before parsing: the span keeps its first name
        try:
            kind = context.operation_type.value
        except Exception:  # no operation of that name: graphql-core reports it to the client
            return
        name = context.operation_name
        span.update_name(f"{kind} {name}" if name else kind)
        span.set_attribute("graphql.operation.type", kind)
        if name:
            span.set_attribute("graphql.operation.name", name)
