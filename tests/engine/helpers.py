"""Small helpers for engine tests: building engines, waiting with deadlines."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar
from uuid import UUID

from laneway.engine import Engine, Workflow, WorkflowRegistry
from laneway.model import EventRecord, EventType, InstanceRecord, Status
from laneway.store import Store

T = TypeVar("T")


def make_engine(store: Store, *workflows: Workflow, **options: object) -> Engine:
    return Engine(store, WorkflowRegistry(workflows), **options)  # type: ignore[arg-type]


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], timeout: float = 10.0
) -> T:
    """Poll `probe` until `accept` holds, or fail at the deadline."""
    async with asyncio.timeout(timeout):
        delay = 0.005
        while True:
            value = await probe()
            if accept(value):
                return value
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)


async def events_of(store: Store, instance_id: UUID) -> list[EventRecord]:
    return await store.instance_events_after(instance_id, 0, 500)


async def types_of(store: Store, instance_id: UUID) -> list[EventType]:
    return [e.type for e in await events_of(store, instance_id)]


async def until_status(
    store: Store, instance_id: UUID, *statuses: Status, timeout: float = 10.0
) -> InstanceRecord:
    """Poll the instance until it is in one of `statuses`, or fail at the deadline."""

    async def probe() -> InstanceRecord | None:
        return await store.get_instance(instance_id)

    found = await eventually(probe, lambda r: r is not None and r.status in statuses, timeout)
    assert found is not None
    return found
