"""Log formatting for the command line: readable text on a terminal, JSON lines otherwise, for
`serve` and `worker`; for a one-shot command, only errors, each a `laneway:` line.

Owns the formatters, the filter that keeps query strings out of uvicorn's websocket lines,
`configure_logging` and `configure_command_logging`. Only laneway/cli/ calls them: library
code never configures logging, so an application that embeds the engine keeps its own
handlers. Fields passed through `extra` appear in every format.
"""

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from `extra`.
# (uvicorn adds `color_message`, an ANSI-coloured copy of the message.)
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
) | {"message", "asctime", "taskName", "color_message"}
# Libraries whose INFO lines are noise for a Laneway operator.
_QUIET_LOGGERS = ("pgserver",)


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed through `extra`, in the order they were given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRIBUTES}


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def escaped(text: str) -> str:
    """`text` with its control characters (a newline too) written as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def field_value(value: object) -> str:
    """A `key=value` field's value as logfmt writes it: bare when it is one plain word, else
    quoted with JSON's escapes, so that `key=value` pairs split back however a user's text
    (an exception's message) reads."""
    text = str(value)
    if text and all(c.isprintable() and c not in ' "=\\' for c in text):
        return text
    # JSON escapes only U+0000-001F: DEL, the C1 controls (NEL breaks a line for some
    # readers, CSI drives a terminal), U+2028 and bidi overrides are escaped here too.
    return escaped(json.dumps(text, ensure_ascii=False))


def indented(block: str) -> str:
    """A block under a line (a traceback), each of its lines indented: none of them can read
    as a log line of its own, whatever a message inside it says."""
    return "\n".join("    " + escaped(line) for line in block.splitlines())


class TextFormatter(logging.Formatter):
    """`HH:MM:SS level logger: message key=value …` for people at a terminal: one line per
    record (control characters escaped, values with spaces quoted), then its multi-line
    fields (a failure's traceback) and exception, indented under it."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{when} {record.levelname.lower():7} {record.name}: {escaped(record.getMessage())}"
        fields = extra_fields(record)
        blocks = {k: v for k, v in fields.items() if isinstance(v, str) and "\n" in v}
        words = " ".join(f"{k}={field_value(v)}" for k, v in fields.items() if k not in blocks)
        if words:
            line = f"{line}  {words}"
        for key, block in blocks.items():
            line = f"{line}\n  {key}:\n{indented(block)}"
        if record.exc_info:
            line = f"{line}\n{indented(self.formatException(record.exc_info))}"
        return line


class CommandFormatter(logging.Formatter):
    """`laneway: message key=value …` on one line (control characters escaped; `laneway:
    warning: …` for a warning a command lets through), then the traceback if the record has
    one: a record as a one-shot command's stderr says it."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in extra_fields(record).items())
        said = f"{record.getMessage()}  {fields}" if fields else record.getMessage()
        warning = "warning: " if record.levelno == logging.WARNING else ""
        line = f"laneway: {warning}{escaped(said)}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class QueryStrings(logging.Filter):
    """Keeps query strings out of uvicorn's line for each websocket handshake
    (`127.0.0.1:5000 - "WebSocket /graphql?..." [accepted]`): a client may put a secret there
    (some send their token as `?token=`), and a log is read by more people than the token's
    holders. The path stays, the query reads `?…`."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            record.name == "uvicorn.error"
            and isinstance(record.msg, str)
            and record.msg.startswith('%s - "WebSocket %s"')
            and isinstance(args, tuple)
            and len(args) >= 2
            and isinstance(args[1], str)
            and "?" in args[1]
        ):
            record.args = (args[0], args[1].split("?", 1)[0] + "?…", *args[2:])
        return True


def configure_logging(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Install one handler on the root logger: text on a TTY, JSON lines otherwise."""
    target = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(target)
    handler.setFormatter(TextFormatter() if target.isatty() else JSONFormatter())
    handler.addFilter(QueryStrings())
    _install(handler, level)


def configure_command_logging(stream: TextIO | None = None) -> None:
    """Install one handler on the root logger for a one-shot command: records of ERROR and
    above only, each a `laneway:` line (CommandFormatter). A warning of the libraries (`listener
    connection lost`, and then it reconnects; `database unavailable`, which the command's own
    error line says again) is for an operator of a long-running process, not the command's
    user, whose command says how it ended in its own words."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(CommandFormatter())
    _install(handler, logging.ERROR)


def _install(handler: logging.Handler, level: int) -> None:
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
