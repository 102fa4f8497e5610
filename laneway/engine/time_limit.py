"""A time limit, and a start of a parallel operation, that cost nothing for a call that never
waits (a template operation's).

asyncio.timeout arms a timer for every call (a handle in the loop's heap, cancelled after),
yet a coroutine can only be stopped where it waits: one that finishes without waiting (a
transform, a check, a cache hit) pays for a timer that could never have fired. Here the
coroutine's first step runs at once; only one that then waits goes on under the deadline,
counted from the call's start, as asyncio.timeout would have counted it. Pure asyncio; what
Python 3.12 does for tasks with its eager task factory, for one await. `started` does the same
for the operations of a parallel stage: one that finishes at once needs no task of its own.
"""

import asyncio
import contextvars
import types
from collections.abc import Awaitable, Coroutine, Generator
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
    resumed: _Resumed[T] = _Resumed(call, waiting)
    return await _limited(resumed, deadline)


def started(coroutine: Coroutine[Any, Any, T], group: asyncio.TaskGroup) -> "T | asyncio.Task[T]":
    """Start `coroutine` at once, in a copy of the current context as a task would: its value
    if it finished without waiting, else the task in `group` that goes on from where it
    waits. (An error of its first step is raised here, before any later sibling starts; a
    task group would have cancelled those before they ran.)"""
    context = contextvars.copy_context()
    try:
        waiting = context.run(coroutine.send, None)
    except StopIteration as done:
        value: T = done.value
        return value
    return group.create_task(_resume(_Resumed(coroutine, waiting)), context=context)


async def _resume(resumed: "_Resumed[T]") -> T:
    return await resumed


async def _limited(call: Awaitable[T], deadline: float) -> T:
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await call
    except TimeoutError:
        if scope.expired():
            raise TimeLimitExceededError from None
        raise


class _Resumed(Generic[T]):
    """A coroutine already past its first step, awaited from where it stopped: what it waits on
    goes up to the task, and what the task sends or throws (a cancellation) goes down to it,
    as `await` would pass them."""

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, T], waiting: Any) -> None:
        self._coroutine = coroutine
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, waiting = self._coroutine, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # passed on, as await passes it
                try:
                    waiting = coroutine.throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                try:
                    waiting = coroutine.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
