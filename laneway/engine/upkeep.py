"""Upkeep: what every engine does now and then beside claiming, each at its own pace.

Owns retention (finished instances past it deleted in batches every few minutes, sooner while
a backlog is left), the event log's time partitions (added ahead, retired whole, the parent
analysed), the once-a-minute queue history roll-up, and the warning about pending instances
of workflows this process does not have (checked once a minute). Run by the claim loop at
every poll and maintenance round; each step skips itself until its time comes. A step that
fails is logged as a warning and counted (EngineObserver.upkeep_failed), and the others and
the claim round go on: it is tried again at its next round.
"""

import logging
import time
from collections.abc import Awaitable, Callable

from laneway.engine.observer import EngineObserver, NoObserver, UpkeepTask
from laneway.engine.registry import WorkflowRegistry
from laneway.errors import described
from laneway.store import Store

logger = logging.getLogger(__name__)

UNREGISTERED_CHECK_SECONDS = 60.0
PRUNE_EVERY_SECONDS = 300.0  # how often an engine sweeps finished instances past retention
PRUNE_BATCH = 5_000  # instances one statement (one short transaction) of a sweep deletes
PRUNE_SWEEP_SECONDS = 0.5  # a sweep starts no batch after this long: claims wait meanwhile
PRUNE_BEHIND_SECONDS = 5.0  # the next sweep, when this one stopped with a backlog left
PARTITIONS_EVERY_SECONDS = 600.0  # how often an engine looks after the event partitions
ROLL_UP_MAX_ROUNDS = 20  # a backlog of events is rolled up in at most this many statements
# The warning of each step that failed (docs/deploying.md names them).
_FAILED: dict[UpkeepTask, str] = {
    "unregistered": "unregistered workflows check failed",
    "queue_history": "queue history roll-up failed",
    "prune": "finished instances prune failed",
    "partitions": "event partition upkeep failed",
}


class Upkeep:
    """One process's housekeeping, paced by the clock."""

    def __init__(
        self,
        store: Store,
        registry: WorkflowRegistry,
        retention_seconds: float,
        *,
        prune_batch: int = PRUNE_BATCH,
        observer: EngineObserver | None = None,
    ) -> None:
        self._store = store
        self._observer: EngineObserver = observer if observer is not None else NoObserver()
        self._registry = registry
        self._retention_seconds = retention_seconds
        self._prune_batch = prune_batch
        self._warned_unregistered: set[str] = set()
        self._last_unregistered_check = -UNREGISTERED_CHECK_SECONDS
        self._next_prune = -float("inf")  # monotonic time of the next sweep: due at once
        self._last_partitions = -PARTITIONS_EVERY_SECONDS
        self._rolled_minute = -1  # the wall-clock minute of this process's last roll-up

    @property
    def has_rolled_up(self) -> bool:
        """Whether this process has rolled the queue history up at least once."""
        return self._rolled_minute >= 0

    async def run(self) -> None:
        """Every step whose time has come."""
        await self._guarded("unregistered", self._report_unregistered)
        # The roll-up first: retention keeps an instance until the roll-up has counted its
        # events (queries.PRUNE_FINISHED), so this sweep can take the ones it just counted.
        await self._guarded("queue_history", self._roll_up_history)
        await self._guarded("prune", self._prune)
        await self._guarded("partitions", self._keep_partitions)

    async def _guarded(self, task: UpkeepTask, step: Callable[[], Awaitable[None]]) -> None:
        """Run one step; a failure is logged and counted, and the others and the claim round
        go on (the step comes again at its next round)."""
        try:
            await step()
        except Exception as exc:
            self._observer.upkeep_failed(task)
            logger.warning(_FAILED[task], extra={"error": described(exc)})

    async def _prune(self) -> None:
        """Every few minutes, delete finished instances older than the retention period.

        One batch per sweep would cap retention at 5,000 instances per engine per five minutes
        (~17/s): a busier deployment would never catch up, nor retire its old event
        partitions. So a sweep deletes batch after batch while they come back full, each its
        own statement (row locks held for one batch), until a short batch or
        PRUNE_SWEEP_SECONDS, which bounds how long the claim loop it runs in waits; stopped
        with a backlog left, it comes back after PRUNE_BEHIND_SECONDS. A short batch can also
        mean another engine holds the rest (skipped, not waited for): its sweep goes on.

        A batch that fails (a lock or statement timeout, a lost connection) ends the sweep: it
        is logged and counted, what the earlier batches deleted stays deleted, and the next
        sweep comes in PRUNE_EVERY_SECONDS. It used to escape into the claim round, which it
        failed ("claim round failed"), skipping that round's claim and partition upkeep.
        """
        now = time.monotonic()
        if self._retention_seconds <= 0 or now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY_SECONDS  # a sweep that fails waits as before
        deadline = now + PRUNE_SWEEP_SECONDS
        pruned = 0
        while True:
            batch = await self._store.prune_finished(self._retention_seconds, self._prune_batch)
            pruned += batch
            behind = batch >= self._prune_batch
            self._observer.pruned(batch, behind)
            if not behind or time.monotonic() >= deadline:
                break
        wait = PRUNE_BEHIND_SECONDS if behind else PRUNE_EVERY_SECONDS
        self._next_prune = time.monotonic() + wait
        if pruned:
            logger.info("finished instances pruned", extra={"count": pruned, "behind": behind})

    async def _keep_partitions(self) -> None:
        """Every ten minutes: add the event partitions of the next days, retire the past ones
        whose instances retention has deleted (none while retention is off: everything is
        kept), and analyse the partitioned parent when its statistics are an hour old.
        Partitions go two days ahead, so a failed round only matters after many in a row; the
        default partition takes what no partition covers meanwhile."""
        now = time.monotonic()
        if now - self._last_partitions < PARTITIONS_EVERY_SECONDS:
            return
        self._last_partitions = now
        added = await self._store.add_event_partitions()
        self._observer.partitions_added(len(added))
        if added:
            logger.info("event partitions added", extra={"partitions": added})
        if self._retention_seconds > 0:
            retired = await self._store.retire_event_partitions(
                ended_seconds_ago=self._retention_seconds
            )
            self._observer.partitions_retired(len(retired))
            if retired:
                logger.info("event partitions retired", extra={"partitions": retired})
        await self._store.analyze_events()

    async def _roll_up_history(self) -> None:
        """Once per minute, at the first poll after it turns: roll the closed minutes' events
        up into the queue history (one statement; another process's roll-up in flight makes it
        a no-op, and the event-id mark makes a second one count nothing twice)."""
        minute = int(time.time() // 60)
        if minute == self._rolled_minute:
            return
        self._rolled_minute = minute
        for _ in range(ROLL_UP_MAX_ROUNDS):
            _rolled, more = await self._store.roll_up_queue_history()
            if not more:
                break

    async def _report_unregistered(self) -> None:
        now = time.monotonic()
        if now - self._last_unregistered_check < UNREGISTERED_CHECK_SECONDS:
            return
        # Scans the pending backlog, so it runs rarely; it only feeds a warning.
        self._last_unregistered_check = now
        unregistered = await self._store.unregistered_pending(self._registry.names())
        for name, count in unregistered.items():
            if name not in self._warned_unregistered:
                self._warned_unregistered.add(name)
                logger.warning(
                    "pending instances of a workflow not registered here",
                    extra={"workflow": name, "pending": count},
                )
