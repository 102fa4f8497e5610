"""A queue's rate of starts, however small, gives a waiting reason, not an internal error.

Found by an outside audit: configureQueue accepts any rate above 0, and with ratePerMinute
1e-12 the next token is ~10^14 s away; the waiting reason added that to now() as an interval,
which PostgreSQL refuses ("interval out of range"), so every read of waitingReason for the
queue answered INTERNAL_SERVER_ERROR (the claim loop was unaffected).
"""

from datetime import UTC, datetime, timedelta

import pytest

from laneway.engine import Done, HandlerContext, Workflow
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


@pytest.mark.parametrize("option", ["rate_per_minute", "key_rate_per_minute"])
async def test_a_vanishing_rate_gives_its_reason_with_a_far_until(
    store: Store, option: str
) -> None:
    glacial = Workflow("glacial", handlers={"run": _done}, initial="run", queue="glacial")
    engine = make_engine(store, glacial, poll_interval_seconds=0.05)
    if option == "rate_per_minute":
        await engine.configure_queue("glacial", concurrency=10, rate_per_minute=1e-12)
    else:
        await engine.configure_queue("glacial", concurrency=10, key_rate_per_minute=1e-12)
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
