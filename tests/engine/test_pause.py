"""Pause and resume on the handler-map runtime: no lease, no slot, resumed exactly once."""

import asyncio

import pytest

from laneway.engine import Done, HandlerContext, Pause, Workflow
from laneway.errors import ConflictError, InvalidInputError
from laneway.model import EventType, Status
from laneway.store import Store
from tests.engine.helpers import make_engine, types_of


async def _gather(ctx: HandlerContext, params: object) -> Pause:
    ctx.state["gathered"] = True
    ctx.report(stage="gather", progress=0.5, message="waiting for review")
    return Pause("data_ready", "publish", {"by": "reviewer"})


async def _publish(ctx: HandlerContext, params: object) -> Done:
    ctx.report(stage="publish")
    return Done({"gathered": ctx.state["gathered"], "params": params, "attempt": ctx.attempt})


reviewed = Workflow("reviewed", handlers={"gather": _gather, "publish": _publish}, initial="gather")


async def test_paused_instance_holds_no_lease_and_resumes_at_the_next_action(store: Store) -> None:
    engine = make_engine(store, reviewed)
    enqueued = await engine.enqueue("reviewed")
    await engine.tick()
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert paused.status == Status.PAUSED
    assert paused.checkpoint == "data_ready"
    assert paused.owner_id is None
    assert paused.lease_expires_at is None
    assert paused.stage == "gather"
    assert paused.progress == 0.5
    assert await engine.tick() == 0  # a paused instance is not claimable
    resumed = await engine.resume(enqueued.instance_id)
    assert resumed.status == Status.PENDING
    assert resumed.checkpoint is None
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"gathered": True, "params": {"by": "reviewer"}, "attempt": 1}
    events = await store.instance_events_after(enqueued.instance_id, 0, 20)
    assert [e.type for e in events] == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.PAUSED,
        EventType.RESUMED,
        EventType.STARTED,
        EventType.COMPLETED,
    ]
    assert events[2].checkpoint == "data_ready"
    assert events[2].stage == "gather"


async def test_two_concurrent_resumes_exactly_one_wins(store: Store) -> None:
    engine = make_engine(store, reviewed)
    enqueued = await engine.enqueue("reviewed")
    await engine.tick()
    outcomes = await asyncio.gather(
        *(engine.resume(enqueued.instance_id) for _ in range(5)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, ConflictError) for o in outcomes if isinstance(o, BaseException))
    assert (await types_of(store, enqueued.instance_id)).count(EventType.RESUMED) == 1


async def test_resume_of_an_instance_that_is_not_paused_is_a_conflict(store: Store) -> None:
    engine = make_engine(store, reviewed)
    enqueued = await engine.enqueue("reviewed")
    with pytest.raises(ConflictError, match="pending"):
        await engine.resume(enqueued.instance_id)


async def _bounded(ctx: HandlerContext, params: object) -> Pause:
    ctx.state["gathered"] = True
    return Pause("note", "publish", max_input_bytes=12)


async def test_a_resume_input_larger_than_max_input_bytes_is_refused_and_stays_paused(
    store: Store,
) -> None:
    bounded = Workflow("bounded", handlers={"ask": _bounded, "publish": _publish}, initial="ask")
    engine = make_engine(store, bounded)
    enqueued = await engine.enqueue("bounded")
    await engine.tick()
    with pytest.raises(InvalidInputError, match=r"^input is 13 bytes encoded; checkpoint 'note'"):
        await engine.resume(enqueued.instance_id, {"n": "12345"})  # {"n":"12345"}: 13 bytes
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.PAUSED
    await engine.resume(enqueued.instance_id, {"n": "1234"})  # 12: to the byte
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert done.result is not None
    assert done.result["params"] == {"n": "1234"}


@pytest.mark.parametrize("bound", [-1, True, 1.5])
def test_max_input_bytes_is_a_count(bound: object) -> None:
    with pytest.raises(InvalidInputError, match="max_input_bytes must be an int >= 0"):
        Pause("note", "publish", max_input_bytes=bound)  # type: ignore[arg-type]
