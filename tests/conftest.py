"""Test fixtures: one PostgreSQL per test worker, a migrated template, a fresh database per test.

The server is the embedded one (pgserver) in a temporary folder, unless
LANEWAY_TEST_DATABASE_URL points at a server to use instead. Per-test transactions with
rollback are not an option: NOTIFY is delivered on commit and the engine uses several
connections.
"""

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from app.store import Store, open_store
from app.store.embedded import embedded_postgres
from app.store.migrate import apply_migrations
from app.store.pool import connect


def url_for(server_url: str, database: str) -> str:
    """The same server, another database."""
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL of the PostgreSQL server the tests use."""
    given = os.environ.get("LANEWAY_TEST_DATABASE_URL")
    if given:
        yield given
        return
    # Not pytest's tmp_path: pytest prunes old base folders, and a concurrent pytest run
    # would delete the data folder under a running server.
    data_dir = Path(tempfile.mkdtemp(prefix="laneway-test-pg-"))
    try:
        with embedded_postgres(data_dir) as url:
            asyncio.run(_tune_throwaway_server(url))
            yield url
    finally:
        _stop_leftover_postmaster(data_dir / "pg")
        shutil.rmtree(data_dir, ignore_errors=True)


def _stop_leftover_postmaster(pgdata: Path) -> None:
    # A test that restarts the server leaves pgserver holding a stale handle, so its cleanup
    # would not stop the new postmaster; stop whatever still runs on this data folder.
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


async def _tune_throwaway_server(url: str) -> None:
    # A throwaway server needs no durability; tests run much faster without fsync.
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ALTER SYSTEM SET fsync = off")
        await conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        await conn.execute("ALTER SYSTEM SET full_page_writes = off")
        await conn.execute("ALTER SYSTEM SET max_connections = 300")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def template_name(server_url: str) -> Iterator[str]:
    """A database migrated once, cloned by every test."""
    name = f"laneway_template_{_worker()}_{uuid.uuid4().hex[:6]}"

    async def create() -> None:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        conn = await connect(url_for(server_url, name))
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()

    async def drop() -> None:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    asyncio.run(create())
    yield name
    asyncio.run(drop())


@pytest.fixture
async def database_url(server_url: str, template_name: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    finally:
        await admin.close()
    try:
        yield url_for(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as opened:
        yield opened


@pytest.fixture
async def admin(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test database, for assertions and fault injection."""
    conn = await connect(database_url, application_name="laneway-test-admin")
    try:
        yield conn
    finally:
        await conn.close()
