"""What the CLI prints of data for a person: as it is, never read as rich markup, and with the
control characters a terminal would act on shown escaped (laneway/cli/output.py)."""

import io
import json
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from rich.console import Console

from laneway.cli import output
from laneway.cli.output import Column, Listing
from tests.processes import run_process
from tests.test_cli import environment, laneway

HOSTILE = [
    "oops [/] closing",  # unbalanced markup: rich.errors.MarkupError when parsed
    "[red]RED[/red] [link=http://evil.example]click[/link]",
    "before\x1b[2J\x1b[Hafter \x1b[31mred\x1b[0m",  # clear the screen, fake colours
    "\x1b]8;;http://evil.example\x1b\\CLICKME\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b]0;PWNED-TITLE\x07title",  # set the window title
    "c1 \x9b31m control",
]


def _rendered(renderable: Any) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=400, highlight=False).print(renderable)
    return buffer.getvalue()


def _instance(**fields: object) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "instanceID": "01a24b6e-acfa-76ed-a7e3-baf5ae14492b",
        "name": "evil",
        "queue": "evil",
        "status": "failed",
        "waitingReason": None,
        "attempts": 1,
        "stage": None,
        "progress": None,
        "message": None,
        "lastError": None,
        "createdAt": 0,
        "updatedAt": 0,
        "runAfter": 0,
        "priority": 0,
        "concurrencyKey": None,
        "version": "1",
        "parentID": None,
        "params": None,
        "result": None,
    }
    return shape | fields


@pytest.mark.parametrize("text", HOSTILE)
def test_data_is_printed_as_it_is_without_markup_or_terminal_controls(text: str) -> None:
    table = output.instance_table(
        _instance(message=text, stage=text, lastError=text, concurrencyKey=text)
    )
    event = {
        "at": 0,
        "type": "failed",
        "status": "failed",
        "name": "evil",
        "instanceID": "x",
        "stage": text,
        "checkpoint": None,
        "signal": None,
        "attempt": 1,
        "error": text,
    }
    for printed in (_rendered(table), _rendered(output.event_line(event))):
        assert output.visible(text) in printed
        # The only escape sequences left are rich's own styles (SGR), never the data's.
        for sequence in ("\x1b[2J", "\x1b]8;;http://evil", "\x1b]0;", "\x07", "\x9b"):
            assert sequence not in printed
    assert output.visible(text).count("\x1b") == 0


def test_visible_escapes_controls_and_keeps_text_tabs_and_newlines() -> None:
    assert output.visible("a\x1b[2Jb\x07\r\x00\x7f\x9b") == r"a\x1b[2Jb\x07\r\x00\x7f\x9b"
    assert output.visible("line\n\tindented é ✓") == "line\n\tindented é ✓"


async def test_status_and_watch_show_an_unbalanced_markup_message(database_url: str) -> None:
    # They used to exit 1 with rich.errors.MarkupError's traceback: the instance could be
    # neither shown nor followed.
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "x"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    code, out, err = await laneway("cancel", instance_id, env=env)
    assert code == 0, err
    message = "oops [/] closing \x1b]0;PWNED\x07"
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(
            "UPDATE laneway.instances SET message = $1, stage = '[red]s' WHERE instance_id = $2",
            message,
            instance_id,
        )
    finally:
        await admin.close()
    code, out, err = await laneway("status", instance_id, env=env)
    assert code == 0, err
    assert r"oops [/] closing \x1b]0;PWNED\x07" in out
    assert "[red]s" in out
    code, out, err = await laneway("watch", "--instance", instance_id, env=env)
    assert code == 1, err  # cancelled: the documented exit of a watch that ends so
    assert err == "", err
    assert "cancelled" in out


def test_an_error_line_is_escaped_one_line_and_capped() -> None:
    assert output.error_line("a\x1b]0;T\x07b\nc\r\n") == r"a\x1b]0;T\x07b\nc\r\n"
    cut = output.error_line("é" * 100_000)
    assert cut == "é" * output.MAX_ERROR_CHARS + "... (98,000 more characters cut)"
    assert output.error_line("x" * output.MAX_ERROR_CHARS) == "x" * output.MAX_ERROR_CHARS


ECHOING = """\
from laneway import Done, Workflow


def check(params):
    raise ValueError(f"unknown customer {params['customer']}")


async def _bill(ctx, params):
    return Done(None)


billing = Workflow("billing", handlers={"bill": _bill}, initial="bill", validator=check)
"""


async def test_an_error_that_quotes_hostile_params_is_one_escaped_line(
    database_url: str, tmp_path: Path
) -> None:
    # A validator quoting the params as given: the message reaches the operator's terminal.
    (tmp_path / "echoing.py").write_text(ECHOING)
    env = environment(database_url, LANEWAY_WORKFLOWS="echoing")
    script = str(Path(sys.executable).parent / "laneway")
    hostile = "x\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\nline2"
    escaped = r"x\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\nline2"
    for customer, says in ((hostile, escaped), ("y" * 100_000, "more characters cut)")):
        params = json.dumps({"customer": customer})
        code, _, err = await run_process(
            [script, "enqueue", "billing", "--params", params], cwd=tmp_path, env=env
        )
        assert code == 2, err
        assert err.startswith("laneway: params rejected by 'billing': unknown customer "), err
        assert err.endswith(says + "\n"), err[-200:]
        assert err.count("\n") == 1
        assert not {"\x1b", "\x07"} & set(err)
        assert len(err) < output.MAX_ERROR_CHARS + 100


def _plain(renderable: Any, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False).print(renderable)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [12, 20, 33, 40, 52, 64, 80, 140])
def test_a_listing_fits_its_width_leaving_out_columns_not_breaking_them(width: int) -> None:
    columns = [
        Column("name"),
        Column("note", drop=2),
        Column("count", drop=1, numeric=True),
        Column("total", drop=3, numeric=True),
    ]
    rows = [
        ["a-name-much-longer-than-sixteen-characters", "some words here", "123456", "7"],
        ["b", "[red]x", "1", "99999999"],
    ]
    lines = _plain(Listing("Things", columns, rows), width).splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), lines
    header = lines[2].split()
    assert header[0] == "name"
    assert header == [c.header for c in columns if c.header in header]  # whole, in order
    shown = "\n".join(lines[4:])
    for column, values in (("count", ("123456", "1")), ("total", ("7", "99999999"))):
        if column in header:
            assert all(f" {value}" in shown for value in values), lines  # never cut
    left_out = [c.header for c in columns if c.header not in header]
    if left_out:
        words = " ".join(" ".join(lines).split())
        assert words.endswith(f"Left out to fit {width} columns: {', '.join(left_out)}")
        kept = [c.drop for c in columns if c.header in header]
        assert min(c.drop for c in columns if c.header in left_out) > max(kept)
    if width >= 100:
        assert left_out == []
        assert "a-name-much-longer-than-sixteen-characters" in shown  # not folded when it fits
    if width < 40:
        assert "total" not in header  # the first left out


IDS = ["0196f1c2-7a3b-7c4d-8e5f-60718293a4b5", "0196f1c2-7a3b-7c4d-8e5f-60718293a4b6"]


@pytest.mark.parametrize("width", [5, 12, 20, 30, 37, 38, 40, 60])
def test_an_id_is_never_folded_however_narrow_the_terminal(width: int) -> None:
    # Narrower than the columns never left out, the ids were folded over two lines (the
    # last character of a UUID on the next): the line is wider than the terminal instead.
    columns = [Column("workflow", drop=1), Column("some of them", whole=True), Column("n")]
    rows = [["a-workflow", "\n".join(IDS), "a few words"]]
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False).print(
        Listing("Things", columns, rows), crop=False
    )
    lines = buffer.getvalue().splitlines()
    for instance_id in IDS:
        assert any(instance_id in line for line in lines), lines
    if width >= 60:
        assert all(len(line.rstrip()) <= width for line in lines), lines


@pytest.mark.parametrize("width", ["5", "37"])
async def test_instances_on_a_narrow_terminal_shows_whole_ids(
    database_url: str, width: str
) -> None:
    env = environment(database_url, COLUMNS=width)
    for name in ("w", "v"):  # two: the page of one has a next page
        code, out, err = await laneway(
            "enqueue", "hello", "--params", f'{{"name": "{name}"}}', env=env
        )
        assert code == 0, err
    newest = json.loads(out)["instanceID"]
    code, out, err = await laneway("instances", "--first", "1", env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert any(newest in line for line in lines), out
    # The next page's cursor is copied as the ids are: it was folded, a few letters a line.
    code, page, err = await laneway("instances", "--first", "1", "--json", env=env)
    assert code == 0, err
    cursor = json.loads(page)["pageInfo"]["endCursor"]
    assert any(f"--after {cursor}" in line for line in lines), out


LONG_MESSAGE = " ".join(["checking"] * 30)


@pytest.mark.parametrize("width", ["8", "20", "40", "120"])
async def test_status_on_a_narrow_terminal_shows_whole_ids_and_labels(
    database_url: str, width: str
) -> None:
    # The ids were folded over two lines at 40 columns, four at 20, and at 8 the labels were
    # cut too (`in…`); a long message still wraps.
    env = environment(database_url, COLUMNS=width)
    ids = []
    for name in ("parent", "child"):
        code, out, err = await laneway(
            "enqueue", "hello", "--params", f'{{"name": "{name}"}}', env=env
        )
        assert code == 0, err
        ids.append(json.loads(out)["instanceID"])
    parent, child = ids
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(
            "UPDATE laneway.instances SET parent_id = $1, message = $2 WHERE instance_id = $3",
            parent,
            LONG_MESSAGE,
            child,
        )
    finally:
        await admin.close()
    code, out, err = await laneway("status", child, env=env)
    assert code == 0, err
    lines = out.splitlines()
    for label, value in (("instance", child), ("parent", parent)):
        assert any(line.split() == [label, value] for line in lines), out
    labels = [line.split(maxsplit=1)[0] for line in lines if line[:1].strip()]
    assert {"instance", "concurrency", "last", "run", "created", "message"} <= set(labels), out
    message_lines = [line for line in lines if "checking" in line]
    if int(width) < 120:
        assert len(message_lines) > 1, out  # wrapped, not one line wider than the table
    assert " ".join(" ".join(message_lines).split()[1:]) == LONG_MESSAGE, out
