"""The group commit's flusher (committer.py): one batch in flight at a time, the next sent as
soon as the answer to the one before is in, and a busy engine's claims riding on its commits
whether the queues' caps or its own slots bound them (claim_loop.py `room`)."""

import asyncio
import itertools
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from laneway.config import Settings
from laneway.engine import Done, EnqueueRequest, HandlerContext, Workflow
from laneway.engine.committer import Committer
from laneway.model import InstanceRecord, Status
from laneway.services import open_services
from laneway.store import Store
from laneway.writes import CompleteWrite
from tests.engine.helpers import eventually, make_engine, watch_claims
from tests.workflows import noop

CONCURRENCY = 20
COUNT = 400
started: list[UUID] = []  # the instances whose handler ran, in that order


async def _done(ctx: HandlerContext, params: object) -> Done:
    started.append(ctx.instance_id)
    return Done()


busy = Workflow("busy", handlers={"run": _done}, initial="run")


async def _completed(store: Store) -> int:
    async with store.connection() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE status = 'completed'"
        )
    return count


async def test_a_busy_engine_claims_on_its_commits_and_sends_the_next_batch_first(
    database_url: str,
) -> None:
    # No cap but the engine's 20 slots (the queue allows 100): each group commit claims the
    # room its batch frees, and the loop claims by itself only to start. The next batch goes
    # out before the runs the last answer claimed start, so their writes make the batch after.
    started.clear()
    settings = Settings(database_url=database_url, worker_concurrency=CONCURRENCY, pool_size=5)
    async with open_services(settings, workflows=(busy,)) as services:
        engine, store = services.engine, services.store
        await engine.enqueue_many([EnqueueRequest(name="busy") for _ in range(COUNT)])
        seen = watch_claims(store, mark=lambda: len(started))  # handlers run when it was sent
        async with engine.running():
            await eventually(lambda: _completed(store), lambda n: n == COUNT, timeout=60)
    claims, rides = seen.own, seen.rides
    commits = [
        (sent, [record.instance_id for record in done.claimed]) for sent, _, done in seen.commits
    ]
    assert sum(claims) + sum(rides) == COUNT  # each instance claimed once
    assert len(started) == COUNT  # each ran once
    assert len(set(started)) == COUNT
    assert len(claims) <= 10, (claims, rides)  # to start, and seldom after
    assert sum(rides) >= COUNT - 2 * CONCURRENCY, (claims, rides)
    # The batch after one that claimed was sent before any of those claimed instances ran.
    position = {instance_id: index for index, instance_id in enumerate(started)}
    followed = [
        (claimed, sent_next)
        for (_, claimed), (sent_next, _) in itertools.pairwise(commits)
        if claimed
    ]
    assert followed  # commits that claimed, each with a batch after it
    sent_first = [min(position[i] for i in claimed) >= sent for claimed, sent in followed]
    assert sent_first.count(True) >= len(followed) // 2, sent_first


async def test_a_batch_that_fails_fails_its_writes_and_the_next_batch_goes(store: Store) -> None:
    engine = make_engine(store, noop)
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(2)])
    first, second = await store.claim("group-commit-test", ["noop@1"], 2, 60.0)
    committer = Committer(store, "group-commit-test", 60.0)
    sent = asyncio.Event()
    answer = asyncio.Event()
    real_commit = store.commit_runner_batch
    calls: list[list[UUID]] = []

    async def commit(owner_id: str, lease_seconds: float, writes: Any, **kwargs: Any) -> Any:
        calls.append([write.instance_id for write in writes])
        if len(calls) == 1:
            sent.set()
            await answer.wait()
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        return await real_commit(owner_id, lease_seconds, writes, **kwargs)

    store.commit_runner_batch = commit  # type: ignore[method-assign]

    def done(record: InstanceRecord) -> CompleteWrite:
        return CompleteWrite(
            instance_id=record.instance_id,
            attempt=record.attempts,
            epoch=record.lease_epoch,
            result_json="null",
            state_json="{}",
        )

    failing = asyncio.create_task(committer.write(done(first)))
    async with asyncio.timeout(10):
        await sent.wait()
    going = asyncio.create_task(committer.write(done(second)))  # queued while the first flies
    await asyncio.sleep(0)
    answer.set()
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await failing
    transition = await going
    assert calls == [[first.instance_id], [second.instance_id]]
    assert transition.status == Status.COMPLETED
    assert (await engine.get(first.instance_id)).status == Status.RUNNING  # type: ignore[union-attr]
