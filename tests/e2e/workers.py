"""Worker subprocesses for end-to-end tests: `python -m laneway worker` with its own owner id.

Starting and stopping a worker is tests/chaos/supervisor.py's; this adds the e2e defaults.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

from tests.chaos.supervisor import start_worker, stop_worker


@contextlib.asynccontextmanager
async def worker_process(
    database_url: str, owner_id: str, extra_env: Mapping[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start a worker; on exit, stop it (SIGKILL if it is still running after SIGTERM)."""
    env = {
        "DATABASE_URL": database_url,
        "LANEWAY_WORKFLOWS": "tests.workflows",
        "LANEWAY_OWNER_ID": owner_id,
        "LANEWAY_LEASE_SECONDS": "1",
        "LANEWAY_POLL_SECONDS": "0.1",
        **(extra_env or {}),
    }
    process = await start_worker(env)
    try:
        yield process
    finally:
        await stop_worker(process, timeout=10)
