"""The `laneway` command: serve, worker, migrate, export-schema, enqueue, status, signal,
resume, watch.

Owns argument parsing, logging setup, `asyncio.run` and exit codes (0 ok, 1 not found or
failed, 2 bad input or refused configuration). Each subcommand is a small async function;
the work itself is done by the engine, store, hub and API modules. The API modules are
imported by the subcommands that use them, so `laneway worker` starts without loading
Strawberry, Starlette and uvicorn (about a second less to replace a lost worker).
"""

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO
from uuid import UUID

from laneway.config import Settings
from laneway.errors import InvalidInputError, LanewayError
from laneway.events import EventSelection
from laneway.logs import configure_logging
from laneway.services import open_services
from laneway.store.embedded import embedded_postgres
from laneway.store.migrate import migrate as migrate_database
from laneway.store.migrate import migrations

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from laneway.api.graphql.types import WaitingReason, WorkflowEvent, WorkflowInstanceStatus

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def graphql_shape(
    value: "WorkflowInstanceStatus | WorkflowEvent | WaitingReason",
) -> dict[str, Any]:
    """A GraphQL object as JSON, with the schema's field names (plain fields only)."""
    from strawberry.schema.name_converter import NameConverter
    from strawberry.types.base import get_object_definition

    names = NameConverter()  # the ID-suffixed fields carry their names (instanceID)
    definition = get_object_definition(value, strict=True)
    return {
        names.get_graphql_name(field): getattr(value, field.python_name)
        for field in definition.fields
        if field.base_resolver is None
    }


def _print_json(value: object, out: TextIO | None = None) -> None:
    print(json.dumps(value), file=out or sys.stdout, flush=True)


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"laneway: {message}", file=sys.stderr)
    return code


def _on_signals(callback: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, callback)


# -- subcommands ---------------------------------------------------------------------------------


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the API (and, unless LANEWAY_ENGINE=0, run the engine) until SIGINT/SIGTERM."""
    import uvicorn

    from laneway.api.app import create_app, server_config

    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    try:
        settings.check_bind(host)
        build = app_factory(args.app) if args.app else create_app
    except InvalidInputError as exc:
        return _fail(str(exc))
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
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` and uvicorn do: the current folder
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
    _print_json(
        {
            "database": report.database,
            "embedded": settings.database_url is None,
            "applied": report.applied,
            "version": report.version,
        }
    )
    return EXIT_OK


async def export(args: argparse.Namespace, settings: Settings) -> int:
    """Print the GraphQL schema as SDL."""
    from laneway.api.graphql.schema import export_schema

    sys.stdout.write(export_schema())
    return EXIT_OK


def _json_option(text: str | None, option: str) -> object:
    """The JSON of an option (None when it is not given).

    Raises:
        InvalidInputError: it is not strict JSON (exit 2, naming the option).
    """
    from laneway.api.http.strict_json import strict_json_loads

    if text is None:
        return None
    try:
        return strict_json_loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"{option} is not valid JSON: {exc}") from None


async def enqueue(args: argparse.Namespace, settings: Settings) -> int:
    """Enqueue one instance and print `{"instanceID", "created"}`."""
    params = _json_option(args.params, "--params")
    async with open_services(settings, role="cli") as services:
        result = await services.engine.enqueue(
            args.name,
            params,
            queue=args.queue,
            priority=args.priority,
            delay_ms=args.delay_ms,
            idempotency_key=args.idempotency_key,
            singleton_key=args.singleton_key,
            concurrency_key=args.concurrency_key,
        )
    _print_json({"instanceID": str(result.instance_id), "created": result.created})
    return EXIT_OK


async def status(args: argparse.Namespace, settings: Settings) -> int:
    """Print one instance as JSON (the fields of WorkflowInstanceStatus, with its
    waitingReason: why it is not running, null while running and once terminal); 1 when
    unknown."""
    from laneway.api.graphql.types import WaitingReason, WorkflowInstanceStatus

    try:
        instance_id = UUID(args.instance_id)
    except ValueError:
        return _fail(f"not an instance id: {args.instance_id!r}")
    async with open_services(settings, role="cli") as services:
        record = await services.engine.get(instance_id)
        reason = await services.engine.waiting_reason(instance_id) if record else None
    if record is None:
        return _fail(f"no instance {instance_id}", EXIT_FAILED)
    shape = graphql_shape(WorkflowInstanceStatus.from_record(record))
    shape["waitingReason"] = (
        graphql_shape(WaitingReason.from_record(reason)) if reason is not None else None
    )
    _print_json(shape)
    return EXIT_OK


def _instance_id(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise InvalidInputError(f"not an instance id: {text!r}") from None


async def send_signal(args: argparse.Namespace, settings: Settings) -> int:
    """Send a signal and print `{"signalID", "accepted", "status"}` (the instance's status
    after it); 1 when the instance is unknown or has ended, 2 for a bad name or payload."""
    instance_id = _instance_id(args.instance_id)
    payload = _json_option(args.payload, "--payload")
    async with open_services(settings, role="cli") as services:
        result = await services.engine.signal(
            instance_id, args.name, payload, idempotency_key=args.idempotency_key
        )
    _print_json(
        {
            "signalID": str(result.signal_id),
            "accepted": result.accepted,
            "status": result.instance.status.value,
        }
    )
    return EXIT_OK


async def resume(args: argparse.Namespace, settings: Settings) -> int:
    """Resume a paused instance, with `--input` for its checkpoint's input schema; print
    `{"instanceID", "status"}`. 1 when unknown or not paused; 2 when the input is refused (the
    message names the failing path), and the instance stays paused."""
    instance_id = _instance_id(args.instance_id)
    given = _json_option(args.input, "--input")
    async with open_services(settings, role="cli") as services:
        record = await services.engine.resume(instance_id, given)
    _print_json({"instanceID": str(record.instance_id), "status": record.status.value})
    return EXIT_OK


async def watch(args: argparse.Namespace, settings: Settings) -> int:
    """Print one JSON line per event as it happens, until SIGINT/SIGTERM."""
    from laneway.api.graphql.types import WorkflowEvent

    try:
        instance_id = UUID(args.instance) if args.instance else None
    except ValueError:
        return _fail(f"not an instance id: {args.instance!r}")
    task = asyncio.current_task()
    assert task is not None
    async with open_services(settings, role="cli") as services:
        _on_signals(task.cancel)
        try:
            async with services.hub.open_stream(
                after_event_id=args.after,
                matches=EventSelection(instance_id),
            ) as events:
                async for event in events:
                    _print_json(graphql_shape(WorkflowEvent.from_record(event)))
        except asyncio.CancelledError:
            task.uncancel()
    return EXIT_OK


# -- parsing -------------------------------------------------------------------------------------


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="laneway", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("serve", help="serve the GraphQL API (and run the engine)")
    p.add_argument("--host", help="bind address (default: HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: PORT or 8000)")
    p.add_argument(
        "--app",
        metavar="MODULE:NAME",
        help="a factory taking Settings and returning the ASGI app (default: laneway's own)",
    )
    p.set_defaults(run=serve)

    commands.add_parser("worker", help="run the engine only").set_defaults(run=worker)
    commands.add_parser("migrate", help="apply database migrations").set_defaults(run=migrate)
    commands.add_parser("export-schema", help="print the GraphQL SDL").set_defaults(run=export)

    p = commands.add_parser("enqueue", help="enqueue an instance of workflow NAME")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--params", help="params as JSON (default: null)")
    p.add_argument("--queue")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--idempotency-key")
    p.add_argument("--singleton-key")
    p.add_argument("--concurrency-key", help="caps per key and fair turns (configureQueue)")
    p.set_defaults(run=enqueue)

    p = commands.add_parser("status", help="print an instance as JSON")
    p.add_argument("instance_id", metavar="ID")
    p.set_defaults(run=status)

    p = commands.add_parser("signal", help="send the signal NAME to instance ID")
    p.add_argument("instance_id", metavar="ID")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--payload", help="the signal's payload as JSON (default: null)")
    p.add_argument("--idempotency-key", help="a repeated key (per instance) sends nothing")
    p.set_defaults(run=send_signal)

    p = commands.add_parser("resume", help="resume paused instance ID")
    p.add_argument("instance_id", metavar="ID")
    p.add_argument("--input", help="the reviewer's input as JSON (checked by the input schema)")
    p.set_defaults(run=resume)

    p = commands.add_parser("watch", help="print events as JSON lines until Ctrl-C")
    p.add_argument("--instance", metavar="ID", help="only this instance's events")
    p.add_argument(
        "--after", metavar="ID", type=_non_negative, help="replay events after this id first"
    )
    p.set_defaults(run=watch)
    return parser


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of `laneway` and `python -m laneway`; returns the exit code."""
    args = build_parser().parse_args(argv)
    configure_logging(logging.INFO if args.command in ("serve", "worker") else logging.WARNING)
    try:
        settings = Settings.from_env(os.environ if environ is None else environ)
    except InvalidInputError as exc:
        return _fail(str(exc))
    command: Command = args.run
    try:
        # uvloop's event loop makes the engine's many small database round trips cheaper
        # (uvicorn picks it up too); plain asyncio where it is not installed.
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(command(args, settings))
    except LanewayError as exc:
        return _fail(str(exc), EXIT_USAGE if isinstance(exc, InvalidInputError) else EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_OK
