"""Committer: the group commit of runner writes.

Owns batching: whoever gets the lock flushes every write queued meanwhile (step writes and
template operations' outcomes of every runner here), in one transaction. Also the hand-back of
an instance whose write failed because the database went away. What a write means:
laneway/writes.py.
"""

import asyncio
import time
from collections.abc import Callable
from uuid import UUID

from laneway.engine import faults
from laneway.errors import LeaseLostError
from laneway.model import Status, Transition
from laneway.store import Store
from laneway.store.leases import RELEASED_AFTER_DATABASE_LOSS
from laneway.store.pool import DATABASE_GONE
from laneway.writes import RunnerWrite

HAND_BACK_FIRST_DELAY_SECONDS = 0.05
HAND_BACK_MAX_DELAY_SECONDS = 1.0

_Queued = tuple[RunnerWrite, "asyncio.Future[Transition | None]"]


class Committer:
    """Group commit for runner writes: whoever gets the lock flushes everything queued."""

    def __init__(
        self,
        store: Store,
        owner_id: str,
        lease_seconds: float,
        committed: Callable[[int | None, bool], None] = lambda event_id, freed: None,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._lease_seconds = lease_seconds
        # Told after each group commit: the event id its doorbell rang with, and whether it
        # freed a queue's slot (an instance left `running`).
        self._committed = committed
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
        try:
            transitions, rung = await self._store.write_runner_batch_rung(
                self._owner_id, self._lease_seconds, [item for item, _ in batch]
            )
            self._committed(rung, any(t.status != Status.RUNNING for t in transitions))
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
