"""What the CLI prints for a person: rich tables, human times, event lines, a progress bar.

Owns presentation only; the shapes it renders are the GraphQL fields the Client returns.
JSON output (`--json`, and the one-line answers of actions) is printed here too, unchanged.
Text that comes from data (messages, errors, stages, keys, descriptions) is printed as it is:
never read as rich markup (`[red]`, `[link=…]`, an unbalanced `[/]` would crash the command),
and its control characters (an escape sequence could clear the screen, set the title or
plant a link in the operator's terminal) are shown escaped (`\x1b`), tty or not. So are
the messages of errors (`error_line`), which also stay one line of bounded length.
"""

import errno
import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from laneway.cli.client import JSONObject

STATUS_STYLES = {
    "pending": "yellow",
    "running": "cyan",
    "paused": "magenta",
    "waiting": "magenta",
    "completed": "green",
    "failed": "red",
    "cancelled": "dim",
}
# Short enough that a queue's row fits 80 columns; the JSON (--json) has the full names.
SHORT_HEADERS = {
    "pending": "pend",
    "running": "run",
    "paused": "paused",
    "waiting": "wait",
    "completed": "done",
    "failed": "failed",
    "cancelled": "cancel",
}
TERMINAL = frozenset({"completed", "failed", "cancelled"})


# C0 controls but tab and newline, DEL, and C1 controls: what a terminal acts on.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with every control character a terminal would act on written as an escape."""
    return _CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


MAX_ERROR_CHARS = 2_000
"""How much of an error message `error_line` keeps: a whole screen, not a flood."""


def error_line(message: str) -> str:
    """An error message as one line of a terminal: its controls escaped (`visible`), each line
    break written as `\\n`, and cut after MAX_ERROR_CHARS characters with a note of how much
    was cut (a server or a workflow's validator wrote it: it may quote anything it was given).
    """
    line = visible(message).replace("\n", "\\n")
    if len(line) <= MAX_ERROR_CHARS:
        return line
    return f"{line[:MAX_ERROR_CHARS]}... ({len(line) - MAX_ERROR_CHARS:,} more characters cut)"


def literal(value: object, style: str = "") -> Text:
    """A value from data as rich Text: shown as it is, markup and control characters too."""
    return Text(visible(str(value)), style=style)


class _Console(Console):
    """rich's Console, which says a closed stdout as print does: BrokenPipeError, which `main`
    turns into a quiet exit 141 (rich's own answer is exit 1)."""

    def print(self, *objects: Any, crop: bool = False, **options: Any) -> None:
        """rich's print, not cropping a line wider than the terminal: a Listing's, whose ids
        must stay whole when even they do not fit it."""
        super().print(*objects, crop=crop, **options)

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more from it, the progress bar's last frame included
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away")


def console(file: IO[str] | None = None) -> Console:
    """A console on `file` (None: stdout); plain text (no colours or markup) when it is not a
    terminal."""
    return _Console(file=file, highlight=False, soft_wrap=False)


def print_json(value: object, file: IO[str] | None = None) -> None:
    """`value` as one line of JSON on `file` (None: stdout)."""
    print(json.dumps(value), file=file or sys.stdout, flush=True)


def human_time(ms: float | None, now: float | None = None) -> str:
    """Epoch milliseconds as local time, with how long ago or ahead ("… (5 s ago)")."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    return f"{moment:%Y-%m-%d %H:%M:%S} ({relative(ms, now)})"


def clock(ms: float) -> str:
    """Epoch milliseconds as the local time of day, to the millisecond."""
    return f"{datetime.fromtimestamp(ms / 1000).astimezone():%H:%M:%S.%f}"[:-3]


def relative(ms: float, now: float | None = None) -> str:
    """'just now', '42 s ago', 'in 3 min', '2 h ago', '5 d ago'."""
    delta = ms / 1000 - (time.time() if now is None else now)
    span = abs(delta)
    if span < 1:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1)):
        if span >= size:
            amount = f"{int(span // size)} {unit}"
            return f"in {amount}" if delta > 0 else f"{amount} ago"
    return "just now"  # unreachable: span >= 1 matches "s"


def _status(status: str) -> Text:
    return literal(status, STATUS_STYLES.get(status, ""))


def json_text(value: object) -> str:
    """A JSON value on one line, or "-" for none."""
    return "-" if value is None else json.dumps(value)


class Fields:
    """A record as two columns, field and value, that never folds an id or a number (`whole`:
    copied, or read, as one) nor cuts a field's name, while long text (a message, an error,
    params) wraps: on a terminal narrower than a name and an id side by side, the lines are
    wider than the terminal (the console prints them uncropped: _Console), as a Listing's.
    (A plain table folded the ids over two lines at 40 columns, four at 20, and cut the names
    to `in…` at 8.)"""

    def __init__(self, rows: Sequence[tuple[str, Text, bool]]) -> None:
        self.rows = list(rows)

    def _table(self, *, whole_only: bool) -> Table:
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for name, value, whole in self.rows:
            table.add_row(name, value if whole or not whole_only else "")
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # As wide as the names beside the widest id or number, at the least.
        unbroken = self._table(whole_only=True)
        least = Measurement.get(console, options.update_width(10**6), unbroken).maximum
        width = max(options.max_width, least)
        yield from console.render(self._table(whole_only=False), options.update_width(width))


def instance_table(shape: JSONObject) -> Fields:
    """One instance as two columns, field and value."""
    reason = shape.get("waitingReason")
    progress = shape.get("progress")
    # (name, value, whole): an id or a number is never folded.
    rows: list[tuple[str, object, bool]] = [
        ("instance", str(shape["instanceID"]), True),
        ("workflow", str(shape["name"]), False),
        ("queue", str(shape["queue"]), False),
        ("status", _status(str(shape["status"])), True),
        ("waiting", f"{reason['code']}: {reason['message']}" if reason else "-", False),
        ("attempts", str(shape["attempts"]), True),
        ("stage", shape.get("stage") or "-", False),
        ("progress", f"{progress:.0%}" if progress is not None else "-", True),
        ("message", shape.get("message") or "-", False),
        ("last error", shape.get("lastError") or "-", False),
        ("created", human_time(shape["createdAt"]), False),
        ("updated", human_time(shape["updatedAt"]), False),
        ("run after", human_time(shape["runAfter"]), False),
        ("priority", str(shape["priority"]), True),
        ("concurrency key", shape.get("concurrencyKey") or "-", False),
        ("version", shape.get("version") or "-", False),
        ("parent", shape.get("parentID") or "-", True),
        ("params", json_text(shape.get("params")), False),
        ("result", json_text(shape.get("result")), False),
    ]
    if shape.get("checkpointInputSchema") is not None:
        rows.append(("input schema", json_text(shape["checkpointInputSchema"]), False))
    return Fields(
        [
            (name, value if isinstance(value, Text) else literal(value), whole)
            for name, value, whole in rows
        ]
    )


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a Listing: its header, how soon it is left out when the terminal is too
    narrow for every column (`drop`: the highest first; 0 is never left out), and whether it
    holds numbers (right-aligned, never broken), text that is never broken either (`whole`:
    an id a person copies) or text (folded where it must be)."""

    header: str
    drop: int = 0
    numeric: bool = False
    style: str = ""
    whole: bool = False

    @property
    def unbroken(self) -> bool:
        return self.numeric or self.whole


class Listing:
    """A table of rows, one cell per column, that fits the width it is printed at: the columns
    that `drop` first are left out, one at a time, until what is left fits with every header,
    number and id whole, and every word of text too up to WORD_CHARS characters; a caption names
    what was left out. (Squeezed by rich instead, a table at 60 columns broke its headers and
    names into a letter per line, and at 50 hid its text columns and cut numbers to "12…".)"""

    WORD_CHARS = 16
    """Text is folded only within words longer than this, or where it must be at all."""

    def __init__(
        self, title: str | Text, columns: Sequence[Column], rows: Iterable[Sequence[str | Text]]
    ) -> None:
        self.title, self.columns = title, list(columns)
        self.rows = [[c if isinstance(c, Text) else literal(c) for c in row] for row in rows]

    def _widths(self, index: int) -> tuple[int, int]:
        """How narrow column `index` may be, and how wide it would be on a wide terminal."""
        column, cells = self.columns[index], [row[index].plain for row in self.rows]
        header = cell_len(column.header)
        widest = max([header, *(cell_len(line) for c in cells for line in c.splitlines())])
        if column.unbroken:
            return widest, widest
        words = [cell_len(word) for cell in cells for word in cell.split()]
        return max(header, min(max(words, default=0), self.WORD_CHARS)), widest

    def _table(self, shown: Sequence[int], widths: Sequence[int | None]) -> Table:
        """The table of the columns `shown`, a text column `widths` wide (None: as it comes);
        numbers and ids are never folded."""
        table = Table(title=self.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for index, width in zip(shown, widths, strict=True):
            column = self.columns[index]
            table.add_column(
                column.header,
                justify="right" if column.numeric else "left",
                style=column.style,
                no_wrap=column.unbroken,
                overflow="fold",
                width=width,
            )
        for row in self.rows:
            table.add_row(*(row[index] for index in shown))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        def frame() -> int:
            """What the borders and padding take: the width of the table with empty columns."""
            empty = self._table(shown, [0] * len(shown))
            return Measurement.get(console, options, empty).minimum

        width = options.max_width
        shown = list(range(len(self.columns)))
        narrowest = {index: self._widths(index)[0] for index in shown}
        for index in sorted(shown, key=lambda i: -self.columns[i].drop):
            if self.columns[index].drop == 0:
                break
            if frame() + sum(narrowest[i] for i in shown) <= width:
                break
            shown.remove(index)
        # Each column as narrow as it may be; then what is left of the width widens the text
        # columns a character at a time, in turn, each up to what it holds.
        widths = {index: narrowest[index] for index in shown}
        widest = {index: self._widths(index)[1] for index in shown}
        spare = width - frame() - sum(widths.values())
        while spare > 0 and (growing := [i for i in shown if widths[i] < widest[i]]):
            for index in growing[:spare]:
                widths[index] += 1
            spare -= len(growing[:spare])
        squeezed = spare < 0  # narrower still than the columns never left out
        unbroken = any(self.columns[i].unbroken for i in shown)
        table = self._table(
            shown,
            [None if self.columns[i].unbroken or squeezed else widths[i] for i in shown],
        )
        if left_out := [c.header for i, c in enumerate(self.columns) if i not in shown]:
            table.caption = f"Left out to fit {width} columns: {', '.join(left_out)}"
            table.caption_justify = "left"
        if not (squeezed and unbroken):
            yield table  # text alone, squeezed or not, rich folds as it must
            return
        # The lines are wider than the terminal (the console prints them uncropped: _Console),
        # never an id or a number folded over two lines, where it could not be copied.
        yield from console.render(table, options.update_width(frame() + sum(widths.values())))


def workflows_table(workflows: list[JSONObject]) -> Listing:
    columns = [
        Column("name"),
        Column("versions", drop=2),
        Column("queue", drop=1),
        Column("kind", drop=3),
        Column("stages", drop=5),
        Column("description", drop=4),
    ]
    rows = [
        [
            workflow["name"],
            ", ".join(workflow["versions"]),
            workflow["queue"],
            workflow["kind"],
            ", ".join(workflow["stages"]) or "-",
            workflow["description"] or "-",
        ]
        for workflow in workflows
    ]
    return Listing("Workflows", columns, rows)


def _limits(queue: JSONObject) -> str:
    """A queue's caps in one cell: "10, 60/min; per key 2, 5/min; paused"."""
    parts = [str(queue["concurrency"])]
    if queue["ratePerMinute"] is not None:
        parts[0] += f", {queue['ratePerMinute']:g}/min"
    if queue["keyConcurrency"] is not None or queue["keyRatePerMinute"] is not None:
        key = [str(queue["keyConcurrency"])] if queue["keyConcurrency"] is not None else []
        if queue["keyRatePerMinute"] is not None:
            key.append(f"{queue['keyRatePerMinute']:g}/min")
        parts.append("per key " + ", ".join(key))
    if queue["paused"]:
        parts.append("paused")
    return "; ".join(parts)


# Which count columns of `laneway queues` a narrow terminal loses first (the highest): what
# is queued, running and failing is what an operator looks for; the caps come next.
QUEUE_DROPS = {
    "pending": 1,
    "running": 2,
    "failed": 3,
    "waiting": 5,
    "paused": 6,
    "completed": 7,
    "cancelled": 8,
}


def queues_table(queues: list[JSONObject]) -> Listing:
    """Queues: name, caps (running at once, starts per minute, per key), counts per status."""
    columns = [
        Column("queue"),
        Column("limits", drop=4),
        *(
            Column(SHORT_HEADERS[status], QUEUE_DROPS[status], True, STATUS_STYLES[status])
            for status in STATUS_STYLES
        ),
    ]
    rows = [
        [queue["name"], _limits(queue), *(str(queue["counts"][s]) for s in STATUS_STYLES)]
        for queue in queues
    ]
    return Listing("Queues", columns, rows)


def event_line(event: JSONObject, *, with_instance: bool = True) -> Text:
    """One event for a person: time, type, workflow (and instance), then what it carries."""
    line = Text(clock(event["at"]) + "  ")
    line.append(visible(f"{event['type']:<10}"), style=STATUS_STYLES.get(event["status"], ""))
    line.append(visible(f"  {event['name']}"))
    if with_instance:
        line.append(f"  {event['instanceID']}", style="dim")
    details = [
        f"{label} {event[key]}"
        for label, key in (
            ("attempt", "attempt"),  # 0 (not yet started) is left out below
            ("stage", "stage"),
            ("checkpoint", "checkpoint"),
            ("signal", "signal"),
        )
        if event.get(key) is not None and not (key == "attempt" and event[key] == 0)
    ]
    if details:
        line.append(visible("  " + ", ".join(details)))
    if event.get("error"):
        line.append(visible(f"  error: {event['error']}"), style="red")
    return line


def progress_bar(out: Console) -> Progress:
    """The bar `watch --instance` shows: the instance's message (given through `visible`),
    its progress, time elapsed."""
    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=out,
    )
