"""Small helpers for engine tests: building engines, waiting with deadlines, watching claims."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from laneway.engine import Engine, Workflow, WorkflowRegistry
from laneway.model import EventRecord, EventType, GroupCommit, InstanceRecord, Status
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


@dataclass
class Claims:
    """What `watch_claims` saw: the sizes of the claim loop's own claims, and per group commit
    the mark taken as it was sent (a count the test keeps), the claim limit it carried (0: none
    rode on it) and its answer."""

    own: list[int] = field(default_factory=list)
    commits: list[tuple[int, int, GroupCommit]] = field(default_factory=list)

    @property
    def rides(self) -> list[int]:
        """How many instances each claim that rode on a group commit took."""
        return [len(done.claimed) for _, limit, done in self.commits if limit > 0]


def watch_claims(store: Store, mark: Callable[[], int] = lambda: 0) -> Claims:
    """Record the claims and group commits of the engines on `store` (the real calls, wrapped)."""
    seen = Claims()
    real_claim, real_commit = store.claim_rung, store.commit_runner_batch

    async def claim(*args: Any, **kwargs: Any) -> tuple[list[InstanceRecord], int | None]:
        claimed, rung = await real_claim(*args, **kwargs)
        seen.own.append(len(claimed))
        return claimed, rung

    async def commit(*args: Any, **kwargs: Any) -> GroupCommit:
        sent = mark()
        done = await real_commit(*args, **kwargs)
        seen.commits.append((sent, kwargs.get("claim_limit", 0), done))
        return done

    store.claim_rung = claim  # type: ignore[method-assign]
    store.commit_runner_batch = commit  # type: ignore[method-assign]
    return seen
