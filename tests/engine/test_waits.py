"""Durable sleeps and waits for signals: rows, not tasks; no lease, no slot; each signal once."""

from uuid import UUID

import pytest

from laneway.engine import Done, HandlerContext, Next, Sleep, WaitForSignal, Workflow
from laneway.errors import ConflictError, InvalidInputError, NotFoundError
from laneway.model import EventType, Status
from laneway.store import Store
from tests.engine.helpers import events_of, eventually, make_engine, types_of, until_status


async def _nap(ctx: HandlerContext, params: object) -> Sleep:
    assert isinstance(params, dict)
    ctx.state["slept_from"] = ctx.attempt
    return Sleep(params["seconds"], "wake", {"slept": params["seconds"]})


async def _wake(ctx: HandlerContext, params: object) -> Done:
    return Done(params)


napper = Workflow("napper", handlers={"nap": _nap, "wake": _wake}, initial="nap", queue="naps")


async def _ask(ctx: HandlerContext, params: object) -> WaitForSignal:
    timeout = params.get("timeout") if isinstance(params, dict) else None
    on_timeout = "gave_up" if isinstance(params, dict) and params.get("recover") else None
    return WaitForSignal("approve", timeout, "approved", on_timeout)


async def _approved(ctx: HandlerContext, params: object) -> Done:
    return Done({"approved": True, "payload": params})


async def _gave_up(ctx: HandlerContext, params: object) -> Done:
    return Done({"approved": False, "params": params})


asker = Workflow(
    "asker",
    handlers={"ask": _ask, "approved": _approved, "gave_up": _gave_up},
    initial="ask",
    queue="asks",
)


async def _collect(ctx: HandlerContext, params: object) -> WaitForSignal | Done:
    got = list(ctx.state.get("got") or [])
    if params is not None:
        got.append(params)
    ctx.state["got"] = got
    if len(got) == 2:
        return Done({"got": got})
    return WaitForSignal("item", None, "collect")


async def _start_collect(ctx: HandlerContext, params: object) -> Next:
    return Next("collect")


collector = Workflow(
    "collector",
    handlers={"start": _start_collect, "collect": _collect},
    initial="start",
    queue="collects",
)


async def test_a_sleep_holds_nothing_then_wakes_at_its_action(store: Store) -> None:
    engine = make_engine(store, napper, poll_interval_seconds=5.0)
    # Long enough that the second tick below comes before it is due on a loaded machine
    enqueued = await engine.enqueue("napper", {"seconds": 1.5})
    await engine.tick()
    asleep = await engine.get(enqueued.instance_id)
    assert asleep is not None
    assert asleep.status == Status.WAITING
    assert asleep.owner_id is None
    assert asleep.lease_expires_at is None
    assert asleep.wake_at is not None
    assert asleep.wait_signal is None
    reason = await engine.waiting_reason(enqueued.instance_id)
    assert reason is not None
    assert reason.code == "SLEEPING"
    assert reason.until == asleep.wake_at
    assert await engine.tick() == 0  # not due: nothing to claim, nothing woken
    async with engine.running():
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED)
    assert done.result == {"slept": 1.5}
    events = await events_of(store, enqueued.instance_id)
    assert [e.type for e in events] == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.WAITING,
        EventType.RESUMED,
        EventType.STARTED,
        EventType.COMPLETED,
    ]
    assert events[2].status == Status.WAITING
    assert events[2].signal is None
    woke = events[3].at
    assert woke >= asleep.wake_at  # on the database clock, never early


async def test_cancel_while_asleep_ends_it_and_it_never_wakes(store: Store) -> None:
    engine = make_engine(store, napper)
    enqueued = await engine.enqueue("napper", {"seconds": 0.2})
    await engine.tick()
    asleep = await engine.get(enqueued.instance_id)
    assert asleep is not None
    wake_at = asleep.wake_at
    assert wake_at is not None
    cancelled = await engine.cancel(enqueued.instance_id)
    assert cancelled.status == Status.CANCELLED
    assert cancelled.wake_at is None
    await eventually(store.now, lambda now: now > wake_at)  # its wake time has passed
    transitions, _ = await store.wake_due()
    assert transitions == []
    assert await store.next_wake_in() is None


async def test_a_signal_wakes_its_wait_with_the_payload(store: Store) -> None:
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": 60})
    await engine.tick()
    waiting = await engine.get(enqueued.instance_id)
    assert waiting is not None
    assert waiting.status == Status.WAITING
    assert waiting.wait_signal == "approve"
    reason = await engine.waiting_reason(enqueued.instance_id)
    assert reason is not None
    assert reason.code == "AWAITING_SIGNAL"
    assert "'approve'" in reason.message
    assert reason.until == waiting.wake_at
    sent = await engine.signal(enqueued.instance_id, "approve", {"by": "ann"})
    assert sent.accepted
    assert sent.instance.status == Status.PENDING
    assert sent.instance.wake_at is None
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"approved": True, "payload": {"by": "ann"}}
    events = await events_of(store, enqueued.instance_id)
    signalled = [e for e in events if e.type in (EventType.WAITING, EventType.SIGNALLED)]
    assert [(e.type, e.signal, e.status) for e in signalled] == [
        (EventType.WAITING, "approve", Status.WAITING),
        (EventType.SIGNALLED, "approve", Status.PENDING),
    ]


async def test_a_signal_sent_before_the_wait_is_kept_for_it(store: Store) -> None:
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": 60})
    early = await engine.signal(enqueued.instance_id, "approve", "early")
    assert early.accepted
    assert early.instance.status == Status.PENDING
    other = await engine.signal(enqueued.instance_id, "unrelated", "ignored")
    assert other.accepted
    await engine.tick()  # the wait finds the kept signal and goes on at once
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"approved": True, "payload": "early"}
    assert (await types_of(store, enqueued.instance_id)).count(EventType.SIGNALLED) == 1


async def test_two_signals_two_waits_in_order(store: Store) -> None:
    engine = make_engine(store, collector)
    enqueued = await engine.enqueue("collector")
    await engine.signal(enqueued.instance_id, "item", 1)
    await engine.signal(enqueued.instance_id, "item", 2)
    async with engine.running():
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED)
    assert done.result == {"got": [1, 2]}


async def test_a_repeated_idempotency_key_is_not_a_second_signal(store: Store) -> None:
    engine = make_engine(store, collector)
    enqueued = await engine.enqueue("collector")
    first = await engine.signal(enqueued.instance_id, "item", 1, idempotency_key="delivery-1")
    again = await engine.signal(enqueued.instance_id, "item", 1, idempotency_key="delivery-1")
    assert first.accepted
    assert not again.accepted
    assert again.signal_id == first.signal_id
    await engine.signal(enqueued.instance_id, "item", 2, idempotency_key="delivery-2")
    async with engine.running():
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED)
    assert done.result == {"got": [1, 2]}


async def test_signals_to_ended_unknown_or_bad_targets_are_refused(store: Store) -> None:
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": 60})
    await engine.tick()
    await engine.signal(enqueued.instance_id, "approve")
    await engine.tick()
    with pytest.raises(ConflictError, match="completed"):
        await engine.signal(enqueued.instance_id, "approve")
    with pytest.raises(NotFoundError):
        await engine.signal(UUID(int=7), "approve")
    with pytest.raises(InvalidInputError, match="signal name"):
        await engine.signal(enqueued.instance_id, "no spaces")
    with pytest.raises(InvalidInputError, match="payload"):
        await engine.signal(enqueued.instance_id, "approve", float("nan"))


async def test_a_timeout_runs_on_timeout_or_fails_without_it(store: Store) -> None:
    engine = make_engine(store, asker)
    recovering = await engine.enqueue("asker", {"timeout": 0.2, "recover": True})
    failing = await engine.enqueue("asker", {"timeout": 0.2})
    async with engine.running():
        recovered = await until_status(store, recovering.instance_id, Status.COMPLETED)
        failed = await until_status(store, failing.instance_id, Status.FAILED)
    assert recovered.result == {"approved": False, "params": None}
    assert failed.last_error == "SignalTimeout: timed out after 0.2 s waiting for signal 'approve'"
    assert (await types_of(store, failing.instance_id))[-1] == EventType.FAILED
    with pytest.raises(ConflictError):  # the timed-out wait takes no late signal
        await engine.signal(failing.instance_id, "approve")


async def test_cancel_while_waiting_for_a_signal(store: Store) -> None:
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": None})
    await engine.tick()
    cancelled = await engine.cancel(enqueued.instance_id)
    assert cancelled.status == Status.CANCELLED
    with pytest.raises(ConflictError, match="cancelled"):
        await engine.signal(enqueued.instance_id, "approve")


async def test_waiting_instances_hold_no_slot_of_a_queue_of_one(store: Store) -> None:
    engine = make_engine(store, napper, asker)
    await engine.configure_queue("naps", concurrency=1)
    await engine.configure_queue("asks", concurrency=1)
    sleepers = [await engine.enqueue("napper", {"seconds": 3600}) for _ in range(2)]
    askers = [await engine.enqueue("asker", {"timeout": 3600}) for _ in range(2)]
    await engine.tick()
    await engine.tick()  # the second of each queue runs while the first waits
    for enqueued in (*sleepers, *askers):
        record = await engine.get(enqueued.instance_id)
        assert record is not None
        assert record.status == Status.WAITING
    [naps] = [q for q in await engine.queues() if q.name == "naps"]
    assert naps.counts[Status.WAITING] == 2


async def test_two_workers_racing_consume_each_signal_once(store: Store) -> None:
    first = make_engine(store, collector, concurrency=4)
    second = make_engine(store, collector, concurrency=4)
    instances = [await first.enqueue("collector") for _ in range(20)]
    async with first.running(), second.running():
        for enqueued in instances:
            await first.signal(enqueued.instance_id, "item", "a")
        for enqueued in instances:
            await second.signal(enqueued.instance_id, "item", "b")
        done = [await until_status(store, e.instance_id, Status.COMPLETED) for e in instances]
    assert all(record.result == {"got": ["a", "b"]} for record in done)
    for enqueued in instances:
        assert (await types_of(store, enqueued.instance_id)).count(EventType.SIGNALLED) == 2


def test_bad_waits_are_refused_where_they_are_made() -> None:
    with pytest.raises(InvalidInputError, match="seconds"):
        Sleep(-1, "wake")
    with pytest.raises(InvalidInputError, match="signal name"):
        WaitForSignal("", 10, "then")
    with pytest.raises(InvalidInputError, match="on_timeout needs timeout_seconds"):
        WaitForSignal("approve", None, "then", "late")


async def _ask_again(ctx: HandlerContext, params: object) -> WaitForSignal:
    asked = int(ctx.state.get("asked") or 0) + 1
    ctx.state["asked"] = asked
    # The first wait times out at once; the one a retry makes waits long enough for a signal.
    return WaitForSignal("approve", 0.2 if asked == 1 else 600, "approved")


patient = Workflow("patient", handlers={"ask": _ask_again, "approved": _approved}, initial="ask")


async def test_a_retried_timeout_waits_again_and_takes_its_signal(store: Store) -> None:
    engine = make_engine(store, patient)
    enqueued = await engine.enqueue("patient")
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.FAILED)
        await engine.retry(enqueued.instance_id)
        waiting = await until_status(store, enqueued.instance_id, Status.WAITING)
        assert waiting.wait_signal == "approve"
        await engine.signal(enqueued.instance_id, "approve", "second chance")
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED)
    assert done.result == {"approved": True, "payload": "second chance"}


async def test_a_waiting_keyed_instance_keeps_its_key_and_runs_after_waking(
    store: Store,
) -> None:
    engine = make_engine(store, napper)
    await engine.configure_queue("naps", concurrency=5, key_concurrency=1)
    sleeper = await engine.enqueue("napper", {"seconds": 0.3}, concurrency_key="tenant")
    await engine.tick()
    other = await engine.enqueue("napper", {"seconds": 0.0}, concurrency_key="other")
    await engine.tick()  # the claim clears idle keys at the front of the turn order
    async with store.connection() as conn:
        keys = await conn.fetch("SELECT key FROM laneway.queue_keys ORDER BY key")
    assert "tenant" in [row["key"] for row in keys]
    async with engine.running():
        done = await until_status(store, sleeper.instance_id, Status.COMPLETED)
        await until_status(store, other.instance_id, Status.COMPLETED)
    assert done.result == {"slept": 0.3}


async def test_a_waiting_singleton_is_still_the_active_one(store: Store) -> None:
    engine = make_engine(store, napper)
    first = await engine.enqueue("napper", {"seconds": 3600}, singleton_key="one")
    await engine.tick()
    again = await engine.enqueue("napper", {"seconds": 1}, singleton_key="one")
    assert not again.created
    assert again.instance_id == first.instance_id


async def _until_past_its_wake_time(store: Store, instance_id: UUID) -> None:
    """Wait until the database clock is past the instance's wake time (no engine runs, so
    nothing wakes it meanwhile)."""

    async def past() -> bool:
        async with store.connection() as conn:
            passed: bool = await conn.fetchval(
                "SELECT wake_at < now() FROM laneway.instances WHERE instance_id = $1",
                instance_id,
            )
        return passed

    await eventually(past, bool)


async def test_a_signal_after_the_timeout_is_kept_and_the_timeout_wins(store: Store) -> None:
    # The timeout passed before the signal came, though no engine had woken the instance
    # yet: on_timeout runs, as it would have had an engine been quicker; the signal is kept.
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": 0.2, "recover": True})
    await engine.tick()
    await _until_past_its_wake_time(store, enqueued.instance_id)
    sent = await engine.signal(enqueued.instance_id, "approve", "late")
    assert sent.accepted
    assert sent.instance.status == Status.WAITING
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"approved": False, "params": None}
    assert EventType.SIGNALLED not in await types_of(store, enqueued.instance_id)
    kept = await _count(
        store,
        "SELECT count(*) FROM laneway.signals WHERE instance_id = $1 AND consumed_at IS NULL",
        enqueued.instance_id,
    )
    assert kept == 1


async def test_a_signal_kept_before_a_wait_of_no_time_is_still_taken(store: Store) -> None:
    engine = make_engine(store, asker)
    enqueued = await engine.enqueue("asker", {"timeout": 0})
    await engine.signal(enqueued.instance_id, "approve", "early")
    for _ in range(2):
        await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"approved": True, "payload": "early"}


async def _count(store: Store, sql: str, *args: object) -> int:
    async with store.connection() as conn:
        value: int = await conn.fetchval(sql, *args)
    return value
