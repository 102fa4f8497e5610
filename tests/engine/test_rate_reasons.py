"""A queue's rate of starts, however small or large, gives a waiting reason, not an internal
error, and never stops the claims of other queues.

Found by an outside audit: configureQueue accepts any rate above 0, and with ratePerMinute
1e-12 the next token is ~10^14 s away; the waiting reason added that to now() as an interval,
which PostgreSQL refuses ("interval out of range"), so every read of waitingReason for the
queue answered INTERNAL_SERVER_ERROR (the claim loop was unaffected).

Found by a later outside audit: rates nearer 0 (5e-324, 1e-310) underflowed or overflowed the
claim's own arithmetic, so every claim round failed and no instance of any queue started. A
rate is now at least 0.0001 a minute (laneway.engine.requests.MIN_RATE_PER_MINUTE); the tests
below take the lowest and the highest rate configure_queue accepts, whatever they are.
"""

from datetime import UTC, datetime, timedelta

import pytest

from laneway.engine import Done, Engine, HandlerContext, Workflow
from laneway.errors import InvalidInputError
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, until_status


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


glacial = Workflow("glacial", handlers={"run": _done}, initial="run", queue="glacial")
other = Workflow("other", handlers={"run": _done}, initial="run", queue="other")


@pytest.mark.parametrize("option", ["rate_per_minute", "key_rate_per_minute"])
async def test_a_vanishing_rate_gives_its_reason_with_a_far_until(
    store: Store, option: str
) -> None:
    engine = make_engine(store, glacial, poll_interval_seconds=0.05)
    await engine.configure_queue("glacial", concurrency=10, **{option: 1.0})  # type: ignore[arg-type]
    # 1e-12 is below what configure_queue takes now, but a row an older release wrote may
    # hold it: its reason still reads.
    column = "rate_per_minute" if option == "rate_per_minute" else "key_rate_per_minute"
    async with store.connection() as conn:
        await conn.execute(f"UPDATE laneway.queues SET {column} = 1e-12")  # noqa: S608
    first, second = [
        (await engine.enqueue("glacial", concurrency_key="k")).instance_id for _ in "ab"
    ]
    async with engine.running():
        await eventually(
            lambda: engine.get(first), lambda r: r is not None and r.status == Status.COMPLETED
        )
        reasons = await store.waiting_reasons([second])
    reason = reasons[second]
    assert reason.code == ("RATE_LIMITED" if option == "rate_per_minute" else "KEY_RATE_LIMITED")
    assert reason.until is not None
    assert reason.until - datetime.now(UTC) > timedelta(days=365 * 99)


async def _first_taken(engine: Engine, option: str, rates: list[float]) -> float:
    """The first of `rates` that configure_queue takes for the queue `glacial`."""
    for rate in rates:
        try:
            await engine.configure_queue("glacial", concurrency=10, **{option: rate})  # type: ignore[arg-type]
        except InvalidInputError:
            continue
        return rate
    raise AssertionError(f"no rate of {rates} was taken")


@pytest.mark.parametrize("option", ["rate_per_minute", "key_rate_per_minute"])
async def test_the_lowest_rate_taken_starts_one_then_waits_and_other_queues_go_on(
    store: Store, option: str
) -> None:
    engine = make_engine(store, glacial, other, poll_interval_seconds=0.05)
    rate = await _first_taken(engine, option, [5e-324, 1e-310, 1e-300, 1e-6, 0.0001])
    first, second = [
        (await engine.enqueue("glacial", concurrency_key="k")).instance_id for _ in "ab"
    ]
    elsewhere = (await engine.enqueue("other")).instance_id
    async with engine.running():
        await until_status(store, elsewhere, Status.COMPLETED)
        await until_status(store, first, Status.COMPLETED)  # the bucket's one token
        # The token wake-up's read, and the waiting reason's, with the bucket empty.
        token = await store.next_token_due(["glacial@1", "other@1"])
        reasons = await store.waiting_reasons([second])
        latest = (await engine.enqueue("other")).instance_id
        await until_status(store, latest, Status.COMPLETED)  # claims went on meanwhile
    assert rate == 0.0001  # one start about every 6.9 days
    assert token.rate_limited
    reason = reasons[second]
    assert reason.code == ("RATE_LIMITED" if option == "rate_per_minute" else "KEY_RATE_LIMITED")
    assert reason.until is not None
    waited = reason.until - datetime.now(UTC)
    assert timedelta(days=6.8) < waited <= timedelta(minutes=1 / rate)


@pytest.mark.parametrize("option", ["rate_per_minute", "key_rate_per_minute"])
async def test_the_highest_rate_taken_starts_everything_and_other_queues_go_on(
    store: Store, option: str
) -> None:
    engine = make_engine(store, glacial, other, poll_interval_seconds=0.05)
    rate = await _first_taken(engine, option, [1e308, 1e300, 1e12, 1e9])
    started = [(await engine.enqueue("glacial", concurrency_key="k")).instance_id for _ in "abc"]
    elsewhere = (await engine.enqueue("other")).instance_id
    async with engine.running():
        for instance_id in (*started, elsewhere):
            await until_status(store, instance_id, Status.COMPLETED)
        token = await store.next_token_due(["glacial@1", "other@1"])
        waiting = await engine.enqueue("glacial", concurrency_key="k", delay_ms=600_000)
        reasons = await store.waiting_reasons([waiting.instance_id])
    assert rate == 1e9
    assert token.due_in is None  # nothing due waits for a token
    assert reasons[waiting.instance_id].code == "DELAYED"
