"""The batch enqueue's bulk path: a batch without keys is copied in (store/instances.py
`_copy_in`); what it returns, writes and rings must be what the statement path gives."""

import asyncio
import functools
import json
import operator
import time
import uuid
from uuid import UUID

import asyncpg

from laneway.engine import EnqueueRequest
from laneway.engine.requests import new_instance_id, new_instance_ids
from laneway.model import EventType, Status
from laneway.store import Store
from laneway.store.instances import COPY_FROM
from tests.engine.helpers import make_engine, types_of
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
    # The first request's singleton key is held, so it gets the holder and takes nothing; its
    # idempotency key is then free for the second, which creates. The second's new instance
    # used to come back for the first as well (found by the key after the batch's insert).
    engine = make_engine(store, noop)
    holder = await engine.enqueue("noop", singleton_key="nightly")
    first, second = await engine.enqueue_many(
        [
            EnqueueRequest(name="noop", singleton_key="nightly", idempotency_key="run-7"),
            EnqueueRequest(name="noop", idempotency_key="run-7"),
        ]
    )
    assert (first.instance_id, first.created) == (holder.instance_id, False)
    assert second.created
    assert second.instance_id != holder.instance_id


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
