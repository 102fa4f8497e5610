"""One attempt of a template operation: the handler called under its time limit, its
outcome checked (a result, JSON data and metadata, a reason of bounded length) and made
ready to write. Running a stage's operations and their attempts: stage_run.py.
"""

import asyncio
import inspect
import types
from dataclasses import replace
from typing import cast

from laneway.engine import time_limit
from laneway.engine.context import NotAwaitableError, not_awaitable, stopped_here
from laneway.engine.payloads import decode_json, encode_json, json_copy, storable_text
from laneway.engine.template import (
    COMPLETED,
    OperationContext,
    OperationHandler,
    OperationResult,
    failed,
)
from laneway.errors import InvalidInputError
from laneway.model import JSONValue

MAX_REASON_CHARS = 2000

NO_DATA = ("null", "null")
"""The data and metadata texts of a failure that has neither."""


async def attempt(
    handler: OperationHandler, ctx: OperationContext, timeout_seconds: float
) -> tuple[OperationResult, tuple[str, str], BaseException | None]:
    """Call a handler once; an exception, a timeout or a bad return value is a failure. With
    the outcome, its row's data and metadata as JSON text: checked here, so that a value that
    is not JSON fails the attempt, and then written as they are; and the handler's own
    exception, if it raised one (the stage's failure keeps it as its cause, whose traceback is
    the user's code). A handler that returns what cannot be awaited fails with a
    NotAwaitableError, not raised (no code of the user's raised it: no traceback to show),
    which ends the operation's attempts (stage_operations.py)."""
    try:
        called: object = handler(ctx)
        if type(called) is types.CoroutineType:  # an async def's: time_limit.within, inline
            deadline = asyncio.get_running_loop().time() + timeout_seconds
            try:
                waiting = called.send(None)
            except StopIteration as stop:  # finished without waiting (most do): no limit
                result: object = stop.value
            else:
                result = await time_limit.rest_within(called, waiting, deadline)
        elif inspect.isawaitable(called):
            result = await time_limit.within(called, timeout_seconds)
        else:
            refused = operation_not_awaitable(ctx, called)
            return failed(str(refused)), NO_DATA, refused
    except time_limit.TimeLimitExceededError:
        return failed(f"timed out after {timeout_seconds:g}s"), NO_DATA, None
    except BaseException as exc:
        # The operation's own error is its failure, as a handler's is (runner._call_handler):
        # its own SystemExit, KeyboardInterrupt or GeneratorExit too (raised in a parallel
        # stage's task they would stop the event loop, or the process), and a CancelledError of
        # its own. Only a cancel of this run (a cancel, a lost lease, a stop past the grace, a
        # sibling's failure) goes on as one; the time limit's own is TimeLimitExceededError.
        stopped_here(exc, ctx.cancelled)
        return failed(reason_of(exc)), NO_DATA, exc
    if not isinstance(result, OperationResult):
        return (
            failed(
                f"handler returned {type(result).__name__}; expected completed(...) or failed(...)"
            ),
            NO_DATA,
            None,
        )
    done = result.status == COMPLETED
    try:
        # None and {} (most operations' metadata and data) are their own constants here.
        metadata = (
            "null"
            if result.metadata is None
            else encode_json(result.metadata, what="operation metadata")
        )
        data = (
            ("{}" if not result.data else encode_json(result.data, what="operation data"))
            if done
            else "null"
        )
    except InvalidInputError as exc:
        return failed(str(exc)), NO_DATA, None
    if not done:
        reason = storable_text((result.reason or "failed")[:MAX_REASON_CHARS])
        return failed(reason, result.metadata), (data, metadata), None
    if result.data:
        # Merged into the context as the database gives it back (a tuple as a list, 1e20 as an
        # int), so the stage's next operations see what a run resumed from it would.
        result = replace(result, data=cast(dict[str, JSONValue], decode_json(data)))
    return result, (data, metadata), None


def reason_of(exc: BaseException) -> str:
    """An exception's failure reason: its message, or its type when it has none; the type too
    for what is no Exception (SystemExit: 3), whose message alone says little."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, Exception) and text != type(exc).__name__:
        text = f"{type(exc).__name__}: {text}"
    return storable_text(text[:MAX_REASON_CHARS])


def copied(context: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """The operation's own copy of a context (it may change it; the stage's stays)."""
    for value in context.values():
        if isinstance(value, _NESTED):
            return {
                key: json_copy(value) if isinstance(value, _NESTED) else value
                for key, value in context.items()
            }
    return context.copy()  # nothing nested (the usual): a copy of the dict is a deep copy


# A tuple, not `dict | list`: that expression builds a union type every time it runs.
_NESTED = (dict, list)


def operation_not_awaitable(ctx: OperationContext, returned: object) -> NotAwaitableError:
    """The NotAwaitableError of the operation handler of `ctx` that returned `returned`: as an
    attempt records it, and as laneway.testing.run_operation raises it."""
    return not_awaitable(
        f"operation handler {ctx.operation_type!r} of template {ctx.workflow_type!r}", returned
    )
