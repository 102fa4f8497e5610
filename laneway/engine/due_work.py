"""The claim loop's maintenance: the idle poll and what it finds (expired leases to recover,
waiting instances whose wake time came, due schedules, each fired by a process that runs the
newest version live), and the upkeep it runs after.

A due schedule that cannot be planned here (a timezone this process's tz database lacks, as
during a rolling deploy or on a host with an older tz database) is skipped and logged once at
ERROR; it is left as it is, for a process that can plan it to fire on time, and is neither
locked nor timed again here until its rule changes. The other schedules, and the rest of the
poll, go on.

A part of ClaimLoop (claim_loop.py), kept apart so that each file reads as one area; the
statements are the store's, retention and the roll-up upkeep.py's.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from laneway.engine import faults
from laneway.engine.observer import EngineObserver
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.runner import log_failure
from laneway.engine.upkeep import Upkeep
from laneway.engine.wake_times import WakeTimes
from laneway.errors import LanewayError, described
from laneway.model import NewInstance, ScheduleRecord, Status, Transition
from laneway.store import Store
from laneway.store.schedules import SchedulePlan

logger = logging.getLogger("laneway.engine.claim_loop")
"""The loop's logger: a recovered lease is logged as the claim loop's, as it always was (an
instance that ends failed as the runner's, as every failed instance: runner.log_failure)."""

SchedulePlanner = Callable[[ScheduleRecord, datetime], tuple[NewInstance | None, datetime]]
TerminalCallback = Callable[[Transition], Awaitable[None]]

WAKE_MAX_ROUNDS = 50  # wake-ups per round: at most this many batches, then claim in between
SCHEDULE_RETRY_SECONDS = 0.05  # a schedule still due after firing: look again after this


class DueWork:
    """Maintenance, on the ClaimLoop's store, registry, wake times and observer."""

    _store: Store
    _registry: WorkflowRegistry
    _observer: EngineObserver
    _times: WakeTimes
    _upkeep: Upkeep
    _plan_schedule: SchedulePlanner
    _unplannable: dict[str, ScheduleRecord]  # by name, as it was when it could not be planned
    _on_terminal: TerminalCallback
    _last_poll: float
    max_recoveries: int
    owner_id: str

    def wake_waiters_in(self, seconds: float) -> None:
        """Wake waiting instances after `seconds` (a wait's wake time this process knows of),
        sooner than the next poll would find it."""
        self._times.waiters_in(seconds)

    def schedules_in(self, seconds: float) -> None:
        """Fire schedules after `seconds` (the next one's due time, as the database counts),
        sooner than the next poll would: an `every` shorter than the poll interval fires
        every occurrence, each on time."""
        self._times.schedules_in(seconds)

    async def maintain(self) -> None:
        """Recover expired leases, fire due schedules, and report unrunnable instances."""
        await self._recover()
        await self._wake_waiters()
        await self._fire_schedules()
        await self._upkeep.run()

    async def _poll(self) -> bool:
        """The idle poll: one cheap statement, then only the work it found.

        Returns whether due instances are waiting to be claimed.
        """
        self._last_poll = time.monotonic()
        due = await self._store.due_work(self._registry.runs(), self._skipped_schedules())
        if due.expired_leases:
            await self._recover()
        woke = False
        if due.next_wake_in is not None:
            if due.next_wake_in <= 0:
                woke = await self._wake_waiters()
            else:
                self.wake_waiters_in(due.next_wake_in)
        fired = False
        if due.due_schedules:
            fired = await self._fire_schedules()
        elif due.next_schedule_in is not None:  # only its workflows' schedules are counted
            self.schedules_in(due.next_schedule_in)
        await self._upkeep.run()
        return due.claimable or woke or fired

    async def _fire_schedules(self) -> bool:
        """Fire the due schedules (an engine with workflows) that are this engine's to fire,
        then time the next one's firing. Returns whether any enqueued an instance."""
        self._times.schedules = None
        if not len(self._registry):
            return False
        names = await self._schedule_names()
        if not names:
            return False
        fired = await self._store.fire_due_schedules(
            self._plan, names, skipped=self._skipped_schedules()
        )
        if faults.ARMED:
            await faults.hit("cron_insert")
        next_in = await self._store.next_schedule_in(names, self._skipped_schedules())
        if next_in is not None:
            # Still due: another engine is firing it, or more were due than one call fires.
            self.schedules_in(max(next_in, SCHEDULE_RETRY_SECONDS))
        return bool(fired)

    def _plan(self, schedule: ScheduleRecord, now: datetime) -> SchedulePlan:
        """The plan of a due schedule's fire; None, to leave it as it is, for one that cannot be
        planned here. That one is logged (once: the store leaves it out from then on, until
        its rule changes) and does not hold up the others in the fire's transaction."""
        try:
            planned = self._plan_schedule(schedule, now)
        except Exception as exc:
            self._unplannable[schedule.name] = schedule
            logger.error(
                "schedule cannot be planned here; skipped",
                extra={
                    "schedule": schedule.name,
                    "workflow": schedule.workflow_name,
                    "error": described(exc),
                },
                exc_info=not isinstance(exc, LanewayError),  # a bug's traceback
            )
            return None
        self._unplannable.pop(schedule.name, None)
        return planned

    def _skipped_schedules(self) -> list[ScheduleRecord]:
        return list(self._unplannable.values())

    async def _schedule_names(self) -> list[str]:
        """The workflows whose due schedules this engine fires: those that no other live
        process (in the workers registry, two heartbeats not missed) runs in a newer version
        than the newest here. A fire starts the firing engine's newest version, so during a
        rolling deploy the old code's processes leave the fires to the new code's (the lock
        on a due schedule still makes one of those fire it once). One left here stays due and
        its next poll looks again, so it fires here once no such process is live: never
        stuck. Versions compare in Python (registry.version_order), hence one read of the
        workers registry, made only when a schedule is due or about to be, not at every idle
        poll."""
        peers = [
            run
            for worker in await self._store.live_workers()
            if worker.owner_id != self.owner_id
            for run in worker.versions
        ]
        left = self._registry.outdated_by(peers)
        if left:
            logger.debug("due schedules left to a newer version", extra={"workflows": sorted(left)})
        return [name for name in self._registry.names() if name not in left]

    async def _wake_waiters(self) -> bool:
        """Wake the waiting and paused instances whose wake time came, in batches (another
        process's batch is skipped, so processes share a crowd of wake-ups); then look up the
        next wake time. Returns whether any instance became pending."""
        self._times.waiters = None
        woke = False
        for _ in range(WAKE_MAX_ROUNDS):
            transitions, more = await self._store.wake_due()
            for transition in transitions:
                if transition.status == Status.FAILED:  # timed out, or its checkpoint expired
                    log_failure(transition, transition.error)
                if transition.status.is_terminal:
                    self._observer.transitioned(transition)
                    await self._on_terminal(transition)
                else:
                    woke = True
            if not more:
                break
        else:
            self.wake_waiters_in(0.0)  # more are due: the next round goes on
            return woke
        next_in = await self._store.next_wake_in()
        if next_in is not None:
            self.wake_waiters_in(next_in)
        return woke

    async def _recover(self) -> None:
        """Recover the instances whose lease ran out: one that goes on (pending) is a
        WARNING; one that ends failed (its last attempt, or dead-lettered) is the runner's
        `instance failed`, as any final failure."""
        recovered = await self._store.recover_expired_leases(max_recoveries=self.max_recoveries)
        for transition in recovered:
            if transition.status == Status.FAILED:
                log_failure(transition, transition.error)
            else:
                logger.warning(
                    "lease expired, instance recovered",
                    extra={
                        "instance_id": str(transition.instance_id),
                        "status": transition.status,
                        "error": transition.error,
                    },
                )
            self._observer.transitioned(transition)  # retried (pending) or failed
            if transition.status.is_terminal:
                await self._on_terminal(transition)
