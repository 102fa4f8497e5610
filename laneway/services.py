"""open_services(): builds one process's object graph and tears it down in reverse order.

Owns composition only: database (embedded or DATABASE_URL), store, workflow registry, engine,
event hub and metrics (and a worker's metrics server), wired together, and then the start-up
heap frozen once per process (heap.py, unless Settings.gc_freeze is off). Holds no other global
state; the entry point that calls it owns the background loops.
"""

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from laneway.config import Settings
from laneway.engine import Engine, Workflow, WorkflowRegistry, check_workflows
from laneway.engine.engine import default_owner_id
from laneway.events import EventHub
from laneway.heap import freeze_startup_heap
from laneway.host_names import AllowedHosts
from laneway.metrics import Metrics, metrics_server
from laneway.store import Store, open_store
from laneway.store.embedded import embedded_postgres
from laneway.store.pool import Timeouts


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """Everything one Laneway process uses, built once."""

    settings: Settings
    database_url: str
    store: Store
    engine: Engine
    hub: EventHub
    metrics: Metrics


@contextlib.asynccontextmanager
async def open_services(
    settings: Settings, *, workflows: Iterable[Workflow] = (), role: str = "worker"
) -> AsyncIterator[Services]:
    """Build one process's object graph; tear it down in reverse order.

    Workflows come from the modules in `settings.workflow_modules` plus `workflows`.
    The engine's loop is not started here: the caller runs `engine.run(stopping)` (or
    `engine.running()`) where it owns background tasks. Every connection is named
    `laneway-<role>-<owner id>` (or `laneway-listener-<owner id>`) in pg_stat_activity, and
    a running engine shows in the workers registry with this role: "worker" unless the
    caller is the HTTP service ("serve", api/lifespan.py) or a CLI command ("cli"). An engine
    run as a library is a worker. The database is migrated first, as `migrate` does.

    Raises:
        InvalidInputError: a workflow module cannot be imported, two workflows share a name
            and version, or a template is wired wrong.
        DatabaseNewerError: a newer Laneway migrated the database.
        MigrationFailedError: the database refused a migration's SQL.
        MigrationsMissingError: this installation carries no migration files.
    """
    registry = WorkflowRegistry.from_modules(settings.workflow_modules)
    for workflow in workflows:
        registry.register(workflow)
    check_workflows(registry)  # a badly wired template fails start-up, naming every problem
    owner_id = settings.owner_id or default_owner_id()
    async with contextlib.AsyncExitStack() as stack:
        database_url = settings.database_url or stack.enter_context(
            embedded_postgres(settings.data_dir)
        )
        store = await stack.enter_async_context(
            open_store(
                database_url,
                pool_size=settings.pool_size,
                application_name=f"laneway-{role}-{owner_id}",
                timeouts=Timeouts.from_seconds(
                    statement=settings.statement_timeout_seconds,
                    lock=settings.lock_timeout_seconds,
                    idle_in_transaction=settings.idle_in_transaction_timeout_seconds,
                ),
            )
        )
        metrics = Metrics()
        # Closed before the store: a snapshot read still under way is stopped, not left to
        # read from a closed pool.
        stack.push_async_callback(metrics.aclose)
        engine = Engine(
            store,
            registry,
            owner_id=owner_id,
            lease_seconds=settings.lease_seconds,
            poll_interval_seconds=settings.poll_interval_seconds,
            concurrency=settings.worker_concurrency,
            max_recoveries=settings.max_recoveries,
            shutdown_grace_seconds=settings.shutdown_grace_seconds,
            retention_seconds=settings.retention_days * 86_400.0,
            role=role,  # how it shows in the workers registry, if it runs
            observer=metrics,
            tracing=settings.tracing,
        )
        hub = await stack.enter_async_context(
            EventHub.open(
                database_url,
                store,
                on_notification=engine.notify,
                # A process that only enqueues or reads never listens; a running engine, the
                # API and the first subscriber start the hub (EventHub.start).
                listen=False,
                application_name=f"laneway-listener-{owner_id}",
            )
        )
        engine.before_run(hub.start)
        metrics.watch(hub, store)
        if role == "worker" and settings.metrics_port is not None:
            # A worker has no HTTP server of its own: its metrics get one (the API's are at
            # /metrics of the API).
            await stack.enter_async_context(
                metrics_server(
                    metrics,
                    store,
                    host=settings.metrics_host,
                    port=settings.metrics_port,
                    given_by=settings.metrics_port_given_by,
                    allowed=AllowedHosts.for_metrics(settings),
                )
            )
        if settings.gc_freeze:
            freeze_startup_heap()  # everything built above lives as long as the process
        yield Services(
            settings=settings,
            database_url=database_url,
            store=store,
            engine=engine,
            hub=hub,
            metrics=metrics,
        )
