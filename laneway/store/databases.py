"""Throwaway PostgreSQL servers and databases, for test suites and benchmarks.

Owns creating, cloning and dropping databases by name and running a temporary embedded
server. Used by tests/conftest.py, the laneway.testing pytest plugin and bench/; never by the
service itself.
"""

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from laneway.store.embedded import embedded_postgres
from laneway.store.migrate import apply_migrations
from laneway.store.pool import connect


def database_url_for(server_url: str, database: str) -> str:
    """The same server, another database."""
    return urlunsplit(urlsplit(server_url)._replace(path="/" + database))


@contextlib.contextmanager
def throwaway_server(given_url: str | None = None, *, tune: bool = True) -> Iterator[str]:
    """Yield an admin URL: `given_url` as is, or a temporary embedded server.

    The embedded one lives in a fresh temporary folder (not pytest's, which pytest prunes
    while another run may still use it) and is stopped and deleted afterwards. With `tune`,
    durability is switched off (a throwaway server needs none, and tests run much faster) and
    connections are raised to 300 for parallel suites.
    """
    if given_url:
        yield given_url
        return
    data_dir = Path(tempfile.mkdtemp(prefix="laneway-pg-"))
    try:
        if tune:
            with embedded_postgres(data_dir) as url:
                asyncio.run(_tune(url))
            # max_connections is read only at start (a reload does not apply it): the
            # server is started again, once, with everything it was tuned to.
        with embedded_postgres(data_dir) as url:
            yield url
    finally:
        stop_leftover_postmaster(data_dir / "pg")
        shutil.rmtree(data_dir, ignore_errors=True)


async def _tune(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in (
            "ALTER SYSTEM SET fsync = off",
            "ALTER SYSTEM SET synchronous_commit = off",
            "ALTER SYSTEM SET full_page_writes = off",
            "ALTER SYSTEM SET max_connections = 300",
        ):
            await conn.execute(statement)
    finally:
        await conn.close()


def stop_leftover_postmaster(pgdata: Path) -> None:
    """Stop the postmaster that still runs on `pgdata`, if any (fast shutdown, then kill).

    After a restart (as the restart tests do) pgserver's handle points at the old process and
    its cleanup leaves the new postmaster running; a test that fails half-way leaves one too.
    """
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # fast shutdown
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


async def create_database(
    server_url: str, name: str, *, template: str | None = None, migrate: bool = False
) -> str:
    """Create database `name` (a generated identifier, never user input); return its URL."""
    admin = await asyncpg.connect(server_url)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await admin.close()
    url = database_url_for(server_url, name)
    if migrate:
        conn = await connect(url)
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
    return url


async def drop_database(server_url: str, name: str) -> None:
    """Drop database `name`, disconnecting whoever is still connected."""
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
