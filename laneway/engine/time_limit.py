"""A time limit that costs nothing for a call that never waits (a template operation's), and
a start of a coroutine that needs no task when it never waits (a parallel operation's).

asyncio.timeout arms a timer for every call (a handle in the loop's heap, cancelled after),
yet a coroutine can only be stopped where it waits: one that finishes without waiting (a
transform, a check, a cache hit) pays for a timer that could never have fired. Here the
coroutine's first step runs at once; only one that then waits goes on under the deadline,
counted from the call's start, as asyncio.timeout would have counted it. Pure asyncio.

What binds to the running task (asyncio.timeout, anyio's cancel scopes, which httpx enters
for every request, current_task()) must run in the task that goes on running the coroutine:
a coroutine started here is never finished in another task (Python 3.11 has no eager tasks,
which would make that safe).
"""

import asyncio
import contextvars
import functools
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class TimeLimitExceededError(Exception):
    """The call was still waiting when its time ran out (it was cancelled there)."""


async def within(call: Awaitable[T], seconds: float) -> T:
    """Await `call`, stopping it where it waits once `seconds` have passed since now.

    Raises:
        TimeLimitExceededError: the time ran out (a TimeoutError of the call's own is not one).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    if not isinstance(call, types.CoroutineType):
        return await _limited(call, deadline)  # a future or another awaitable: as it is
    try:
        waiting = call.send(None)
    except StopIteration as done:
        value: T = done.value  # finished without waiting: nothing to limit
        return value
    return await rest_within(call, waiting, deadline)


def rest_within(
    coroutine: Coroutine[Any, Any, T], waiting: Any, deadline: float
) -> Coroutine[Any, Any, T]:
    """The rest of `coroutine`, whose first step was taken (as within takes it) and stopped at
    `waiting`, stopped where it waits once the loop's clock passes `deadline`: what within
    awaits after that first step, for a caller that took the step itself (a template's
    operation attempt, which then needs no frame of within's when the call never waits).

    Raises (when awaited):
        TimeLimitExceededError: the time ran out.
    """
    resumed: Begun[T] = Begun(coroutine, waiting)
    return _limited(resumed, deadline)


def start_here(coroutine: Coroutine[Any, Any, T]) -> "Begun[T]":
    """Run `coroutine`'s first step now, in this task, in a copy of the current context (as a
    task would run it: what it sets in context variables stays its own). Finished at once:
    `done`, with its `value`. Else await the result, in this same task, for the rest: never in
    another, since what the first step bound to this task (an asyncio.timeout, an anyio cancel
    scope, current_task()) must stay right. A parallel stage starts its operations so."""
    context = contextvars.copy_context()
    try:
        waiting = context.run(coroutine.send, None)
    except StopIteration as stop:
        begun: Begun[T] = Begun(coroutine, None, context)
        begun.done, begun.value = True, stop.value
        return begun
    return Begun(coroutine, waiting, context)


async def _limited(call: Awaitable[T], deadline: float) -> T:
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await call
    except TimeoutError:
        if scope.expired():
            raise TimeLimitExceededError from None
        raise


class Begun(Generic[T]):
    """A coroutine past its first step (`waiting`: what that step waits on), awaited from where
    it stopped, each step run in `context` when given: what it waits on goes up to the task,
    and what the task sends or throws (a cancellation) goes down to it, as `await` would pass
    them. `done` (and its `value`) when the first step finished it (start_here)."""

    __slots__ = ("_context", "_coroutine", "_waiting", "done", "value")

    def __init__(
        self,
        coroutine: Coroutine[Any, Any, T],
        waiting: Any,
        context: contextvars.Context | None = None,
    ) -> None:
        self._coroutine = coroutine
        self._waiting = waiting
        self._context = context
        self.done = False
        self.value: T

    def __await__(self) -> Generator[Any, Any, T]:
        if self.done:
            return self.value
        coroutine, waiting, context = self._coroutine, self._waiting, self._context
        send: Callable[[Any], Any] = coroutine.send
        throw: Callable[[BaseException], Any] = coroutine.throw
        if context is not None:
            run: Callable[..., Any] = context.run
            send = functools.partial(run, coroutine.send)
            throw = functools.partial(run, coroutine.throw)
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # passed on, as await passes it
                try:
                    waiting = throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                try:
                    waiting = send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
