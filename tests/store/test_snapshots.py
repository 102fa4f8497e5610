"""Store.snapshot: the reads of one task in the block see one moment (store/base.py).

Rows are changed by the `admin` connection, another client, between two reads of the block.
"""

import asyncio
import uuid

import asyncpg
import pytest

from laneway.model import Status
from laneway.store import Store

INSERT = """INSERT INTO laneway.instances (instance_id, name, queue, status)
            VALUES ($1, 'hello', 'default', 'pending')"""
CANCEL = "UPDATE laneway.instances SET status = 'cancelled' WHERE instance_id = $1"


async def _status(store: Store, instance_id: uuid.UUID) -> Status:
    record = await store.get_instance(instance_id)
    assert record is not None
    return record.status


async def test_reads_in_a_snapshot_see_one_moment_when_a_row_changes_between_them(
    store: Store, admin: asyncpg.Connection
) -> None:
    await store.ensure_queues(["default"])  # a waiting reason is read with its queue's row
    instance_id = uuid.uuid4()
    await admin.execute(INSERT, instance_id)
    async with store.snapshot():
        assert await _status(store, instance_id) == Status.PENDING
        await admin.execute(CANCEL, instance_id)
        assert await _status(store, instance_id) == Status.PENDING
        assert instance_id in await store.waiting_reasons([instance_id])
    assert await _status(store, instance_id) == Status.CANCELLED
    assert await store.waiting_reasons([instance_id]) == {}


async def test_a_snapshot_holds_only_its_own_task_and_refuses_writes(
    store: Store, admin: asyncpg.Connection
) -> None:
    instance_id = uuid.uuid4()
    await admin.execute(INSERT, instance_id)
    async with store.snapshot():
        assert await _status(store, instance_id) == Status.PENDING
        await admin.execute(CANCEL, instance_id)
        # A task made in the block reads on a pooled connection of its own: now.
        assert await asyncio.create_task(_status(store, instance_id)) == Status.CANCELLED
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await store.ensure_queues(["made-in-a-snapshot"])
