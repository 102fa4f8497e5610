"""Store: one method per state change, each one transaction with its events and NOTIFY.

Owns `open_store` and the Store class, composed of one part per area (queues.py, instances.py,
leases.py, history.py, schedules.py, workers.py, queue_history.py, waits.py, deploys.py,
pages.py, bulk.py, partitions.py, on base.py); rows.py decodes rows into records.
Decides nothing about workflows: the engine says what to write, the store writes it
atomically and reports what changed. Runner writes are fenced by owner id.
"""

import contextlib
from collections.abc import AsyncIterator

from laneway.store.base import EVENTS_LOCK_KEY as EVENTS_LOCK_KEY
from laneway.store.bulk import BulkStore
from laneway.store.deploys import DeployStore
from laneway.store.history import HistoryStore
from laneway.store.leases import DEFAULT_MAX_RECOVERIES as DEFAULT_MAX_RECOVERIES
from laneway.store.leases import LeaseStore
from laneway.store.migrate import apply_migrations
from laneway.store.pages import PageStore
from laneway.store.partitions import PartitionStore
from laneway.store.pool import (
    APPLICATION_NAME,
    DEFAULT_TIMEOUTS,
    MIGRATION_TIMEOUTS,
    Timeouts,
    connect,
    create_pool,
)
from laneway.store.queue_history import QueueHistoryStore
from laneway.store.schedules import ScheduleStore
from laneway.store.waits import WaitStore
from laneway.store.workers import WorkerStore


@contextlib.asynccontextmanager
async def open_store(
    database_url: str,
    *,
    pool_size: int = 10,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> AsyncIterator["Store"]:
    """Migrate the database, open a pool, and yield a Store; close the pool on exit."""
    conn = await connect(
        database_url, application_name=application_name, timeouts=MIGRATION_TIMEOUTS
    )
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    pool = await create_pool(
        database_url, size=pool_size, application_name=application_name, timeouts=timeouts
    )
    try:
        yield Store(pool, database_url)
    finally:
        await pool.close()


class Store(
    ScheduleStore,
    LeaseStore,
    HistoryStore,
    WorkerStore,
    QueueHistoryStore,
    WaitStore,
    PageStore,
    BulkStore,
    DeployStore,
    PartitionStore,
):
    """Laneway's tables, behind one method per verb."""
