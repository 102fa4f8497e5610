"""The `laneway` command: serve, worker, migrate, export-schema; for instances enqueue, cancel,
resume, retry, signal, status, instances and watch; and workflows, preflight, queues,
queue-history, configure-queue, pause-queue, resume-queue, workers and the schedule
subcommands.

Owns `main`: logging setup, the event loop and exit codes (0 ok, 1 not found, in the wrong
status or failed, 2 bad input or a refused configuration, 3 migrations pending, 130
interrupted by Ctrl-C, 141 the reader of its output gone). The parser is parser.py (with
cluster_parser.py), the process subcommands process.py, the others commands.py and a module
each for the larger ones (through client.py: remote.py with --url, local.py without), and
what a person reads output.py.
"""

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from laneway.cli.client import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT_CLOSED,
    EXIT_USAGE,
    CommandError,
    database_error,
)
from laneway.cli.parser import build_parser
from laneway.cli.streams import OutputError, open_standard_streams
from laneway.config import (
    TOKEN_RULE,
    Settings,
    token_flaw,
    unknown_variable_warning,
    unknown_variables,
)
from laneway.engine import faults
from laneway.errors import InvalidInputError, LanewayError
from laneway.logs import configure_command_logging, configure_logging

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

Command = Callable[..., Coroutine[Any, Any, int]]


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    """Say `message` as one `laneway:` line on stderr and return `code`. The message may quote
    what a server, a workflow's validator or the database said: output.error_line escapes it."""
    from laneway.cli.output import error_line  # rich, loaded only once a command failed

    print(f"laneway: {error_line(message)}", file=sys.stderr)
    return code


def _unwritable(exc: OSError) -> int:
    """A write to stdout failed. Its reader went away (BrokenPipeError: `laneway watch --json
    | head -2`): end quietly, with the exit code a shell reports for a command that SIGPIPE
    ended (Python ignores SIGPIPE). Or it cannot be written (OutputError: a full disk, `>
    /dev/full`): one line, exit 1; what the command did before it printed (an enqueue) stays
    done. stdout is pointed at /dev/null first: the flush at exit would fail again, and Python
    would say so after the command's own line (Python's docs: "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    if isinstance(exc, BrokenPipeError):
        return EXIT_OUTPUT_CLOSED
    return _fail(f"cannot write the output: {exc.strerror or exc}", EXIT_FAILED)


def _parser_exit(exc: SystemExit) -> int:
    """Flush what argparse printed (a help, the version) before it raised `exc`, which goes on
    when that works: a write that fails is said as a command's is (exit 1, or 141 quietly),
    not by Python at exit (exit 120, "Exception ignored in: <_io.TextIOWrapper name=1…>" and a
    traceback)."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OutputError) as error:
        return _unwritable(error)
    raise exc


def _internal_error(exc: Exception) -> int:
    """A fault of Laneway's own: the `laneway:` line every error has, then the traceback, which
    is what a report of it needs."""
    code = _fail(
        f"internal error: {type(exc).__name__}: {exc} (a fault in Laneway: the traceback below"
        " is what a report of it needs)",
        EXIT_FAILED,
    )
    traceback.print_exception(exc, file=sys.stderr)
    return code


def _visible_ascii(token: str, source: str) -> str:
    """`token`, once it can go in an `Authorization: Bearer` header. Any other character failed
    only as the request was built, after the command had started (httpx cannot encode `é`; a
    line break is an illegal header value), and `watch`, which sends the token in a websocket
    message, was told that the server refused it.

    Raises:
        CommandError: it cannot (exit 2), said with `source`, where it came from, and never
            the token itself: it is a secret.
    """
    if (flaw := token_flaw(token)) is not None:
        raise CommandError(f"{source} {TOKEN_RULE}: {flaw}", EXIT_USAGE)
    return token


def _server_token(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The bearer token for --url: --token, else LANEWAY_TOKEN (None: neither), checked.

    Raises:
        CommandError: it cannot be sent as a bearer token (exit 2).
    """
    if args.token == "":  # `--token "$TOKEN"` with TOKEN unset: not "use LANEWAY_TOKEN"
        raise CommandError(
            "--token is empty: give the token, or leave --token out to use LANEWAY_TOKEN",
            EXIT_USAGE,
        )
    if args.token is not None:
        return _visible_ascii(args.token, "--token")
    token = env.get("LANEWAY_TOKEN")
    return _visible_ascii(token, "LANEWAY_TOKEN") if token else None


def _warn_of_unknown_variables(env: Mapping[str, str]) -> None:
    """Say, as one `laneway: warning:` line each, the LANEWAY_ variables Laneway does not read
    (a one-shot command shows no log records of WARNING, Settings.from_env's among them); the
    command goes on."""
    unknown = unknown_variables(env)
    if unknown:
        from laneway.cli.output import error_line  # rich, loaded only when there is one

        for name, meant in unknown.items():
            print(
                f"laneway: warning: {error_line(unknown_variable_warning(name, meant))}",
                file=sys.stderr,
            )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of `laneway` and `python -m laneway`; returns the exit code."""
    open_standard_streams()  # first: before the event loop, or anything, opens a file
    env = os.environ if environ is None else environ
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while a JSON option was read from stdin
        return _fail("interrupted", EXIT_INTERRUPTED)
    except SystemExit as exc:  # --help, --version (or a usage error): argparse printed them
        return _parser_exit(exc)  # or raises exc, as parse_args did
    except (BrokenPipeError, OutputError) as exc:  # a help longer than stdout's buffer
        return _unwritable(exc)
    if getattr(args, "url", None) is not None:  # only a server takes a token, not a database
        try:
            args.token = _server_token(args, env)
        except CommandError as exc:
            return _fail(str(exc), exc.exit_code)
    if args.command in ("serve", "worker"):
        configure_logging(logging.INFO)  # Settings.from_env logs each unknown LANEWAY_ name
    else:
        configure_command_logging()
        _warn_of_unknown_variables(env)
    try:
        settings = Settings.from_env(env)
        faults.check()  # read at import (engine/faults.py), refused here as Settings are
    except InvalidInputError as exc:
        return _fail(str(exc))
    command: Command = args.run
    try:
        # uvloop's event loop makes the engine's many small database round trips cheaper
        # (uvicorn picks it up too); plain asyncio where it is not installed.
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            code = runner.run(command(args, settings))
        sys.stdout.flush()  # here, not at exit: a write that fails is said as below
        return code
    except CommandError as exc:
        return _fail(str(exc), exc.exit_code)
    except LanewayError as exc:
        refused = database_error(exc)  # a database this release must not use as it stands
        if refused is not None:
            return _fail(*refused)
        return _fail(str(exc), EXIT_USAGE if isinstance(exc, InvalidInputError) else EXIT_FAILED)
    except KeyboardInterrupt:
        # Ctrl-C before the command finished (watch, serve and worker take it as their normal
        # end, and exit 0 by themselves): not a success, whatever it had done by then.
        return _fail("interrupted", EXIT_INTERRUPTED)
    except (BrokenPipeError, OutputError) as exc:
        return _unwritable(exc)
    except Exception as exc:
        refused = database_error(exc)
        if refused is None:
            return _internal_error(exc)
        return _fail(*refused)
