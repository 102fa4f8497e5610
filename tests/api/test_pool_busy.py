"""A process whose database connections are all in use says so, not that the database is down.

Found by an outside audit: under a load that kept every pooled connection lent, requests were
answered SERVICE_UNAVAILABLE "The database is unavailable" and /healthz said the database was
"unreachable", though PostgreSQL answered all along: an operator goes looking for an outage.
The code stays SERVICE_UNAVAILABLE (come back shortly); the message and /healthz say which.
"""

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from laneway.api.app import create_app
from laneway.api.graphql.errors import BUSY_MESSAGE
from laneway.services import Services
from laneway.store import Store
from laneway.store.pool import PoolBusyError
from tests.api.conftest import executor, make_settings, running_services


@contextlib.asynccontextmanager
async def _every_connection_lent(store: Store) -> AsyncIterator[None]:
    """Hold every connection of `store`'s pool, and make a wait for one give up at once."""
    store._acquire_timeout = 0.2  # the test's clock: 5 s by default
    async with contextlib.AsyncExitStack() as held:
        while not store.connections_busy:
            await held.enter_async_context(store.connection())
        yield


@pytest.fixture
async def small(database_url: str) -> AsyncIterator[Services]:
    settings = make_settings(database_url, pool_size=2, engine_enabled=False)
    async with running_services(settings) as services:
        yield services


async def test_a_wait_for_a_lent_pool_is_pool_busy(small: Services) -> None:
    async with _every_connection_lent(small.store):
        with pytest.raises(PoolBusyError, match=r"stayed lent for 0\.2 s"):
            await small.store.ping()
    await small.store.ping()  # given back: it answers again


async def test_graphql_says_the_server_is_busy_not_the_database_down(small: Services) -> None:
    run = executor(small)
    async with _every_connection_lent(small.store):
        result = await run("{ queues { name } }")
    assert result.errors is not None
    (error,) = result.errors
    assert (error.message, (error.extensions or {}).get("code")) == (
        BUSY_MESSAGE,
        "SERVICE_UNAVAILABLE",
    )
    assert (await run("{ queues { name } }")).errors is None


async def test_healthz_says_busy_when_every_connection_is_lent(database_url: str) -> None:
    app = create_app(make_settings(database_url, pool_size=2, engine_enabled=False))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.running() as services,
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
    ):
        async with _every_connection_lent(services.store):
            busy = await client.get("/healthz")
        assert (busy.status_code, busy.json()["database"]) == (503, "busy")
        ok: Any = (await client.get("/healthz")).json()
        assert ok["database"] == "ok"
