"""Lease renewal never waits for a row lock: it renews what it can, and counts a row that a
transaction holds meanwhile as still held (queries.RENEW_LEASES)."""

import asyncio

from laneway.engine import EnqueueRequest
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop

OWNER = "renewing"
LEASE = "SELECT lease_expires_at FROM laneway.instances WHERE instance_id = $1"


async def test_a_renewal_skips_a_locked_row_and_counts_it_held(store: Store) -> None:
    # Found by an outside soak: under load the renewal deadlocked with this process's own
    # group commit (each waited for a row the other had locked), PostgreSQL ended the
    # renewal, and several heartbeats in a row renewed nothing.
    await make_engine(store, noop).enqueue_many([EnqueueRequest(name="noop") for _ in range(3)])
    locked, free, other = await store.claim(OWNER, ["noop@1"], 3, 30.0)
    leases = {record.instance_id: record.lease_epoch for record in (locked, free, other)}
    leases[other.instance_id] += 1  # an epoch this owner no longer holds: lost
    async with store.connection() as holder, store.connection() as reader:
        before = {i: await reader.fetchval(LEASE, i) for i in leases}
        async with holder.transaction():
            await holder.execute(
                "SELECT 1 FROM laneway.instances WHERE instance_id = $1 FOR UPDATE",
                locked.instance_id,
            )
            async with asyncio.timeout(5):  # a renewal that waited for the lock hangs here
                held = await store.renew_leases(OWNER, leases, 60.0)
        after = {i: await reader.fetchval(LEASE, i) for i in leases}
    assert held == {locked.instance_id, free.instance_id}
    assert after[free.instance_id] > before[free.instance_id]  # renewed
    assert after[locked.instance_id] == before[locked.instance_id]  # skipped, renewed next time
    assert after[other.instance_id] == before[other.instance_id]  # not this owner's lease
