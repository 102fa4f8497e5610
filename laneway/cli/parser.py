"""The `laneway` command line: which subcommands there are, and their options.

Owns the words a person reads in each subcommand's --help and in usage errors (no internal
names: every option type says what it wants, in arguments.py; every --help is built, and ends
with its exit codes, as subcommands.py builds it). The subcommands about queues,
schedules and workers are cluster_parser.py's; the subcommands themselves live in process.py,
commands.py, bulk.py, preflight.py, instances.py, queues.py, schedules.py and workers.py.
"""

import argparse
from collections.abc import Sequence
from typing import NoReturn

from laneway.cli.arguments import event_id, json_value, milliseconds, port_number, whole_number
from laneway.cli.cluster_parser import add_cluster_commands
from laneway.cli.subcommands import (
    DATABASE,
    JSON_SOURCES,
    UNUSABLE,
    WORKFLOW_MODULES,
    Subcommands,
    epilog,
    lazy,
)
from laneway.cli.version import VersionAction

# The exit codes of the subcommands whose codes mean more, or other, than subcommands.py's
# EXIT_MEANINGS (the same as docs/cli.md says them).
PROCESS_EXITS = {
    0: "stopped by SIGINT or SIGTERM (a clean shutdown)",
    3: None,  # it migrates
    130: None,
    141: None,
}
BULK_EXITS = {
    1: "not found or in the wrong status for it, or the server or database cannot be used;"
    " with --filter, stopped at the server's time limit (run it again to finish)",
    2: "bad input (an option, id, filter or JSON), a refused token or configuration; with"
    " --filter, no --yes and no terminal to ask at",
    130: "interrupted (Ctrl-C): at the question, nothing changed; while it works, what it"
    " changed so far stays changed",
}

_BULK_APPLIES = {
    "cancel": "every selected instance that is not terminal",
    "retry": "every selected failed instance (through its queue's caps and rates)",
    "resume": "every selected paused instance, without input (one whose checkpoint needs an"
    " input stays paused)",
}


def _bulk_help(name: str) -> tuple[str, str]:
    """The paragraphs of --help on `name --filter`: what it does, an example."""
    text = (
        f"With --filter instead of ID: {name} {_BULK_APPLIES[name]}. KEY is name, queue,"
        " status (repeatable), key (the concurrency key), version, parent (an instance id:"
        " its children), created-after or created-before (ISO times, UTC unless they name"
        " an offset). It counts first (a dry"
        " run) and asks at a terminal; --yes skips the question (needed in scripts, else exit"
        " 2); --dry-run only counts. Prints {matched, changed, sampleIDs}."
    )
    example = f"laneway {name} --filter name=billing --filter created-after=2026-01-31T00:00Z --yes"
    return text, f"Example:\n  {example}"


def _bulk_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("bulk (instead of ID)")
    group.add_argument(
        "--filter",
        metavar="KEY=VALUE",
        action="append",
        help="select instances by name, queue, status, key, version, parent, created-after"
        " or created-before (repeatable: all must match)",
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

    # override: only the first of argparse's overloads (no caller passes a namespace).
    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        """argparse's, but an argument no parser took is refused by the subcommand's parser
        (`laneway enqueue: unrecognized arguments: --bogus (see `laneway enqueue --help`)`):
        argparse hands a subcommand's leftovers up to the top-level parser, whose error pointed
        to `laneway --help`, where the subcommand's options are not."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._parser_of(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _parser_of(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The parser of the subcommand `parsed` names (this one when it names none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, argparse.ArgumentParser):
                    return chosen
        return self


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="laneway",
        description="Laneway: durable workflows on PostgreSQL. `laneway COMMAND --help` for one.",
        epilog=epilog(
            DATABASE, "Each `laneway COMMAND --help` ends with the exit codes of that command."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    commands = Subcommands(parser)
    add, server, as_json = commands.add, commands.server, commands.as_json

    p = add(
        "serve",
        "serve the GraphQL API and the dashboard, and run an engine (LANEWAY_ENGINE=0: API only)",
        WORKFLOW_MODULES,
        "Example:\n  LANEWAY_WORKFLOWS=workflows laneway serve --port 8000",
        run=lazy("process", "serve"),
        exits={
            **PROCESS_EXITS,
            1: "cannot listen on its address (a port in use), cannot use the database (or a"
            " newer release migrated it), or its app did not start",
            2: "a refused configuration: a public address without LANEWAY_API_TOKENS (or with"
            " one shorter than 16 characters), no workflows, a module that cannot be"
            " imported, a bad option",
        },
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

    p = add(
        "worker",
        "run instances (an engine only, no API) until Ctrl-C or SIGTERM",
        WORKFLOW_MODULES,
        "Example:\n  LANEWAY_WORKFLOWS=workflows laneway worker",
        run=lazy("process", "worker"),
        exits={
            **PROCESS_EXITS,
            1: "cannot use the database (or a newer release migrated it), or cannot serve its"
            " metrics (--metrics-port in use)",
            2: "a refused configuration: no workflows, a module that cannot be imported, a bad"
            " option",
        },
    )
    p.add_argument("--allow-no-workflows", action="store_true", help="start even with no workflows")
    p.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="N",
        help="serve Prometheus metrics at http://LANEWAY_METRICS_HOST:N/metrics "
        "(default: LANEWAY_METRICS_PORT; host 127.0.0.1; no token: bind it for the scraper only)",
    )

    add(
        "migrate",
        "create or upgrade the database tables and print what was applied",
        "Database: DATABASE_URL, or the embedded PostgreSQL in .laneway/ of the current folder.",
        "Example:\n  DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres laneway migrate",
        run=lazy("process", "migrate"),
        exits={
            0: "applied what was pending (or nothing was)",
            1: "cannot use the database, or a newer release migrated it",
            2: "a refused DATABASE_URL or configuration",
            3: None,
        },
    )
    add(
        "export-schema",
        "print the GraphQL schema (SDL)",
        "Uses no database and no workflows.",
        "Example:\n  laneway export-schema > schema.graphql",
        run=lazy("process", "export"),
        exits={1: None, 2: "a refused configuration (of the environment)", 3: None},
    )

    p = add(
        "enqueue",
        "start an instance of workflow NAME and print {instanceID, created}",
        DATABASE,
        # Workflows of the user's own (app/examples.py is the repository's, not the wheel's).
        "Examples:\n  laneway enqueue send-invoice --params '{\"id\": 42}'\n"
        "  laneway enqueue send-invoice --params '{\"id\": 42}' --url http://127.0.0.1:8000\n"
        "  laneway enqueue ingest --params @batch.json",
        run=lazy("commands", "enqueue"),
        parents=[server],
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

    for name, summary in (
        ("cancel", "cancel instance ID (a running handler is stopped)"),
        ("retry", "run failed instance ID again from its last checkpoint"),
    ):
        p = add(
            name,
            summary + " and print {instanceID, status}; or every one --filter selects",
            DATABASE,
            f"Example:\n  laneway {name} ID --url http://127.0.0.1:8000",
            *_bulk_help(name),
            run=lazy("commands", name),
            parents=[server],
            exits=BULK_EXITS,
        )
        p.add_argument("instance_id", metavar="ID", nargs="?")
        _bulk_options(p)

    p = add(
        "resume",
        "resume paused instance ID and print {instanceID, status}; or every one --filter selects",
        DATABASE,
        "--input is checked against the checkpoint's input schema; when it is refused the"
        " message names the failing path (exit 2) and the instance stays paused.",
        'Example:\n  laneway resume ID --input \'{"decision": "approve"}\'',
        *_bulk_help("resume"),
        run=lazy("commands", "resume"),
        parents=[server],
        exits={**BULK_EXITS, 2: f"{BULK_EXITS[2]}; an --input the checkpoint's schema refuses"},
    )
    p.add_argument("instance_id", metavar="ID", nargs="?")
    p.add_argument(
        "--input",
        metavar="JSON",
        type=json_value,
        help=f"the reviewer's input as JSON; {JSON_SOURCES}",
    )
    _bulk_options(p)

    p = add(
        "signal",
        "send the signal NAME to instance ID and print {signalID, accepted, status}",
        DATABASE,
        'Example:\n  laneway signal ID approve --payload \'{"by": "ada"}\'',
        run=lazy("commands", "send_signal"),
        parents=[server],
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

    p = add(
        "status",
        "show instance ID: its status, why it waits, progress, times, params and result",
        DATABASE,
        "--json prints the GraphQL fields of WorkflowInstanceStatus and its waitingReason.",
        "Examples:\n  laneway status ID\n  laneway status ID --json --url http://127.0.0.1:8000",
        run=lazy("commands", "status"),
        parents=[server, as_json],
    )
    p.add_argument("instance_id", metavar="ID")

    p = add(
        "instances",
        "list a page of instances, newest first: those --filter selects, or all",
        DATABASE,
        "--filter takes the words of cancel --filter but created-after and created-before:"
        " name, queue, status (repeatable), key, version, parent (an instance id: its"
        " children); all must match. Under the table, the"
        " --after that gives the next page. --json prints the GraphQL fields of"
        " workflowInstancesConnection: {edges: [{cursor, node}], pageInfo: {hasNextPage,"
        " endCursor}}, each node a summary (`laneway status ID` has the rest).",
        "Examples:\n  laneway instances --filter status=failed --filter queue=emails\n"
        "  laneway instances --first 200 --after CURSOR --json --url http://127.0.0.1:8000",
        run=lazy("instances", "instances"),
        parents=[server, as_json],
        exits=UNUSABLE,
    )
    p.add_argument(
        "--filter",
        metavar="KEY=VALUE",
        action="append",
        help="select by name, queue, status, key, version or parent (repeatable: all must match)",
    )
    p.add_argument("--first", metavar="N", type=whole_number, help="how many, 1 to 500 (50)")
    p.add_argument("--after", metavar="CURSOR", help="the page after this cursor (endCursor)")

    add(
        "workflows",
        "list the workflows: name, versions, queue, kind, stages, description",
        DATABASE,
        "Example:\n  laneway workflows --url http://127.0.0.1:8000",
        run=lazy("commands", "workflows"),
        parents=[server, as_json],
        exits=UNUSABLE,
    )

    p = add(
        "preflight",
        "before a deploy: list the instances in flight that the new code could not run",
        "The new code is the modules of --workflows (comma-separated; default:"
        " LANEWAY_WORKFLOWS), imported from the current folder. A finding is a version"
        " the new code no longer has (VERSION_GONE), or a next action or template stage it"
        " no longer has (ACTION_MISSING, STAGE_MISSING), with a count and some ids."
        " Gate a deploy step on its exit code.",
        DATABASE,
        "Examples:\n  laneway preflight --workflows myapp.workflows\n"
        "  laneway preflight --json --url http://127.0.0.1:8000",
        run=lazy("preflight", "preflight"),
        parents=[server, as_json],
        exits={
            0: "nothing in flight would be stranded",
            1: "something would be, or the server or database cannot be used",
            2: "the new code's modules cannot be imported or define no workflow, or bad input",
            3: "without --url, the database lacks migrations the new release ships (it never"
            " migrates: ask a server of the release running now with --url)",
        },
    )
    p.add_argument("--workflows", metavar="MODULES", help="the new code's workflow modules")

    p = add(
        "watch",
        "follow events as they happen",
        "With --instance ID: that instance's events from its start, with a progress bar,"
        " until it ends. Without: every instance's new events, until Ctrl-C. --json prints"
        " one JSON line per event (the fields of WorkflowEvent). Over --url it follows the"
        " server's workflowEvents subscription (websocket).",
        DATABASE,
        "Examples:\n  laneway watch --instance ID\n  laneway watch --json --url http://127.0.0.1:8000",
        run=lazy("commands", "watch"),
        parents=[server, as_json],
        exits={
            0: "the watched instance completed, or Ctrl-C ended the watch",
            1: "the watched instance failed or was cancelled, or it is not found, or the server"
            " or database cannot be used",
            130: None,
        },
    )
    p.add_argument("--instance", metavar="ID", help="only this instance, from its start")
    p.add_argument(
        "--after",
        metavar="EVENT_ID",
        type=event_id,
        help="start after this event id (0: from the first event)",
    )
    add_cluster_commands(commands)
    return parser
