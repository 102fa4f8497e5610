"""Fixtures of the chaos tests: a private PostgreSQL server for the tests that restart it."""

import asyncio
from collections.abc import Iterator

import pytest

from laneway.store.databases import create_database
from tests.chaos.postgres import PostgresControl, private_server


async def _stop(admin_url: str) -> None:
    await (await PostgresControl.of(admin_url)).stop()


@pytest.fixture
def private_database_url() -> Iterator[str]:
    """A migrated database on a server of this test's own (it may be restarted or stopped)."""
    with private_server() as admin_url:
        yield asyncio.run(create_database(admin_url, "chaos", migrate=True))
        # Stopped here, with pg_ctl: after a restart the embedded server's own handle points
        # at a process that is gone, and its clean-up would wait for the new one.
        asyncio.run(_stop(admin_url))
