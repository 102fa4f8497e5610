"""Worker subprocesses for end-to-end tests: `python -m app worker` with its own owner id."""

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def worker_process(
    database_url: str, owner_id: str, extra_env: Mapping[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start a worker; on exit, stop it (SIGKILL if it is still running after SIGTERM)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "LANEWAY_WORKFLOWS": "tests.workflows",
        "LANEWAY_OWNER_ID": owner_id,
        "LANEWAY_LEASE_SECONDS": "1",
        "LANEWAY_POLL_SECONDS": "0.1",
        "PYTHONPATH": str(REPO),
        **(extra_env or {}),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app",
        "worker",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=10)
            except TimeoutError:
                process.kill()
                await process.wait()
