"""A stopping process's leases: renewed until each run has stopped, released as each stops;
and what the heartbeat logs when the database fails it.

The drain and the first hand-back rules are in test_leases.py; these are the runs whose
handler goes on after its cancel (a handler that catches CancelledError), found by an outside
audit of deploys.
"""

import asyncio
import contextlib
from datetime import datetime

import pytest

from laneway.engine import Done, HandlerContext, Workflow, WorkflowRegistry
from laneway.engine.presence import Presence
from laneway.engine.runner import Run
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine
from tests.workflows import noop

LEASE_SECONDS = 0.6


def _ignores_its_cancel(
    entered: asyncio.Event, ignoring: asyncio.Event, go_on: asyncio.Event
) -> Workflow:
    async def stubborn(ctx: HandlerContext, params: object) -> Done:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ignoring.set()
            await go_on.wait()  # its work goes on, as if no cancel had come
        return Done({"finished": True})

    return Workflow("stubborn", handlers={"run": stubborn}, initial="run")


async def _db_now_plus(store: Store, seconds: float) -> datetime:
    async with store.connection() as conn:
        moment: datetime = await conn.fetchval(
            "SELECT now() + $1::double precision * interval '1 second'", seconds
        )
    return moment


async def _db_passed(store: Store, moment: datetime) -> bool:
    async with store.connection() as conn:
        passed: bool = await conn.fetchval("SELECT now() > $1", moment)
    return passed


def _warned(caplog: pytest.LogCaptureFixture) -> list[object]:
    """The instance ids of each warning that runs go on after their cancel."""
    return [
        getattr(record, "instance_ids", None)
        for record in caplog.records
        if record.getMessage().startswith("runs still running after their cancel")
    ]


async def test_a_handler_that_ignores_its_cancel_keeps_its_lease_until_it_stops(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by an outside audit: after SIGTERM such a handler went on in the stopping process
    # while its heartbeat was cancelled, so its lease lapsed and another worker started the same
    # instance: both ran at once for 37 s, and the instance ended with recoveries=1, WorkerLost.
    entered, ignoring, go_on = asyncio.Event(), asyncio.Event(), asyncio.Event()
    engine = make_engine(
        store,
        _ignores_its_cancel(entered, ignoring, go_on),
        owner_id="stopping",
        lease_seconds=LEASE_SECONDS,
        shutdown_grace_seconds=0.05,
    )
    instance_id = (await engine.enqueue("stubborn")).instance_id
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    with caplog.at_level("WARNING", logger="laneway.engine.presence"):
        stopping.set()
        await asyncio.wait_for(ignoring.wait(), timeout=10)
        # Another worker's lease recovery, polled until the process has said which runs go on
        # after their cancel and three leases' time has passed on the database's clock: the
        # lease is renewed all along, so it never finds it expired.
        until = await _db_now_plus(store, 3 * LEASE_SECONDS)
        async with asyncio.timeout(30):
            while not (_warned(caplog) and await _db_passed(store, until)):
                assert await store.recover_expired_leases(max_recoveries=5) == []
                await asyncio.sleep(0.05)
        held = await engine.get(instance_id)
        assert held is not None
        assert (held.status, held.owner_id, held.recoveries) == (Status.RUNNING, "stopping", 0)
        go_on.set()
        await asyncio.wait_for(running, timeout=10)
    ended = await engine.get(instance_id)
    assert ended is not None
    # Its own outcome, written under the lease it kept: no lost worker, no second run.
    assert (ended.status, ended.result, ended.recoveries) == (
        Status.COMPLETED,
        {"finished": True},
        0,
    )
    assert _warned(caplog) == [[str(instance_id)]]


def _cooperative(entered: asyncio.Event) -> Workflow:
    async def waits(ctx: HandlerContext, params: object) -> Done:
        entered.set()
        await asyncio.Event().wait()  # stops at its cancel
        return Done()

    return Workflow("cooperative", handlers={"run": waits}, initial="run")


async def test_runs_that_stop_at_their_cancel_are_released_at_once_beside_one_that_does_not(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by an outside audit: the hand-back waited up to 5 s for every cancelled run
    # together, then released every lease in one call, so one handler that went on after its
    # cancel held back the release of every cooperative instance (13 s more in the audit,
    # past the 10 s Docker waits before it kills the process).
    entered, ignoring, go_on, also_entered = (asyncio.Event() for _ in range(4))
    engine = make_engine(
        store,
        _ignores_its_cancel(entered, ignoring, go_on),
        _cooperative(also_entered),
        owner_id="stopping",
        lease_seconds=LEASE_SECONDS,
        shutdown_grace_seconds=0.05,
    )
    stubborn = (await engine.enqueue("stubborn")).instance_id
    cooperative = (await engine.enqueue("cooperative")).instance_id
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(asyncio.gather(entered.wait(), also_entered.wait()), timeout=10)
    with caplog.at_level("WARNING", logger="laneway.engine.presence"):
        stopping.set()
        await asyncio.wait_for(ignoring.wait(), timeout=10)
        # Released while the other still runs, and well within the 5 s it used to wait.
        released = await eventually(
            lambda: engine.get(cooperative), lambda r: r is not None and r.owner_id is None, 2.5
        )
        assert released is not None
        assert released.status == Status.PENDING
        held = await engine.get(stubborn)
        assert held is not None
        assert (held.status, held.owner_id) == (Status.RUNNING, "stopping")
        assert _warned(caplog) == [[str(stubborn)]]  # the one that goes on, by its id
        go_on.set()
        await asyncio.wait_for(running, timeout=10)


async def test_an_instance_handed_back_at_a_stop_keeps_its_place_in_its_queue(
    store: Store,
) -> None:
    # Found by an outside audit: the release set run_after to now(), and a claim takes the
    # earliest run_after first, so in a queue capped at 1 an instance handed back at a deploy
    # ran after two enqueued after it.
    entered = asyncio.Event()
    first = make_engine(
        store, _cooperative(entered), owner_id="stopping", shutdown_grace_seconds=0.05
    )
    await first.configure_queue("cooperative", concurrency=1)
    handed = (await first.enqueue("cooperative")).instance_id
    stopping = asyncio.Event()
    running = asyncio.create_task(first.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    later = [(await first.enqueue("cooperative")).instance_id for _ in range(2)]
    stopping.set()
    await asyncio.wait_for(running, timeout=10)
    for instance_id in later:  # the cap held them back: never claimed
        waited = await store.get_instance(instance_id)
        assert waited is not None
        assert (waited.status, waited.attempts) == (Status.PENDING, 0)
    back = await store.get_instance(handed)
    assert back is not None
    assert (back.status, back.owner_id) == (Status.PENDING, None)
    second = make_engine(store, _cooperative(asyncio.Event()), owner_id="next")
    claimed, _ = await second.claim_loop.claim(limit=1)
    assert [record.instance_id for record in claimed] == [handed], later
    # Its second claim counts in `attempts`; its step's budget (ctx.attempt) starts again.
    assert (claimed[0].attempts, claimed[0].step_attempt) == (2, 1)


async def test_a_database_call_that_times_out_is_logged_with_its_type(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an outside audit: "worker heartbeat failed" logged `"error": ""` for a
    # TimeoutError, whose str() is empty; so did a failed lease renewal and release.
    async def times_out(*args: object, **kwargs: object) -> None:
        raise TimeoutError

    await make_engine(store, noop).enqueue("noop")
    [record] = await store.claim("timing-out", ["noop@1"], 1, 30.0)  # the lease it holds
    for method in ("renew_leases", "heartbeat_worker", "release"):
        monkeypatch.setattr(store, method, times_out)
    run = Run(record=record)
    presence = Presence(
        store,
        WorkflowRegistry([noop]),
        {record.instance_id: run},
        lambda instance_id, why: None,
        lambda newer: None,
        owner_id="timing-out",
        role="worker",
        lease_seconds=0.15,  # a heartbeat every 50 ms
        concurrency=1,
    )

    async def errors() -> dict[str, object]:
        return {r.getMessage(): getattr(r, "error", None) for r in caplog.records}

    halted = asyncio.Event()
    with caplog.at_level("WARNING", logger="laneway.engine.presence"):
        beating = asyncio.create_task(presence.heartbeat(halted))
        await eventually(errors, lambda said: "worker heartbeat failed" in said)
        halted.set()
        await asyncio.wait_for(beating, timeout=10)
        run.handed_back = True  # stopped at a checkpoint while draining: released at the stop
        await presence.stop(grace_seconds=0)
    assert await errors() == {
        "lease renewal failed": "TimeoutError",
        "worker heartbeat failed": "TimeoutError",
        "release at shutdown failed": "TimeoutError",
    }


def _swallows_then_checks(entered: asyncio.Event) -> Workflow:
    async def checks(ctx: HandlerContext, params: object) -> Done:
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # as 3.11's asyncio.wait_for can
            await asyncio.Event().wait()
        ctx.raise_if_cancelled()  # the README's advice: stop here once asked to
        return Done()

    return Workflow("checks", handlers={"run": checks}, initial="run")


async def test_a_stop_whose_cancel_was_swallowed_hands_back_and_costs_no_attempt(
    store: Store,
) -> None:
    # Found by an outside audit (the image's Python 3.11 and app/examples.py's countdown, whose
    # asyncio.wait_for swallowed the stop's cancel): raise_if_cancelled's CancelledByRequestError
    # was taken for the handler's failure, so each deploy during a long step cost an attempt
    # (lastError "... was cancelled", its due time moved), and the third failed it for good.
    entered = asyncio.Event()
    engine = make_engine(
        store, _swallows_then_checks(entered), owner_id="stopping", shutdown_grace_seconds=0.05
    )
    instance_id = (await engine.enqueue("checks")).instance_id
    before = await store.get_instance(instance_id)
    assert before is not None
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    stopping.set()
    await asyncio.wait_for(running, timeout=10)
    back = await store.get_instance(instance_id)
    assert back is not None
    assert (back.status, back.owner_id, back.last_error) == (Status.PENDING, None, None)
    assert back.run_after == before.run_after  # its place kept
    nxt = make_engine(store, _swallows_then_checks(asyncio.Event()), owner_id="next")
    claimed, _ = await nxt.claim_loop.claim(limit=1)
    assert [(r.instance_id, r.step_attempt) for r in claimed] == [(instance_id, 1)]
