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
from datetime import UTC, date, datetime

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


class Template:
    """The migrated database every test clones, made again when the UTC day changes: the
    migration makes the event log's partitions from its day on, which a clone made on a later
    day would not start at (a run that goes past midnight)."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.name = ""
        self.day: date | None = None

    async def current(self) -> str:
        today = datetime.now(UTC).date()
        if self.day != today:
            old, self.name = self.name, f"laneway_template_{_worker()}_{uuid.uuid4().hex[:6]}"
            await create_database(self.server_url, self.name, migrate=True)
            self.day = today
            if old:
                await drop_database(self.server_url, old)
        return self.name


@pytest.fixture(scope="session")
def template(server_url: str) -> Iterator[Template]:
    made = Template(server_url)
    yield made
    if made.name:  # synchronous: a session fixture has no event loop of its own
        asyncio.run(drop_database(server_url, made.name))


@pytest.fixture
async def template_name(template: Template) -> str:
    """The migrated database of today that tests clone."""
    return await template.current()


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
