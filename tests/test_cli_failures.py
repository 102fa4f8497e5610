"""Failures said as docs/cli.md promises: one `laneway:` line on stderr, not a bare traceback.

A write to stdout that fails other than by its reader going away (`> /dev/full`), a migration
whose SQL the database refuses, and an error inside Laneway itself (the line, then its
traceback). Each used to end in a traceback alone, the first after the command's work was done.
"""

import argparse
import json
import os
import subprocess
import sys

import asyncpg
import pytest

from laneway.cli import EXIT_FAILED, EXIT_OUTPUT_CLOSED, EXIT_USAGE, main, process
from laneway.cli.client import database_error
from laneway.config import Settings
from laneway.store.migrate import migrations
from tests.processes import run_process
from tests.test_cli import ROOT, environment, laneway
from tests.test_cli_database import PROCESS_STARTS, says_in_one_line

FULL = "laneway: cannot write the output: No space left on device"


def _to_dev_full(*args: str) -> list[str]:
    return ["sh", "-c", 'exec "$@" >/dev/full', "full", sys.executable, "-m", "laneway", *args]


async def _count_instances(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM laneway.instances")
    finally:
        await conn.close()
    return count


async def test_enqueue_whose_output_cannot_be_written_is_one_line_exit_1(
    database_url: str,
) -> None:
    argv = _to_dev_full("enqueue", "hello", "--params", '{"name": "full"}')
    code, _, err = await run_process(argv, cwd=ROOT, env=environment(database_url))
    assert (code, err.splitlines()) == (EXIT_FAILED, [FULL]), err
    assert await _count_instances(database_url) == 1  # done, though its answer was lost


@pytest.mark.parametrize(
    "args",
    [
        ("instances", "--first", "500"),
        ("instances", "--first", "500", "--json"),
        ("status", "{id}"),
        ("export-schema",),
        ("watch", "--instance", "{id}", "--json"),  # written by a thread of its own
    ],
)
async def test_a_listing_whose_output_cannot_be_written_is_one_line_exit_1(
    database_url: str, args: tuple[str, ...]
) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "f"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    argv = _to_dev_full(*(a.format(id=instance_id) for a in args))
    code, _, err = await run_process(argv, cwd=ROOT, env=env, timeout=30)
    assert (code, err.splitlines()) == (EXIT_FAILED, [FULL]), err


async def test_a_migration_whose_sql_fails_is_one_line_naming_it_at_every_start(
    database_url: str,
) -> None:
    # The first migration: its CREATE TABLEs fail when run again (a later one may be written
    # to apply again, as 0037 is).
    first = migrations()[0].name
    conn = await asyncpg.connect(database_url)
    try:  # recorded as not applied, while what it made is there: its SQL fails again
        await conn.execute("DELETE FROM laneway.schema_migrations WHERE name = $1", first)
    finally:
        await conn.close()
    code, out, err = await laneway("migrate", env=environment(database_url))
    assert code == EXIT_FAILED, err
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"laneway: migration {first} failed"), line
    assert "stay applied): " in line, line
    assert "Error: " in line, line  # the database's error, by its class
    # worker and serve (whose lifespan migrates: uvicorn logged a traceback first) say it alike
    env = environment(database_url)
    lines = await says_in_one_line(env, f"migration {first} failed", PROCESS_STARTS)
    assert set(lines) == {line}, lines


def test_an_internal_error_is_a_laneway_line_then_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def broken(args: argparse.Namespace, settings: Settings) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(process, "export", broken)
    assert main(["export-schema"], environ={}) == EXIT_FAILED
    err = capsys.readouterr().err
    first, *rest = err.splitlines()
    assert first.startswith("laneway: internal error: ZeroDivisionError: a bug"), err
    assert rest[0] == "Traceback (most recent call last):", err
    assert rest[-1] == "ZeroDivisionError: a bug", err


HELP_AND_VERSION = [("--version",), ("--help",), ("enqueue", "--help")]


@pytest.mark.parametrize("args", HELP_AND_VERSION)
async def test_help_or_version_whose_output_cannot_be_written_is_one_line_exit_1(
    args: tuple[str, ...],
) -> None:
    # argparse prints them and exits inside parse_args: they ended with exit 120 and Python's
    # "Exception ignored in: <_io.TextIOWrapper name=1…>" and OutputError's traceback.
    code, _, err = await run_process(_to_dev_full(*args), cwd=ROOT, env=environment(None))
    assert (code, err.splitlines()) == (EXIT_FAILED, [FULL]), err


@pytest.mark.parametrize("args", HELP_AND_VERSION)
def test_help_or_version_whose_reader_went_away_ends_quietly_with_141(
    args: tuple[str, ...],
) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "laneway", *args],
            cwd=ROOT,
            env=environment(None),
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (EXIT_OUTPUT_CLOSED, b"")


async def test_a_usage_error_is_still_argparses_exit_2_with_stdout_full() -> None:
    code, _, err = await run_process(
        _to_dev_full("--no-such-option"), cwd=ROOT, env=environment(None)
    )
    assert code == EXIT_USAGE, err
    [line] = err.splitlines()
    assert line.startswith("laneway: "), err


def test_a_database_that_never_answers_is_said_as_such() -> None:
    # An outside audit: a server that accepts the connection and never answers got
    # "cannot use the database: TimeoutError" after asyncpg's connect timeout.
    assert database_error(TimeoutError()) == (
        "cannot use the database: it did not answer in time (TimeoutError)",
        EXIT_FAILED,
    )
