"""running(): Laneway's services and engine, started and stopped in one async context manager.

Owns the start/stop order every way of serving Laneway shares: Laneway's own app (its
lifespan), a host that mounts that app (`async with laneway_app.running(): yield` in its own
lifespan), and a host with its own schema (`async with running(settings) as services`).
The services open, the event listener starts (so /healthz reports it, and the first
subscriber does not wait for it), the engine loop runs in a TaskGroup unless
LANEWAY_ENGINE=0; on exit the engine stops first, handing its instances back while the store
and hub it writes through are still open. An engine that ends on its own with an error leaves
the API serving, and /healthz says `engine: stopped` (503), for the orchestrator to restart
the process. Beside it, the watch for a newer release's migration: once the process learns of
one (Store.newer_release), its API refuses every operation (graphql/schema.py), its
subscriptions end with that error, and /healthz says `schema: newer` (503).
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

from starlette.requests import HTTPConnection

from laneway.config import Settings
from laneway.engine import Workflow
from laneway.engine.presence import heartbeat_seconds
from laneway.errors import DatabaseNewerError, LanewayError, described, raised_alone
from laneway.services import Services, open_services

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def running(
    settings: Settings, *, workflows: Iterable[Workflow] = ()
) -> AsyncIterator[Services]:
    """Open the services for `settings` (with `workflows` registered besides the modules'),
    start the hub, run the engine loop until the block ends; yields the services."""
    async with open_services(settings, workflows=tuple(workflows), role="serve") as services:
        if settings.engine_enabled:
            # Refused here, not in the engine's task: that would only log it, and the process
            # would go on serving with its engine stopped.
            await services.engine.check_owner()
        await services.hub.start()
        stopping = asyncio.Event()
        with raised_alone():  # an error of the block comes out as itself
            async with asyncio.TaskGroup() as group:
                engine = None
                if settings.engine_enabled:
                    engine = group.create_task(
                        _run_engine(services, stopping), name="laneway-engine"
                    )
                watch = group.create_task(
                    _watch_schema(services, engine), name="laneway-schema-watch"
                )
                logger.info(
                    "laneway started",
                    extra={
                        "engine": settings.engine_enabled,
                        "workflows": services.engine.registry.names(),
                    },
                )
                try:
                    yield services
                finally:
                    stopping.set()
                    watch.cancel()
    logger.info("laneway stopped")


async def _run_engine(services: Services, stopping: asyncio.Event) -> None:
    """The engine's loop, whose error ends the engine alone: raised into the TaskGroup it would
    end the lifespan under a server still answering, with every request failing."""
    try:
        await services.engine.run(stopping)
    except DatabaseNewerError:
        pass  # the claim loop logged it ("…; stopping"): one ERROR line for one event
    except Exception as exc:
        logger.error(
            "engine stopped; /healthz says engine: stopped",
            extra={"error": described(exc)},
            exc_info=not isinstance(exc, LanewayError),  # Laneway's own say it all
        )


async def _watch_schema(services: Services, engine: "asyncio.Task[None] | None") -> None:
    """Once the process learns that a newer release migrated the database, end its
    subscriptions with that error (EventHub.refuse); its operations are refused already, by
    the flag (Store.newer_release) the schema reads.

    While the engine runs, its heartbeat reads the newest migration (engine/presence.py), and
    this only waits for what it finds. Without one (LANEWAY_ENGINE=0, a host that mounts the
    app and runs no engine, an engine that stopped on an error), this reads it itself, one
    statement every third of LANEWAY_LEASE_SECONDS, as the heartbeat would; a failed read is
    only logged, and the next one comes. Cancelled at shutdown.
    """
    store = services.store
    if engine is not None:
        found = asyncio.ensure_future(store.wait_newer_release())
        try:
            await asyncio.wait({found, engine}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            found.cancel()
    interval = heartbeat_seconds(services.settings.lease_seconds)
    read_here = store.newer_release is None  # else the engine found it, and said so itself
    while store.newer_release is None:
        await asyncio.sleep(interval)
        try:
            await store.check_schema()
        except Exception as exc:
            logger.warning("schema check failed", extra={"error": described(exc)})
    newer = store.newer_release
    if read_here:
        logger.error(
            "the database was migrated by a newer release; refusing requests",
            extra={"error": str(newer)},
        )
    services.hub.refuse(newer)


def services_of(connection: HTTPConnection) -> Services:
    """The Services of the Laneway app serving `connection` (Starlette puts the innermost app
    in the scope, so this holds when the app is mounted in a host's too).

    Raises:
        RuntimeError: the app is not running: neither its lifespan nor `app.running()` is
            active (a host that mounts the app must enter `running()` in its own lifespan).
    """
    services = getattr(connection.scope.get("app"), "services", None)
    if not isinstance(services, Services):
        raise RuntimeError(
            "Laneway is not running: serve its app with the lifespan on, or, when a host "
            "mounts it, enter `async with laneway_app.running():` in the host's lifespan"
        )
    return services
