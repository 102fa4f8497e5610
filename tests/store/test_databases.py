"""Throwaway servers for test suites and benchmarks: tuned as they say, gone afterwards."""

import asyncio
from pathlib import Path

import asyncpg

from laneway.store.databases import throwaway_server


async def _settings(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT name, setting FROM pg_settings"
            " WHERE name IN ('max_connections', 'fsync', 'synchronous_commit', 'data_directory')"
        )
    finally:
        await conn.close()
    return {row["name"]: row["setting"] for row in rows}


def test_a_tuned_embedded_server_runs_with_its_tuned_settings() -> None:
    # max_connections is read only when the server starts: a reload does not apply it.
    with throwaway_server() as url:
        shown = asyncio.run(_settings(url))
    pgdata = Path(shown.pop("data_directory"))
    assert shown == {"max_connections": "300", "fsync": "off", "synchronous_commit": "off"}
    assert not pgdata.exists()  # stopped and deleted afterwards
