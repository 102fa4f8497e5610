"""Concurrency keys in the engine (issue #18, points 1-2): caps per key across processes, fair
turns across keys, the key rate, idle keys pruned without losing work, and waiting reasons.

Caps and orders are measured on database timestamps and event ids, never on the test's clock.
"""

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from laneway.engine import Done, Engine, HandlerContext, Pause, Workflow
from laneway.engine.handler_map import RetryPolicy
from laneway.engine.requests import EnqueueRequest
from laneway.model import EventType, Status, WaitingReason
from laneway.store import Store, open_store
from tests.engine.helpers import events_of, eventually, make_engine
from tests.engine.key_worker import QUEUE, keyed_workflow
from tests.processes import run_process

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.05


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


def _instant(name: str, queue: str) -> Workflow:
    return Workflow(name, handlers={"run": _done}, initial="run", queue=queue)


async def _statuses(store: Store, ids: Sequence[UUID]) -> Counter[str]:
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT status FROM laneway.instances WHERE instance_id = ANY($1)", list(ids)
        )
    return Counter(row["status"] for row in rows)


def _all_completed(ids: Sequence[UUID]) -> Callable[[Counter[str]], bool]:
    return lambda counts: counts == Counter({Status.COMPLETED.value: len(ids)})


async def _until_completed(store: Store, ids: Sequence[UUID], timeout: float = 20) -> None:
    await eventually(lambda: _statuses(store, ids), _all_completed(ids), timeout=timeout)


async def _start_order(store: Store, queue: str) -> list[str | None]:
    """The concurrency key of every `started` event of `queue`, in event order."""
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT i.concurrency_key FROM laneway.events AS e"
            " JOIN laneway.instances AS i USING (instance_id)"
            " WHERE e.type = 'started' AND i.queue = $1 ORDER BY e.event_id",
            queue,
        )
    return [row["concurrency_key"] for row in rows]


async def _key_rows(store: Store, queue: str) -> int:
    async with store.connection() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM laneway.queue_keys WHERE queue = $1", queue
        )
    return count


async def _tick_until_idle(engine: Engine, most: int) -> int:
    """Tick until a tick runs nothing; fail if that takes more than `most` ticks."""
    for ticks in range(most):
        if await engine.tick() == 0:
            return ticks
    raise AssertionError(f"still claiming after {most} ticks")


# -- 1. the cap per key across two OS processes ------------------------------------------------


async def test_key_and_queue_caps_hold_across_two_processes(
    store: Store, database_url: str
) -> None:
    # At first 6 keys x 2 slots = 12 > 10: the queue's cap binds. Then the smaller keys run
    # dry one after another, and the caps per key hold back the longer ones.
    backlog = {"tenant-0": 14, "tenant-1": 10, "tenant-2": 7, "tenant-3": 5, "tenant-4": 3}
    backlog["tenant-5"] = 3
    setup = make_engine(store, keyed_workflow("setup"))
    await setup.configure_queue(QUEUE, concurrency=10, key_concurrency=2)
    owners = ("proc-a", "proc-b")

    async def worker(owner: str) -> None:
        env = dict(
            os.environ,
            KEY_WORKER_URL=database_url,
            KEY_WORKER_OWNER=owner,
            KEY_WORKER_EXPECTED=str(sum(backlog.values())),
        )
        argv = [sys.executable, "-m", "tests.engine.key_worker"]
        code, out, err = await run_process(argv, cwd=ROOT, env=env, timeout=90)
        # Raised inside the task group: a process that dies early ends the wait for it.
        assert code == 0, err
        assert out.startswith("done"), (out, err)

    async with asyncio.TaskGroup() as group:
        for owner in owners:
            group.create_task(worker(owner))
        # Enqueue only once both processes' engines run, so neither finishes it all alone.
        await eventually(
            setup.workers, lambda ws: {w.owner_id for w in ws} >= set(owners), timeout=60
        )
        results = await setup.enqueue_many(
            [
                EnqueueRequest(name="keyed", params={"i": i}, concurrency_key=key)
                for key, count in backlog.items()
                for i in range(count)
            ]
        )
    ids = [r.instance_id for r in results]

    spans: list[tuple[datetime, datetime, str]] = []
    ran_by: Counter[str] = Counter()
    for instance_id in ids:
        record = await setup.get(instance_id)
        assert record is not None
        assert record.status == Status.COMPLETED
        assert isinstance(record.result, dict)
        ran_by[str(record.result["owner"])] += 1
        events = await events_of(store, instance_id)
        start = next(e.at for e in events if e.type == EventType.STARTED)
        end = next(e.at for e in events if e.type == EventType.COMPLETED)
        assert record.concurrency_key is not None
        spans.append((start, end, record.concurrency_key))
    assert set(ran_by) == set(owners), ran_by  # both processes claimed some
    peak_total = peak_key = 0
    for start, _, key in spans:
        running = [k for s, e, k in spans if s <= start < e]
        peak_total = max(peak_total, len(running))
        peak_key = max(peak_key, running.count(key))
        assert len(running) <= 10, (start, running)
        assert running.count(key) <= 2, (start, key, running)
    # The caps were reached, not merely respected by a trickle.
    assert (peak_total, peak_key) == (10, 2)


# -- 2. fair turns: a big backlog does not starve a small key ---------------------------------


async def test_small_key_starts_early_behind_a_backlog_of_another_key(store: Store) -> None:
    workflow = _instant("fair", "fair")
    engine = make_engine(store, workflow)
    await engine.configure_queue("fair", concurrency=4)
    await engine.enqueue_many(
        [EnqueueRequest(name="fair", params={"i": i}, concurrency_key="big") for i in range(2000)]
    )
    small = await engine.enqueue_many(
        [EnqueueRequest(name="fair", params={"i": i}, concurrency_key="small") for i in range(5)]
    )
    small_ids = [r.instance_id for r in small]
    for _ in range(10):
        assert await engine.tick() >= 3  # a claim fills the queue's 4 slots, or nearly
        if await _statuses(store, small_ids) == Counter({Status.COMPLETED.value: 5}):
            break
    else:
        raise AssertionError("the small key did not finish in 10 ticks")
    order = await _start_order(store, "fair")
    places = [n for n, key in enumerate(order) if key == "small"]
    # First in, first out, they would be starts 2000 to 2004; with turns, two a claim.
    assert len(places) == 5
    assert places[-1] < 40, places
    assert order[:4].count("small") == 2, order[:4]


async def test_higher_priority_goes_first_across_keys_whose_turn_is_far_off(
    store: Store,
) -> None:
    workflow = _instant("ranked", "ranked")
    engine = make_engine(store, workflow)
    await engine.configure_queue("ranked", concurrency=2)
    # "vip" is served first, so it goes to the back of the turn order behind 30 keys.
    await engine.enqueue("ranked", {"first": True}, concurrency_key="vip")
    assert await engine.tick() == 1
    await engine.enqueue_many(
        [
            EnqueueRequest(name="ranked", params={"i": i}, concurrency_key=f"k-{i % 30}")
            for i in range(150)
        ]
    )
    urgent = await engine.enqueue("ranked", {"urgent": True}, concurrency_key="vip", priority=10)
    assert await engine.tick() == 2
    order = await _start_order(store, "ranked")
    # Only the least recently served keys have their turn (2 slots, 31 keys), yet the
    # priority-10 instance of "vip" starts in this claim.
    assert len(order) == 3
    assert "vip" in order[1:], order
    started = [e for e in await events_of(store, urgent.instance_id) if e.type == "started"]
    assert len(started) == 1


async def test_one_slot_takes_turns_across_keys_and_the_unkeyed_lane(store: Store) -> None:
    workflow = _instant("turns", "turns")
    engine = make_engine(store, workflow)
    await engine.configure_queue("turns", concurrency=1)
    lanes: dict[str | None, int] = {"a": 12, "b": 6, None: 9}
    # Enqueued lane after lane: FIFO would run all of "a" first.
    for key, count in lanes.items():
        await engine.enqueue_many(
            [
                EnqueueRequest(name="turns", params={"i": i}, concurrency_key=key)
                for i in range(count)
            ]
        )
    await _tick_until_idle(engine, sum(lanes.values()) + 2)
    order = await _start_order(store, "turns")
    assert Counter(order) == Counter(lanes)
    left = dict(lanes)
    streak = 0
    for n, key in enumerate(order):
        streak = streak + 1 if n > 0 and order[n - 1] == key else 1
        others_waiting = any(c > 0 for k, c in left.items() if k != key)
        assert streak <= 2 or not others_waiting, (n, order)
        left[key] -= 1


# -- 3. the key rate holds across two engines, other lanes unaffected -------------------------


async def test_key_rate_holds_across_two_engines_and_other_lanes_start_at_once(
    store: Store, database_url: str
) -> None:
    workflow = _instant("metered_keys", "metered_keys")
    rate = 600.0  # per key: 10 a second, bursts of 10
    window = 10.0
    burst = 10
    setup = make_engine(store, workflow)
    await setup.configure_queue("metered_keys", concurrency=100, key_rate_per_minute=rate)
    intervals = round(window * rate / 60.0)
    needed = burst + intervals + 1
    limited = await setup.enqueue_many(
        [EnqueueRequest(name="metered_keys", concurrency_key="k") for _ in range(needed)]
    )
    # Behind k's backlog: a key with few enough to fit its own bucket, and the unkeyed lane
    # (no key caps). Neither should wait for k.
    others = await setup.enqueue_many(
        [EnqueueRequest(name="metered_keys", concurrency_key="free") for _ in range(burst)]
        + [EnqueueRequest(name="metered_keys") for _ in range(30)]
    )
    limited_ids = [r.instance_id for r in limited]
    other_ids = [r.instance_id for r in others]
    async with open_store(database_url) as other_store:
        # The default 2 s poll: only the token wake-ups can hold 10 a second.
        first = make_engine(store, workflow, owner_id="keys-a")
        second = make_engine(other_store, workflow, owner_id="keys-b")
        async with first.running(), second.running():
            await eventually(
                lambda: _statuses(store, limited_ids + other_ids),
                _all_completed(limited_ids + other_ids),
                timeout=window + 20,
            )
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT concurrency_key, claimed_at, owner_id FROM laneway.instances"
            " WHERE queue = 'metered_keys' ORDER BY claimed_at"
        )
    k_starts = [r["claimed_at"] for r in rows if r["concurrency_key"] == "k"]
    assert len(k_starts) == needed
    span = (k_starts[burst + intervals] - k_starts[burst]).total_seconds()
    observed = intervals / span * 60.0
    assert abs(observed - rate) <= TOLERANCE * rate, observed
    # Never ahead of the bucket: the n-th start (0-based) needs n+1-burst tokens refilled.
    for n, at in enumerate(k_starts):
        earliest = (n + 1 - burst) / (rate / 60.0)
        assert (at - k_starts[0]).total_seconds() >= earliest - 0.05, (n, at - k_starts[0])
    # The other lanes all started within a second of the first start (k took ten seconds).
    other_starts = [r["claimed_at"] for r in rows if r["concurrency_key"] != "k"]
    assert len(other_starts) == len(other_ids)
    assert max(other_starts) - k_starts[0] < timedelta(seconds=1), max(other_starts)


# -- 4. idle keys are pruned, and no instance is lost to a prune ------------------------------


async def test_idle_keys_are_pruned_by_later_claims(store: Store) -> None:
    workflow = _instant("pruned", "pruned")
    engine = make_engine(store, workflow)
    await engine.configure_queue("pruned", concurrency=10)
    keys = [f"key-{k:02d}" for k in range(50)]
    for _ in range(4):
        batch = await engine.enqueue_many(
            [EnqueueRequest(name="pruned", concurrency_key=key) for key in keys]
        )
        assert await _key_rows(store, "pruned") == len(keys)  # every key with work has its row
        await _tick_until_idle(engine, 20)
        ids = [r.instance_id for r in batch]
        assert await _statuses(store, ids) == Counter({Status.COMPLETED.value: len(keys)})
    # Now work in one other key only: each claim deletes a few idle keys at the front.
    seen = [await _key_rows(store, "pruned")]
    for _ in range(12):
        await engine.enqueue("pruned", concurrency_key="busy")
        assert await engine.tick() == 1
        seen.append(await _key_rows(store, "pruned"))
    assert seen[-1] == 1, seen  # "busy" alone: it was pending at every claim
    assert seen == sorted(seen, reverse=True), seen
    # The first claim serves "busy" (a new key comes first); the second walks past the 50
    # idle keys at the front of the turn order, and clears them all away.
    assert seen[2] == 1, seen


async def test_enqueues_racing_claims_and_prunes_all_complete(store: Store) -> None:
    workflow = _instant("racing", "racing")
    engine = make_engine(store, workflow, poll_interval_seconds=0.02)
    await engine.configure_queue("racing", concurrency=20)
    keys = [f"r-{k}" for k in range(10)]
    ids: list[UUID] = []
    async with engine.running():
        for round_ in range(6):
            # Single enqueues and batches on the same keys at once, while the engine claims
            # and prunes the keys the previous round left idle.
            singles = [
                engine.enqueue("racing", {"round": round_, "i": i}, concurrency_key=keys[i % 10])
                for i in range(60)
            ]
            batches = [
                engine.enqueue_many(
                    [EnqueueRequest(name="racing", concurrency_key=key) for key in reversed(keys)]
                )
                for _ in range(4)
            ]
            results = await asyncio.gather(*singles)
            batched = await asyncio.gather(*batches)
            ids += [r.instance_id for r in results]
            ids += [r.instance_id for batch in batched for r in batch]
            await _until_completed(store, ids)
    assert len(ids) == 6 * (60 + 40)


# -- 5. a retried keyed instance gets its key row back ----------------------------------------


async def test_retry_of_a_failed_keyed_instance_makes_its_key_row_again(store: Store) -> None:
    calls = 0

    async def fail_once(ctx: HandlerContext, params: object) -> Done:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first attempt fails")
        return Done({"calls": calls})

    workflow = Workflow(
        "retried",
        handlers={"run": fail_once},
        initial="run",
        queue="retried",
        retry=RetryPolicy(max_attempts=1),
    )
    other = _instant("retried_other", "retried")
    engine = make_engine(store, workflow, other)
    await engine.configure_queue("retried", concurrency=5, key_concurrency=1)
    failed = await engine.enqueue("retried", concurrency_key="r")
    await engine.tick()
    record = await engine.get(failed.instance_id)
    assert record is not None
    assert record.status == Status.FAILED
    # Work in another key: its claims prune "r", which has nothing pending, running or paused.
    for _ in range(2):
        await engine.enqueue("retried_other", concurrency_key="other")
        await engine.tick()
    async with store.connection() as conn:
        left = await conn.fetch("SELECT key FROM laneway.queue_keys WHERE queue = 'retried'")
    assert [row["key"] for row in left] == ["other"]

    retried = await engine.retry(failed.instance_id)
    assert retried.status == Status.PENDING
    async with store.connection() as conn:
        keys = await conn.fetch("SELECT key FROM laneway.queue_keys WHERE queue = 'retried'")
    assert sorted(row["key"] for row in keys) == ["other", "r"]
    assert await engine.tick() == 1
    done = await engine.get(failed.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"calls": 2}


# -- 6. waiting reasons -----------------------------------------------------------------------


async def _reason(store: Store, instance_id: UUID) -> WaitingReason:
    reasons = await store.waiting_reasons([instance_id])
    assert instance_id in reasons, "not pending or paused"
    return reasons[instance_id]


async def _claimed_at(store: Store, instance_id: UUID) -> datetime:
    async with store.connection() as conn:
        at: datetime = await conn.fetchval(
            "SELECT claimed_at FROM laneway.instances WHERE instance_id = $1", instance_id
        )
    return at


async def _until_status(engine: Engine, instance_id: UUID, status: Status) -> None:
    async def current() -> Status | None:
        record = await engine.get(instance_id)
        return None if record is None else record.status

    await eventually(current, lambda s: s == status)


async def test_waiting_reasons_name_the_cap_that_holds_an_instance(store: Store) -> None:
    gate = asyncio.Event()

    async def held(ctx: HandlerContext, params: object) -> Done:
        await gate.wait()
        return Done()

    async def fail(ctx: HandlerContext, params: object) -> Done:
        raise RuntimeError("fails, then backs off")

    async def review(ctx: HandlerContext, params: object) -> Pause:
        return Pause("data_ready", "run")

    workflows = [
        Workflow("held", handlers={"run": held}, initial="run", queue="capped"),
        Workflow("metered", handlers={"run": _done}, initial="run", queue="metered"),
        Workflow("key_metered", handlers={"run": _done}, initial="run", queue="key_metered"),
        Workflow(
            "backing_off",
            handlers={"run": fail},
            initial="run",
            retry=RetryPolicy(max_attempts=3, backoff="fixed", base_ms=60_000, max_ms=60_000),
        ),
        Workflow("reviewed", handlers={"run": review}, initial="run"),
        _instant("paused_queue", "paused_queue"),
    ]
    idle = _instant("idle", "idle")

    # Before any engine runs: no live worker lists the workflow.
    setup = make_engine(store, *workflows, idle)
    unserved = await setup.enqueue("held", concurrency_key="a")
    reason = await _reason(store, unserved.instance_id)
    assert reason.code == "NO_WORKER"
    assert "'held'" in reason.message
    assert reason.until is None
    await setup.cancel(unserved.instance_id)

    await setup.configure_queue("capped", concurrency=3, key_concurrency=2)
    await setup.configure_queue("metered", concurrency=10, rate_per_minute=1.0)
    await setup.configure_queue("key_metered", concurrency=10, key_rate_per_minute=1.0)
    await setup.configure_queue("paused_queue", concurrency=10)
    await setup.configure_queue("idle", concurrency=10)
    async with store.connection() as conn:
        await conn.execute("UPDATE laneway.queues SET paused = true WHERE name = 'paused_queue'")

    engine = make_engine(store, *workflows, owner_id="reasons", poll_interval_seconds=0.05)
    # A second engine for `idle` that polls once a minute, and no enqueue here wakes it: what
    # is enqueued for it stays ready (claimable) while the test reads it.
    sleepy = make_engine(store, idle, owner_id="sleepy", poll_interval_seconds=60)
    # Its first round claims what is due then: the READY read waits until that round is over
    # (it is listed as a worker just before it, and a fresh clone's run once enqueued first).
    first_round = asyncio.Event()
    claim = sleepy.claim_loop.claim

    async def claim_once_seen(limit: int | None = None) -> Any:
        try:
            return await claim(limit)
        finally:
            first_round.set()

    sleepy.claim_loop.claim = claim_once_seen  # type: ignore[method-assign]
    try:
        async with engine.running(), sleepy.running():
            await eventually(
                engine.workers, lambda ws: {w.owner_id for w in ws} == {"reasons", "sleepy"}
            )
            await asyncio.wait_for(first_round.wait(), timeout=10)

            # READY: a live worker, a queue with room, and nothing else in the way.
            ready = await setup.enqueue("idle", concurrency_key="x")
            reason = await _reason(store, ready.instance_id)
            assert reason.code == "READY"
            assert "'idle'" in reason.message
            assert reason.until is None

            # KEY_FULL: two of key "a" hold both its slots; the queue has one more.
            holders = [await engine.enqueue("held", concurrency_key="a") for _ in range(2)]
            for h in holders:
                await _until_status(engine, h.instance_id, Status.RUNNING)
            third = await engine.enqueue("held", concurrency_key="a")
            reason = await _reason(store, third.instance_id)
            assert reason.code == "KEY_FULL"
            assert "key 'a' of queue 'capped'" in reason.message
            assert "2 of 2 running" in reason.message
            assert reason.until is None

            # QUEUE_FULL: key "b" takes the queue's last slot; then "c" and "a" wait for it.
            b = await engine.enqueue("held", concurrency_key="b")
            await _until_status(engine, b.instance_id, Status.RUNNING)
            c = await engine.enqueue("held", concurrency_key="c")
            for waiting in (c, third):
                reason = await _reason(store, waiting.instance_id)
                assert reason.code == "QUEUE_FULL"
                assert "queue 'capped'" in reason.message
                assert "3 of 3 running" in reason.message

            # RATE_LIMITED: one token a minute, the first start spent it.
            spent, limited = [await engine.enqueue("metered") for _ in range(2)]
            await _until_status(engine, spent.instance_id, Status.COMPLETED)
            reason = await _reason(store, limited.instance_id)
            assert reason.code == "RATE_LIMITED"
            assert "queue 'metered'" in reason.message
            assert "1/min" in reason.message
            assert reason.until is not None
            token_at = await _claimed_at(store, spent.instance_id) + timedelta(seconds=60)
            assert abs(reason.until - token_at) < timedelta(seconds=1), (reason.until, token_at)

            # KEY_RATE_LIMITED: the same per key; another key has a bucket of its own.
            k_spent, k_limited = [
                await engine.enqueue("key_metered", concurrency_key="k") for _ in range(2)
            ]
            other_key = await engine.enqueue("key_metered", concurrency_key="j")
            await _until_status(engine, k_spent.instance_id, Status.COMPLETED)
            await _until_status(engine, other_key.instance_id, Status.COMPLETED)
            reason = await _reason(store, k_limited.instance_id)
            assert reason.code == "KEY_RATE_LIMITED"
            assert "key 'k' of queue 'key_metered'" in reason.message
            assert "1/min" in reason.message
            assert reason.until is not None
            token_at = await _claimed_at(store, k_spent.instance_id) + timedelta(seconds=60)
            assert abs(reason.until - token_at) < timedelta(seconds=1), (reason.until, token_at)

            # DELAYED: until is the instance's run_after.
            delayed = await engine.enqueue("metered", delay_ms=120_000)
            reason = await _reason(store, delayed.instance_id)
            assert reason.code == "DELAYED"
            assert reason.until == delayed.instance.run_after

            # RETRY_BACKOFF: attempt 1 failed, the next waits its 60 s backoff.
            backing = await engine.enqueue("backing_off")

            async def attempts() -> int:
                record = await engine.get(backing.instance_id)
                return 0 if record is None else record.attempts

            await eventually(attempts, lambda n: n == 1)
            await _until_status(engine, backing.instance_id, Status.PENDING)
            record = await engine.get(backing.instance_id)
            assert record is not None
            reason = await _reason(store, backing.instance_id)
            assert reason.code == "RETRY_BACKOFF"
            assert "attempt 1 failed" in reason.message
            assert reason.until == record.run_after
            assert reason.until - await _claimed_at(store, backing.instance_id) >= timedelta(
                seconds=59
            )

            # AWAITING_REVIEW: paused at its checkpoint.
            reviewed = await engine.enqueue("reviewed")
            await _until_status(engine, reviewed.instance_id, Status.PAUSED)
            reason = await _reason(store, reviewed.instance_id)
            assert reason.code == "AWAITING_REVIEW"
            assert "'data_ready'" in reason.message
            assert reason.until is None

            # QUEUE_PAUSED: a worker runs the workflow, but its queue is paused.
            paused = await engine.enqueue("paused_queue", concurrency_key="p")
            reason = await _reason(store, paused.instance_id)
            assert reason.code == "QUEUE_PAUSED"
            assert "queue 'paused_queue' is paused" in reason.message

            # READY meant claimable: woken, the sleepy engine runs it at once.
            sleepy.claim_loop.wake()
            await _until_status(engine, ready.instance_id, Status.COMPLETED)
            assert (await _reason(store, paused.instance_id)).code == "QUEUE_PAUSED"

            # Running instances have no reason; a released slot lets the waiting one run.
            assert holders[0].instance_id not in await store.waiting_reasons(
                [holders[0].instance_id]
            )
            gate.set()
            for waiting in (third, c):
                await _until_status(engine, waiting.instance_id, Status.COMPLETED)
    finally:
        gate.set()
