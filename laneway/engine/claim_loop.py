"""ClaimLoop: the claim loop that starts runners for due instances, within queue caps.

Owns claiming (its own claims and those that ride on a group commit), expired-lease
recovery, firing due schedules, the wake-up of waiting instances whose wake time came (the
idle poll and what it finds: due_work.py), and, through upkeep.py, retention and the queue
history roll-up; through presence.py, the
heartbeat, the workers registry row and the leases' renewal and hand-back; through
wake_times.py, the deadlines it wakes for before its next poll, and its sleep. Tells its
observer of claims and outcomes. Does not run user code itself (runner.py) and writes no SQL
(store).
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from uuid import UUID

from laneway.engine import tracing
from laneway.engine.committer import Committer
from laneway.engine.doorbells import Doorbells
from laneway.engine.due_work import DueWork, SchedulePlanner, TerminalCallback
from laneway.engine.observer import EngineObserver
from laneway.engine.presence import LEASE_LOST, Presence
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.runner import Run, run_instance
from laneway.engine.runner_tools import EngineCalls, RunnerTools
from laneway.engine.upkeep import Upkeep
from laneway.engine.wake_times import WakeTimes, is_due, wait
from laneway.errors import DatabaseNewerError, described
from laneway.model import (
    GroupCommit,
    InstanceRecord,
    Notification,
    Status,
)
from laneway.store import Store

logger = logging.getLogger(__name__)

CLAIM_COALESCE_SECONDS = 0.002
TOKEN_MARGIN_SECONDS = 0.002  # claim this long after a token is due, so that it is there
TOKEN_RETRY_SECONDS = 0.005  # first back-off when a token was there but another claimer had it


class ClaimLoop(DueWork):
    """Claims due instances and runs them, as one process's share of the work."""

    def __init__(
        self,
        store: Store,
        registry: WorkflowRegistry,
        *,
        owner_id: str,
        lease_seconds: float,
        poll_interval_seconds: float,
        concurrency: int,
        retention_seconds: float,
        max_recoveries: int,
        shutdown_grace_seconds: float,
        plan_schedule: SchedulePlanner,
        on_terminal: TerminalCallback,
        engine_calls: EngineCalls,
        observer: EngineObserver,
        tracing: bool,
        role: str = "worker",
    ) -> None:
        self._store = store
        self._registry = registry
        self.owner_id = owner_id
        self.lease_seconds = lease_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.concurrency = concurrency
        self.max_recoveries = max_recoveries
        self.retention_seconds = retention_seconds
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self._plan_schedule = plan_schedule
        self._unplannable = {}  # due schedules this process cannot plan: left to others
        self._on_terminal = on_terminal
        self._engine_calls = engine_calls
        self._observer = observer
        self._tracing = tracing  # spans of its claims and its runs' steps (tracing.py)
        # This loop's own claims and group commits ring the doorbell too, and their NOTIFY
        # must not wake it for a claim that would find nothing (doorbells.py). A group commit
        # that freed a queue's slot claims it itself, or wakes the loop at once; a run that
        # ends wakes it only when this process's own slots bound the last claim
        # (`_slots_bound`), so each freed room costs one claim, not one per run.
        self._doorbells = Doorbells(self.wake)
        self._slots_bound = True
        # A group commit that frees room claims it in its own transaction (room() and
        # committed() below): while the loop runs, the claimed instances start in its group.
        self._group: asyncio.TaskGroup | None = None
        self._stopping: asyncio.Event | None = None
        self._replaced: DatabaseNewerError | None = None  # a newer release migrated meanwhile
        self._committer = Committer(store, owner_id, lease_seconds, rider=self, tracing=tracing)
        # A claim takes at most half the slots, so a busy engine runs two cohorts: one is
        # claimed while the other's group commit is in flight, instead of the claim and the
        # commit taking turns (no-op instances, 20,000 queued: ~9,000/s instead of ~7,500/s).
        self._cohort = max(concurrency // 2, 1)
        self._runs: dict[UUID, Run] = {}
        self._wake = asyncio.Event()
        self._times = WakeTimes()  # a claim, the waiters' wake-up, the next schedule
        self._last_poll = -float("inf")
        self._upkeep = Upkeep(store, registry, retention_seconds, observer=observer)
        self._token_check_after = -float("inf")  # no rate-limited queue: ask again after this
        self._token_misses = 0  # claims in a row that found a token there but got nothing
        self._token_checking = False  # a read of the next token's due time is in flight
        # The heartbeat, the workers row and the leases' renewal and hand-back.
        self.presence = Presence(
            store,
            registry,
            self._runs,
            lambda instance_id, why: self.stop_run(instance_id, reason=why),
            self._schema_replaced,
            owner_id=owner_id,
            role=role,
            lease_seconds=lease_seconds,
            concurrency=concurrency,
        )

    # -- signals from outside --------------------------------------------------------------------

    def notify(self, notification: Notification) -> None:
        """A NOTIFY arrived: wake the loop, and stop the handlers whose instances were cancelled."""
        for instance_id in notification.cancelled_ids:
            self.stop_run(instance_id, reason="cancelled")
        if notification.cancelled_ids:
            self._wake.set()
        else:
            self._doorbells.rang(notification.last_event_id)

    def writing(self) -> int:
        """A group commit starts (ClaimRider): the doorbells that come in meanwhile may be its."""
        return self._doorbells.writing()

    def room(self, freed: int) -> tuple[Sequence[str], int]:
        """What a group commit whose batch ends `freed` runs here may claim in its own
        transaction (ClaimRider): as much as the loop's next claim would, counting the slots
        of those runs as free. Whether the queues' room or this process's slots bound it: the
        committer sends its next batch while the runs this claim took start, so a busy engine
        keeps two cohorts of runs, each claimed by the commit of the other's batch, and one
        commit per cohort instead of a commit and a claim. Nothing while the loop is not
        running, or stops."""
        if not freed or self._group is None or self._stopping is None or self._stopping.is_set():
            return (), 0
        limit = min(self._cohort, self.concurrency - len(self._runs) + freed)
        return self._registry.runs(), max(limit, 0)

    def committed(
        self, token: int, commit: GroupCommit | None, limit: int, traced: str | None
    ) -> None:
        """A group commit is in, or failed (None) (ClaimRider): start what its claim took, and
        wake the loop when room it freed may be left (a commit that did not claim, or whose
        claim got all it asked for, a cohort's worth)."""
        if commit is None:
            self._doorbells.wrote(token)
            return
        self._doorbells.wrote(token, commit.rung, commit.claim_rung)
        if commit.claimed and self._group is not None:
            self._observer.claimed(commit.claimed, self.lease_seconds)
            for record in commit.claimed:
                self._start(self._group, record, traced)
        if limit > 0:
            self._slots_bound = len(commit.claimed) == limit
            if self._slots_bound:
                if limit >= self._cohort:  # a cohort's worth: there may be more room
                    self._wake.set()
            elif (
                self._group is not None
                and not self._token_checking
                and time.monotonic() >= self._token_check_after
            ):
                # Bound by the queues: a rate-limited one's next token may free more, as
                # after the loop's own claim that fell short.
                self._token_checking = True
                self._group.create_task(self._retime_for_next_token())
        elif any(t.status != Status.RUNNING for t in commit.transitions):
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def wake_in(self, seconds: float) -> None:
        """Claim again after `seconds` (a retry backoff or a delay this process knows of),
        sooner than the next poll would."""
        self._times.claim_in(seconds)

    def stop_run(self, instance_id: UUID, *, reason: str) -> bool:
        """Cancel the handler task of an instance running here; False if it is not here."""
        run = self._runs.get(instance_id)
        if run is None:
            return False
        if run.cancelled.is_set() and reason == "cancelled":
            # The cancel's own NOTIFY coming back: a second task.cancel() would cut the
            # handler's cleanup short. (A stop for another reason, a lost lease or a shutdown
            # past its grace, still cancels a handler that swallowed the first.)
            return True
        # A lost lease means another process runs the step again: a WARNING, as a fenced write.
        log = logger.warning if reason == LEASE_LOST else logger.info
        log("stopping run", extra={"instance_id": str(instance_id), "reason": reason})
        run.cancelled.set()
        if run.task is not None:
            run.task.cancel()
        return True

    # -- one round, for tests and for the loop ---------------------------------------------------

    async def claim(self, limit: int | None = None) -> tuple[list[InstanceRecord], str | None]:
        """Claim up to `limit` due instances; and the traceparent of the claim's span, or None."""
        free = self.concurrency - len(self._runs)
        limit = free if limit is None else min(limit, free)
        started_ns = time.time_ns() if self._tracing else 0
        token, rung = self._doorbells.writing(), None
        try:
            claimed, rung = await self._store.claim_rung(
                self.owner_id, self._registry.runs(), limit, self.lease_seconds
            )
        finally:
            self._doorbells.wrote(token, rung)
        # A span only for a claim that took something (tracing.claim_span).
        span = tracing.claim_span(started_ns, limit, claimed) if started_ns and claimed else None
        self._observer.claimed(claimed, self.lease_seconds)
        return claimed, span

    async def tick(self) -> int:
        """One full round: maintenance, claim, and run what was claimed to its end.

        Returns how many instances were run. Tests drive the engine with this.
        """
        await self.maintain()
        claimed, traced = await self.claim()
        if claimed:
            async with asyncio.TaskGroup() as group:
                for record in claimed:
                    self._start(group, record, traced)
        return len(claimed)

    # -- the loop --------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run until `stopping` is set; then let steps in flight finish (within the
        grace period) and hand every unfinished instance back.

        The process is in the workers registry from before its first claim until every task
        of the loop has ended (the last heartbeat included), then it removes its row.
        """
        halted = asyncio.Event()
        self._stopping = stopping  # before the first beat, which may find the schema replaced
        await self.presence.beat()
        try:
            async with asyncio.TaskGroup() as group:
                # Until every run here has ended: what a commit in flight when the loop
                # stops claims still starts here, and is drained and handed back with the rest.
                self._group = group
                # Leases are renewed until every run here has stopped: a handler that goes on
                # after its cancel keeps its lease, so it never runs in two processes at once.
                heartbeat = group.create_task(
                    self.presence.heartbeat(halted), name="laneway-heartbeat"
                )
                try:
                    await self._loop(group, stopping)
                finally:
                    try:
                        await self.presence.stop(self.shutdown_grace_seconds)
                    finally:
                        halted.set()
                        heartbeat.cancel()
        finally:
            self._group = None
            await self.presence.unregister()
        if self._replaced is not None:
            raise self._replaced

    def _schema_replaced(self, error: DatabaseNewerError) -> None:
        """A newer release migrated the database while this loop ran (Presence sees it at a
        heartbeat): its statements may be gone or changed, so every write would fail and each
        instance it ran would burn attempts. It stops as at a shutdown (claims nothing more,
        drains, hands back) and `run` ends with the error, for the process to stop."""
        if self._replaced is None:
            logger.error(
                "the database was migrated by a newer release; stopping",
                extra={"error": str(error)},
            )
            self._replaced = error
        if self._stopping is not None:
            self._stopping.set()

    async def _loop(self, group: asyncio.TaskGroup, stopping: asyncio.Event) -> None:
        failures = 0
        woken = True  # the first round claims whatever is due
        while not stopping.is_set():
            self._wake.clear()
            try:
                claimable = woken
                if time.monotonic() - self._last_poll >= self.poll_interval_seconds:
                    claimable = await self._poll() or woken
                elif is_due(self._times.waiters):
                    claimable = await self._wake_waiters() or woken
                elif is_due(self._times.schedules):
                    claimable = await self._fire_schedules() or woken
                limit = min(self._cohort, self.concurrency - len(self._runs))
                claimed, traced = await self.claim(limit) if claimable and limit > 0 else ([], None)
                # A claim that got fewer than it asked for was bound by the queues' room (or
                # their due work), which only a commit or another process can change.
                self._slots_bound = limit <= 0 or len(claimed) == limit
                failures = 0
            except Exception as exc:
                # A lost or restarting database: the loop outlives it, backing off meanwhile.
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                logger.warning(
                    "claim round failed",
                    extra={"error": described(exc), "retry_s": delay},
                )
                await wait(stopping, delay)
                continue
            for record in claimed:
                self._start(group, record, traced)
            if claimed and len(claimed) == limit and len(self._runs) < self.concurrency:
                continue  # there may be more due work right now
            if claimable and limit > 0 and not claimed:
                await self._wake_for_next_token()
            poll_at = self._last_poll + self.poll_interval_seconds
            woken = await self._times.sleep(stopping, self._wake, poll_at)
            if woken and 0 < self.concurrency - len(self._runs) < self.concurrency // 4:
                # Busy, and only a few slots free: a moment lets more runs finish, so one
                # claim takes them all (every claim is a commit in the append-lock pipeline).
                await wait(stopping, CLAIM_COALESCE_SECONDS)
            if is_due(self._times.claim):
                self._times.claim = None  # a known due time arrived: claim
                woken = True

    async def _wake_for_next_token(self) -> None:
        """After a claim that found nothing: wake when a rate-limited queue's next token is due.

        Without this, a queue's bucket refills every 1/rate s but is only looked at again at
        the next poll (a 60/min queue ran at ~34/min with a 2 s poll). A process whose queues
        have no rate limit asks at most once per poll interval, and only after empty claims.
        """
        if time.monotonic() < self._token_check_after:
            return
        try:
            token = await self._store.next_token_due(self._registry.runs())
        except Exception as exc:
            logger.warning("next token read failed", extra={"error": described(exc)})
            return  # the fallback poll still comes
        if not token.rate_limited:
            self._token_check_after = time.monotonic() + self.poll_interval_seconds
        if token.due_in is None:
            self._token_misses = 0
        elif token.due_in > 0:
            self._token_misses = 0
            self.wake_in(token.due_in + TOKEN_MARGIN_SECONDS)
        else:
            # A token is there, yet this claim got nothing: another process holds the queue
            # (or its rows) and is taking it, and its commit's NOTIFY wakes this loop too.
            # Back off, doubling, so that a claim in flight elsewhere cannot make this spin.
            self.wake_in(
                min(TOKEN_RETRY_SECONDS * 2**self._token_misses, self.poll_interval_seconds)
            )
            self._token_misses = min(self._token_misses + 1, 16)

    async def _retime_for_next_token(self) -> None:
        try:
            await self._wake_for_next_token()  # wake_in() re-times the loop's sleep
        finally:
            self._token_checking = False

    def _start(self, group: asyncio.TaskGroup, record: InstanceRecord, traced: str | None) -> None:
        run = Run(record=record, claimed_by=traced)
        self._runs[record.instance_id] = run
        run.task = group.create_task(self._run(run), name=f"laneway-run-{record.instance_id}")
        # When the task ends, however it ends: one cancelled before its first step (a cancel's
        # NOTIFY right after the claim) never enters _run, and its slot was kept for good.
        run.task.add_done_callback(lambda _: self._ended(run))

    def _ended(self, run: Run) -> None:
        """A run's task is done: its slot is free."""
        # A run whose lease was lost may end after the instance was claimed here again.
        if self._runs.get(run.record.instance_id) is run:
            del self._runs[run.record.instance_id]
        if self._slots_bound:
            self._wake.set()

    async def _run(self, run: Run) -> None:
        try:
            workflow = self._registry.get(run.record.name, run.record.version)
            tools = RunnerTools(
                self._store,
                self.owner_id,
                run.record,
                self._engine_calls,
                self._observer,
                self._committer,
            )
            due = await run_instance(
                run,
                workflow,
                self._committer,
                self._on_terminal,
                tools,
                self._observer,
                trace_steps=self._tracing,
            )
            if due is not None and due.waking:
                self.wake_waiters_in(due.seconds)
            elif due is not None:
                self.wake_in(due.seconds)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug or a lost database: the lease runs out and another claim retries it.
            logger.exception("runner crashed", extra={"instance_id": str(run.record.instance_id)})
