"""The `laneway` console script as pyproject.toml declares it: Ctrl-C while it still loads
Laneway's modules ends in one line, `laneway: interrupted`, and exit 130, as it does later.
"""

import asyncio
import re
import signal
import sys
import tomllib

from laneway.cli import EXIT_INTERRUPTED
from tests.test_cli import ROOT, environment

# A module of Laneway's own, done loading while `import laneway` is still under way (the
# package's own line comes last): once it is reported, the process is past Python's start-up
# (its SIGINT handler is installed) and inside the console script's imports.
_LANEWAY_SUBMODULE = re.compile(rb"^import time:.*\|\s+laneway\.\w")


def _console_script() -> str:
    """What pip's `laneway` wrapper runs, for the entry point pyproject.toml declares."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["laneway"].split(":")
    return f"import sys\nfrom {module} import {function}\nsys.exit({function}())"


async def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130() -> None:
    # PYTHONPROFILEIMPORTTIME: Python reports each import on stderr as it ends, which tells
    # when the imports are under way. `--params @-` reads stdin, which never ends here: a
    # signal that came after the imports is the command's to catch, as it always was.
    env = environment(None, PYTHONPROFILEIMPORTTIME="1")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _console_script(), "enqueue", "hello", "--params", "@-",
        cwd=ROOT, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        async with asyncio.timeout(60):
            while not _LANEWAY_SUBMODULE.match(line := await process.stderr.readline()):
                assert line, "the process ended before it loaded any of Laneway's modules"
            process.send_signal(signal.SIGINT)
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    said = [ln for ln in err.decode().splitlines() if not ln.startswith("import time:")]
    assert (process.returncode, said, out) == (EXIT_INTERRUPTED, ["laneway: interrupted"], b"")
