"""Handler utilities: decorators that add a timeout, in-process retries or an error boundary.

Generic over the wrapped callable's signature, so they fit handler-map and template operation
handlers alike. Pure asyncio, no I/O; the engine's own attempts are RetryPolicy's.
"""

import asyncio
import copy
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Concatenate, ParamSpec, Protocol, TypeVar, overload

from laneway.engine.context import CancelledByRequestError, Done, HandlerContext
from laneway.engine.template import OperationContext, OperationResult, failed
from laneway.errors import InvalidInputError, LeaseLostError

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
F = TypeVar("F")

Wrappable = Callable[P, Awaitable[R]]
"""What the decorators accept: any async callable (a handler, an operation handler)."""
Wrapped = Callable[P, Coroutine[object, object, R]]
"""What they return: a coroutine function with the same parameters."""
Sleep = Callable[[float], Awaitable[None]]

# The engine's own signals: a cancel request and a lost lease must reach the runner as they
# are. They are never retried and never turned into a result.
ENGINE_SIGNALS: tuple[type[Exception], ...] = (CancelledByRequestError, LeaseLostError)

MAX_RETRY_ATTEMPTS = 100
MAX_MULTIPLIER = 1000.0


class HandlerTimeoutError(TimeoutError):
    """The handler did not finish in time."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"timed out after {seconds:g}s")


def _name_of(handler: Callable[..., object]) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


def _error_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def with_timeout(
    seconds: float,
) -> Callable[[Wrappable[P, R]], Wrapped[P, R]]:
    """Stop the handler after `seconds` and raise HandlerTimeoutError in its place.

    The error is an ordinary exception, so the engine records a failed attempt with the
    message "timed out after {seconds:g}s" (as a template operation's timeout reads) and
    retries by the workflow's RetryPolicy. A TimeoutError the handler raises itself passes
    through unchanged.

    Raises:
        InvalidInputError: `seconds` is not a positive, finite number.
        TypeError: `seconds` is a function: `@with_timeout` written without its `(seconds)`.
    """
    if callable(seconds):
        raise TypeError("with_timeout takes the seconds first: @with_timeout(5), not @with_timeout")
    if not 0 < seconds < math.inf:
        raise InvalidInputError("timeout seconds must be positive and finite")

    def decorate(handler: Wrappable[P, R]) -> Wrapped[P, R]:
        @functools.wraps(handler)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                async with asyncio.timeout(seconds) as deadline:
                    return await handler(*args, **kwargs)
            except TimeoutError as timeout:
                if not deadline.expired():
                    raise
                # The frames of the cancellation say where the handler was when its time ran
                # out (its own await): the traceback a failure keeps of this error.
                stopped = timeout.__cause__ or timeout.__context__
                where = None if stopped is None else stopped.__traceback__
                raise HandlerTimeoutError(seconds).with_traceback(where) from None

        return timed

    return decorate


def delay_after_try_ms(
    try_number: int, base_delay_ms: float, multiplier: float, max_delay_ms: float | None
) -> float:
    """The wait after failed try number `try_number` (1-based): base * multiplier**(n-1), capped."""
    # The exponent is capped so a long run of tries cannot overflow a float.
    delay = base_delay_ms * multiplier ** min(try_number - 1, 60)
    return delay if max_delay_ms is None else min(delay, max_delay_ms)


def with_retry(
    attempts: int,
    base_delay_ms: float,
    multiplier: float = 2.0,
    max_delay_ms: float | None = None,
    retry_on: tuple[type[Exception], ...] = (Exception,),
    *,
    sleep: Sleep = asyncio.sleep,
) -> Callable[[Wrappable[P, R]], Wrapped[P, R]]:
    """Call the handler up to `attempts` times in this process, waiting between tries.

    After failed try n the wait is `base_delay_ms * multiplier**(n-1)`, capped at
    `max_delay_ms`. Only exceptions matching `retry_on` are retried; the last one propagates.
    Cancellation (asyncio.CancelledError, a cancel request, a lost lease) is never retried.
    These tries are invisible to the engine: together they are one attempt of the
    RetryPolicy, with one `ctx.attempt`. When the handler's first argument is a
    HandlerContext, each try starts from the state the first one saw, as an engine retry
    starts from the last checkpoint. `sleep` is injectable for tests.

    Raises:
        InvalidInputError: attempts outside 1..100, a negative delay, a multiplier outside
            1..1000, or `max_delay_ms` below `base_delay_ms`.
    """
    if not 1 <= attempts <= MAX_RETRY_ATTEMPTS:
        raise InvalidInputError(f"attempts must be between 1 and {MAX_RETRY_ATTEMPTS}")
    if base_delay_ms < 0 or not 1.0 <= multiplier <= MAX_MULTIPLIER:
        raise InvalidInputError(
            f"need base_delay_ms >= 0 and a multiplier between 1 and {MAX_MULTIPLIER:g}"
        )
    if max_delay_ms is not None and max_delay_ms < base_delay_ms:
        raise InvalidInputError("max_delay_ms must not be below base_delay_ms")

    def decorate(handler: Wrappable[P, R]) -> Wrapped[P, R]:
        @functools.wraps(handler)
        async def retried(*args: P.args, **kwargs: P.kwargs) -> R:
            ctx = args[0] if args and isinstance(args[0], HandlerContext) else None
            initial_state = copy.deepcopy(ctx.state) if ctx is not None else None
            for try_number in range(1, attempts + 1):
                try:
                    return await handler(*args, **kwargs)
                except ENGINE_SIGNALS:
                    raise
                except retry_on as exc:
                    if try_number == attempts:
                        raise
                    delay_ms = delay_after_try_ms(
                        try_number, base_delay_ms, multiplier, max_delay_ms
                    )
                    logger.info(
                        "handler retrying in process",
                        extra={
                            "handler": _name_of(handler),
                            "try": try_number,
                            "delay_ms": delay_ms,
                            "error": _error_text(exc),
                        },
                    )
                    if ctx is not None and initial_state is not None:
                        ctx.state.clear()
                        ctx.state.update(copy.deepcopy(initial_state))
                    await sleep(delay_ms / 1000.0)
            raise AssertionError("unreachable: the last try returns or raises")

        return retried

    return decorate


def _default_result(exc: Exception, args: tuple[object, ...]) -> Done | OperationResult:
    # Told apart by what the engine passes at call time: a template calls an operation handler
    # with its OperationContext, which no handler-map handler receives. A Done there would be
    # recorded as "handler returned Done", the error's own message lost.
    if args and isinstance(args[0], OperationContext):
        return failed(_error_text(exc))
    return Done({"error": _error_text(exc)})


class DefaultErrorBoundary(Protocol):
    """What `with_error_boundary()` returns: its result type follows the handler's kind.

    Overloads are tried in order, and compose() types its chain from the first one: with the
    default boundary first, a chain is typed for handler-map handlers; for an operation
    handler, apply the boundary on its own, outside the composed rest.
    """

    @overload
    def __call__(
        self, handler: Callable[Concatenate[HandlerContext, P], Awaitable[R]], /
    ) -> Callable[Concatenate[HandlerContext, P], Coroutine[object, object, R | Done]]: ...

    @overload
    def __call__(
        self, handler: Callable[[OperationContext], Awaitable[R]], /
    ) -> Callable[[OperationContext], Coroutine[object, object, R | OperationResult]]: ...

    @overload
    def __call__(self, handler: Wrappable[P, R], /) -> Wrapped[P, R | Done]: ...


@overload
def with_error_boundary(
    *, catch: tuple[type[Exception], ...] = (Exception,)
) -> DefaultErrorBoundary: ...


@overload
def with_error_boundary(
    on_error: Callable[[Exception], E], *, catch: tuple[type[Exception], ...] = (Exception,)
) -> Callable[[Wrappable[P, R]], Wrapped[P, R | E]]: ...


def with_error_boundary(
    on_error: Callable[[Exception], object] | None = None,
    *,
    catch: tuple[type[Exception], ...] = (Exception,),
) -> Callable[[Wrappable[P, R]], Wrapped[P, object]]:
    """Turn an exception from the handler into a result instead of a failed attempt.

    The message is the exception's text (its class name when it has none). By default, a
    template operation handler (called with an OperationContext) then returns
    `failed(message)`: the attempt fails with that message as the operation's error, as any
    failed result does (retried up to the operation's max_attempts, then the stage goes on as
    for any failure). Any other handler, a handler-map handler among them, returns
    `Done({"error": message})`, ending its instance as completed. Pass `on_error` to build
    another result from the exception, e.g. `Next("compensate", {...})`. Only exceptions
    matching `catch` are caught; cancellation (asyncio.CancelledError, a cancel request, a
    lost lease) always passes through, and so does an error raised by `on_error` itself (a
    failed attempt).

    Raises:
        TypeError: `on_error` is an async function: it must return the result itself (and an
            async one is most likely the handler, `@with_error_boundary` written without its
            parentheses).
    """
    if inspect.iscoroutinefunction(on_error):
        raise TypeError(
            "with_error_boundary's on_error must return the result, not a coroutine; "
            "to decorate a handler, write @with_error_boundary(), with its parentheses"
        )

    def decorate(
        handler: Wrappable[P, R],
    ) -> Wrapped[P, object]:
        @functools.wraps(handler)
        async def bounded(*args: P.args, **kwargs: P.kwargs) -> object:
            try:
                return await handler(*args, **kwargs)
            except ENGINE_SIGNALS:
                raise
            except catch as exc:
                logger.info(
                    "handler error turned into a result",
                    extra={"handler": _name_of(handler), "error": _error_text(exc)},
                )
                return _default_result(exc, args) if on_error is None else on_error(exc)

        return bounded

    return decorate


# Overloads rather than one variadic signature: each decorator may change the handler's type
# (an error boundary widens its result), and mypy can chain up to four such changes exactly.
# Beyond four, every decorator must keep the type. mypy infers the chain when any
# type-changing decorator comes first; elsewhere, apply the decorators one by one.
@overload
def compose(first: Callable[[A], B], /) -> Callable[[A], B]: ...


@overload
def compose(first: Callable[[B], C], second: Callable[[A], B], /) -> Callable[[A], C]: ...


@overload
def compose(
    first: Callable[[C], D], second: Callable[[B], C], third: Callable[[A], B], /
) -> Callable[[A], D]: ...


@overload
def compose(
    first: Callable[[D], F],
    second: Callable[[C], D],
    third: Callable[[B], C],
    fourth: Callable[[A], B],
    /,
) -> Callable[[A], F]: ...


@overload
def compose(first: Callable[[A], A], /, *rest: Callable[[A], A]) -> Callable[[A], A]: ...


def compose(*decorators: Callable[..., object]) -> Callable[..., object]:
    """Combine decorators into one, applied right to left like function composition.

    `compose(f, g, h)(handler)` is `f(g(h(handler)))`: the first decorator is the outermost
    layer and sees what every later one lets through. So
    `compose(with_error_boundary(), with_timeout(5), with_retry(3, 100))` retries each
    failure, gives up on the whole after 5 s, and turns whatever escapes into a result;
    with `with_timeout(5)` last instead, each try gets its own 5 s.
    """

    def composed(handler: object) -> object:
        for decorator in reversed(decorators):
            handler = decorator(handler)
        return handler

    return composed
