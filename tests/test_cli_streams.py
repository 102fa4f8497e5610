"""`laneway` started with stdin, stdout or stderr closed (`laneway enqueue x >&-`), as a script or
a service manager may start it: the command does its work once and exits as it would with the
stream on /dev/null. It used to abort (exit 134) after its work, in libuv, which had taken the
free descriptor for a file of its own: a script that retried on failure enqueued twice.
"""

import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from tests.api.conftest import live_server, make_settings
from tests.processes import run_process
from tests.test_cli import ROOT, environment, laneway
from tests.test_stop_signals import until_logged

# `sh -c 'exec "$@" 1>&-' closed python -m laneway ...`: the command with that descriptor
# closed, which subprocess's stdin/stdout/stderr cannot say.
_CLOSE = {0: "0<&-", 1: "1>&-", 2: "2>&-"}


def _closed(fd: int, *args: str) -> list[str]:
    return ["sh", "-c", f'exec "$@" {_CLOSE[fd]}', "closed", sys.executable, "-m", "laneway", *args]


async def _instances(database_url: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT instance_id, params FROM laneway.instances")
    finally:
        await conn.close()
    return [dict(row) for row in rows]


@pytest.mark.parametrize("fd", [0, 1, 2])
async def test_enqueue_with_a_closed_stream_enqueues_once_and_exits_0(
    database_url: str, fd: int
) -> None:
    env = environment(database_url)
    argv = _closed(fd, "enqueue", "hello", "--params", '{"name": "closed"}')
    code, out, err = await run_process(argv, cwd=ROOT, env=env)
    assert (code, err) == (0, ""), err
    if fd != 1:
        assert json.loads(out)["created"] is True
    assert len(await _instances(database_url)) == 1


@pytest.mark.parametrize(
    ("fd", "args", "exit_code"),
    [
        (0, ("status", "{id}", "--json"), 0),
        (1, ("status", "{id}", "--json"), 0),
        (2, ("status", "nope"), 2),
        (1, ("export-schema",), 0),
        (0, ("export-schema",), 0),
    ],
)
async def test_a_command_with_a_closed_stream_exits_as_with_it_on_dev_null(
    database_url: str, fd: int, args: Sequence[str], exit_code: int
) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "s"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    argv = _closed(fd, *(a.format(id=instance_id) for a in args))
    code, out, err = await run_process(argv, cwd=ROOT, env=env)
    assert code == exit_code, err
    if fd == 0 and args[0] == "status":
        assert json.loads(out)["instanceID"] == instance_id
    if fd != 2 and exit_code == 0:
        assert err == ""


@pytest.mark.parametrize("fd", [0, 1, 2])
async def test_a_command_with_url_and_a_closed_stream_exits_0(database_url: str, fd: int) -> None:
    env = environment("postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS="")
    async with live_server(make_settings(database_url)) as server:
        url = f"http://127.0.0.1:{server.port}"
        argv = _closed(fd, "enqueue", "hello", "--params", '{"name": "u"}', "--url", url)
        code, _, err = await run_process(argv, cwd=ROOT, env=env)
        assert code == 0, err
    assert len(await _instances(database_url)) == 1


@pytest.mark.parametrize(
    ("command", "started"),
    # serve: once uvicorn is up (it installs its signal handlers after `listening`).
    [(("worker",), "worker started"), (("serve", "--port", "0"), "Application startup complete.")],
)
async def test_worker_and_serve_with_stdin_closed_stop_cleanly(
    database_url: str, command: tuple[str, ...], started: str
) -> None:
    process = await asyncio.create_subprocess_exec(
        *_closed(0, *command), cwd=ROOT, env=environment(database_url),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            await until_logged(process, started)
            process.send_signal(signal.SIGTERM)
            _, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()[-2000:]


async def test_a_json_option_read_from_a_closed_stdin_says_stdin_is_empty(
    database_url: str,
) -> None:
    argv = _closed(0, "enqueue", "hello", "--params", "-")
    code, _, err = await run_process(argv, cwd=ROOT, env=environment(database_url))
    assert code == 2, err
    assert err.startswith("laneway: enqueue: argument --params: stdin is empty"), err
    assert len(err.splitlines()) == 1, err
    assert await _instances(database_url) == []
