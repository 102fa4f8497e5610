"""The `laneway` command line: subcommands, options, and each one's --help.

Owns the words a person reads in --help and in usage errors (no internal names: every option
type says what it wants, in arguments.py). The subcommands themselves live in process.py and
commands.py.
"""

import argparse
import importlib
import textwrap
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from laneway.cli.arguments import event_id, json_value, milliseconds, port_number, whole_number
from laneway.cli.version import VersionAction
from laneway.config import Settings

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]

DATABASE = """\
Database and workflows: without --url, the database of DATABASE_URL, or when it is not set
the embedded PostgreSQL in .laneway/ of the current folder, and the workflows of the modules
in LANEWAY_WORKFLOWS. With --url BASE, the server's GraphQL API (POST BASE/graphql) and the
workflows that server registered; --token, or LANEWAY_TOKEN, is its bearer token."""

WORKFLOW_MODULES = """\
Workflows: every Workflow at the top level of the modules in LANEWAY_WORKFLOWS (comma-
separated); the current folder is on the import path. A module that cannot be imported
stops it with exit 2; so does an empty LANEWAY_WORKFLOWS, unless --allow-no-workflows.
Database: DATABASE_URL, or the embedded PostgreSQL in .laneway/ of the current folder."""

JSON_SOURCES = "@PATH reads it from a file, - from stdin"

EXIT_CODES = (
    "Exit codes: 0 ok, 1 not found, in the wrong status or failed, 2 bad input,\n"
    "130 interrupted (Ctrl-C), 141 the reader of its output went away (| head)."
)


def _lazy(module: str, name: str) -> Command:
    """The subcommand `name` of laneway/cli/`module`.py, imported when it runs: `laneway
    worker` loads neither rich nor httpx, `laneway status` not the engine's process code."""

    async def run(args: argparse.Namespace, settings: Settings) -> int:
        command: Command = getattr(importlib.import_module(f"laneway.cli.{module}"), name)
        return await command(args, settings)

    return run


def _server_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("server (instead of the database)")
    group.add_argument(
        "--url",
        metavar="BASE",
        help="the server's base URL, such as http://127.0.0.1:8000: go through its GraphQL"
        " API and its workflows",
    )
    group.add_argument(
        "--token",
        help="the server's bearer token (one of its LANEWAY_API_TOKENS; default: LANEWAY_TOKEN)",
    )
    return options


def _json_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return options


def _epilog(*parts: str) -> str:
    return "\n\n".join(parts)


_BULK_APPLIES = {
    "cancel": "every selected instance that is not terminal",
    "retry": "every selected failed instance (through its queue's caps and rates)",
    "resume": "every selected paused instance, without input (one whose checkpoint needs an"
    " input stays paused)",
}


def _bulk_help(name: str) -> str:
    text = (
        f"With --filter instead of ID: {name} {_BULK_APPLIES[name]}. KEY is name, queue,"
        " status (repeatable), key (the concurrency key), version, created-after or"
        " created-before (ISO times, UTC unless they name an offset). It counts first (a dry"
        " run) and asks at a terminal; --yes skips the question (needed in scripts, else exit"
        " 2); --dry-run only counts. Prints {matched, changed, sampleIDs}."
    )
    example = f"laneway {name} --filter name=billing --filter created-after=2026-01-31T00:00Z --yes"
    return f"{textwrap.fill(text, width=92)}\n\nExample:\n  {example}"


def _bulk_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("bulk (instead of ID)")
    group.add_argument(
        "--filter",
        metavar="KEY=VALUE",
        action="append",
        help="select instances by name, queue, status, key, version, created-after or"
        " created-before (repeatable: all must match)",
    )
    group.add_argument(
        "--dry-run", action="store_true", help="only count and sample what --filter selects"
    )
    group.add_argument("--yes", action="store_true", help="do it without asking")


class _Parser(argparse.ArgumentParser):
    """argparse's, with a usage error said as every other error is: one `laneway:` line on
    stderr, exit 2, naming the command and where its options are explained."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("laneway").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"laneway: {where}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="laneway",
        description="Laneway: durable workflows on PostgreSQL. `laneway COMMAND --help` for one.",
        epilog=_epilog(DATABASE, EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    commands_ = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server, as_json = _server_options(), _json_option()

    def add(
        name: str, summary: str, epilog: str, *parents: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        return commands_.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=epilog,
            parents=list(parents),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    p = add(
        "serve",
        "serve the GraphQL API and the dashboard, and run an engine (LANEWAY_ENGINE=0: API only)",
        _epilog(
            WORKFLOW_MODULES,
            "Example:\n  LANEWAY_WORKFLOWS=workflows laneway serve --port 8000",
        ),
    )
    p.add_argument("--host", help="bind address (default: HOST or 127.0.0.1)")
    p.add_argument("--port", type=port_number, help="port (default: PORT or 8000)")
    p.add_argument(
        "--app",
        metavar="MODULE:NAME",
        help="a factory taking Settings and returning the ASGI app (default: laneway's own);"
        " it chooses its own workflows",
    )
    p.add_argument("--allow-no-workflows", action="store_true", help="start even with no workflows")
    p.set_defaults(run=_lazy("process", "serve"))

    p = add(
        "worker",
        "run instances (an engine only, no API) until Ctrl-C or SIGTERM",
        _epilog(WORKFLOW_MODULES, "Example:\n  LANEWAY_WORKFLOWS=workflows laneway worker"),
    )
    p.add_argument("--allow-no-workflows", action="store_true", help="start even with no workflows")
    p.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="N",
        help="serve Prometheus metrics at http://LANEWAY_METRICS_HOST:N/metrics "
        "(default: LANEWAY_METRICS_PORT; host 127.0.0.1; no token: bind it for the scraper only)",
    )
    p.set_defaults(run=_lazy("process", "worker"))

    add(
        "migrate",
        "create or upgrade the database tables and print what was applied",
        "Database: DATABASE_URL, or the embedded PostgreSQL in .laneway/ of the current folder."
        "\n\nExample:\n  DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres"
        " laneway migrate",
    ).set_defaults(run=_lazy("process", "migrate"))
    add(
        "export-schema",
        "print the GraphQL schema (SDL)",
        "Uses no database and no workflows.\n\nExample:\n  laneway export-schema > schema.graphql",
    ).set_defaults(run=_lazy("process", "export"))

    p = add(
        "enqueue",
        "start an instance of workflow NAME and print {instanceID, created}",
        _epilog(
            DATABASE,
            'Examples:\n  laneway enqueue hello --params \'{"name": "Ada"}\'\n'
            '  laneway enqueue hello --params \'{"name": "Ada"}\' --url http://127.0.0.1:8000',
            EXIT_CODES,
        ),
        server,
    )
    p.add_argument("name", metavar="NAME", help="the workflow's name")
    p.add_argument(
        "--params",
        metavar="JSON",
        type=json_value,
        help=f"params as JSON (default: null); {JSON_SOURCES}",
    )
    p.add_argument("--queue", help="run on this queue (default: the workflow's)")
    p.add_argument("--priority", type=whole_number, default=0, help="higher runs first")
    p.add_argument(
        "--delay-ms", metavar="MS", type=milliseconds, default=0.0, help="start no sooner"
    )
    p.add_argument("--idempotency-key", metavar="KEY", help="the same key returns the first")
    p.add_argument("--singleton-key", metavar="KEY", help="one unfinished instance per key")
    p.add_argument(
        "--concurrency-key", metavar="KEY", help="caps per key and fair turns (configureQueue)"
    )
    p.add_argument(
        "--version", metavar="VERSION", help="run on this version (default: the newest there)"
    )
    p.set_defaults(run=_lazy("commands", "enqueue"))

    for name, summary, run in (
        (
            "cancel",
            "cancel instance ID (a running handler is stopped)",
            _lazy("commands", "cancel"),
        ),
        (
            "retry",
            "run failed instance ID again from its last checkpoint",
            _lazy("commands", "retry"),
        ),
    ):
        p = add(
            name,
            summary + " and print {instanceID, status}; or every one --filter selects",
            _epilog(
                DATABASE,
                f"Example:\n  laneway {name} ID --url http://127.0.0.1:8000",
                _bulk_help(name),
                EXIT_CODES,
            ),
            server,
        )
        p.add_argument("instance_id", metavar="ID", nargs="?")
        _bulk_options(p)
        p.set_defaults(run=run)

    p = add(
        "resume",
        "resume paused instance ID and print {instanceID, status}; or every one --filter selects",
        _epilog(
            DATABASE,
            "--input is checked against the checkpoint's input schema; when it is refused the"
            " message names the failing path (exit 2) and the instance stays paused.",
            'Example:\n  laneway resume ID --input \'{"decision": "approve"}\'',
            _bulk_help("resume"),
            EXIT_CODES,
        ),
        server,
    )
    p.add_argument("instance_id", metavar="ID", nargs="?")
    p.add_argument(
        "--input",
        metavar="JSON",
        type=json_value,
        help=f"the reviewer's input as JSON; {JSON_SOURCES}",
    )
    _bulk_options(p)
    p.set_defaults(run=_lazy("commands", "resume"))

    p = add(
        "signal",
        "send the signal NAME to instance ID and print {signalID, accepted, status}",
        _epilog(
            DATABASE,
            'Example:\n  laneway signal ID approve --payload \'{"by": "ada"}\'',
            EXIT_CODES,
        ),
        server,
    )
    p.add_argument("instance_id", metavar="ID")
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--payload",
        metavar="JSON",
        type=json_value,
        help=f"the signal's payload as JSON; {JSON_SOURCES}",
    )
    p.add_argument(
        "--idempotency-key", metavar="KEY", help="a repeated key (per instance) sends nothing"
    )
    p.set_defaults(run=_lazy("commands", "send_signal"))

    p = add(
        "status",
        "show instance ID: its status, why it waits, progress, times, params and result",
        _epilog(
            DATABASE,
            "--json prints the GraphQL fields of WorkflowInstanceStatus and its waitingReason.",
            "Examples:\n  laneway status ID\n  laneway status ID --json --url http://127.0.0.1:8000",
            EXIT_CODES,
        ),
        server,
        as_json,
    )
    p.add_argument("instance_id", metavar="ID")
    p.set_defaults(run=_lazy("commands", "status"))

    p = add(
        "workflows",
        "list the workflows: name, versions, queue, kind, stages, description",
        _epilog(DATABASE, "Example:\n  laneway workflows --url http://127.0.0.1:8000"),
        server,
        as_json,
    )
    p.set_defaults(run=_lazy("commands", "workflows"))

    p = add(
        "preflight",
        "before a deploy: list the instances in flight that the new code could not run",
        _epilog(
            "The new code is the modules of --workflows (comma-separated; default:"
            " LANEWAY_WORKFLOWS), imported from the current folder. A finding is a version"
            " the new code no longer has (VERSION_GONE), or a next action or template stage it"
            " no longer has (ACTION_MISSING, STAGE_MISSING), with a count and some ids."
            " Exit 0 when nothing would be stranded, 1 when something would: gate a deploy"
            " step on it.",
            DATABASE,
            "Examples:\n  laneway preflight --workflows myapp.workflows\n"
            "  laneway preflight --json --url http://127.0.0.1:8000",
        ),
        server,
        as_json,
    )
    p.add_argument("--workflows", metavar="MODULES", help="the new code's workflow modules")
    p.set_defaults(run=_lazy("preflight", "preflight"))

    p = add(
        "queues",
        "list the queues: caps, paused, instances per status",
        _epilog(DATABASE, "Example:\n  laneway queues --json"),
        server,
        as_json,
    )
    p.set_defaults(run=_lazy("commands", "queues"))

    p = add(
        "watch",
        "follow events as they happen",
        _epilog(
            "With --instance ID: that instance's events from its start, with a progress bar,"
            " until it ends; exit 0 when it completed, 1 when it failed or was cancelled."
            " Without: every instance's new events, until Ctrl-C. --json prints one JSON line"
            " per event (the fields of WorkflowEvent). Over --url it follows the server's"
            " workflowEvents subscription (websocket).",
            DATABASE,
            "Examples:\n  laneway watch --instance ID\n  laneway watch --json --url http://127.0.0.1:8000",
        ),
        server,
        as_json,
    )
    p.add_argument("--instance", metavar="ID", help="only this instance, from its start")
    p.add_argument(
        "--after",
        metavar="EVENT_ID",
        type=event_id,
        help="start after this event id (0: from the first event)",
    )
    p.set_defaults(run=_lazy("commands", "watch"))
    return parser
