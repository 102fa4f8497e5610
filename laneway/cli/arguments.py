"""What the values of the command line's options must be, checked as argparse reads them.

Owns each option type and the words of its refusal, which argparse puts after the option's
name (`laneway: enqueue: argument --params: ...`, exit 2); and reading a JSON option's value
from where it names: the text itself, `@PATH` (a file) or `-` (stdin). Says nothing of what the
values are used for (parser.py, the subcommands).
"""

import argparse
import math
import sys

STDIN = "-"
"""A JSON option's value that says: read it from stdin."""
FROM_FILE = "@"
"""The prefix of a JSON option's value that names a file to read it from. No JSON text starts
with it (nor is one `-` alone), so neither can be mistaken for the JSON itself."""


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None


MAX_EVENT_ID = 2**63 - 1  # event ids are PostgreSQL bigints


def event_id(text: str) -> int:
    value = whole_number(text)
    if not 0 <= value <= MAX_EVENT_ID:
        raise argparse.ArgumentTypeError(
            f"must be an event id from 0 to {MAX_EVENT_ID}, not {text!r}"
        )
    return value


def port_number(text: str) -> int:
    value = whole_number(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, not {text!r}")
    return value


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of milliseconds, not {text!r}"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text!r}")
    return value


def json_value(text: str) -> object:
    """The JSON value an option gives: `text` itself, or what the file `@PATH` or stdin (`-`)
    holds. A command line holds at most 128 KiB (Linux's limit on one argument), a file or
    stdin as much as the server takes (256 KiB) and more. Read before the command starts, so
    that Ctrl-C while stdin is read is the plain interrupt `main` reports.

    Raises:
        argparse.ArgumentTypeError: the file or stdin cannot be read, or what it holds (or the
            text) is not strict JSON (the API's rules: no NaN, no duplicate keys, ...).
    """
    from laneway.api.http.strict_json import strict_json_loads

    source: str | None
    if text == STDIN:
        source, data = "stdin", _read_stdin()
    elif text.startswith(FROM_FILE):
        path = text.removeprefix(FROM_FILE)
        source, data = f"the file {path!r}", _read_file(path)
    else:
        source, data = None, text.encode()
    if text == STDIN and not data.strip():
        # Said as such, not as JSON's "Expecting value: line 1 column 1": stdin that was
        # closed (it reads as /dev/null: streams.py), or that nothing was piped into.
        raise argparse.ArgumentTypeError(
            "stdin is empty (closed, or nothing was written to it): it must hold the JSON value"
        )
    try:
        # utf-8-sig: a byte order mark that an editor saved in front of the JSON is not JSON.
        return strict_json_loads(data.decode("utf-8-sig"))
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError from a file
        what = f"{source} does not hold" if source else "not"
        raise argparse.ArgumentTypeError(f"{what} valid JSON: {exc}") from None


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read the file {path!r}: {exc.strerror or exc}"
        ) from None


def _read_stdin() -> bytes:
    try:
        return sys.stdin.buffer.read()
    except (OSError, ValueError) as exc:  # a stdin that cannot be read (a directory, ...)
        raise argparse.ArgumentTypeError(f"cannot read stdin: {exc}") from None
