"""Engines on a test database, and their timers made due at once: for tests of whole instances.

Owns EngineFactory (what the laneway_engine_factory fixture of testing_plugin.py gives a test,
and what a test annotates it with) and make_timers_due. Needs no pytest: laneway.testing
re-exports both, and that is where users import them.
"""

import contextlib
from uuid import UUID

from laneway.engine.engine import Engine
from laneway.engine.handler_map import Workflow
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.template_interpreter import check_workflows
from laneway.store import open_store


class EngineFactory:
    """Builds engines on one test database, each with its own Store, as separate processes
    would have; `aclose` closes them all."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._stack = contextlib.AsyncExitStack()

    async def __call__(
        self,
        *workflows: Workflow,
        owner_id: str | None = None,
        lease_seconds: float = 30.0,
        poll_interval_seconds: float = 2.0,
        concurrency: int = 100,
    ) -> Engine:
        """An engine that runs `workflows`; drive it with `tick()` or `running()`.

        Raises:
            InvalidInputError: a template is badly wired (an operation type with no handler, a
                checkpoint after no stage, an unregistered next workflow): the start-up check
                of `laneway serve` and `worker`, listing every problem.
        """
        registry = WorkflowRegistry(workflows)
        # As open_services does: a test of a badly wired template fails here, on the wiring,
        # not on one operation after the stages before it ran.
        check_workflows(registry)
        store = await self._stack.enter_async_context(open_store(self.database_url))
        return Engine(
            store,
            registry,
            owner_id=owner_id,
            lease_seconds=lease_seconds,
            poll_interval_seconds=poll_interval_seconds,
            concurrency=concurrency,
        )

    async def aclose(self) -> None:
        await self._stack.aclose()


async def make_timers_due(engine: Engine, *instance_ids: UUID) -> int:
    """Make the timers of these instances (none given: of every instance in the engine's
    database) due now, so that the next `engine.tick()` does what it would once their time came.

    A test of a retry's backoff, a delayed start, a `Sleep`, a signal wait's timeout or a
    checkpoint's expiry then takes no wall-clock time. Only the times move, to the database's
    now: the engine's own wake-up and claim do the rest as if the time had passed (a sleep's
    action runs, a timed-out wait runs its `on_timeout` or fails, an expired checkpoint does
    what its `on_expiry` says). Instances with no timer still to come, running ones and ended
    ones are left alone. This engine, if it runs in the background (`engine.running()`), is
    woken at once; another engine on the database finds the due times at its next poll.

    Returns how many instances had a timer moved.
    """
    moved = await engine.store.make_timers_due(list(instance_ids) if instance_ids else None)
    if moved:
        # The loop timed its next wake-up and claim by the old times: tell it they are now.
        engine.claim_loop.wake_waiters_in(0.0)
        engine.claim_loop.wake_in(0.0)
    return moved
