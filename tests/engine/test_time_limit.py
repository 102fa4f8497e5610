"""time_limit.within: a time limit that arms no timer for a call that never waits, and behaves
as asyncio.timeout for one that does; time_limit.start_here (pure asyncio, no database)."""

import asyncio
import contextlib
import contextvars

import pytest

from laneway.engine.time_limit import TimeLimitExceededError, start_here, within


def _timers() -> int:
    """Timers the running loop has scheduled (not cancelled)."""
    loop = asyncio.get_running_loop()
    return sum(1 for handle in loop._scheduled if not handle.cancelled())  # type: ignore[attr-defined,misc]


async def test_a_call_that_never_waits_returns_its_value_and_arms_no_timer() -> None:
    seen: list[int] = []

    async def quick() -> str:
        seen.append(_timers())
        return "done"

    before = _timers()
    assert await within(quick(), 30.0) == "done"
    assert seen == [before]  # no timer while it ran
    assert _timers() == before


async def test_a_call_that_waits_and_finishes_in_time_gets_what_it_waited_for() -> None:
    ready = asyncio.Event()

    async def waits() -> int:
        await ready.wait()
        await asyncio.sleep(0)
        return 7

    task = asyncio.create_task(within(waits(), 30.0))
    await asyncio.sleep(0)
    assert not task.done()
    ready.set()
    assert await task == 7


async def test_a_call_still_waiting_when_time_runs_out_is_stopped_where_it_waits() -> None:
    never = asyncio.Event()
    stopped: list[str] = []

    async def hangs() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise

    with pytest.raises(TimeLimitExceededError):
        await within(hangs(), 0.01)
    assert stopped == ["cancelled"]


async def test_the_time_counts_from_the_call_not_from_its_first_wait() -> None:
    loop = asyncio.get_running_loop()
    never = asyncio.Event()

    async def busy_then_waits() -> None:
        started = loop.time()
        while loop.time() - started < 0.02:  # a first step longer than the limit, no waiting
            pass
        await never.wait()

    with pytest.raises(TimeLimitExceededError):
        await within(busy_then_waits(), 0.01)


async def test_a_timeout_error_of_the_call_itself_is_not_the_time_limit() -> None:
    async def own_timeout() -> None:
        await asyncio.sleep(0)
        raise TimeoutError("upstream timed out")

    async def own_timeout_at_once() -> None:
        raise TimeoutError("refused at once")

    with pytest.raises(TimeoutError, match="upstream timed out"):
        await within(own_timeout(), 30.0)
    with pytest.raises(TimeoutError, match="refused at once"):
        await within(own_timeout_at_once(), 30.0)


async def test_errors_of_the_call_come_through_before_and_after_it_waits() -> None:
    async def fails_at_once() -> None:
        raise ValueError("bad input")

    async def fails_after_waiting() -> None:
        await asyncio.sleep(0)
        raise KeyError("missing")

    with pytest.raises(ValueError, match="bad input"):
        await within(fails_at_once(), 30.0)
    with pytest.raises(KeyError, match="missing"):
        await within(fails_after_waiting(), 30.0)


async def test_cancelling_the_caller_cancels_the_call_where_it_waits() -> None:
    waiting = asyncio.Event()
    never = asyncio.Event()
    stopped: list[str] = []

    async def hangs() -> None:
        waiting.set()
        try:
            await never.wait()
        finally:
            stopped.append("finally")

    task = asyncio.create_task(within(hangs(), 30.0))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped == ["finally"]


async def test_a_call_that_catches_a_cancellation_goes_on_with_what_it_returns() -> None:
    never = asyncio.Event()

    async def shielded() -> str:
        try:
            await never.wait()
        except asyncio.CancelledError:
            return "caught"
        return "woke"

    task = asyncio.create_task(within(shielded(), 30.0))
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "caught"


async def test_an_awaitable_that_is_not_a_coroutine_is_limited_as_well() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    loop.call_soon(done.set_result, "from a future")
    assert await within(done, 30.0) == "from a future"
    with pytest.raises(TimeLimitExceededError):
        await within(loop.create_future(), 0.01)


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="outer")


async def test_start_here_keeps_context_variables_apart_and_runs_in_the_awaiting_task() -> None:
    me = asyncio.current_task()
    seen: list[object] = []

    async def sets_and_waits() -> str:
        seen.append(MARK.get())
        MARK.set("inner")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.01):  # binds to the task running it: the awaiting one
                await asyncio.sleep(30)
        seen.append((MARK.get(), asyncio.current_task() is me))
        return "done"

    begun = start_here(sets_and_waits())
    assert not begun.done
    assert await begun == "done"
    assert seen == ["outer", ("inner", True)]
    assert MARK.get() == "outer"


async def test_start_here_passes_values_errors_and_cancellations_through() -> None:
    async def at_once() -> str:
        return "at once"

    begun = start_here(at_once())
    assert (begun.done, begun.value, await begun) == (True, "at once", "at once")

    async def fails() -> None:
        await asyncio.sleep(0)
        raise LookupError("from the coroutine")

    with pytest.raises(LookupError, match="from the coroutine"):
        await start_here(fails())

    waiting = asyncio.Event()
    stopped: list[str] = []

    async def hangs() -> None:
        waiting.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(MARK.get())

    async def outer() -> None:
        MARK.set("caller")
        await start_here(hangs())

    task = asyncio.create_task(outer())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped == ["caller"]
