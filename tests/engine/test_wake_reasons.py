"""The waiting reason of a wait whose wake time came, before a live process wakes it: what the
wake-up will make of it (due as a pending instance, or ended), never the wait's old reason."""

from datetime import UTC, datetime
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import (
    Done,
    Engine,
    HandlerContext,
    OnExpiry,
    Pause,
    Sleep,
    WaitForSignal,
    Workflow,
)
from laneway.model import JSONValue, Status, WaitingReason
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop


async def _wait(ctx: HandlerContext, params: JSONValue) -> Sleep | WaitForSignal | Pause:
    assert isinstance(params, dict)
    kind = params["kind"]
    if kind == "sleep":
        return Sleep(60, "done")
    if kind == "signal":
        return WaitForSignal("go", 60, "done", "done" if params.get("on_timeout") else None)
    then = params["then"]
    assert then in ("resume", "cancel", "fail")
    expiry = OnExpiry(then, {"default": True} if then == "resume" else None)
    return Pause("decide", "done", timeout_seconds=60, on_expiry=expiry)


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


waiter = Workflow("waiter", handlers={"wait": _wait, "done": _done}, initial="wait")


async def _wake_passed(engine: Engine, admin: asyncpg.Connection, instance_id: UUID) -> datetime:
    """Move an instance's wake time 25 s into the past, as if nothing had woken it; that time."""
    await admin.execute(
        "UPDATE laneway.instances SET wake_at = now() - interval '25 seconds'"
        " WHERE instance_id = $1",
        instance_id,
    )
    record = await engine.get(instance_id)
    assert record is not None
    assert record.wake_at is not None
    return record.wake_at


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("params", "ended", "ends"),
    [
        ({"kind": "sleep"}, "its sleep ended at {at}", None),
        (
            {"kind": "signal", "on_timeout": True},
            "its wait for signal 'go' timed out at {at}",
            None,
        ),
        ({"kind": "signal"}, "its wait for signal 'go' timed out at {at}", Status.FAILED),
        ({"kind": "pause", "then": "resume"}, "its checkpoint 'decide' expired at {at}", None),
        (
            {"kind": "pause", "then": "cancel"},
            "its checkpoint 'decide' expired at {at}",
            Status.CANCELLED,
        ),
        (
            {"kind": "pause", "then": "fail"},
            "its checkpoint 'decide' expired at {at}",
            Status.FAILED,
        ),
    ],
    ids=["sleep", "timeout-action", "timeout-fails", "expiry-resumes", "expiry-cancels", "fails"],
)
async def test_a_wait_whose_wake_time_passed_reads_as_what_its_wake_up_makes_it(
    store: Store,
    admin: asyncpg.Connection,
    params: dict[str, JSONValue],
    ended: str,
    ends: Status | None,
) -> None:
    # Found by an outside audit: with every worker killed, a wait whose timeout had passed
    # said "waiting for signal 'go' until <a time gone by>, then it times out" (a sleep,
    # "sleeping until" one) for as long as no process came, and never NO_WORKER: its old
    # reason, with `until` in the past.
    engine = make_engine(store, waiter)  # driven by hand: no live process
    enqueued = await engine.enqueue("waiter", params)
    await engine.tick()
    reason = await engine.waiting_reason(enqueued.instance_id)
    assert reason is not None
    assert reason.code in ("SLEEPING", "AWAITING_SIGNAL", "AWAITING_REVIEW")
    # Its wake time passed 25 s ago, and nothing woke it.
    wake_at = await _wake_passed(engine, admin, enqueued.instance_id)
    ended = ended.format(at=_iso(wake_at))
    how = {Status.FAILED: "it fails", Status.CANCELLED: "it is cancelled", None: ""}[ends]

    # No live process: none wakes it; one that comes and runs its workflow runs it (or, for a
    # wait whose wake-up ends it, any process that comes ends it).
    alone = await engine.waiting_reason(enqueued.instance_id)
    if ends is None:
        assert alone == WaitingReason(
            code="NO_WORKER",
            message=f"{ended}; no live worker has workflow 'waiter' registered",
            until=None,
        )
    else:
        assert alone == WaitingReason(
            code="NO_WORKER",
            message=f"{ended}: {how} when a live process wakes it, and none is running",
            until=None,
        )

    # A live process runs its workflow: its next poll wakes it, then it is due (READY here),
    # or it ends.
    await engine.claim_loop.presence.beat()
    live = await engine.waiting_reason(enqueued.instance_id)
    assert live is not None
    assert live.until is None
    ready = "ready: queue 'waiter' has room, it starts at the next claim"
    if ends is None:
        assert (live.code, live.message) == ("READY", f"{ended}; {ready}")
    else:
        assert live.code == reason.code
        assert live.message == f"{ended}: {how} at the next poll of a live process"

    # Which is what the wake-up does (here by a process that runs none of it: any does).
    bystander = make_engine(store, noop)
    await bystander.tick()
    woken = await engine.get(enqueued.instance_id)
    assert woken is not None
    if ends is None:
        assert woken.status == Status.PENDING
        assert await engine.waiting_reason(enqueued.instance_id) == WaitingReason(
            code="READY", message=ready, until=None
        )
    else:
        assert woken.status == ends


async def test_a_woken_wait_meets_its_queue_s_pause_as_a_pending_instance_does(
    store: Store, admin: asyncpg.Connection
) -> None:
    # A wake-up checks no queue (neither its pause nor its caps): the claim does, after it.
    engine = make_engine(store, waiter)
    enqueued = await engine.enqueue("waiter", {"kind": "sleep"})
    await engine.tick()
    await engine.pause_queue("waiter")
    wake_at = await _wake_passed(engine, admin, enqueued.instance_id)
    await engine.claim_loop.presence.beat()
    assert await engine.waiting_reason(enqueued.instance_id) == WaitingReason(
        code="QUEUE_PAUSED",
        message=f"its sleep ended at {_iso(wake_at)}; queue 'waiter' is paused",
        until=None,
    )
    await engine.tick()  # wakes it, claims nothing
    woken = await engine.get(enqueued.instance_id)
    assert woken is not None
    assert woken.status == Status.PENDING
    assert await engine.waiting_reason(enqueued.instance_id) == WaitingReason(
        code="QUEUE_PAUSED", message="queue 'waiter' is paused", until=None
    )
