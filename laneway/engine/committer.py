"""Committer: the group commit of runner writes.

Owns batching: whoever gets the lock flushes every write queued meanwhile (step writes and
template operations' outcomes of every runner here), in one transaction. Also the hand-back of
an instance whose write failed because the database went away. What a write means:
laneway/writes.py.
"""

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol
from uuid import UUID

from laneway.engine import faults
from laneway.errors import LeaseLostError
from laneway.model import GroupCommit, Transition
from laneway.store import Store
from laneway.store.leases import RELEASED_AFTER_DATABASE_LOSS
from laneway.store.pool import DATABASE_GONE
from laneway.writes import RunnerWrite, ends_run

HAND_BACK_FIRST_DELAY_SECONDS = 0.05
HAND_BACK_MAX_DELAY_SECONDS = 1.0

_Queued = tuple[RunnerWrite, "asyncio.Future[Transition | None]"]


class ClaimRider(Protocol):
    """Who claims the room a group commit frees, in the commit's own transaction (the claim
    loop): the next claim rides on the commit instead of costing a round trip of its own."""

    def room(self, freed: int) -> tuple[Sequence[str], int]:
        """The run keys to claim and how many instances at most (0: no claim), given that
        `freed` of this batch's writes end their run here."""
        ...

    def writing(self) -> int:
        """A batch is being written; returns its token for `committed`."""
        ...

    def committed(self, token: int, commit: GroupCommit | None, limit: int) -> None:
        """The batch committed (`limit`: what its claim asked for), or failed (None); start
        what it claimed."""
        ...


class Committer:
    """Group commit for runner writes: whoever gets the lock flushes everything queued."""

    def __init__(
        self,
        store: Store,
        owner_id: str,
        lease_seconds: float,
        rider: ClaimRider | None = None,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._lease_seconds = lease_seconds
        self._rider = rider
        self._queued: list[_Queued] = []
        self._lock = asyncio.Lock()

    async def write(self, item: RunnerWrite) -> Transition:
        """Apply one write (batched with whatever else is ready).

        Raises:
            LeaseLostError: the instance is no longer ours (lease taken over, or cancelled).
        """
        future: asyncio.Future[Transition | None] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        # One turn of the event loop lets the other runners that are ready now queue their
        # writes too, so the first writer does not commit alone.
        await asyncio.sleep(0)
        async with self._lock:
            if not future.done():
                batch, self._queued = self._queued, []
                # Shielded: a cancelled runner must not abort the transaction of the others.
                await asyncio.shield(self._flush(batch))
        transition = future.result()
        if transition is None:
            raise LeaseLostError(item.instance_id)
        return transition

    async def hand_back(self, instance_id: UUID, epoch: int) -> bool:
        """After a write failed because the database went away: wait for it (backing off)
        and hand the instance back at once, fenced by this lease, so that it resumes from its
        last checkpoint now instead of after its lease. Whether the write had committed is
        unknown: a step is never recorded twice this way, at most run again. Gives up when
        the lease would have run out meanwhile (lease recovery takes it from there).

        Returns whether it was handed back (False: fenced out, or given up).
        """
        deadline = time.monotonic() + self._lease_seconds
        delay = HAND_BACK_FIRST_DELAY_SECONDS
        while time.monotonic() < deadline:
            try:
                released = await self._store.release(
                    self._owner_id, {instance_id: epoch}, reason=RELEASED_AFTER_DATABASE_LOSS
                )
            except DATABASE_GONE:
                await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
                delay = min(delay * 2, HAND_BACK_MAX_DELAY_SECONDS)
                continue
            return bool(released)
        return False

    async def _flush(self, batch: list[_Queued]) -> None:
        writes = [item for item, _ in batch]
        freed = sum(1 for item in writes if ends_run(item))
        rider = self._rider
        token = rider.writing() if rider is not None else 0
        runs, limit = rider.room(freed) if rider is not None else ((), 0)
        try:
            try:
                commit = await self._store.commit_runner_batch(
                    self._owner_id, self._lease_seconds, writes, runs=runs, claim_limit=limit
                )
            except BaseException:
                if rider is not None:
                    rider.committed(token, None, limit)
                raise
            if rider is not None:
                rider.committed(token, commit, limit)
            transitions = commit.transitions
            if faults.ARMED:
                await faults.hit("after_checkpoint_commit")
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        by_id = {t.instance_id: t for t in transitions}  # a step's row comes after its rows'
        for item, future in batch:
            if not future.done():
                future.set_result(by_id.get(item.instance_id))
