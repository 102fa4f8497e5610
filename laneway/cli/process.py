"""The subcommands that run a process or set one up: serve, worker, migrate, export-schema.

Owns putting the current folder on the import path, importing LANEWAY_WORKFLOWS before
anything starts (a module that cannot be imported is a one-line error, exit 2) and refusing
to run with no workflows unless --allow-no-workflows. The API stack is imported by `serve`
alone, so `laneway worker` starts without loading Strawberry, Starlette and uvicorn.
"""

import argparse
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneway.cli.client import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError, database_error
from laneway.config import MIN_TOKEN_LENGTH, Settings
from laneway.engine import WorkflowRegistry
from laneway.engine import check_workflows as check_wiring
from laneway.engine.registry import error_line, is_missing
from laneway.errors import InvalidInputError, MigrationFailedError, os_error_reason
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


def check_workflows(
    settings: Settings,
    *,
    allow_none: bool,
    named_by: str = "LANEWAY_WORKFLOWS",
    allow_flag: str | None = "--allow-no-workflows",
) -> WorkflowRegistry:
    """Import the workflow modules of `settings` now, so that what cannot run refuses before
    anything starts. `named_by` is where the modules were named (the variable, or an
    option), and `allow_flag` the option that starts without workflows, as the refusal
    tells them (None: the command has none).

    Raises:
        InvalidInputError: a module cannot be imported (from_modules says which and why).
        CommandError: there are no workflows and `allow_none` is False (exit 2).
    """
    current_folder_on_path()
    registry = WorkflowRegistry.from_modules(settings.workflow_modules)
    if len(registry) == 0 and not allow_none:
        modules = ",".join(settings.workflow_modules)
        if modules:
            cause = f"the modules of {named_by}={modules} define no Workflow at their top level"
        elif named_by.startswith("--"):
            cause = f"{named_by} names no module"
        else:
            cause = f"{named_by} is not set"
        example = f"{named_by} workflows" if named_by.startswith("--") else f"{named_by}=workflows"
        escape = f", or pass {allow_flag}" if allow_flag else ""
        raise CommandError(
            f"no workflows to run: {cause}. Name your modules, as in {example}"
            f" (the current folder is on the import path){escape}",
            EXIT_USAGE,
        )
    return registry


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the API (and, unless LANEWAY_ENGINE=0, run the engine) until SIGINT/SIGTERM."""
    from laneway.api.app import create_app, server_config
    from laneway.cli.served import Server

    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    settings.check_bind(host)
    if short := settings.short_tokens():  # allowed on loopback or with ALLOW_INSECURE only
        logger.warning(
            "short api tokens",
            extra={"tokens": list(short), "min_length": MIN_TOKEN_LENGTH, "host": host},
        )
    # An --app factory chooses its own workflows (app.main adds the examples), so only the
    # modules the environment names are checked for it.
    registry = check_workflows(settings, allow_none=args.allow_no_workflows or bool(args.app))
    if not args.app:
        # Those are all the app's workflows: a badly wired template refuses now, as `worker`
        # refuses it, before anything listens (an app's own is refused by StartupWatch).
        check_wiring(registry)
    build = app_factory(args.app) if args.app else create_app
    # Listening comes first, so that a port in use is one line before anything starts (uvicorn
    # would start the app, engine included, then fail to bind and exit on its own).
    listening = listen(host, port, LISTEN_BACKLOG)
    try:
        config = server_config(_built(build, settings), host=host, port=port, settings=settings)
        config.app = startup = StartupWatch(config.app)
        server = Server(config)
        url = f"http://{authority(host, listening.getsockname()[1])}"
        logger.info("listening", extra={"url": url})
        await server.serve(sockets=[listening])
    except SystemExit:  # uvicorn's own exit when the app did not start
        raise startup.refusal() from None
    finally:
        listening.close()
    return EXIT_OK if server.started else EXIT_FAILED


def _built(build: "Callable[[Settings], Starlette]", settings: Settings) -> "Starlette":
    """The app `build` makes; a failure of the factory's own is one line, naming where."""
    try:
        return build(settings)
    except Exception as exc:
        raise CommandError(f"the app did not start: {error_line(exc)}") from None


def authority(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets (`[::1]:8000`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


LISTEN_BACKLOG = 2048
"""uvicorn's own listen backlog (uvicorn.Config's default), on the socket `serve` makes."""


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A socket listening on `host`:`port` (0: any free port), as uvicorn would bind it.

    Raises:
        CommandError: the address cannot be listened on (in use, not of this machine; exit 1).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as exc:
        reason = os_error_reason(exc)
        raise CommandError(f"cannot listen on {authority(host, port)}: {reason}") from None


class StartupWatch:
    """The served app, keeping what its lifespan startup raised: uvicorn exits, and `serve`
    says it in one line. A database it cannot use, a migration the database refused, or a
    configuration Laneway refuses (InvalidInputError: a badly wired template, a module that
    cannot be imported), is that line alone, with the exit code `worker` has for it: the
    traceback Starlette hands uvicorn to log is left out of the startup-failed message (any
    other failure keeps it, for the frames that show where the app went wrong)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.failure: BaseException | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_briefly(message: Any) -> None:
            # Starlette sends it while handling the exception: sys.exception() is that one.
            failure = sys.exception()
            if (
                message.get("type") == "lifespan.startup.failed"
                and failure is not None
                and _said_in_one_line(failure)
            ):
                message = {**message, "message": ""}
            await send(message)

        try:
            await self.app(scope, receive, send_briefly if scope["type"] == "lifespan" else send)
        except BaseException as exc:
            if scope["type"] == "lifespan" and self.failure is None:
                self.failure = exc
            raise

    def refusal(self) -> BaseException:
        """Why the app did not start: a database error or a refused configuration as it came
        (`main` says it in one line, exit 2 for the configuration), anything else as a
        CommandError (exit 1)."""
        failure = self.failure
        if failure is None:
            return CommandError("the server did not start (the log above says why)")
        if _said_in_one_line(failure):
            return failure
        return CommandError(f"the app did not start: {type(failure).__name__}: {failure}")


def _said_in_one_line(failure: BaseException) -> bool:
    """A start-up failure `main` says in one line, which needs no traceback: a configuration
    refused, a database it cannot use, a migration the database refused (as `migrate` and
    `worker` say it)."""
    return (
        isinstance(failure, (InvalidInputError, MigrationFailedError))
        or database_error(failure) is not None
    )


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
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if not is_missing(exc, module_name):  # found, but its own imports failed
            raise InvalidInputError(
                f"--app {reference}: its module failed while importing: {error_line(exc)}"
            ) from None
        raise InvalidInputError(f"--app {reference}: {exc}") from None
    except Exception as exc:  # the module's own code failed (an AttributeError of its own too)
        raise InvalidInputError(
            f"--app {reference}: its module failed while importing: {error_line(exc)}"
        ) from None
    try:
        factory = getattr(module, attribute)
    except AttributeError:
        raise InvalidInputError(
            f"--app {reference}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if not callable(factory):
        raise InvalidInputError(f"--app {reference} is not callable")
    built: Callable[[Settings], Starlette] = factory
    return built


async def worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run the engine only, until SIGINT/SIGTERM; then hand unfinished instances back."""
    check_workflows(settings, allow_none=args.allow_no_workflows)
    if args.metrics_port is not None:
        settings = dataclasses.replace(
            settings, metrics_port=args.metrics_port, metrics_port_given_by="--metrics-port"
        )
    async with open_services(settings, role="worker") as services:
        names = services.engine.registry.names()
        await services.engine.check_owner()  # refused before it says it started, as serve is
        await services.engine.run_until_stopped(
            lambda: logger.info("worker started", extra={"workflows": names})
        )
    logger.info("worker stopped")
    return EXIT_OK


async def migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Apply pending migrations; print the database, what was applied and the version now."""
    migrations()  # a broken install refuses before any server starts
    # Its warning of live engines (of the older release: the upgrade's first step skipped) is
    # for the one who migrates, though a command prints errors only (configure_command_logging).
    logging.getLogger(migrate_database.__module__).setLevel(logging.WARNING)
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
