"""An instance whose worker was lost twice runs alone (migrations/0029): a step that kills its
worker cannot take an innocent instance to the recovery cap with it (chaos R-06)."""

import asyncio
from uuid import UUID

from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow
from laneway.model import Status
from laneway.store import Store
from laneway.store.base import EVENTS_LOCK_KEY
from tests.engine.helpers import make_engine, until_status
from tests.workflows import noop

RUN = ["noop@1"]
LEASE = 30.0


async def _isolated(store: Store, instance_id: UUID) -> bool:
    async with store.connection() as conn:
        flag: bool = await conn.fetchval(
            "SELECT isolated FROM laneway.instances WHERE instance_id = $1", instance_id
        )
    return flag


async def _enqueued(store: Store, count: int, *, key: str | None = None) -> list[UUID]:
    """`count` noop instances (of concurrency key `key`), due one millisecond apart in enqueue
    order (claim order)."""
    engine = make_engine(store, noop)
    ids = [(await engine.enqueue("noop", concurrency_key=key)).instance_id for _ in range(count)]
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances AS i SET run_after = now() - interval '1 second'"
            " + u.n * interval '1 millisecond'"
            "  FROM unnest($1::uuid[]) WITH ORDINALITY AS u (id, n) WHERE i.instance_id = u.id",
            ids,
        )
    return ids


async def _isolate(
    store: Store, instance_id: UUID, *, due_seconds_ago: float | None = None
) -> None:
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances"
            "   SET isolated = true,"
            "       run_after = COALESCE(now() - $2::float8 * interval '1 second', run_after)"
            " WHERE instance_id = $1",
            instance_id,
            due_seconds_ago,
        )


async def _claim(store: Store, owner: str, limit: int = 10) -> list[UUID]:
    return [record.instance_id for record in await store.claim(owner, RUN, limit, LEASE)]


async def _finish(store: Store, instance_id: UUID) -> None:
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'completed', owner_id = NULL,"
            " lease_expires_at = NULL WHERE instance_id = $1",
            instance_id,
        )


async def test_a_recovery_isolates_an_instance_at_its_second_loss_and_a_retry_clears_it(
    store: Store,
) -> None:
    workflow = Workflow(
        "noop", handlers=dict(noop.handlers), initial="run", retry=RetryPolicy(max_attempts=10)
    )
    engine = make_engine(store, workflow)
    instance_id = (await engine.enqueue("noop")).instance_id
    seen = []
    for _ in range(4):
        async with store.connection() as conn:  # any backoff of the last recovery is over
            await conn.execute("UPDATE laneway.instances SET run_after = now()")
        assert await _claim(store, "doomed") == [instance_id]
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
            )
        await store.recover_expired_leases(max_recoveries=3)
        seen.append(await _isolated(store, instance_id))
    assert seen == [False, True, True, True]  # lost once: not yet; lost twice: alone from then on
    retried = await engine.retry(instance_id)
    assert retried.recoveries == 0
    assert not await _isolated(store, instance_id)


async def test_a_recovery_isolates_at_once_where_the_next_loss_dead_letters(store: Store) -> None:
    (instance_id,) = await _enqueued(store, 1)
    assert await _claim(store, "doomed") == [instance_id]
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
        )
    (recovered,) = await store.recover_expired_leases(max_recoveries=1)
    assert recovered.status == Status.PENDING
    assert await _isolated(store, instance_id)


async def test_an_idle_process_claims_an_isolated_instance_alone_and_then_nothing_else(
    store: Store,
) -> None:
    alone, *others = await _enqueued(store, 3)
    await _isolate(store, alone)
    assert await _claim(store, "idle") == [alone]
    assert await _claim(store, "idle") == []  # it runs alone while it runs
    assert await _claim(store, "other") == others
    await _finish(store, alone)
    (late,) = await _enqueued(store, 1)
    assert await _claim(store, "idle") == [late]  # alone no more once it ended


async def test_a_busy_process_leaves_an_isolated_instance_to_an_idle_one(store: Store) -> None:
    first, alone, last = await _enqueued(store, 3)
    assert await _claim(store, "busy", limit=1) == [first]
    await _isolate(store, alone)
    assert await _claim(store, "busy") == [last]  # it takes what comes after, not the isolated
    assert await _claim(store, "idle") == [alone]


async def test_a_busy_process_drains_for_an_isolated_instance_due_for_more_than_a_lease(
    store: Store,
) -> None:
    first, before, alone, after = await _enqueued(store, 4)
    assert await _claim(store, "busy", limit=1) == [first]
    await _isolate(store, alone, due_seconds_ago=LEASE + 5)
    async with store.connection() as conn:  # `before` is due before it, `after` after it
        await conn.execute(
            "UPDATE laneway.instances SET run_after = now() - $2::float8 * interval '1 second'"
            " WHERE instance_id = $1",
            before,
            LEASE + 10,
        )
    assert await _claim(store, "busy") == [before]  # claim order stops at the overdue one
    assert await _claim(store, "busy") == []  # drains while it runs anything
    await _finish(store, first)
    await _finish(store, before)
    assert await _claim(store, "busy") == [alone]
    await _finish(store, alone)
    assert await _claim(store, "busy") == [after]


async def test_keyed_lanes_keep_an_isolated_instance_alone_too(store: Store) -> None:
    alone, *others = await _enqueued(store, 3, key="tenant-a")
    await _isolate(store, alone)
    assert await _claim(store, "idle") == [alone]
    assert await _claim(store, "idle") == []
    assert sorted(await _claim(store, "other")) == sorted(others)


async def test_a_process_claims_nothing_while_another_claim_of_its_own_is_under_way(
    store: Store,
) -> None:
    """Its loop's claim and the claim on its group commit can overlap, on different queues;
    neither sees what the other took until it commits (migrations/0030)."""
    second = Workflow("noop2", handlers=dict(noop.handlers), initial="run", queue="second")
    runs = [*RUN, "noop2@1"]
    alone = (await make_engine(store, noop).enqueue("noop")).instance_id
    await _isolate(store, alone)
    beside = (await make_engine(store, second).enqueue("noop2")).instance_id
    due = "UPDATE laneway.instances SET run_after = now() + $2::float8 * interval '1 second'"
    due += " WHERE instance_id = $1"
    async with store.connection() as conn:
        await conn.execute(due, beside, 3600.0)  # not due yet
    claim = "SELECT array_agg(instance_id) FROM laneway.claim($1, $2::text[], 10, 30, $3)"
    async with store.connection() as held, held.transaction():
        # The process runs nothing: it takes the isolated instance, alone, not yet committed
        # (it locked the one queue with due work then).
        assert await held.fetchval(claim, "proc", runs, EVENTS_LOCK_KEY) == [alone]
        async with store.connection() as other:
            await other.execute(due, beside, -1.0)  # due now, on a queue that claim left
            # Its other claim takes nothing, at once (without the lock it would take the
            # instance beside the isolated one, and wait for the first claim's event append).
            taken = other.fetchval(claim, "proc", runs, EVENTS_LOCK_KEY)
            assert await asyncio.wait_for(taken, timeout=10) is None
    assert await _claim(store, "proc") == []  # committed: it runs alone while it runs
    assert await store.claim("elsewhere", runs, 10, LEASE) != []


async def test_its_waiting_reason_says_it_runs_alone(store: Store) -> None:
    await store.heartbeat_worker(
        owner_id="live", role="worker", host="here", pid=1, workflows=["noop"], versions=RUN,
        running=0, concurrency=10, heartbeat_seconds=60.0,
    )  # fmt: skip
    plain, alone = await _enqueued(store, 2)
    await _isolate(store, alone)
    async with store.connection() as conn:
        await conn.execute("UPDATE laneway.instances SET recoveries = 2 WHERE isolated")
    reasons = await store.waiting_reasons([plain, alone])
    assert reasons[plain].code == reasons[alone].code == "READY"
    assert "alone" not in reasons[plain].message
    assert reasons[alone].message.endswith(
        "of a process that runs nothing else (its worker was lost 2 times: it runs alone)"
    )
    async with store.connection() as conn:  # isolated at its first loss: a cap of 1
        await conn.execute("UPDATE laneway.instances SET recoveries = 1 WHERE isolated")
    reasons = await store.waiting_reasons([alone])
    assert reasons[alone].message.endswith("(its worker was lost 1 time: it runs alone)")


async def _lost_twice(store: Store, instance_id: UUID, name: str) -> None:
    """Claim `instance_id` for a process that dies, twice, through the real recovery: it is
    isolated then, and due now (its backoff driven over)."""
    for _ in range(2):
        assert [r.instance_id for r in await store.claim("doomed", [f"{name}@1"], 1, LEASE)] == [
            instance_id
        ]
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
                " WHERE instance_id = $1",
                instance_id,
            )
        await store.recover_expired_leases(max_recoveries=3)
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET run_after = now() WHERE instance_id = $1",
                instance_id,
            )
    assert await _isolated(store, instance_id)


async def test_others_wait_with_no_worker_while_every_live_process_runs_one_alone(
    store: Store,
) -> None:
    # Found by an outside audit: while the only process ran an isolated instance alone, every
    # other pending instance said READY ("it starts at the next claim") and none started.
    gate = asyncio.Event()
    started = asyncio.Event()

    async def hold(ctx: HandlerContext, params: object) -> Done:
        started.set()
        await gate.wait()
        return Done()

    held = Workflow(
        "held", handlers={"run": hold}, initial="run", retry=RetryPolicy(max_attempts=10)
    )
    engine = make_engine(store, held, noop, owner_id="only")
    alone = (await engine.enqueue("held")).instance_id
    await _lost_twice(store, alone, "held")
    async with engine.running():
        async with asyncio.timeout(10):
            await started.wait()  # the one live process runs it, alone
        await engine.configure_queue("qa", concurrency=5)
        fresh = (await engine.enqueue("noop", queue="qa")).instance_id
        assert await store.claim("only", ["held@1", *RUN], 10, LEASE) == []  # nothing beside it
        reason = await engine.waiting_reason(fresh)
        assert reason is not None
        assert (reason.code, reason.until) == ("NO_WORKER", None)
        assert reason.message == (
            "every live worker of workflow 'noop' (1 worker) runs an instance alone (its worker"
            " was lost), claiming nothing beside it; it starts when one of those ends"
        )
        # Another live process that runs noop, running nothing alone, would take it.
        await store.heartbeat_worker(
            owner_id="free", role="worker", host="there", pid=2, workflows=["noop"],
            versions=RUN, running=0, concurrency=10, heartbeat_seconds=LEASE / 3,
        )  # fmt: skip
        free = await engine.waiting_reason(fresh)
        assert free is not None
        assert free.code == "READY"
        await store.remove_worker("free")
        gate.set()
        await until_status(store, fresh, Status.COMPLETED)  # it started once the other ended


async def test_others_behind_an_overdue_isolated_instance_wait_with_no_worker(
    store: Store,
) -> None:
    # A busy process drains for an isolated instance due for more than a lease: it takes
    # nothing behind it in claim order until it has drained and run it.
    await store.heartbeat_worker(
        owner_id="busy", role="worker", host="here", pid=1, workflows=["noop"], versions=RUN,
        running=1, concurrency=10, heartbeat_seconds=LEASE / 3,
    )  # fmt: skip
    first, alone, after = await _enqueued(store, 3)
    assert await _claim(store, "busy", limit=1) == [first]
    await _isolate(store, alone, due_seconds_ago=LEASE + 5)
    urgent = (await make_engine(store, noop).enqueue("noop", priority=5)).instance_id
    reasons = await store.waiting_reasons([alone, after, urgent])
    assert reasons[after].code == "NO_WORKER"
    assert reasons[after].message == (
        "every live worker of workflow 'noop' (1 worker) drains to run an instance alone (its"
        " worker was lost) that is ahead of it, claiming nothing beside it; it starts when one"
        " of those ends"
    )
    assert reasons[urgent].code == "READY"  # ahead of it in claim order
    assert reasons[alone].code == "READY"  # the process that drains takes it next
    assert await _claim(store, "busy") == [urgent]  # as the reasons said
