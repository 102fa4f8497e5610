"""Error codes of the GraphQL API: one table from error class to `extensions.code`.

Owns what a client sees when something goes wrong. Domain errors (laneway/errors.py) get their
code here; UNAUTHENTICATED and FORBIDDEN are the API layer's own. A database that cannot be
reached is SERVICE_UNAVAILABLE (HTTP 503 when the answer has no data and nothing was written,
see http/request_ids.py), with a message that names no host, driver or statement; so is one a
newer release migrated under this process (DatabaseNewerError: every operation is refused,
schema.py), with a message that says to restart the process on that release. Anything
else is masked as "Unexpected error.", with the code INTERNAL_SERVER_ERROR and the request id
in `extensions.requestId`, and logged once with its traceback (schema.py). Also the JSON
error documents the middlewares answer with (413, 415, 429, 503, 504; http/refusals.py).

Codes travel two ways. Every Laneway field carries CodedErrors, which turns a mapped
LanewayError into a GraphQLError with its code as the field raises it, so a host's schema
with none of Laneway's extensions still answers NOT_FOUND, BAD_USER_INPUT or CONFLICT; the
schema extension ErrorCodes (schema.py) adds what only a whole schema can: SERVICE_UNAVAILABLE,
request ids on masked errors, no "Did you mean …?", and the codes of a request's own errors,
found before anything ran: GRAPHQL_PARSE_FAILED for a document that does not parse (or has too
many tokens), GRAPHQL_VALIDATION_FAILED for one that does not validate (the depth and alias
limits included), BAD_USER_INPUT for variable values that do not fit their types
(request_code). A request refused before its document is even looked at (a body that is not
JSON, too large, a wrong method, an unknown host) is BAD_REQUEST, and one whose document has
no operation of the name asked for (or several and no name) OPERATION_RESOLUTION_FAILURE,
both Apollo's names too (error_body; http/refusals.py sends it).
"""

import inspect
import json
import logging
import re
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import asyncpg
from graphql import GraphQLError, GraphQLSyntaxError, Node
from strawberry.extensions import FieldExtension
from strawberry.extensions.field_extension import AsyncExtensionResolver, SyncExtensionResolver
from strawberry.schema.exceptions import CannotGetOperationTypeError
from strawberry.types import Info

from laneway.api.request_trace import current_trace
from laneway.engine import LockUnavailableError
from laneway.errors import (
    BulkStoppedError,
    ConflictError,
    DatabaseNewerError,
    InputRejectedError,
    InvalidInputError,
    LanewayError,
    NotFoundError,
)
from laneway.store.pool import PoolBusyError

logger = logging.getLogger(__name__)

MASKED_MESSAGE = "Unexpected error."
INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
UNAVAILABLE_MESSAGE = "The database is unavailable; try again shortly."
BUSY_MESSAGE = "The server is busy: every database connection is in use; try again shortly."
"""SERVICE_UNAVAILABLE's message when the database answers but this process's connections
are all taken (store.pool.PoolBusyError): told apart, so no one looks for a database down."""
NEWER_RELEASE_MESSAGE = (
    "The database was migrated by a newer Laneway release ({migrations}); this process must be"
    " restarted on that release."
)
"""SERVICE_UNAVAILABLE's message once a newer release migrated the database under this process
(DatabaseNewerError): its SQL may no longer fit the schema, and no retry here can help."""
UNAVAILABLE_RETRY_AFTER_SECONDS = 2
RATE_LIMITED = "RATE_LIMITED"
BAD_USER_INPUT = "BAD_USER_INPUT"
PARSE_FAILED = "GRAPHQL_PARSE_FAILED"
VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
BAD_REQUEST = "BAD_REQUEST"
OPERATION_RESOLUTION_FAILURE = "OPERATION_RESOLUTION_FAILURE"
TIMEOUT = "TIMEOUT"
STOP_AT = "laneway.stop_at"
"""In a timed HTTP request's scope (http/deadline.py): the event loop's time by which work
that can end part-way (a bulk action, between its batches) stops, to answer with what it did
(BulkStoppedError, TIMEOUT) before the deadline cuts it off with nothing: a fifth of the
time, at most a second, before the deadline."""

# Connection loss, refusal and server shutdown (OSError includes ConnectionError and
# TimeoutError), connection-class SQLSTATEs (08, 57P0x), exhausted server resources (53),
# and lock or statement timeouts: all mean "the database cannot serve this now".
_UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.InsufficientResourcesError,
    asyncpg.LockNotAvailableError,
    asyncpg.QueryCanceledError,
    asyncpg.ReadOnlySQLTransactionError,  # a standby, or a database set read-only for a while
)
_CLOSED_MESSAGES = ("connection is closed", "pool is closing", "pool is closed")
_SUGGESTION = re.compile(r"\s*Did you mean .*$", re.DOTALL)

ERROR_CODES: dict[type[LanewayError], str] = {
    NotFoundError: "NOT_FOUND",
    InvalidInputError: BAD_USER_INPUT,
    InputRejectedError: BAD_USER_INPUT,
    ConflictError: "CONFLICT",
    LockUnavailableError: "CONFLICT",
    BulkStoppedError: TIMEOUT,
    DatabaseNewerError: SERVICE_UNAVAILABLE,
}


class APIError(GraphQLError):
    """An error of the API layer itself, raised with its code already attached."""

    code = INTERNAL_SERVER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"code": self.code})


class UnauthenticatedError(APIError):
    """The request carries no credentials, and this operation needs them."""

    code = "UNAUTHENTICATED"


class ForbiddenError(APIError):
    """The request's credentials do not allow this operation."""

    code = "FORBIDDEN"


class CodedError(GraphQLError):
    """A mapped LanewayError, raised by a field with its code attached (and where in the
    document it is, when it is about one place there: `nodes`)."""

    def __init__(self, error: LanewayError, code: str, nodes: Node | None = None) -> None:
        super().__init__(
            str(error),
            nodes,
            extensions={"code": code, **error.details()},
            original_error=error,
        )


def coded(error: Exception, nodes: Node | None = None) -> Exception:
    """A mapped LanewayError as a CodedError (at `nodes` of the document, if given); any other
    exception unchanged."""
    if isinstance(error, LanewayError):
        code = code_for(error)
        if code is not None:
            return CodedError(error, code, nodes)
    return error


async def _coded_stream(events: AsyncGenerator[Any, Any]) -> AsyncGenerator[Any, None]:
    try:
        async for event in events:
            yield event
    except LanewayError as exc:
        raise coded(exc) from exc
    finally:
        await events.aclose()


class CodedErrors(FieldExtension):
    """On every Laneway field: a mapped LanewayError leaves the field with its code."""

    def resolve(
        self, next_: SyncExtensionResolver, source: Any, info: Info[Any, Any], **kwargs: Any
    ) -> Any:
        try:
            return next_(source, info, **kwargs)
        except LanewayError as exc:
            raise coded(exc) from exc

    async def resolve_async(
        self, next_: AsyncExtensionResolver, source: Any, info: Info[Any, Any], **kwargs: Any
    ) -> Any:
        try:
            result: Any = next_(source, info, **kwargs)
            if inspect.isasyncgen(result):
                return _coded_stream(result)
            if inspect.isawaitable(result):
                result = await result
            if inspect.isasyncgen(result):
                return _coded_stream(result)
            return result
        except LanewayError as exc:
            raise coded(exc) from exc


def is_database_unavailable(error: BaseException | None) -> bool:
    """True for the driver and socket errors of a database that is down, starting or full."""
    if isinstance(error, _UNAVAILABLE_ERRORS):
        return True
    if isinstance(error, asyncpg.InternalClientError):
        # A pooled connection that broke mid-operation during a restart reports its protocol
        # state on its next use ("cannot switch to state ..."): the database went away.
        return str(error).startswith("cannot switch to state")
    return isinstance(error, asyncpg.InterfaceError) and str(error) in _CLOSED_MESSAGES


def unavailable_message(error: BaseException | None) -> str:
    """The message of a SERVICE_UNAVAILABLE: a newer release's schema, every connection of
    this process in use, or the database unavailable."""
    if isinstance(error, DatabaseNewerError):
        return NEWER_RELEASE_MESSAGE.format(migrations=", ".join(error.unknown))
    return BUSY_MESSAGE if isinstance(error, PoolBusyError) else UNAVAILABLE_MESSAGE


def code_for(error: BaseException | None) -> str | None:
    """The public code of an exception, or None when it must be masked."""
    if isinstance(error, GraphQLError):
        code = (error.extensions or {}).get("code")
        return code if isinstance(code, str) else None
    if is_database_unavailable(error):
        return SERVICE_UNAVAILABLE
    for cls in type(error).__mro__:
        if cls in ERROR_CODES:
            return ERROR_CODES[cls]
    return None


def is_expected(error: GraphQLError) -> bool:
    """True for errors a client may see as they are.

    An error without an original exception comes from parsing or validation (including the
    depth, alias and token limits); so does a document with no operation of the name asked
    for (a request error, which HTTP and the websocket answer before execution where they
    can: documents.operation_refusal); a GraphQLError raised on purpose, or a mapped
    LanewayError, is deliberate. Anything else is an internal fault.
    """
    original = error.original_error
    if original is None or isinstance(original, GraphQLError | CannotGetOperationTypeError):
        return True
    return code_for(original) is not None


def add_request_code(error: GraphQLError, *, executing: bool) -> None:
    """Give a request's own error its code, if it has none: an error at no path, raised by
    graphql-core itself (no original exception, or a GraphQLError without a code). A syntax
    error is GRAPHQL_PARSE_FAILED; before execution, any other is validation's,
    GRAPHQL_VALIDATION_FAILED; once execution is under way (`executing`), it comes from coercing
    the variables, before any resolver: BAD_USER_INPUT. An error with a path is a field's, and
    one with another original exception is coded or masked by add_code.
    """
    extensions = error.extensions or {}
    if error.path is not None or "code" in extensions:
        return
    original = error.original_error
    if original is not None and not isinstance(original, GraphQLError):
        return
    if isinstance(error, GraphQLSyntaxError):
        code = PARSE_FAILED
    elif executing:
        code = BAD_USER_INPUT
    else:
        code = VALIDATION_FAILED
    error.extensions = {**extensions, "code": code}


def add_code(error: GraphQLError) -> None:
    """Finish an error for the client: the code of a mapped exception, or the request id.

    An error at or below a root mutation field lists the root mutation fields that completed up
    to it (`completed`, by response key), when any did: those before the field when it failed
    itself, and the field too when it committed and a field of its result failed. A database
    error also gets a message of its own (the driver's names hosts and sockets) and marks the
    request, so that HTTP answers 503; so does a newer release's schema (logged once, when the
    process found it, not per request). A masked error gets `requestId`, the id its log record
    carries. A validation error loses graphql-core's "Did you mean …?" (type and enum names;
    `disable_field_suggestions` covers only fields), a schema hint.
    """
    original = error.original_error
    trace = current_trace()
    if trace is not None and error.path:
        # A root mutation field that failed after others committed, or a field of its result
        # that failed after it committed (fields.Completion): the client learns which stay
        # done, as from a TIMEOUT's list (http/deadline.py).
        completed = trace.completed_up_to(str(error.path[0]))
        if completed:
            error.extensions = {**(error.extensions or {}), "completed": completed}
    if original is None:
        error.message = _SUGGESTION.sub("", error.message)
        if error.message == MASKED_MESSAGE and trace is not None:
            error.extensions = {**(error.extensions or {}), "requestId": trace.request_id}
        return
    code = code_for(original)
    if code is None or isinstance(original, GraphQLError):
        return
    error.extensions = {**(error.extensions or {}), "code": code}
    if code != SERVICE_UNAVAILABLE:
        return
    message = unavailable_message(original)
    if error.message != message:  # not seen yet (a streamed result comes here twice)
        error.message = message
        if not isinstance(original, DatabaseNewerError):
            busy = isinstance(original, PoolBusyError)
            what = "database connections all in use" if busy else "database unavailable"
            logger.warning(what, extra={"error": type(original).__name__})
        if trace is not None:
            trace.database_unavailable = True


def public_error(error: BaseException) -> dict[str, object]:
    """What a client may see of an exception raised outside GraphQL execution (a websocket
    stream that fails, say): SERVICE_UNAVAILABLE (the database's, or a newer release's
    schema), a mapped LanewayError with its code, or the masked message."""
    code = code_for(error)
    if code == SERVICE_UNAVAILABLE:
        return {"message": unavailable_message(error), "extensions": {"code": code}}
    if isinstance(error, LanewayError) and code is not None:
        return {"message": str(error), "extensions": {"code": code, **error.details()}}
    return {"message": MASKED_MESSAGE, "extensions": {"code": INTERNAL_SERVER_ERROR}}


def error_body(
    message: str,
    code: str,
    *,
    details: Mapping[str, object] | None = None,
    executed: bool = False,
) -> bytes:
    """A GraphQL-shaped error document: `{"errors": [{"message", "extensions": {"code",
    **details}}]}`, with `"data": null` when the operation had begun to execute (a request
    refused before that has no `data`, as the GraphQL spec's response section has it)."""
    error = {"message": message, "extensions": {"code": code, **(details or {})}}
    document: dict[str, object] = {"data": None} if executed else {}
    document["errors"] = [error]
    return json.dumps(document).encode()
