"""Running a command as a user would, for the tests that drive `laneway` and friends.

Owns one way to run a subprocess to its end: output captured, a deadline, and the process
killed (never left behind) when the deadline passes.
"""

import asyncio
from collections.abc import Mapping, Sequence
from os import PathLike


async def run_process(
    argv: Sequence[str | PathLike[str]],
    *,
    cwd: str | PathLike[str],
    env: Mapping[str, str],
    timeout: float = 60,
    stdin: bytes | None = None,
) -> tuple[int, str, str]:
    """Run `argv` to its end, with `stdin` as its input (None: this process's stdin); return
    its exit code, stdout and stderr.

    Raises:
        TimeoutError: it ran longer than `timeout` seconds (it is killed first).
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=None if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate(stdin)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
