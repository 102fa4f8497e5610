"""The README's Python example runs as written, against the test database."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_example(marker: str) -> str:
    """The README's python block that contains `marker` (a whole program)."""
    text = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL) if marker in b]
    assert len(blocks) == 1, f"README.md should have one python example with {marker!r}"
    return str(blocks[0])


@pytest.mark.parametrize(
    ("marker", "printed"),
    [
        ("ingest = Workflow(", "completed {'words': 6}"),
        ("pipeline = compile_template(", "completed 6"),
    ],
)
async def test_readme_example_runs_and_prints_the_result(
    database_url: str, marker: str, printed: str
) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(REPO)}
    result = subprocess.run(  # noqa: ASYNC221 - a finished child process is all we need
        [sys.executable, "-c", readme_example(marker)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == printed
