"""Test fixtures: one PostgreSQL per test worker, a migrated template, a fresh database per test.

The server is the embedded one (pgserver) in a temporary folder, unless
LANEWAY_TEST_DATABASE_URL points at a server to use instead. Per-test transactions with
rollback are not an option: NOTIFY is delivered on commit and the engine uses several
connections.
"""

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from laneway.store import Store, open_store
from laneway.store.databases import create_database, drop_database, throwaway_server
from laneway.store.pool import connect


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """The root logger as each test found it: `laneway.cli.main` run in-process sets up the
    command's logging (a one-shot command's shows only ERROR), which would hide the WARNING
    records that later tests of the same worker look for."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL of the PostgreSQL server the tests use."""
    with throwaway_server(os.environ.get("LANEWAY_TEST_DATABASE_URL")) as url:
        yield url


# Session fixtures are synchronous (asyncio.run inside): test event loops are per test.
@pytest.fixture(scope="session")
def template_name(server_url: str) -> Iterator[str]:
    """A database migrated once, cloned by every test."""
    name = f"laneway_template_{_worker()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(create_database(server_url, name, migrate=True))
    yield name
    asyncio.run(drop_database(server_url, name))


@pytest.fixture
async def database_url(server_url: str, template_name: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = await create_database(server_url, name, template=template_name)
    try:
        yield url
    finally:
        await drop_database(server_url, name)


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
