"""Leases, fencing, heartbeats, retries and cancellation (issue #2, points 5, 6 and 7)."""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from laneway.engine import (
    Done,
    Engine,
    HandlerContext,
    Next,
    PermanentFailure,
    RetryPolicy,
    Workflow,
    runner,
)
from laneway.model import EventType, Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine, types_of
from tests.workflows import noop


def _blocking(label: str, gate: asyncio.Event, entered: asyncio.Event) -> Workflow:
    async def run(ctx: HandlerContext, params: object) -> Done:
        entered.set()
        await gate.wait()
        return Done({"by": label})

    return Workflow(
        "fenced", handlers={"run": run}, initial="run", retry=RetryPolicy(max_attempts=3)
    )


async def test_late_write_changes_nothing_when_lease_was_taken_over(
    store: Store, database_url: str
) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    first = make_engine(store, _blocking("first", gate, entered), owner_id="first")
    enqueued = await first.enqueue("fenced")
    first_tick = asyncio.create_task(first.tick())
    await asyncio.wait_for(entered.wait(), timeout=10)
    async with store.connection() as conn:  # the first owner's lease runs out
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
        )
    async with open_store(database_url) as other_store:
        open_gate, other_entered = asyncio.Event(), asyncio.Event()
        open_gate.set()
        second = make_engine(
            other_store, _blocking("second", open_gate, other_entered), owner_id="second"
        )
        assert await second.tick() == 1  # recovers the expired lease, claims, completes
    gate.set()
    await asyncio.wait_for(first_tick, timeout=10)
    done = await first.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"by": "second"}
    types = await types_of(store, enqueued.instance_id)
    assert types.count(EventType.COMPLETED) == 1
    assert types == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.RETRYING,
        EventType.STARTED,
        EventType.COMPLETED,
    ]


async def test_heartbeat_keeps_a_step_alive_for_three_leases(
    store: Store, database_url: str
) -> None:
    lease = 0.6

    async def long_step(ctx: HandlerContext, params: object) -> Done:
        await asyncio.sleep(lease * 3)  # the work itself takes three leases
        return Done()

    workflow = Workflow("long", handlers={"run": long_step}, initial="run")
    options = {"lease_seconds": lease, "poll_interval_seconds": 0.05}
    first = make_engine(store, workflow, owner_id="first", **options)
    async with open_store(database_url) as other_store:
        second = make_engine(other_store, workflow, owner_id="second", **options)
        async with first.running(), second.running():
            enqueued = await first.enqueue("long")
            done = await first.wait(enqueued.instance_id, timeout=20)
    assert done.status == Status.COMPLETED
    assert done.attempts == 1
    assert (await types_of(store, enqueued.instance_id)).count(EventType.STARTED) == 1


async def test_attempts_exhausted_ends_failed_with_last_error(store: Store) -> None:
    async def broken(ctx: HandlerContext, params: object) -> Done:
        raise ValueError(f"broken on attempt {ctx.attempt}")

    workflow = Workflow(
        "broken",
        handlers={"run": broken},
        initial="run",
        retry=RetryPolicy(max_attempts=3, backoff="fixed", base_ms=0),
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("broken")
    for _ in range(3):
        assert await engine.tick() == 1
    assert await engine.tick() == 0
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.last_error == "ValueError: broken on attempt 3"
    assert failed.attempts == 3
    events = await store.instance_events_after(enqueued.instance_id, 0, 100)
    assert [e.type for e in events if e.type in ("retrying", "failed")] == [
        EventType.RETRYING,
        EventType.RETRYING,
        EventType.FAILED,
    ]
    assert events[-1].error == "ValueError: broken on attempt 3"
    [failures] = (await store.failures([enqueued.instance_id], 10)).values()
    assert [(f.attempt, f.type, f.message) for f in failures] == [
        (3, "ValueError", "broken on attempt 3"),  # newest first
        (2, "ValueError", "broken on attempt 2"),
        (1, "ValueError", "broken on attempt 1"),
    ]
    traceback = failures[0].traceback
    assert traceback is not None
    assert "in broken" in traceback
    assert 'raise ValueError(f"broken on attempt {ctx.attempt}")' in traceback
    assert "laneway/engine" not in traceback  # the engine's own frames are left out
    assert (await store.failures([enqueued.instance_id], 1))[enqueued.instance_id] == failures[:1]


async def test_retry_waits_out_an_exponential_backoff(store: Store) -> None:
    async def broken(ctx: HandlerContext, params: object) -> Done:
        raise RuntimeError("nope")

    workflow = Workflow(
        "backoff",
        handlers={"run": broken},
        initial="run",
        retry=RetryPolicy(max_attempts=3, backoff="exponential", base_ms=300, max_ms=500),
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("backoff")
    delays = []
    for _ in range(2):
        await eventually(engine.tick, lambda n: n == 1)
        record = await engine.get(enqueued.instance_id)
        assert record is not None
        assert record.status == Status.PENDING
        delays.append((record.run_after - record.updated_at).total_seconds())
    assert 0.29 <= delays[0] <= 0.35  # base
    assert 0.49 <= delays[1] <= 0.55  # 600 ms capped at 500 ms


async def test_crash_after_last_attempt_ends_failed_not_pending(store: Store) -> None:
    engine = make_engine(store, noop)
    enqueued = await engine.enqueue("noop")
    async with store.connection() as conn:  # a worker claimed its last attempt, then vanished
        await conn.execute(
            "UPDATE laneway.instances SET status = 'running', owner_id = 'gone', attempts = 3,"
            " max_attempts = 3, lease_expires_at = now() - interval '1 second'"
        )
    await engine.claim_loop.maintain()
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.last_error is not None
    assert failed.last_error.startswith("WorkerLost: lease expired during attempt 3")
    assert (await types_of(store, enqueued.instance_id))[-1] == EventType.FAILED


async def test_cancel_stops_a_running_handler_and_frees_its_slot(store: Store) -> None:
    stopped = asyncio.Event()

    async def forever(ctx: HandlerContext, params: object) -> Done:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()
        return Done()

    workflow = Workflow("forever", handlers={"run": forever}, initial="run", queue="single")
    quick = Workflow("quick", handlers={"run": _done}, initial="run", queue="single")
    engine = make_engine(store, workflow, quick, poll_interval_seconds=0.05)
    await engine.configure_queue("single", concurrency=1)
    async with engine.running():
        stuck = await engine.enqueue("forever")
        await eventually(
            lambda: engine.get(stuck.instance_id), lambda r: r is not None and r.status == "running"
        )
        waiting = await engine.enqueue("quick")
        cancelled = await engine.cancel(stuck.instance_id)
        assert cancelled.status == Status.CANCELLED
        await asyncio.wait_for(stopped.wait(), timeout=10)
        done = await engine.wait(waiting.instance_id, timeout=10)
    assert done.status == Status.COMPLETED
    final = await engine.get(stuck.instance_id)
    assert final is not None
    assert final.status == Status.CANCELLED
    assert final.result is None
    types = await types_of(store, stuck.instance_id)
    assert types[-1] == EventType.CANCELLED
    assert EventType.COMPLETED not in types


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


async def test_permanent_failure_ends_the_instance_without_more_attempts(store: Store) -> None:
    async def refuse(ctx: HandlerContext, params: object) -> Done:
        raise PermanentFailure("card declined")

    workflow = Workflow(
        "refused", handlers={"run": refuse}, initial="run", retry=RetryPolicy(max_attempts=5)
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("refused")
    assert await engine.tick() == 1
    assert await engine.tick() == 0
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.attempts == 1
    assert failed.last_error == "PermanentFailure: card declined"
    assert EventType.RETRYING not in await types_of(store, enqueued.instance_id)


async def test_retry_starts_when_its_backoff_ends_not_at_the_next_poll(store: Store) -> None:
    async def once(ctx: HandlerContext, params: object) -> Done:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return Done(ctx.attempt)

    workflow = Workflow(
        "backs_off",
        handlers={"run": once},
        initial="run",
        retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=200),
    )
    engine = make_engine(store, workflow, poll_interval_seconds=60.0)
    async with engine.running():
        enqueued = await engine.enqueue("backs_off")
        # The loop polls once a minute; only the backoff timer can start attempt 2 this soon.
        done = await engine.wait(enqueued.instance_id, timeout=10)
        delayed = await engine.enqueue("backs_off", delay_ms=300)
        later = await engine.wait(delayed.instance_id, timeout=10)
    assert done.status == Status.COMPLETED
    assert done.result == 2
    assert later.status == Status.COMPLETED
    assert later.updated_at - later.created_at >= timedelta(milliseconds=300)


async def test_a_second_claim_by_the_same_owner_fences_the_first(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Two claims of one instance under one owner id (a restarted worker reusing its id, or a
    # stalled run in the same process): only the later claim's writes may land. The fenced
    # write is a WARNING: its step has run twice, which an operator should see.
    first_gate, first_entered = asyncio.Event(), asyncio.Event()
    first = make_engine(store, _blocking("first", first_gate, first_entered), owner_id="same")
    enqueued = await first.enqueue("fenced")
    first_tick = asyncio.create_task(first.tick())
    await asyncio.wait_for(first_entered.wait(), timeout=10)
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
        )
    async with open_store(database_url) as other_store:
        second_gate, second_entered = asyncio.Event(), asyncio.Event()
        second = make_engine(
            other_store, _blocking("second", second_gate, second_entered), owner_id="same"
        )
        second_tick = asyncio.create_task(second.tick())
        await asyncio.wait_for(second_entered.wait(), timeout=10)
        first_gate.set()
        await asyncio.wait_for(first_tick, timeout=10)
        held = await first.get(enqueued.instance_id)
        assert held is not None
        assert held.status == Status.RUNNING  # the first claim's completion was fenced out
        assert held.lease_epoch == 2
        [fenced] = [r for r in caplog.records if r.getMessage() == "write fenced out"]
        assert fenced.levelname == "WARNING"
        second_gate.set()
        await asyncio.wait_for(second_tick, timeout=10)
    done = await first.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"by": "second"}
    assert (await types_of(store, enqueued.instance_id)).count(EventType.COMPLETED) == 1


async def test_an_instance_that_keeps_losing_its_worker_is_dead_lettered(store: Store) -> None:
    workflow = Workflow(
        "poison", handlers=dict(noop.handlers), initial="run", retry=RetryPolicy(max_attempts=10)
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("poison")
    statuses, waits = [], []
    for _ in range(3):  # claimed, then the worker vanishes: its lease runs out
        async with store.connection() as conn:  # any backoff of the last recovery is over
            await conn.execute("UPDATE laneway.instances SET run_after = now()")
        assert len(await store.claim("doomed", ["poison@1"], 10, 30.0)) == 1
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
            )
        recovered = await store.recover_expired_leases(max_recoveries=2)
        statuses.append([t.status for t in recovered])
        async with store.connection() as conn:
            # From the recovery's own time (updated_at), not this read's: a loaded machine
            # read the wait after a short one had passed, and saw it below 0.
            waits.append(
                await conn.fetchval(
                    "SELECT EXTRACT(EPOCH FROM run_after - updated_at) FROM laneway.instances"
                )
            )
    assert statuses == [[Status.PENDING], [Status.PENDING], [Status.FAILED]]
    assert waits[0] <= 0  # the first recovery resumes at once
    assert 0 <= waits[1] <= 1  # the second waits a random part of a second
    dead = await engine.get(enqueued.instance_id)
    assert dead is not None
    assert dead.recoveries == 3
    assert dead.last_error is not None
    assert dead.last_error.startswith("DeadLettered: its worker was lost 3 times")
    events = await store.instance_events_after(enqueued.instance_id, 0, 100)
    assert [e.type for e in events].count(EventType.FAILED) == 1
    assert events[-1].type == EventType.FAILED
    assert events[-1].error == dead.last_error
    retried = await engine.retry(enqueued.instance_id)  # a manual retry starts the count again
    assert retried.recoveries == 0


async def test_a_worker_lost_once_is_said_once_when_no_recovery_is_allowed(store: Store) -> None:
    # LANEWAY_MAX_RECOVERIES=0: the first loss dead-letters; it read "lost 1 times".
    engine = make_engine(store, noop)
    enqueued = await engine.enqueue("noop")
    assert len(await store.claim("doomed", ["noop@1"], 10, 30.0)) == 1
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
        )
    [recovered] = await store.recover_expired_leases(max_recoveries=0)
    dead = await engine.get(enqueued.instance_id)
    assert recovered.status == Status.FAILED
    assert dead is not None
    assert dead.last_error == (
        "DeadLettered: its worker was lost 1 time (recovery cap 0), last during attempt 1"
    )


def _two_steps(gate: asyncio.Event, entered: asyncio.Event, second_ran: list[str]) -> Workflow:
    async def first(ctx: HandlerContext, params: object) -> Next:
        entered.set()
        await gate.wait()
        return Next("second")

    async def second(ctx: HandlerContext, params: object) -> Done:
        second_ran.append(str(ctx.instance_id))
        return Done()

    return Workflow("drained", handlers={"first": first, "second": second}, initial="first")


async def test_stopping_lets_the_step_in_flight_finish_and_hands_back_at_its_checkpoint(
    store: Store,
) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    second_ran: list[str] = []
    engine = make_engine(store, _two_steps(gate, entered, second_ran), shutdown_grace_seconds=30)
    enqueued = await engine.enqueue("drained")
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    stopping.set()  # SIGTERM while the first step runs
    gate.set()
    await asyncio.wait_for(running, timeout=10)
    handed = await engine.get(enqueued.instance_id)
    assert handed is not None
    # The interrupted attempt is given back to the step's budget; the count goes on.
    assert (handed.status, handed.next_action, handed.attempts) == (Status.PENDING, "second", 1)
    assert handed.step_attempt == 0
    assert second_ran == []  # the next step is left to whoever claims it next
    assert await types_of(store, enqueued.instance_id) == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.CHECKPOINT,
        EventType.RETRYING,
    ]


async def test_each_instance_is_handed_back_at_its_own_checkpoint_while_others_drain(
    store: Store,
) -> None:
    # Found by an outside audit: an instance whose step checkpointed during the drain was
    # released only when the drain ended (the slowest step in flight, or the whole grace), so
    # no process ran it meanwhile.
    gates = {"fast": asyncio.Event(), "slow": asyncio.Event()}
    entered = {"fast": asyncio.Event(), "slow": asyncio.Event()}

    async def first(ctx: HandlerContext, params: Any) -> Next:
        entered[params["which"]].set()
        await gates[params["which"]].wait()
        return Next("second")

    async def second(ctx: HandlerContext, params: object) -> Done:
        return Done()

    workflow = Workflow("drained", handlers={"first": first, "second": second}, initial="first")
    engine = make_engine(store, workflow, shutdown_grace_seconds=30)
    fast = await engine.enqueue("drained", {"which": "fast"})
    slow = await engine.enqueue("drained", {"which": "slow"})
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in entered.values())), timeout=10)
    stopping.set()
    gates["fast"].set()
    handed = await eventually(
        lambda: store.get_instance(fast.instance_id),
        lambda found: found is not None and found.status == Status.PENDING,
    )
    assert handed is not None
    assert (handed.next_action, handed.owner_id) == ("second", None)
    assert not running.done()  # the slow step still runs, in its grace
    slow_instance = await store.get_instance(slow.instance_id)
    assert slow_instance is not None
    assert slow_instance.status == Status.RUNNING
    gates["slow"].set()
    await asyncio.wait_for(running, timeout=10)
    for enqueued in (fast, slow):
        assert await types_of(store, enqueued.instance_id) == [
            EventType.ENQUEUED,
            EventType.STARTED,
            EventType.CHECKPOINT,
            EventType.RETRYING,
        ]


async def test_a_step_still_running_after_the_grace_is_handed_back_unfinished(
    store: Store,
) -> None:
    never, entered = asyncio.Event(), asyncio.Event()
    engine = make_engine(store, _two_steps(never, entered, []), shutdown_grace_seconds=0.2)
    enqueued = await engine.enqueue("drained")
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    stopping.set()
    await asyncio.wait_for(running, timeout=10)
    handed = await engine.get(enqueued.instance_id)
    assert handed is not None
    assert (handed.status, handed.next_action, handed.attempts) == (Status.PENDING, "first", 1)
    assert handed.step_attempt == 0


async def test_a_handed_back_lease_is_released_only_once_its_handler_has_stopped(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an outside audit: the hand-back cancelled the handler and released its lease
    # at once, so while the handler unwound (cleanup after its cancel) another process had
    # claimed the instance and ran it too, past the queue's cap.
    entered, unwinding, unwind = asyncio.Event(), asyncio.Event(), asyncio.Event()
    cleaned_up = asyncio.Event()
    released_after_cleanup: list[bool] = []

    async def slow_to_stop(ctx: HandlerContext, params: object) -> Done:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            unwinding.set()
            await unwind.wait()  # cleanup that takes its time
            cleaned_up.set()
            raise
        return Done()

    release = store.release

    async def noting_release(*args: Any, **kwargs: Any) -> Any:
        released_after_cleanup.append(cleaned_up.is_set())
        return await release(*args, **kwargs)

    monkeypatch.setattr(store, "release", noting_release)  # the real one, called when noted
    workflow = Workflow("unwinding", handlers={"first": slow_to_stop}, initial="first")
    engine = make_engine(store, workflow, shutdown_grace_seconds=0.1)
    enqueued = await engine.enqueue("unwinding")
    stopping = asyncio.Event()
    running = asyncio.create_task(engine.run(stopping))
    await asyncio.wait_for(entered.wait(), timeout=10)
    stopping.set()
    await asyncio.wait_for(unwinding.wait(), timeout=10)
    for _ in range(20):  # turns of the loop for a hand-back that does not wait to go on
        await asyncio.sleep(0)
    unwind.set()
    await asyncio.wait_for(running, timeout=10)
    assert released_after_cleanup == [True]
    handed = await engine.get(enqueued.instance_id)
    assert handed is not None
    assert (handed.status, handed.owner_id) == (Status.PENDING, None)


async def _tick_of_one_hooked(
    store: Store, hook: Callable[[object], Awaitable[None]]
) -> tuple[Engine, "asyncio.Task[int]"]:
    """An engine (owner `renewer`) with one instance of a no-op workflow whose terminal hook is
    `hook`, and its tick running."""
    workflow = Workflow(
        "hooked", handlers=dict(noop.handlers), initial=noop.initial, on_terminal=hook
    )
    engine = make_engine(store, workflow, owner_id="renewer")
    await engine.enqueue("hooked")
    return engine, asyncio.create_task(engine.tick())


async def test_a_renewal_that_finds_the_lease_gone_stops_the_run_with_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Another process holds the instance now (its epoch moved on) and runs the step again:
    # the run here is stopped, and an operator should see that, as a fenced write.
    gate, entered = asyncio.Event(), asyncio.Event()
    engine = make_engine(store, _blocking("first", gate, entered))
    await engine.enqueue("fenced")
    tick = asyncio.create_task(engine.tick())
    await asyncio.wait_for(entered.wait(), timeout=10)
    [run] = engine.claim_loop._runs.values()
    async with store.connection() as conn:
        await conn.execute("UPDATE laneway.instances SET lease_epoch = lease_epoch + 1")
    await engine.claim_loop.presence.renew()
    assert run.cancelled.is_set()
    [stopped] = [r for r in caplog.records if r.getMessage() == "stopping run"]
    assert (stopped.levelname, getattr(stopped, "reason", None)) == ("WARNING", "lease lost")
    gate.set()
    await asyncio.wait_for(tick, timeout=10)


async def test_a_renewal_that_misses_a_run_which_just_ended_does_not_stop_it(
    store: Store,
) -> None:
    # Found by S-12 under CPU load: a renewal in flight while a run's completion committed
    # came back without that instance, and the heartbeat cancelled the run in its last
    # steps (here: the workflow's terminal hook) as if its lease had been lost.
    gate, entered, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hook(record: object) -> None:
        entered.set()
        await gate.wait()
        finished.set()

    engine, tick = await _tick_of_one_hooked(store, hook)
    await asyncio.wait_for(entered.wait(), timeout=10)
    [run] = engine.claim_loop._runs.values()
    assert run.settled
    # The instance is completed: the renewal does not hold it.
    await engine.claim_loop.presence.renew()
    assert not run.cancelled.is_set()
    gate.set()
    await asyncio.wait_for(tick, timeout=10)
    assert finished.is_set()  # the hook ran to its end


async def test_a_renewal_in_the_moment_a_write_committed_does_not_stop_its_run(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an outside audit under load: a renewal that came back after the run's last
    # write committed but before the run had its answer stopped it there: its failure's
    # ERROR line, its outcome counter and the workflow's terminal hook were skipped.
    committed, go_on, hooked = asyncio.Event(), asyncio.Event(), asyncio.Event()
    written = runner._written

    async def answered_late(*args: Any) -> Any:
        answer = await written(*args)
        committed.set()
        await go_on.wait()  # the run has not had its answer yet
        return answer

    async def hook(record: object) -> None:
        hooked.set()

    monkeypatch.setattr(runner, "_written", answered_late)
    engine, tick = await _tick_of_one_hooked(store, hook)
    await asyncio.wait_for(committed.wait(), timeout=10)
    [run] = engine.claim_loop._runs.values()
    assert not run.settled
    await engine.claim_loop.presence.renew()  # the instance is completed: not held
    assert not run.cancelled.is_set()
    go_on.set()
    await asyncio.wait_for(tick, timeout=10)
    assert hooked.is_set()


async def test_a_renewal_stops_a_run_whose_lease_was_taken(store: Store) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    engine = make_engine(store, _blocking("mine", gate, entered), owner_id="renewer")
    enqueued = await engine.enqueue("fenced")
    tick = asyncio.create_task(engine.tick())
    await asyncio.wait_for(entered.wait(), timeout=10)
    async with store.connection() as conn:  # another owner took it over
        await conn.execute("UPDATE laneway.instances SET owner_id = 'thief'")
    run = engine.claim_loop._runs[enqueued.instance_id]
    await engine.claim_loop.presence.renew()
    assert run.cancelled.is_set()
    await asyncio.wait_for(tick, timeout=10)


async def test_an_instance_whose_worker_was_lost_keeps_its_place_in_its_queue(
    store: Store,
) -> None:
    # The first recovery set run_after to now(), and a claim takes the earliest run_after
    # first: in a queue capped at 1, an instance whose worker died ran after two instances
    # enqueued after it (a hand-back at a stop already kept its place).
    engine = make_engine(store, noop)
    await engine.configure_queue("noop", concurrency=1)
    lost = (await engine.enqueue("noop")).instance_id
    assert [r.instance_id for r in await store.claim("dies", ["noop@1"], 1, 30.0)] == [lost]
    later = [(await engine.enqueue("noop")).instance_id for _ in range(2)]
    async with store.connection() as conn:  # the worker vanished: its lease runs out
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
            " WHERE instance_id = $1",
            lost,
        )
    assert [t.instance_id for t in await store.recover_expired_leases()] == [lost]
    claimed = await store.claim("next", ["noop@1"], 1, 30.0)
    assert [record.instance_id for record in claimed] == [lost], later
