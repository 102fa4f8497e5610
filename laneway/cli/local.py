"""The Client of database mode (no --url): the API's own schema, executed in this process.

Owns running the CLI's GraphQL documents in-process against open_services (DATABASE_URL, or
the embedded PostgreSQL of the current folder), so both modes answer with the same fields and
the same error codes; and following events through the event hub. The workflows it knows
are those of LANEWAY_WORKFLOWS only. It never migrates: a database that lacks this release's
migrations is refused (an older release's processes may still run on it).
"""

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from uuid import UUID

from laneway.cli.client import (
    EXIT_MIGRATIONS_PENDING,
    EXIT_USAGE,
    CommandError,
    JSONObject,
    migrations_pending,
    raise_for_errors,
)
from laneway.errors import MigrationsPendingError
from laneway.events import EventSelection
from laneway.services import Services, open_services

if TYPE_CHECKING:
    from laneway.config import Settings
    from laneway.events.hub import EventHub


def graphql_shape(value: object) -> JSONObject:
    """A Strawberry object as JSON with the schema's field names (plain fields, nested too)."""
    from strawberry.schema.name_converter import NameConverter
    from strawberry.types.base import get_object_definition

    names = NameConverter()  # the ID-suffixed fields carry their names (instanceID)
    definition = get_object_definition(value, strict=True)
    shape: JSONObject = {}
    for field in definition.fields:
        if field.base_resolver is not None:
            continue
        item = getattr(value, field.python_name)
        if get_object_definition(item) is not None:
            item = graphql_shape(item)
        shape[names.get_graphql_name(field)] = item
    return shape


class LocalClient:
    """Runs documents through the real schema with an open permission: whoever can reach the
    database can do anything there anyway."""

    def __init__(self, services: Services) -> None:
        self._services = services

    @property
    def where(self) -> str:
        return "the database"

    async def execute(self, document: str, **variables: object) -> JSONObject:
        from laneway.api.auth import BearerTokens
        from laneway.api.graphql.context import LanewayContext
        from laneway.api.graphql.schema import schema

        context = LanewayContext(services=self._services, permission=BearerTokens(tokens=()))
        result = await schema.execute(document, variable_values=variables, context_value=context)
        raise_for_errors([error.formatted for error in result.errors or ()], self.where)
        data: dict[str, Any] = result.data or {}
        return data

    async def execute_long_running(self, document: str, **variables: object) -> JSONObject:
        """`execute`: in this process nothing waits on a server's answer."""
        return await self.execute(document, **variables)

    def check_workflow(self, name: str) -> None:
        registry = self._services.engine.registry
        if name in registry:
            return
        modules = ",".join(self._services.settings.workflow_modules)
        known = ", ".join(registry.names()) or "none"
        source = f"LANEWAY_WORKFLOWS={modules}" if modules else "LANEWAY_WORKFLOWS (not set)"
        hint = (
            "add the module that defines it to LANEWAY_WORKFLOWS"
            if modules
            else "set LANEWAY_WORKFLOWS to the module that defines it"
        )
        raise CommandError(
            f"unknown workflow {name!r}: without --url, only the workflows of {source} are"
            f" known here, which registers: {known}. To use it here, {hint}; to go through a"
            " running server and its workflows, add --url (for example --url"
            " http://127.0.0.1:8000)",
            EXIT_USAGE,
        )

    @contextlib.asynccontextmanager
    async def follow(
        self, instance_id: str | None, after: str | None
    ) -> AsyncIterator[AsyncIterator[JSONObject]]:
        from laneway.api.graphql.types import WorkflowEvent

        selection = EventSelection(UUID(instance_id) if instance_id else None)
        hub = self._services.hub
        async with (
            hub.open_stream(
                after_event_id=int(after) if after is not None else None, matches=selection
            ) as events,
            _losses_said(hub),
        ):

            async def shapes() -> AsyncIterator[JSONObject]:
                async for event in events:
                    yield graphql_shape(WorkflowEvent.from_record(event))

            yield shapes()


LOSS_CHECK_SECONDS = 1.0
"""How often a watch looks whether the event hub's connection to the database is down."""


@contextlib.asynccontextmanager
async def _losses_said(hub: "EventHub") -> AsyncIterator[None]:
    """While the block runs, one `laneway: lost the connection to the database; reconnecting`
    line on stderr each time the hub's listener is found down, as a `--url` watch says one for
    its server: the hub reconnects by itself (after the database comes back, however long that
    takes), and the events go on after the last one printed."""

    async def look() -> None:
        was_up = True
        while True:
            await asyncio.sleep(LOSS_CHECK_SECONDS)
            is_up = hub.is_connected
            if was_up and not is_up:
                print(
                    "laneway: lost the connection to the database; reconnecting",
                    file=sys.stderr,
                    flush=True,
                )
            was_up = is_up

    looking = asyncio.create_task(look(), name="laneway-watch-losses")
    try:
        yield
    finally:
        looking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await looking


def database_of(settings: "Settings") -> str:
    """Which database the commands use, for a message: DATABASE_URL without its passwords, or
    the embedded PostgreSQL's folder (the current one's `.laneway` unless LANEWAY_DATA_DIR)."""
    from laneway.store.migrate import redact_url

    if settings.database_url is None:
        folder = settings.data_dir.resolve()
        return f"the embedded PostgreSQL in {folder}, as DATABASE_URL is not set"
    return f"DATABASE_URL {redact_url(settings.database_url)}"


@contextlib.asynccontextmanager
async def open_local(settings: "Settings") -> AsyncIterator[LocalClient]:
    """A LocalClient on this process's database and LANEWAY_WORKFLOWS (importable from the
    current folder, as for serve and worker).

    Raises:
        CommandError: the database lacks migrations this release ships (exit 3, naming the
            database: database_of). Applying them here would change the schema under the
            processes of the release that runs there (they stop at their next heartbeat), so
            only serve, worker and migrate do.
    """
    from laneway.cli.process import current_folder_on_path
    from laneway.store.embedded import embedded_postgres
    from laneway.store.migrate import require_migrated

    current_folder_on_path()
    async with contextlib.AsyncExitStack() as stack:
        url = settings.database_url or stack.enter_context(embedded_postgres(settings.data_dir))
        try:
            await require_migrated(url)
        except MigrationsPendingError as exc:
            said = migrations_pending(exc, database_of(settings))
            raise CommandError(said, EXIT_MIGRATIONS_PENDING) from None
        # Nothing is pending now (and nothing becomes so): open_services migrates nothing.
        services = await stack.enter_async_context(
            open_services(dataclasses.replace(settings, database_url=url), role="cli")
        )
        yield LocalClient(services)
