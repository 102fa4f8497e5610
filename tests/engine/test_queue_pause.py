"""Pausing a queue (Engine.pause_queue, resume_queue): nothing of it starts while paused, what
runs finishes, a resume starts its instances at once in every listening process, both calls
are idempotent, and neither an operator's caps nor code's defaults undo a pause."""

import asyncio
import json
import logging
import time
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Done, HandlerContext, Workflow
from laneway.errors import InvalidInputError
from laneway.events import EventHub
from laneway.model import InstanceRecord, JSONValue, QueueRecord, Status
from laneway.store import Store, open_store
from tests.billing_template import billing
from tests.engine.helpers import eventually, make_engine, until_status
from tests.workflows import noop

POLL_SECONDS = 30.0  # a worker's fallback poll, far longer than any wait in these tests
PROMPT_SECONDS = 5.0  # a resume that starts its instance within this did not wait for a poll


async def _queue(store: Store, name: str) -> QueueRecord:
    (record,) = await store.queues(name)
    return record


def claims_begun(store: Store) -> list[float]:
    """When each claim of the engines on `store` began (time.monotonic()), listed as it ends."""
    ended: list[float] = []
    real_claim = store.claim_rung

    async def claim(*args: Any, **kwargs: Any) -> tuple[list[InstanceRecord], int | None]:
        began = time.monotonic()
        try:
            return await real_claim(*args, **kwargs)
        finally:
            ended.append(began)

    store.claim_rung = claim  # type: ignore[method-assign]
    return ended


async def idle_since(claims: list[float], moment: float) -> None:
    """Wait for a claim begun after `moment` to end: with nothing to take, the loop then sleeps
    until its next poll unless something wakes it. Take `moment` before the write whose
    doorbell wakes the loop: its NOTIFY can reach the listener, and the claim begin, before
    the write's own answer reaches the caller, and no claim would come after that."""
    await eventually(
        lambda: asyncio.sleep(0, claims), lambda ended: any(began > moment for began in ended)
    )


async def _reason(store: Store, instance_id: UUID) -> str | None:
    reason = (await store.waiting_reasons([instance_id])).get(instance_id)
    return None if reason is None else reason.code


async def test_a_paused_queue_starts_nothing_until_it_is_resumed(store: Store) -> None:
    engine = make_engine(store, noop)
    held = [await engine.enqueue("noop", queue="held") for _ in range(3)]
    other = await engine.enqueue("noop", queue="other")
    paused = await engine.pause_queue("held")
    assert (paused.name, paused.paused, paused.counts) == ("held", True, {Status.PENDING: 3})

    assert await engine.tick() == 1  # the other queue's instance only
    assert (await until_status(store, other.instance_id, Status.COMPLETED)).attempts == 1
    assert await engine.tick() == 0
    for enqueued in held:
        record = await engine.get(enqueued.instance_id)
        assert record is not None
        assert (record.status, record.attempts) == (Status.PENDING, 0)

    resumed = await engine.resume_queue("held")
    assert (resumed.paused, resumed.counts) == (False, {Status.PENDING: 3})
    assert await engine.tick() == 3
    for enqueued in held:
        await until_status(store, enqueued.instance_id, Status.COMPLETED)


async def test_running_instances_finish_and_pending_ones_wait_while_paused(
    store: Store, database_url: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def gated(ctx: HandlerContext, params: JSONValue) -> Done:
        started.set()
        await release.wait()
        return Done({"finished": True})

    workflow = Workflow("gated", handlers={"run": gated}, initial="run", queue="gate")
    engine = make_engine(store, workflow, poll_interval_seconds=0.05)
    async with engine.running():
        first = await engine.enqueue("gated")
        await asyncio.wait_for(started.wait(), timeout=10)
        record = await engine.pause_queue("gate")
        assert (record.paused, record.counts) == (True, {Status.RUNNING: 1})
        second = await engine.enqueue("gated")
        # The live worker has the workflow: the only thing holding the second is the pause.
        await eventually(lambda: _reason(store, second.instance_id), lambda c: c == "QUEUE_PAUSED")

        release.set()  # the running one goes on to its end
        done = await until_status(store, first.instance_id, Status.COMPLETED)
        assert done.result == {"finished": True}
        # The slot its end freed is not filled: another process claims nothing either.
        async with open_store(database_url) as other_store:
            assert await make_engine(other_store, workflow, owner_id="other").tick() == 0
        pending = await engine.get(second.instance_id)
        assert pending is not None
        assert (pending.status, pending.attempts) == (Status.PENDING, 0)
        assert await _reason(store, second.instance_id) == "QUEUE_PAUSED"

        await engine.resume_queue("gate")
        await until_status(store, second.instance_id, Status.COMPLETED)


async def test_a_resume_elsewhere_starts_an_idle_workers_instance_before_its_next_poll(
    store: Store, database_url: str
) -> None:
    worker = make_engine(store, noop, owner_id="idle-worker", poll_interval_seconds=POLL_SECONDS)
    async with open_store(database_url) as api_store:
        api = make_engine(api_store, noop, owner_id="api")  # another process: its loop never runs
        await api.pause_queue("noop")
        hub = EventHub.open(database_url, store, on_notification=worker.notify)
        claims = claims_begun(store)
        async with hub, worker.running():
            await eventually(store.live_workers, lambda workers: len(workers) == 1)
            before = time.monotonic()
            enqueued = await api.enqueue("noop")  # its doorbell wakes the worker: nothing to claim
            await idle_since(claims, before)
            assert await _reason(store, enqueued.instance_id) == "QUEUE_PAUSED"
            began = time.monotonic()
            await api.resume_queue("noop")
            await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=10)
            elapsed = time.monotonic() - began
    assert elapsed < PROMPT_SECONDS, f"started {elapsed:.2f} s after the resume"


async def test_a_resume_wakes_its_own_engine_without_a_listener(store: Store) -> None:
    engine = make_engine(store, noop, poll_interval_seconds=POLL_SECONDS)
    await engine.pause_queue("noop")
    claims = claims_begun(store)
    async with engine.running():
        await eventually(store.live_workers, lambda workers: len(workers) == 1)
        before = time.monotonic()
        enqueued = await engine.enqueue("noop")  # wakes its loop: nothing to claim
        await idle_since(claims, before)
        assert await _reason(store, enqueued.instance_id) == "QUEUE_PAUSED"
        began = time.monotonic()
        await engine.resume_queue("noop")
        await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=10)
        assert time.monotonic() - began < PROMPT_SECONDS


async def test_pause_and_resume_are_idempotent_and_only_a_change_rings(
    store: Store, admin: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, noop)
    rung: asyncio.Queue[str] = asyncio.Queue()
    await admin.add_listener("laneway_events", lambda *args: rung.put_nowait(args[3]))
    caplog.set_level(logging.INFO, logger="laneway.engine.queue_calls")

    first = await engine.pause_queue("noop", requested_by="graphql from 10.0.0.7")
    again = await engine.pause_queue("noop")
    assert first == again
    assert first.paused

    resumed = await engine.resume_queue("noop")
    once_more = await engine.resume_queue("noop")
    assert resumed == once_more
    assert not resumed.paused
    # One doorbell, the first resume's: the next one to come is the enqueue's.
    assert json.loads(await asyncio.wait_for(rung.get(), timeout=10)) == {"e": 0}
    enqueued = await engine.enqueue("noop")
    last = await admin.fetchval(
        "SELECT max(event_id) FROM laneway.events WHERE instance_id = $1", enqueued.instance_id
    )
    assert json.loads(await asyncio.wait_for(rung.get(), timeout=10)) == {"e": last}

    said = [
        (r.getMessage(), r.__dict__["queue"], r.__dict__["requested_by"]) for r in caplog.records
    ]
    assert said == [
        ("queue paused", "noop", "graphql from 10.0.0.7"),
        ("queue already paused", "noop", "python"),
        ("queue resumed", "noop", "python"),
        ("queue not paused", "noop", "python"),
    ]
    assert {r.levelno for r in caplog.records} == {logging.INFO}


async def test_pausing_a_queue_there_is_not_yet_creates_it_paused(store: Store) -> None:
    engine = make_engine(store, noop)
    record = await engine.pause_queue("not-yet")
    assert record == QueueRecord(
        name="not-yet",
        concurrency=100,
        rate_per_minute=None,
        paused=True,
        counts={},
        settings_source="default",
    )
    enqueued = await engine.enqueue("noop", queue="not-yet")
    assert await engine.tick() == 0
    assert (await _queue(store, "not-yet")).counts == {Status.PENDING: 1}
    assert (await engine.resume_queue("new-and-running")).paused is False
    await engine.resume_queue("not-yet")
    assert await engine.tick() == 1
    await until_status(store, enqueued.instance_id, Status.COMPLETED)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "ünï"])
async def test_a_bad_queue_name_is_refused_and_nothing_is_written(store: Store, name: str) -> None:
    engine = make_engine(store, noop)
    for call in (engine.pause_queue, engine.resume_queue):
        with pytest.raises(InvalidInputError, match="queue name"):
            await call(name)
    assert await store.queues() == []


async def test_a_pause_survives_an_operators_caps_and_code_defaults_at_each_start(
    store: Store, database_url: str
) -> None:
    first = make_engine(store, billing(3, 120.0))
    await first.pause_queue("billing")  # before any engine declared it: code may still set caps
    async with first.running():
        await eventually(store.live_workers, lambda workers: len(workers) == 1)
        pending = await first.enqueue("billing")
        await eventually(lambda: _reason(store, pending.instance_id), lambda c: c == "QUEUE_PAUSED")
    record = await _queue(store, "billing")
    assert (record.paused, record.concurrency, record.settings_source) == (True, 3, "code")

    configured = await first.configure_queue("billing", concurrency=7, rate_per_minute=60.0)
    assert (configured.paused, configured.concurrency) == (True, 7)

    # A new deploy with other code defaults: its start re-applies queue settings.
    async with open_store(database_url) as other_store:
        second = make_engine(other_store, billing(5, 30.0), owner_id="deploy-2")
        async with second.running():
            await eventually(other_store.live_workers, lambda workers: len(workers) == 1)
            assert await second.tick() == 0
            assert await _reason(other_store, pending.instance_id) == "QUEUE_PAUSED"
        record = await _queue(other_store, "billing")
        assert (record.paused, record.concurrency, record.settings_source) == (
            True,
            7,
            "operator",
        )
        await second.resume_queue("billing")
        assert await second.tick() == 1
        await until_status(other_store, pending.instance_id, Status.COMPLETED)


async def test_caps_raised_elsewhere_start_an_idle_workers_waiting_instance_at_once(
    store: Store, database_url: str
) -> None:
    # configureQueue raising a full queue's cap left what waited for the workers' next poll.
    release = asyncio.Event()

    async def hold(ctx: HandlerContext, params: JSONValue) -> Done:
        await release.wait()
        return Done()

    held = Workflow("held", handlers={"run": hold}, initial="run")
    worker = make_engine(store, held, owner_id="idle-worker", poll_interval_seconds=POLL_SECONDS)
    async with open_store(database_url) as api_store:
        api = make_engine(api_store, held, owner_id="api")  # another process: its loop never runs
        await api.configure_queue("held", concurrency=1)
        hub = EventHub.open(database_url, store, on_notification=worker.notify)
        claims = claims_begun(store)
        async with hub, worker.running():
            first = await api.enqueue("held")
            await until_status(store, first.instance_id, Status.RUNNING, timeout=10)
            before = time.monotonic()
            second = await api.enqueue("held")  # its doorbell wakes the worker: the queue is full
            await idle_since(claims, before)
            assert await _reason(store, second.instance_id) == "QUEUE_FULL"
            began = time.monotonic()
            await api.configure_queue("held", concurrency=2)
            await until_status(store, second.instance_id, Status.RUNNING, timeout=10)
            elapsed = time.monotonic() - began
            release.set()
    assert elapsed < PROMPT_SECONDS, f"started {elapsed:.2f} s after the caps were raised"
