"""The Engine's running calls: its loop, in the background or until a stop signal, and stops.

A part of Engine (engine.py), kept apart so that each file reads as one area; the loop itself
is the claim loop's (claim_loop.py), and the drain and hand-back of a stop are Presence's.
"""

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Self

from laneway.engine.claim_loop import ClaimLoop
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.stop_signals import stop_signals
from laneway.errors import raised_alone
from laneway.model import Notification
from laneway.store import Store

# Every engine whose loop runs in this process: what `laneway serve`'s second stop signal
# hurries (skip_all_drains), wherever the app it serves runs its engine.
_RUNNING: "weakref.WeakSet[RunCalls]" = weakref.WeakSet()


def skip_all_drains() -> None:
    """`skip_drain` on every engine running in this process."""
    for engine in list(_RUNNING):
        engine.skip_drain()


class RunCalls:
    """Running the loop, on the Engine's claim loop, store and registry."""

    store: Store
    registry: WorkflowRegistry
    claim_loop: ClaimLoop
    _before_run: list[Callable[[], Awaitable[object]]]
    _started: bool
    _ready: bool

    def notify(self, notification: Notification) -> None:
        """Feed a NOTIFY from the event listener: wakes the loop, stops cancelled handlers."""
        self.claim_loop.notify(notification)

    async def tick(self) -> int:
        """One round: maintenance, schedules, claim, and run the claimed instances to the end."""
        return await self.claim_loop.tick()

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run instances until `stopping` is set (for the process's TaskGroup).

        Raises:
            RuntimeError: the engine is running already.
            OwnerIdInUseError: another live process holds this engine's owner id.
        """
        self._start()
        await self._run_started(stopping)

    async def check_owner(self) -> None:
        """Refuse now what `run` refuses at its start: an owner id that another live process
        holds (`laneway serve` asks before its API starts to listen).

        Raises:
            OwnerIdInUseError: another live process holds this engine's owner id.
        """
        await self.claim_loop.presence.check_owner()

    def _start(self) -> None:
        """Mark the engine running, or refuse: a second loop would claim beside the first with
        the same owner, and its end would mark the engine stopped and remove its worker row
        while the first went on running."""
        if self._started:
            raise RuntimeError("this Laneway engine is running already")
        # Running from the first line: health checks must not see a starting engine as down.
        self._started = True
        _RUNNING.add(self)

    def _stop(self) -> None:
        self._started = self._ready = False
        _RUNNING.discard(self)

    async def _run_started(self, stopping: asyncio.Event) -> None:
        """The loop of a run that `_start` marked; refused first, before it writes or listens
        to anything, when another live process holds its owner id (check_owner)."""
        try:
            await self.check_owner()
            for step in self._before_run:
                await step()
            await self._prepare_queues()
            self._ready = True
            await self.claim_loop.run(stopping)
        finally:
            self._stop()

    async def _prepare_queues(self) -> None:
        """Create the registered queues; a template's queue_settings are code's defaults,
        written only where no operator has set the queue's caps (one statement each); the
        newest version's, where versions differ."""
        await self.store.ensure_queues({w.queue_name for w in self.registry})
        for workflow in self.registry.newest():
            settings = getattr(getattr(workflow, "template", None), "queue_settings", None)
            if settings is not None:  # a template declares its queue's caps (validated there)
                await self.store.apply_code_queue_settings(
                    workflow.queue_name, settings.concurrency, settings.rate_per_minute
                )

    async def run_until_stopped(self, started: Callable[[], object] | None = None) -> None:
        """Run until SIGINT or SIGTERM, as `laneway worker` does: the first stops claiming and
        lets the steps in flight finish within the shutdown grace, then hands the rest back;
        a second cuts that wait short (`skip_drain`). For an application that runs an engine
        in a process of its own; Python's default for SIGTERM would end it at once.
        `started` is called once the signals are taken (a supervisor may stop the process as
        soon as it says it started)."""
        stopping = asyncio.Event()
        with stop_signals(stopping.set, self.skip_drain):
            if started is not None:
                started()
            await self.run(stopping)

    def skip_drain(self) -> None:
        """Stop without waiting for the steps in flight: a stop under way (or the next) cancels
        them and hands them back now, not at the end of the shutdown grace."""
        self.claim_loop.presence.skip_drain()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """Run the engine's loop in the background for the duration of the block. An error
        of the block, or of the loop, comes out as itself (errors.raised_alone). Leaving the
        block, however it is left, stops as `run` does when told to: the steps in flight may
        finish within the shutdown grace, then the rest are handed back (skip_drain: at once).

        Raises:
            RuntimeError: the engine is running already (refused before the block starts).
            OwnerIdInUseError: another live process holds this engine's owner id (the loop
                stops before its first heartbeat, and the block is cancelled).
        """
        # Marked here, not in the loop's task: a second `running()` entered before that task
        # took its first step must be refused too.
        self._start()
        stopping = asyncio.Event()
        try:
            with raised_alone():
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._run_started(stopping), name="laneway-engine")
                    try:
                        yield self
                    finally:
                        stopping.set()
        finally:
            # The loop's task ran no line of its own when the block ended before its first
            # step (cancelled unstarted): its `finally` did not unmark the engine.
            self._stop()

    @property
    def is_running(self) -> bool:
        """True while `run` is active, from its first line to its last."""
        return self._started

    @property
    def is_ready(self) -> bool:
        """True once `run` has prepared its queues and claims (what a caller that counts the
        engine's own writes waits for)."""
        return self._ready
