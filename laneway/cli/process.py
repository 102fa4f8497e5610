"""The subcommands that run a process or set one up: serve, worker, migrate, export-schema.

Owns putting the current folder on the import path, importing LANEWAY_WORKFLOWS before
anything starts (a module that cannot be imported is a one-line error, exit 2) and refusing
to run with no workflows unless --allow-no-workflows. The API stack is imported by `serve`
alone, so `laneway worker` starts without loading Strawberry, Starlette and uvicorn.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from laneway.cli.client import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError
from laneway.config import Settings
from laneway.engine import WorkflowRegistry
from laneway.errors import InvalidInputError
from laneway.services import open_services
from laneway.store.embedded import embedded_postgres
from laneway.store.migrate import migrate as migrate_database
from laneway.store.migrate import migrations

if TYPE_CHECKING:
    from starlette.applications import Starlette

logger = logging.getLogger(__name__)


def current_folder_on_path() -> None:
    """Make modules of the current folder importable, as `python -m`, uvicorn and celery do
    (the `laneway` console script alone would not)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def check_workflows(settings: Settings, *, allow_none: bool) -> WorkflowRegistry:
    """Import LANEWAY_WORKFLOWS now, so that what cannot run refuses before anything starts.

    Raises:
        InvalidInputError: a module cannot be imported (from_modules says which and why).
        CommandError: there are no workflows and `allow_none` is False (exit 2).
    """
    current_folder_on_path()
    registry = WorkflowRegistry.from_modules(settings.workflow_modules)
    if len(registry) == 0 and not allow_none:
        modules = ",".join(settings.workflow_modules)
        cause = (
            f"the modules of LANEWAY_WORKFLOWS={modules} define no Workflow at their top level"
            if modules
            else "LANEWAY_WORKFLOWS is not set"
        )
        raise CommandError(
            f"no workflows to run: {cause}. Name your modules, as in LANEWAY_WORKFLOWS=workflows"
            " (the current folder is on the import path), or pass --allow-no-workflows",
            EXIT_USAGE,
        )
    return registry


def _on_signals(callback: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, callback)


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the API (and, unless LANEWAY_ENGINE=0, run the engine) until SIGINT/SIGTERM."""
    import uvicorn

    from laneway.api.app import create_app, server_config

    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    settings.check_bind(host)
    # An --app factory chooses its own workflows (app.main adds the examples), so only the
    # modules the environment names are checked for it.
    check_workflows(settings, allow_none=args.allow_no_workflows or bool(args.app))
    build = app_factory(args.app) if args.app else create_app
    server = uvicorn.Server(server_config(build(settings), host=host, port=port, settings=settings))
    await server.serve()
    return EXIT_OK if server.started else EXIT_FAILED


def app_factory(reference: str) -> "Callable[[Settings], Starlette]":
    """The factory `MODULE:NAME` names: a callable that takes Settings and returns the app.

    Raises:
        InvalidInputError: the reference is malformed, or names nothing callable.
    """
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise InvalidInputError(f"--app must look like MODULE:NAME, not {reference!r}")
    current_folder_on_path()
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"--app {reference}: {exc}") from None
    if not callable(factory):
        raise InvalidInputError(f"--app {reference} is not callable")
    built: Callable[[Settings], Starlette] = factory
    return built


async def worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run the engine only, until SIGINT/SIGTERM; then hand unfinished instances back."""
    check_workflows(settings, allow_none=args.allow_no_workflows)
    if args.metrics_port is not None:
        settings = dataclasses.replace(settings, metrics_port=args.metrics_port)
    stopping = asyncio.Event()
    async with open_services(settings, role="worker") as services:
        _on_signals(stopping.set)
        logger.info("worker started", extra={"workflows": services.engine.registry.names()})
        await services.engine.run(stopping)
    logger.info("worker stopped")
    return EXIT_OK


async def migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Apply pending migrations; print the database, what was applied and the version now."""
    migrations()  # a broken install refuses before any server starts
    with contextlib.ExitStack() as stack:
        url = settings.database_url
        if url is None:
            print(
                f"laneway: DATABASE_URL is not set; starting the embedded PostgreSQL in"
                f" {settings.data_dir}",
                file=sys.stderr,
            )
            url = stack.enter_context(embedded_postgres(settings.data_dir))
        report = await migrate_database(url)
    report_json = {
        "database": report.database,
        "embedded": settings.database_url is None,
        "applied": report.applied,
        "version": report.version,
    }
    print(json.dumps(report_json), flush=True)
    return EXIT_OK


async def export(args: argparse.Namespace, settings: Settings) -> int:
    """Print the GraphQL schema as SDL."""
    from laneway.api.graphql.schema import export_schema

    sys.stdout.write(export_schema())
    return EXIT_OK
