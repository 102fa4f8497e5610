"""The Engine's bulk calls: cancel, retry or resume every instance a filter selects.

A part of Engine (engine.py), kept apart so that each file reads as one area. Owns what each
action applies to (cancel: not terminal; retry: failed; resume: paused), the walk over the
selection in the store's batches (store/bulk.py: each batch one transaction whose UPDATE
re-checks the status, so a repeated or concurrent call changes nothing twice), and what
follows each batch, as after the single calls: observers, stopping the handlers, terminal hooks
and waking the claim loop. The API, the command line and the dashboard all come here.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from laneway.engine.claim_loop import ClaimLoop
from laneway.engine.observer import EngineObserver
from laneway.engine.waits import validate_input
from laneway.errors import BulkStoppedError, InputRejectedError
from laneway.model import BulkResult, InstanceFilter, InstanceRecord, Status, Transition
from laneway.store import Store
from laneway.store.bulk import BulkCandidate

CANCELLABLE = (Status.PENDING, Status.RUNNING, Status.PAUSED, Status.WAITING)
RETRYABLE = (Status.FAILED,)
RESUMABLE = (Status.PAUSED,)

BatchWrite = Callable[[Sequence[BulkCandidate]], Awaitable[list[InstanceRecord]]]


class BulkCalls:
    """Bulk cancel, retry and resume, on the Engine's store, claim loop and observer."""

    store: Store
    claim_loop: ClaimLoop
    observer: EngineObserver

    async def _run_hook(self, record: InstanceRecord) -> None:
        """The workflow's terminal hook (Engine's)."""
        raise NotImplementedError

    async def cancel_many(
        self, where: InstanceFilter, *, dry_run: bool = False, stop_at: float | None = None
    ) -> BulkResult:
        """Cancel every instance `where` selects that is not terminal; each running handler is
        stopped wherever it runs. An instance that ends while the call runs is left as it
        ended. `dry_run`: count and sample only.

        Raises:
            BulkStoppedError: `stop_at` passed with batches left; what it changed stays changed.
        """

        async def write(batch: Sequence[BulkCandidate]) -> list[InstanceRecord]:
            records = await self.store.cancel_instances([c.instance_id for c in batch])
            for record in records:
                self.observer.transitioned(Transition.of(record))
                self.claim_loop.stop_run(record.instance_id, reason="cancelled")
            for record in records:
                await self._run_hook(record)
            return records

        return await self._bulk(where, CANCELLABLE, write, dry_run=dry_run, stop_at=stop_at)

    async def retry_many(
        self, where: InstanceFilter, *, dry_run: bool = False, stop_at: float | None = None
    ) -> BulkResult:
        """Run again, with fresh attempts, every failed instance `where` selects. They go back
        to pending, so their queue's caps and rates decide when each runs again: a bulk retry
        cannot start more at once than the queue allows. `dry_run`: count and sample only.

        Raises:
            BulkStoppedError: `stop_at` passed with batches left; what it changed stays changed.
        """

        async def write(batch: Sequence[BulkCandidate]) -> list[InstanceRecord]:
            records = await self.store.retry_instances([c.instance_id for c in batch])
            if records:
                self.claim_loop.wake()
            return records

        return await self._bulk(
            where, RETRYABLE, write, dry_run=dry_run, as_counted=True, stop_at=stop_at
        )

    async def resume_many(
        self, where: InstanceFilter, *, dry_run: bool = False, stop_at: float | None = None
    ) -> BulkResult:
        """Resume, without input, every paused instance `where` selects.

        An instance paused at a checkpoint whose input schema rejects a missing input stays
        paused: it is matched but not changed (resume it alone, with its input). So does one
        whose schema cannot be used at all (validate_input refuses it too), rather than the
        call failing after the batches before it were committed. `dry_run`: count and sample
        only.

        Raises:
            BulkStoppedError: `stop_at` passed with batches left; what it changed stays changed.
        """

        async def write(batch: Sequence[BulkCandidate]) -> list[InstanceRecord]:
            accepted = [c for c in batch if _accepts_no_input(c)]
            if not accepted:
                return []
            records = await self.store.resume_instances(
                [c.instance_id for c in accepted],
                [None] * len(accepted),
                [c.checkpoint for c in accepted],
            )
            if records:
                self.claim_loop.wake()
            return records

        return await self._bulk(
            where, RESUMABLE, write, dry_run=dry_run, as_counted=True, stop_at=stop_at
        )

    async def _bulk(
        self,
        where: InstanceFilter,
        statuses: Sequence[Status],
        write: BatchWrite,
        *,
        dry_run: bool,
        as_counted: bool = False,
        stop_at: float | None = None,
    ) -> BulkResult:
        """Count, then walk and `write` in batches what was counted: what existed at the count
        and was then in the filter's statuses of `statuses`, and when `as_counted` (retry and
        resume) has not changed since.

        `changed` counts only matched instances. A retry's or resume's statuses are resting
        ones: an instance enters them by a step of its own (it fails, it pauses), so one that
        does so after the count is left for the next call. A cancel's include pending and
        running, between which instances move all the time: what was counted in one and is
        in another now was still matched, and is cancelled unless it ended; one a retry
        brought back from failed since was not. What the count saw of an instance is read
        from its events up to the last one the count saw (store.bulk_batch), not from clocks:
        an enqueue that began before the count and committed after it is older than the count.

        `stop_at` (the event loop's clock): past it, the walk stops before its next batch
        (after one that took rows at least, so that calls again always get on) and raises
        BulkStoppedError with how many it changed, instead of being cut off mid-batch by a
        deadline that would say nothing of what it did.

        Raises:
            BulkStoppedError: `stop_at` passed with batches left to walk.
        """
        match = await self.store.bulk_match(where, statuses)
        if dry_run or match.matched == 0:
            return BulkResult(matched=match.matched, changed=0, sample_ids=match.sample_ids)
        changed = 0
        after: BulkCandidate | None = None
        took = False  # a batch took rows: a call again gets further
        # Each batch goes on from the last row the one before read, taken or not
        # (store.bulk_batch), so a walk reads each row once.
        while (
            batch := await self.store.bulk_batch(
                where, statuses, match, after, unchanged=as_counted
            )
        ).last is not None:
            late = stop_at is not None and asyncio.get_running_loop().time() >= stop_at
            if late and took:
                raise BulkStoppedError(matched=match.matched, changed=changed)
            after = batch.last
            if batch.taken:
                took = True
                changed += len(await write(batch.taken))
        return BulkResult(matched=match.matched, changed=changed, sample_ids=match.sample_ids)


def _accepts_no_input(candidate: BulkCandidate) -> bool:
    try:
        validate_input(candidate.input_schema, None, label=candidate.checkpoint)
    except InputRejectedError:
        return False
    return True
