"""The README's Python example runs as written, against the test database."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README.md has no python example"
    return str(blocks[0])


async def test_readme_example_runs_and_prints_the_result(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(REPO)}
    result = subprocess.run(  # noqa: ASYNC221 - a finished child process is all we need
        [sys.executable, "-c", readme_example()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "completed {'words': 6}"
