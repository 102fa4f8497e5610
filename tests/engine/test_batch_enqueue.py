"""The batch enqueue: a batch without keys is copied in (store/instances.py `_copy_in`), and
what it returns, writes and rings must be what the statement path gives; a batch with keys
resolves them as one call after another would, and concurrent batches sharing keys in
different orders neither deadlock nor fail (each key named once, the others given it)."""

import asyncio
import functools
import itertools
import json
import operator
import time
import uuid
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import EnqueueRequest
from laneway.engine.requests import new_instance_id, new_instance_ids
from laneway.model import EnqueueResult, EventType, NewInstance, Status
from laneway.store import Store, instances
from laneway.store.instances import COPY_FROM
from tests.engine.helpers import eventually, make_engine, types_of
from tests.workflows import noop


async def test_a_copied_batch_returns_the_rows_as_stored_in_request_order(store: Store) -> None:
    engine = make_engine(store, noop)
    parent = await engine.enqueue("noop")
    requests = [
        EnqueueRequest(
            name="noop",
            params={"zz": i, "a": {"yy": [1, 2.5, None], "b": "é"}, "mid": i % 2 == 0},
            priority=i % 5,
            delay_ms=60_000 if i % 3 == 0 else 0.0,
            queue="copied" if i % 4 == 0 else None,
            parent_id=parent.instance_id if i % 7 == 0 else None,
        )
        for i in range(COPY_FROM * 2)
    ]
    results = await engine.enqueue_many(requests)
    assert [r.created for r in results] == [True] * len(requests)
    assert [r.instance.params["zz"] for r in results] == list(range(len(requests)))
    for result in results:
        stored = await engine.get(result.instance_id)
        assert stored is not None
        assert result.instance == stored
        assert json.dumps(result.instance.params) == json.dumps(stored.params)  # jsonb's order
        assert await types_of(store, result.instance_id) == [EventType.ENQUEUED]
    delayed, due = results[0].instance, results[1].instance
    assert (delayed.run_after - delayed.created_at).total_seconds() == 60.0
    assert due.run_after == due.created_at
    assert "copied" in {queue.name for queue in await store.queues()}


async def test_a_copied_batch_rings_the_doorbell_with_its_last_event(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    rung: asyncio.Queue[str] = asyncio.Queue()
    await admin.add_listener("laneway_events", lambda *args: rung.put_nowait(args[3]))
    results = await engine.enqueue_many(
        [EnqueueRequest(name="noop", params={"i": i}) for i in range(COPY_FROM)]
    )
    payload = json.loads(await asyncio.wait_for(rung.get(), timeout=10))
    last = await admin.fetchval(
        "SELECT max(event_id) FROM laneway.events WHERE instance_id = ANY($1::uuid[])",
        [r.instance_id for r in results],
    )
    assert payload == {"e": last}
    assert rung.empty()  # one doorbell for the whole batch


async def test_a_batch_with_a_key_takes_the_statement_and_keeps_its_rules(store: Store) -> None:
    engine = make_engine(store, noop)
    first = await engine.enqueue("noop", idempotency_key="seen")
    requests = [EnqueueRequest(name="noop", params={"i": i}) for i in range(COPY_FROM)]
    requests.append(EnqueueRequest(name="noop", idempotency_key="seen"))
    results = await engine.enqueue_many(requests)
    assert [r.created for r in results] == [True] * COPY_FROM + [False]
    assert results[-1].instance_id == first.instance_id
    assert await engine.tick() == COPY_FROM + 1  # the copied and the keyed ones all run
    for result in results:
        done = await engine.get(result.instance_id)
        assert done is not None
        assert done.status == Status.COMPLETED


async def test_a_batch_resolves_each_request_as_one_call_after_another_would(
    store: Store,
) -> None:
    # The first request's singleton key is held, so it gets the holder, and its idempotency key
    # is bound to the holder: the second, with that key, gets the holder too. The second's new
    # instance once came back for the first as well (found by the key after the batch's
    # insert); then the second created one under the key, bound to nothing (an outside audit).
    engine = make_engine(store, noop)
    holder = await engine.enqueue("noop", singleton_key="nightly")
    first, second, other = await engine.enqueue_many(
        [
            EnqueueRequest(name="noop", singleton_key="nightly", idempotency_key="run-7"),
            EnqueueRequest(name="noop", idempotency_key="run-7"),
            EnqueueRequest(name="noop", idempotency_key="run-8"),
        ]
    )
    assert (first.instance_id, first.created) == (holder.instance_id, False)
    assert (second.instance_id, second.created) == (holder.instance_id, False)
    assert other.created
    await engine.cancel(holder.instance_id)
    again = await engine.enqueue_many(
        [
            EnqueueRequest(name="noop", idempotency_key="run-7"),
            EnqueueRequest(name="noop", singleton_key="nightly", idempotency_key="run-7"),
        ]
    )
    assert [(r.instance_id, r.created) for r in again] == [(holder.instance_id, False)] * 2
    async with store.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM laneway.instances") == 2


async def test_requests_sharing_a_key_keep_their_order_whatever_their_other_keys(
    store: Store,
) -> None:
    # The batch goes in in its lock order (by idempotency key), but the second request sorts
    # first: their shared singleton key must still go to the first, as one call after another.
    engine = make_engine(store, noop)
    first, second = await engine.enqueue_many(
        [
            EnqueueRequest(name="noop", idempotency_key="b", singleton_key="s"),
            EnqueueRequest(name="noop", idempotency_key="a", singleton_key="s"),
        ]
    )
    assert (first.created, second.created) == (True, False)
    assert second.instance_id == first.instance_id
    assert first.instance.idempotency_key == "b"


# Backends of the test database waiting for a lock (a row another transaction inserted).
WAITING_ON_LOCKS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


async def _past_a_gate(
    store: Store, admin: asyncpg.Connection, gate: str, *batches: list[EnqueueRequest]
) -> list[list[EnqueueResult] | BaseException]:
    """Enqueue the batches at once, each stopped at the request whose idempotency key is
    `gate` until every one of them waits for a lock: the test holds the gate (a row with that
    key, inserted and not yet committed), so each batch has inserted the rows it sorts before
    it, or waits for one another batch did. Then the gate row commits, and the batches go on
    from there together: the interleaving in which opposite orders cross, every time."""
    engine = make_engine(store, noop)
    async with store.connection() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "INSERT INTO laneway.instances (instance_id, name, queue, idempotency_key)"
            " VALUES ($1, 'noop', 'default', $2)",
            new_instance_id(),
            gate,
        )
        calls = [asyncio.create_task(engine.enqueue_many(batch)) for batch in batches]
        try:
            await eventually(lambda: admin.fetchval(WAITING_ON_LOCKS), lambda n: n == len(batches))
        finally:
            await transaction.commit()
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_batches_sharing_keys_in_opposite_orders_do_not_deadlock(
    store: Store, admin: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One try each: the lock order alone must keep them apart, not a second try.
    monkeypatch.setattr(instances, "DEADLOCK_ATTEMPTS", 1)
    keys = ["a-first", "m-gate", "z-last"]
    forward = [EnqueueRequest(name="noop", idempotency_key=key) for key in keys]
    outcomes = await _past_a_gate(store, admin, "m-gate", forward, forward[::-1])
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    one, other = (o for o in outcomes if not isinstance(o, BaseException))
    # Each in its own request order; each key's instance created once, the other batch given it.
    assert [r.instance.idempotency_key for r in one] == keys
    assert [r.instance.idempotency_key for r in other] == keys[::-1]
    by_key = {r.instance.idempotency_key: r for r in one}
    for result in other:
        twin = by_key[result.instance.idempotency_key]
        assert result.instance_id == twin.instance_id
        made_here = 0 if result.instance.idempotency_key == "m-gate" else 1  # the gate: ours
        assert [result.created, twin.created].count(True) == made_here
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 3


async def test_a_write_that_keeps_losing_deadlocks_tries_again_after_longer_pauses(
    store: Store, admin: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tried again at once, a loser of a deadlock could take a row the winner wanted next
    # before the winner ran, and lose again: three in a row failed a loaded full test run.
    tries: list[float] = []
    real_insert = instances.InstanceStore._insert

    async def losing(self: instances.InstanceStore, conn: object, todo: object) -> object:
        tries.append(time.monotonic())
        if len(tries) < instances.DEADLOCK_ATTEMPTS:
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return await real_insert(self, conn, todo)  # type: ignore[arg-type]

    monkeypatch.setattr(instances.InstanceStore, "_insert", losing)
    engine = make_engine(store, noop)
    requests = [EnqueueRequest(name="noop", idempotency_key=f"k-{n}") for n in range(2)]
    results = await engine.enqueue_many(requests)
    assert [r.created for r in results] == [True, True]
    assert len(tries) == instances.DEADLOCK_ATTEMPTS >= 4
    pauses = [later - earlier for earlier, later in itertools.pairwise(tries)]
    least = [0.5 * instances.DEADLOCK_PAUSE_SECONDS * 2**n for n in range(len(pauses))]
    assert all(pause >= bound for pause, bound in zip(pauses, least, strict=True)), pauses
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 2


async def test_batches_whose_keys_cross_past_any_order_are_written_again(
    store: Store, admin: asyncpg.Connection
) -> None:
    # Each row takes two keys, and no order of rows takes both kinds in one order: the first
    # batch holds singleton z and wants y, the second holds y and wants z. The deadlock is
    # real; the statement that lost it is tried again and finds the other batch's instances.
    first = [
        EnqueueRequest(name="noop", idempotency_key="a-1", singleton_key="z"),
        EnqueueRequest(name="noop", idempotency_key="m-gate"),
        EnqueueRequest(name="noop", idempotency_key="z-1", singleton_key="y"),
    ]
    second = [
        EnqueueRequest(name="noop", idempotency_key="a-2", singleton_key="y"),
        EnqueueRequest(name="noop", idempotency_key="m-gate"),
        EnqueueRequest(name="noop", idempotency_key="z-2", singleton_key="z"),
    ]
    outcomes = await _past_a_gate(store, admin, "m-gate", first, second)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    results = [r for o in outcomes if not isinstance(o, BaseException) for r in o]
    singletons = {r.instance.singleton_key: r.instance_id for r in results if r.created}
    assert set(singletons) == {"y", "z"}  # each key created once, by one of the batches
    for result, request in zip(results, first + second, strict=True):
        if request.singleton_key is not None:
            assert result.instance_id == singletons[request.singleton_key]
    stored = "SELECT count(*) FROM laneway.instances WHERE singleton_key IS NOT NULL"
    assert await admin.fetchval(stored) == 2


async def test_a_batch_of_a_thousand_keys_holds_no_more_than_the_key_buckets_locks(
    store: Store,
) -> None:
    # Every advisory lock is an entry in the server's shared lock table (6,400 by default),
    # held to commit: one lock per idempotency key let a few batches of 1,000 keys exhaust it
    # and fail unrelated transactions. The keys' locks are on 64 buckets
    # (laneway.idempotency_key_bucket). Counted before the commit, inside a caller's
    # transaction (as a schedule's fire enqueues), on the batch's statement path. A batch
    # with only singleton keys takes none.
    await store.ensure_queues(["default"])

    def new(i: int, idempotency_key: str | None, singleton_key: str | None) -> NewInstance:
        return NewInstance(
            instance_id=new_instance_id(),
            name="noop",
            queue="default",
            priority=0,
            max_attempts=1,
            delay_ms=0.0,
            params_json=json.dumps({"i": i}),
            first_action="run",
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
        )

    async def locks_held(batch: list[NewInstance]) -> int:
        async with store.connection() as conn, conn.transaction():
            results = await store._enqueue_on(conn, batch)
            assert [r.created for r in results] == [True] * len(batch)
            held: int = await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 7462"
                " AND objsubid = 2 AND pid = pg_backend_pid() AND granted"
            )
            return held

    assert 0 < await locks_held([new(i, f"order-{i}", None) for i in range(1000)]) <= 64
    assert await locks_held([new(i, None, f"s-{i}") for i in range(10)]) == 0


def test_a_batch_of_ids_is_time_ordered_random_and_well_formed() -> None:
    before = time.time_ns() // 1_000_000
    ids = list(new_instance_ids(1000))
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == 1000
    for instance_id in ids:
        assert (instance_id.version, instance_id.variant) == (7, uuid.RFC_4122)
        assert before <= instance_id.int >> 80 <= after  # the millisecond it was made in
        assert UUID(str(instance_id)) == instance_id  # an ordinary UUID, though built bare
        assert hash(UUID(bytes=instance_id.bytes)) == hash(instance_id)
    # The 74 random bits differ: no two ids share their last 8 bytes, and every bit varies.
    assert len({instance_id.bytes[8:] for instance_id in ids}) == 1000
    varying = [instance_id.int ^ ids[0].int for instance_id in ids[1:]]
    random_bits = 2**80 - 1 & ~(0xF << 76) & ~(0x3 << 62)
    assert functools.reduce(operator.or_, varying) == random_bits
    assert new_instance_id().version == 7
