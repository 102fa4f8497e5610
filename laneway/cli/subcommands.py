"""How a `laneway` subcommand is declared: its summary, its --help, its shared options, its code.

Owns `Subcommands.add`, the one way a subcommand is added, so every --help is built alike and
ends with that command's exit codes (EXIT_MEANINGS, narrowed per command: `exit_codes`); the
words several helps share (where the database and workflows come from); the options several
take (--url and --token, --json); and `lazy`, which imports a command's module only when it
runs. Which subcommands there are is parser.py's.
"""

import argparse
import importlib
import textwrap
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from laneway.cli.client import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_MIGRATIONS_PENDING,
    EXIT_OK,
    EXIT_OUTPUT_CLOSED,
    EXIT_USAGE,
)
from laneway.config import Settings

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]

WIDTH = 92
"""Where the help's own paragraphs wrap (argparse wraps the options' help to the terminal)."""

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

# What each exit code means for a command that reads or acts on instances, workflows and
# queues; docs/cli.md ("Exit codes") says the same at length. A command whose codes mean
# something else, or that has fewer, says so in `exits` (None: it has no such code).
EXIT_MEANINGS: Mapping[int, str] = {
    EXIT_OK: "ok",
    EXIT_FAILED: "not found or in the wrong status for it, or the server or database cannot"
    " be used",
    EXIT_USAGE: "bad input (an option, id or JSON), a refused token or configuration",
    EXIT_MIGRATIONS_PENDING: "migrations are pending: without --url, the database lacks"
    " migrations this release ships, which this does not apply (docs/deploying.md#upgrading)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_OUTPUT_CLOSED: "the reader of its output went away (as in | head)",
}

Exits = Mapping[int, str | None]
"""A command's own meanings of exit codes, over EXIT_MEANINGS (None: it has no such code)."""
UNUSABLE: Exits = {EXIT_FAILED: "the server or database cannot be used"}
"""The exit codes of a command that looks nothing up by name: a list, a create."""


def _wrapped(paragraph: str) -> str:
    """A paragraph of one line wrapped at WIDTH; one with line breaks is laid out already."""
    if "\n" in paragraph:
        return paragraph
    return textwrap.fill(paragraph, width=WIDTH, break_on_hyphens=False)


def exit_codes(exits: Exits | None = None) -> str:
    """The paragraph every --help ends with: each exit code the command has, and what it means
    there."""
    meanings = {**EXIT_MEANINGS, **(exits or {})}
    lines = [
        textwrap.fill(
            meaning,
            width=WIDTH,
            initial_indent=f"  {code:<5}",
            subsequent_indent=" " * 7,
            break_on_hyphens=False,
        )
        for code, meaning in sorted(meanings.items())
        if meaning is not None
    ]
    return "\n".join(["Exit codes:", *lines])


def epilog(*parts: str, exits: Exits | None = None) -> str:
    """A --help's text below the options: `parts` as paragraphs, then the exit codes."""
    return "\n\n".join([*map(_wrapped, parts), exit_codes(exits)])


def lazy(module: str, name: str) -> Command:
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


class Subcommands:
    """The subcommands of one parser. `server` and `as_json` are the parents that give a
    subcommand --url and --token, and --json."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self._choices = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        self.server = _server_options()
        self.as_json = _json_option()

    def add(
        self,
        name: str,
        summary: str,
        *about: str,
        run: Command,
        parents: Sequence[argparse.ArgumentParser] = (),
        exits: Exits | None = None,
    ) -> argparse.ArgumentParser:
        """Add the subcommand `name`, which runs `run`: `summary` is its line in `laneway
        --help` and, as a sentence, its description; `about` the paragraphs of its epilog
        (what it uses, examples), which ends with its exit codes (`exits`: where they differ
        from EXIT_MEANINGS)."""
        command = self._choices.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=epilog(*about, exits=exits),
            parents=list(parents),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.set_defaults(run=run)
        return command
