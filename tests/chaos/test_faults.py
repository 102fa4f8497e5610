"""The LANEWAY_FAULTS parser and what each action does (laneway/engine/faults.py)."""

import ast
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from laneway.engine import faults
from laneway.engine.faults import Fault, parse

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def disarmed() -> Iterator[None]:
    """Arm faults in this process for one test only (a test run has none armed)."""
    assert not faults.ARMED
    try:
        yield
    finally:
        faults.arm("")


def test_parse_reads_every_action_and_probability() -> None:
    table = parse(
        "after_checkpoint_commit=kill@0.05, before_step=sleep:2,"
        " before_release=raise_conn_lost , cron_insert=sleep:0.5@1"
    )
    assert table == {
        "after_checkpoint_commit": Fault(
            point="after_checkpoint_commit", action="kill", probability=0.05
        ),
        "before_step": Fault(point="before_step", action="sleep", seconds=2.0),
        "before_release": Fault(point="before_release", action="raise_conn_lost"),
        "cron_insert": Fault(point="cron_insert", action="sleep", seconds=0.5),
    }


@pytest.mark.parametrize("spec", ["", " ", ",", " , ,"])
def test_parse_gives_an_empty_table_when_the_spec_is_empty(spec: str) -> None:
    assert parse(spec) == {}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("before_step", "expected point=action"),
        ("before_step=", "expected point=action"),
        ("nowhere=kill", "unknown point 'nowhere'"),
        ("before_step=explode", "unknown action 'explode'"),
        ("before_step=kill:3", "only sleep takes an argument"),
        ("before_step=sleep", "only sleep takes an argument"),
        ("before_step=sleep:soon", "bad sleep seconds"),
        ("before_step=sleep:-1", "sleep seconds must be >= 0"),
        ("before_step=sleep:nan", "sleep seconds must be >= 0"),
        ("before_step=kill@often", "bad probability"),
        ("before_step=kill@0", "probability must be in"),
        ("before_step=kill@1.5", "probability must be in"),
        ("before_step=kill,before_step=sleep:1", "given twice"),
    ],
)
def test_parse_refuses_with_a_clear_message_when_the_spec_is_malformed(
    spec: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse(spec)


def test_the_hot_path_flag_follows_the_table_when_faults_are_armed_in_process(
    disarmed: None,
) -> None:
    flags = []
    for spec in ("", "before_step=sleep:0"):
        faults.arm(spec)
        flags.append(faults.ARMED)
    assert flags == [False, True]
    assert set(faults.armed()) == {"before_step"}


async def test_hit_raises_connection_lost_and_sleeps_when_armed(disarmed: None) -> None:
    faults.arm("after_checkpoint_commit=raise_conn_lost,before_step=sleep:0.2")
    with pytest.raises(asyncpg.ConnectionDoesNotExistError, match="after_checkpoint_commit"):
        await faults.hit("after_checkpoint_commit")
    started = time.monotonic()
    await faults.hit("before_step")
    assert time.monotonic() - started >= 0.2
    await faults.hit("cron_insert")  # not armed: nothing happens


async def test_hit_fires_about_as_often_as_its_probability_says(disarmed: None) -> None:
    faults.arm("before_release=raise_conn_lost@0.25")
    raised = 0
    for _ in range(2000):
        try:
            await faults.hit("before_release")
        except asyncpg.ConnectionDoesNotExistError:
            raised += 1
    assert 400 <= raised <= 600  # 500 expected; the bounds are over 5 standard deviations wide


def _python(code: str, spec: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LANEWAY_FAULTS": spec, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_kill_ends_the_process_with_sigkill_when_its_point_is_reached() -> None:
    code = (
        "import asyncio\nfrom laneway.engine import faults\nasyncio.run(faults.hit('before_step'))"
    )
    done = _python(code, "before_step=kill")
    assert done.returncode == -signal.SIGKILL


LANEWAY = (
    "import runpy, sys; sys.argv[1:] = {argv!r}; runpy.run_module('laneway', run_name='__main__')"
)


@pytest.mark.parametrize("argv", [["worker"], ["migrate"], ["status", "--url", "http://x", "1"]])
def test_a_command_refuses_in_one_line_with_exit_2_when_the_spec_is_invalid(
    argv: list[str],
) -> None:
    # It used to be a ValueError traceback and exit 1, raised while `laneway` was imported.
    done = _python(LANEWAY.format(argv=argv), "before=kill")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "laneway: LANEWAY_FAULTS: unknown point 'before' (known: after_checkpoint_commit,"
        " before_release, before_step, cancel_transition, cron_insert, pause_transition)\n"
    )


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["worker", "--help"]])
def test_help_and_version_answer_when_the_spec_is_invalid(argv: list[str]) -> None:
    done = _python(LANEWAY.format(argv=argv), "bogus")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout


def test_an_engine_built_without_the_cli_refuses_when_the_spec_is_invalid() -> None:
    # The chaos tier's client builds an Engine with no Settings: it must not run unarmed.
    code = (
        "from laneway.engine import Engine\n"
        "from laneway.errors import InvalidInputError\n"
        "try:\n"
        "    Engine(None)\n"
        "except InvalidInputError as exc:\n"
        "    print(exc)"
    )
    done = _python(code, "before_step=sleep:1@0")
    assert (done.returncode, done.stderr) == (0, "")
    assert (
        done.stdout == "LANEWAY_FAULTS: probability must be in (0, 1] in 'before_step=sleep:1@0'\n"
    )


def test_arming_in_process_replaces_a_refused_spec(disarmed: None) -> None:
    faults.arm("before_step=sleep:0")
    faults.check()  # nothing refused: the table in force was armed well
    with pytest.raises(ValueError, match="unknown point"):
        faults.arm("nowhere=kill")
    assert set(faults.armed()) == {"before_step"}


def _fault_calls(path: Path) -> list[tuple[str, bool]]:
    """Each `faults.hit("<point>")` in a module, and whether `if faults.ARMED:` guards it."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "faults.hit"
            and isinstance(node.args[0], ast.Constant)
        ):
            guard: ast.AST | None = parents.get(node)
            while guard is not None and not isinstance(guard, ast.If):
                guard = parents.get(guard)
            guarded = isinstance(guard, ast.If) and "faults.ARMED" in ast.unparse(guard.test)
            calls.append((str(node.args[0].value), guarded))
    return calls


def test_every_point_is_placed_in_the_engine_behind_the_armed_flag() -> None:
    # With nothing armed the hot path costs one attribute read: `hit` is never awaited.
    calls = [
        c for path in sorted((REPO / "laneway" / "engine").glob("*.py")) for c in _fault_calls(path)
    ]
    assert {point for point, _ in calls} == faults.POINTS
    assert all(guarded for _, guarded in calls), calls
