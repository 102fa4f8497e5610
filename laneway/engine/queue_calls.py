"""The Engine's queue calls: caps, pause and resume, counts, the live workers and the queue
history.

A part of Engine (engine.py), kept apart so that each file reads as one area; the claim that
holds the caps and skips a paused queue is laneway.claim (laneway/store/sql/functions.sql).
"""

import logging

from laneway.engine.claim_loop import ClaimLoop
from laneway.engine.handler_map import check_name
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.requests import check_cap, check_rate
from laneway.errors import InvalidInputError
from laneway.model import QueueRecord, QueueSample, WorkerRecord
from laneway.store import Store

logger = logging.getLogger(__name__)

MAX_HISTORY_MINUTES = 1440  # queueHistory reaches back one day at most


class QueueCalls:
    """Queues and workers, on the Engine's store and registry."""

    store: Store
    registry: WorkflowRegistry
    claim_loop: ClaimLoop

    async def configure_queue(
        self,
        name: str,
        *,
        concurrency: int,
        rate_per_minute: float | None = None,
        key_concurrency: int | None = None,
        key_rate_per_minute: float | None = None,
    ) -> QueueRecord:
        """Create or change a queue: at most `concurrency` running at once across all processes,
        and at most `rate_per_minute` starts per minute (token bucket; None: no rate cap); and
        per concurrency key, at most `key_concurrency` running and `key_rate_per_minute`
        starts per minute (None: no cap per key). Within a priority, keys take turns.

        These are an operator's settings (settings_source "operator"): a template's
        queue_settings, applied at every engine start, never override them again. Idle
        workers claim again at once (the call rings every listening engine's doorbell, and
        wakes this one's loop): raised caps start what waited without waiting for a poll.

        Raises:
            InvalidInputError: a bad name, a concurrency below 1, or a rate below 0.0001 (one
                start about every 6.9 days) or above 10^9 (requests.MIN_RATE_PER_MINUTE).
        """
        check_name(name, "queue name")
        check_cap(concurrency, "concurrency")
        check_rate(rate_per_minute, "ratePerMinute")
        if key_concurrency is not None:
            check_cap(key_concurrency, "keyConcurrency")
        check_rate(key_rate_per_minute, "keyRatePerMinute")
        record = await self.store.configure_queue(
            name, concurrency, rate_per_minute, key_concurrency, key_rate_per_minute
        )
        self.claim_loop.wake()  # this process's loop, whether or not it listens
        return record

    async def pause_queue(self, name: str, *, requested_by: str = "python") -> QueueRecord:
        """Pause a queue: from the moment this returns, no instance of it starts, in any
        process (a claim under way finishes first). Instances already running go on to their
        end; pending ones stay pending (waitingReason QUEUE_PAUSED), and so do those enqueued
        meanwhile, until `resume_queue`. A queue that does not exist yet is created paused
        (default caps), as configure_queue and an enqueue create theirs; pausing a paused
        queue changes nothing.

        The pause is the operator's alone: configure_queue and a template's queue_settings,
        applied at every engine start, never resume it. `requested_by` names who asked, for
        the log line ("python" unless an API says more).

        Raises:
            InvalidInputError: a bad name.
        """
        return await self._set_paused(
            name, True, requested_by, ("queue paused", "queue already paused")
        )

    async def resume_queue(self, name: str, *, requested_by: str = "python") -> QueueRecord:
        """Resume a paused queue: its pending instances start again within its caps, at once
        (the resume rings every listening engine's doorbell, and wakes this one's loop),
        not at the next poll. A queue that does not exist yet is created (default caps);
        resuming a queue that is not paused changes nothing.

        Raises:
            InvalidInputError: a bad name.
        """
        return await self._set_paused(
            name, False, requested_by, ("queue resumed", "queue not paused")
        )

    async def _set_paused(
        self, name: str, paused: bool, requested_by: str, said: tuple[str, str]
    ) -> QueueRecord:
        """Pause or resume, and log it (`said`: the line when it changed, when it did not);
        a resume that changed the queue wakes this process's loop, whether or not it
        listens (the store rang the others')."""
        check_name(name, "queue name")
        record, changed = await self.store.set_queue_paused(name, paused)
        if changed and not paused:
            self.claim_loop.wake()
        logger.info(
            said[0] if changed else said[1], extra={"queue": name, "requested_by": requested_by}
        )
        return record

    async def queues(self) -> list[QueueRecord]:
        """Every queue with its caps and counts per status; registered ones exist even if idle."""
        await self.store.ensure_queues({w.queue_name for w in self.registry})
        return await self.store.queues()

    async def workers(self) -> list[WorkerRecord]:
        """The live processes that run an engine (this one too while it runs), by role and host.

        Each running engine writes its row at start and at every lease heartbeat; a process
        that stopped heartbeating drops out once it has missed two of its heartbeats.
        """
        return await self.store.live_workers()

    async def queue_history(self, name: str, *, minutes: int = 60) -> list[QueueSample]:
        """A queue's last `minutes` closed minutes (1..1440), oldest first, one per minute:
        started, completed, failed, retried and the pending depth, zeros where idle.

        Rolled up from the event log once a minute by a running engine, so the newest minute
        appears a few seconds after it ends.

        Raises:
            InvalidInputError: minutes out of range.
            NotFoundError: no such queue.
        """
        if not isinstance(minutes, int) or not 1 <= minutes <= MAX_HISTORY_MINUTES:
            raise InvalidInputError(f"minutes must be an integer from 1 to {MAX_HISTORY_MINUTES}")
        await self.store.ensure_queues({w.queue_name for w in self.registry})
        return await self.store.queue_history(name, minutes)
