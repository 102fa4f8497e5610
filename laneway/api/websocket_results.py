"""graphql-transport-ws answers for a request error of a query or mutation: `error`, not `next`.

Owns the one case Strawberry's handler sends as a `next`: a query or mutation whose variables
do not coerce, which graphql-core answers as an ordinary result (`data` null, the errors at no
path), where it answers a subscription's with a pre-execution error. Everything else about an
operation stays the handler's (websocket.py), which is built on this one.
"""

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, TypeVar

from strawberry.schema.schema import StreamResult
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.types.execution import ExecutionResult, PreExecutionError

from laneway.api.http.media_type import is_request_error

Result = TypeVar("Result")


class RequestErrorsAsErrors(BaseGraphQLTransportWSHandler[Any, Any]):
    """Strawberry's graphql-transport-ws handler, with a request error of a query or mutation
    answered as a subscription's is: one `error` message with the errors, and no `next` (whose
    `data: null` says that the operation ran) or `complete` (the `error` ends it)."""

    async def _send_result_stream(
        self, operation: Operation[Any, Any], result_source: StreamResult
    ) -> None:
        async with aclosing(request_errors_first(result_source)) as results:
            await super()._send_result_stream(operation, results)


async def request_errors_first(
    results: AsyncIterator[Result],
) -> AsyncGenerator[Result | PreExecutionError, None]:
    """`results`, with a first result that is a request error (nothing ran, as HTTP judges it:
    media_type.is_request_error) given as the PreExecutionError it is, for the same errors.

    Only a first result can be one: anything later, and anything with `data` or with an error
    at a path (a field's, such as NOT_FOUND), comes from an operation that ran, a `next`.
    """
    first = True
    async for result in results:
        if (
            first
            and isinstance(result, ExecutionResult)
            and not isinstance(result, PreExecutionError)
            and is_request_error(result)
        ):
            yield PreExecutionError(data=None, errors=result.errors, extensions=result.extensions)
            return
        first = False
        yield result
