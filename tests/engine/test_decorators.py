"""Handler utilities: timeout, in-process retry, error boundary and compose.

Pure tests with fake handlers and an injected sleep, plus one run through a real engine.
"""

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from laneway.engine import (
    Done,
    HandlerContext,
    Next,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    RetryPolicy,
    Stage,
    Template,
    Workflow,
    compile_template,
    failed,
)
from laneway.engine.context import CancelledByRequestError
from laneway.engine.decorators import (
    HandlerTimeoutError,
    compose,
    delay_after_try_ms,
    with_error_boundary,
    with_retry,
    with_timeout,
)
from laneway.errors import InvalidInputError, LeaseLostError
from laneway.model import EventType, JSONValue, Status
from laneway.store import Store
from laneway.testing import mock_context, mock_operation_context, run_operation
from tests.engine.helpers import events_of, make_engine


class FakeSleep:
    """Records the waits asked for, and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def failing(times: int, error: Exception) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A handler that raises `error` on its first `times` calls, then returns "ok"."""
    calls: list[int] = []

    async def handler() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= times:
            raise error
        return "ok"

    return handler, calls


async def never_returns() -> str:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


# -- with_timeout ----------------------------------------------------------------------------------


async def test_with_timeout_raises_handler_timeout_error_when_handler_overruns() -> None:
    with pytest.raises(HandlerTimeoutError, match=r"^timed out after 0\.01s$") as caught:
        await with_timeout(0.01)(never_returns)()
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.seconds == 0.01


async def test_with_timeout_returns_the_result_when_handler_is_in_time() -> None:
    async def quick(x: int) -> int:
        return x * 2

    assert await with_timeout(5)(quick)(21) == 42


async def test_with_timeout_passes_the_handlers_own_timeout_error_through() -> None:
    handler, _ = failing(1, TimeoutError("upstream took too long"))
    with pytest.raises(TimeoutError, match="upstream") as caught:
        await with_timeout(5)(handler)()
    assert not isinstance(caught.value, HandlerTimeoutError)


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), float("nan")])
def test_with_timeout_rejects_seconds_when_not_positive_and_finite(seconds: float) -> None:
    with pytest.raises(InvalidInputError):
        with_timeout(seconds)


def test_with_timeout_without_its_seconds_says_how_to_write_it() -> None:
    # `@with_timeout` on its own passed the handler as the seconds: "'<' not supported between
    # instances of 'int' and 'function'" at import, which named neither mistake nor fix.
    async def handler(ctx: object, params: object) -> None:
        return None

    with pytest.raises(TypeError, match=r"@with_timeout\(5\), not @with_timeout"):
        with_timeout(handler)  # type: ignore[arg-type]


# -- with_retry ------------------------------------------------------------------------------------


async def test_with_retry_succeeds_after_failures_waiting_with_backoff() -> None:
    sleep = FakeSleep()
    handler, calls = failing(2, RuntimeError("flaky"))
    result = await with_retry(3, base_delay_ms=100, sleep=sleep)(handler)()
    assert result == "ok"
    assert calls == [1, 2, 3]
    assert sleep.seconds == [0.1, 0.2]


async def test_with_retry_raises_the_last_error_when_attempts_run_out() -> None:
    sleep = FakeSleep()
    handler, calls = failing(10, RuntimeError("down"))
    decorated = with_retry(5, base_delay_ms=100, multiplier=3, max_delay_ms=500, sleep=sleep)
    with pytest.raises(RuntimeError, match="down"):
        await decorated(handler)()
    assert calls == [1, 2, 3, 4, 5]
    assert sleep.seconds == pytest.approx([0.1, 0.3, 0.5, 0.5])


async def test_with_retry_does_not_retry_errors_outside_retry_on() -> None:
    sleep = FakeSleep()
    handler, calls = failing(1, ValueError("bad input"))
    with pytest.raises(ValueError, match="bad input"):
        await with_retry(3, 10, retry_on=(ConnectionError,), sleep=sleep)(handler)()
    assert calls == [1]
    assert sleep.seconds == []


@pytest.mark.parametrize(
    "signal",
    [
        asyncio.CancelledError(),
        CancelledByRequestError("instance was cancelled"),
        LeaseLostError(uuid.uuid4()),
    ],
    ids=["asyncio-cancel", "cancel-request", "lease-lost"],
)
async def test_with_retry_never_retries_when_cancelled(signal: BaseException) -> None:
    sleep = FakeSleep()
    calls: list[int] = []

    async def handler() -> str:
        calls.append(1)
        raise signal

    with pytest.raises(type(signal)):
        await with_retry(3, 10, sleep=sleep)(handler)()
    assert calls == [1]
    assert sleep.seconds == []


async def test_with_retry_stops_when_cancelled_while_waiting_between_tries() -> None:
    waiting = asyncio.Event()

    async def sleep_until_cancelled(seconds: float) -> None:
        waiting.set()
        await asyncio.Event().wait()

    handler, calls = failing(10, RuntimeError("flaky"))
    task = asyncio.create_task(with_retry(3, 10, sleep=sleep_until_cancelled)(handler)())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == [1]


async def test_with_retry_starts_each_try_from_the_first_tries_state() -> None:
    tries: list[dict[str, JSONValue]] = []

    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        tries.append(dict(ctx.state))
        ctx.state["seen"] = [*ctx.state["seen"], len(tries)]
        if len(tries) < 3:
            raise RuntimeError("flaky")
        return Done()

    ctx = mock_context(state={"seen": [0]})
    await with_retry(3, 0, sleep=FakeSleep())(handler)(ctx, None)
    assert tries == [{"seen": [0]}] * 3
    assert ctx.state == {"seen": [0, 3]}


@pytest.mark.parametrize(
    ("attempts", "base_delay_ms", "multiplier", "max_delay_ms"),
    [(0, 10, 2, None), (101, 10, 2, None), (3, -1, 2, None), (3, 10, 0.5, None), (3, 10, 2, 5)],
)
def test_with_retry_rejects_settings_when_out_of_range(
    attempts: int, base_delay_ms: float, multiplier: float, max_delay_ms: float | None
) -> None:
    with pytest.raises(InvalidInputError):
        with_retry(attempts, base_delay_ms, multiplier, max_delay_ms)


def test_retry_delay_grows_by_the_multiplier_up_to_the_cap() -> None:
    assert [delay_after_try_ms(n, 100, 2, None) for n in (1, 2, 3, 4)] == [100, 200, 400, 800]
    assert [delay_after_try_ms(n, 100, 2, 300) for n in (1, 2, 3, 4)] == [100, 200, 300, 300]
    assert delay_after_try_ms(10_000, 1, 1000, 5000) == 5000


# -- with_error_boundary ---------------------------------------------------------------------------


async def test_with_error_boundary_returns_done_with_the_error_by_default() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Next:
        raise RuntimeError("no such customer")

    step = await with_error_boundary()(handler)(mock_context(), None)
    assert step == Done({"error": "no such customer"})


async def test_with_error_boundary_fails_an_operation_with_the_error_by_default() -> None:
    # An operation handler's result is an OperationResult: a Done there would be recorded
    # as "handler returned Done", and the error's own message lost.
    async def charge(ctx: OperationContext) -> OperationResult:
        raise RuntimeError("card declined")

    result = await run_operation(with_error_boundary()(charge), mock_operation_context())
    assert result == failed("card declined")


async def test_with_error_boundary_names_the_class_when_the_error_has_no_message() -> None:
    handler, _ = failing(1, KeyError())
    assert await with_error_boundary()(handler)() == Done({"error": "KeyError"})


async def test_with_error_boundary_returns_what_on_error_builds() -> None:
    handler, _ = failing(1, RuntimeError("card declined"))
    bounded = with_error_boundary(lambda exc: Next("refund", {"reason": str(exc)}))(handler)
    assert await bounded() == Next("refund", {"reason": "card declined"})


async def test_with_error_boundary_passes_the_result_through_when_nothing_fails() -> None:
    handler, _ = failing(0, RuntimeError("unused"))
    assert await with_error_boundary()(handler)() == "ok"


def test_with_error_boundary_without_its_parentheses_says_how_to_write_it() -> None:
    # `@with_error_boundary` on its own took the handler as on_error and was accepted: every
    # attempt then failed with "decorate() takes 1 positional argument but 2 were given".
    async def handler(ctx: object, params: object) -> None:
        return None

    with pytest.raises(TypeError, match=r"write @with_error_boundary\(\), with its parentheses"):
        with_error_boundary(handler)  # type: ignore[arg-type]
    with_error_boundary(lambda exc: None)  # a plain function builds the result: accepted


async def test_with_error_boundary_lets_errors_outside_catch_propagate() -> None:
    handler, _ = failing(1, ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        await with_error_boundary(catch=(ConnectionError,))(handler)()


async def test_with_error_boundary_lets_a_cancel_request_through() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        ctx.raise_if_cancelled()
        return Done()

    ctx = mock_context()
    ctx.cancelled.set()
    with pytest.raises(CancelledByRequestError):
        await with_error_boundary()(handler)(ctx, None)


# -- compose ---------------------------------------------------------------------------------------


def tag(
    name: str, entered: list[str]
) -> Callable[[Callable[[], Awaitable[str]]], Callable[[], Awaitable[str]]]:
    def decorate(handler: Callable[[], Awaitable[str]]) -> Callable[[], Awaitable[str]]:
        async def tagged() -> str:
            entered.append(name)
            return await handler()

        return tagged

    return decorate


async def test_compose_applies_right_to_left_so_the_first_is_outermost() -> None:
    entered: list[str] = []
    handler, _ = failing(0, RuntimeError("unused"))
    composed = compose(tag("a", entered), tag("b", entered), tag("c", entered))(handler)
    nested = tag("a", entered)(tag("b", entered)(tag("c", entered)(handler)))
    await composed()
    await nested()
    assert entered == ["a", "b", "c"] * 2


async def test_compose_with_boundary_first_sees_the_error_after_every_retry() -> None:
    sleep = FakeSleep()
    calls: list[int] = []

    # A handler-map handler: what mypy types a chain with the default boundary first for.
    async def handler(ctx: HandlerContext, params: JSONValue) -> Next:
        calls.append(len(calls) + 1)
        raise RuntimeError("down")

    guarded = compose(with_error_boundary(), with_retry(3, 10, sleep=sleep))(handler)
    assert await guarded(mock_context(), None) == Done({"error": "down"})
    assert calls == [1, 2, 3]


async def test_compose_with_boundary_inside_the_retry_leaves_nothing_to_retry() -> None:
    sleep = FakeSleep()
    handler, calls = failing(10, RuntimeError("down"))
    guarded = with_retry(3, 10, sleep=sleep)(with_error_boundary()(handler))
    assert await guarded() == Done({"error": "down"})
    assert calls == [1]


async def test_compose_with_timeout_outside_the_retry_bounds_all_tries_together() -> None:
    tries: list[int] = []

    async def slow() -> str:
        tries.append(1)
        return await never_returns()

    with pytest.raises(HandlerTimeoutError):
        await compose(with_timeout(0.01), with_retry(3, 0, retry_on=(TimeoutError,)))(slow)()
    assert tries == [1]


async def test_compose_with_timeout_inside_the_retry_gives_each_try_its_own_deadline() -> None:
    tries: list[int] = []

    async def slow() -> str:
        tries.append(1)
        return await never_returns()

    sleep = FakeSleep()
    with pytest.raises(HandlerTimeoutError):
        await compose(with_retry(3, 0, retry_on=(TimeoutError,), sleep=sleep), with_timeout(0.01))(
            slow
        )()
    assert tries == [1, 1, 1]


# -- through the engine ----------------------------------------------------------------------------


async def test_with_timeout_turns_a_slow_handler_into_a_failed_attempt(store: Store) -> None:
    async def waiting_on_upstream() -> None:
        await asyncio.Event().wait()

    @with_timeout(0.05)
    async def stuck(ctx: HandlerContext, params: JSONValue) -> Done:
        await waiting_on_upstream()
        return Done()

    workflow = Workflow(
        "stuck", handlers={"run": stuck}, initial="run", retry=RetryPolicy(max_attempts=1)
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("stuck")
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.FAILED
    assert record.last_error == "HandlerTimeoutError: timed out after 0.05s"
    failed = [e for e in await events_of(store, enqueued.instance_id) if e.type == EventType.FAILED]
    assert [(e.attempt, e.error) for e in failed] == [
        (1, "HandlerTimeoutError: timed out after 0.05s")
    ]
    # Its traceback shows where the handler was when the time ran out (it showed no frame of
    # the handler's: only the engine's, which failures leave out).
    [failure] = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert failure.traceback is not None
    assert "in stuck\n    await waiting_on_upstream()" in failure.traceback
    assert "in waiting_on_upstream\n    await asyncio.Event().wait()" in failure.traceback
    assert failure.traceback.rstrip().endswith("HandlerTimeoutError: timed out after 0.05s")


async def test_with_error_boundary_records_an_operations_error_as_its_failure(
    store: Store,
) -> None:
    @with_error_boundary()
    async def charge(ctx: OperationContext) -> OperationResult:
        raise RuntimeError("card declined")

    template = Template(
        type="billing",
        stages=[Stage(name="pay", operations=[Operation(type="charge", max_attempts=1)])],
        retry=RetryPolicy(max_attempts=1),
    )
    engine = make_engine(store, compile_template(template, OperationRegistry({"charge": charge})))
    enqueued = await engine.enqueue("billing", {})
    assert await engine.tick() == 1
    [operation] = await engine.operations(enqueued.instance_id)
    assert (operation.status, operation.error) == ("failed", "card declined")
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.FAILED
