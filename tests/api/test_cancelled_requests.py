"""P-07 (docs/reliability.md), API side: clients that go away mid-query over graphql-transport-ws.

The queries are held mid-statement by a lock another session holds on laneway.instances;
each client sends one, waits until the server runs it, and closes its socket, so the server
cancels the operation while its statement waits (or while it waits for a pooled connection).
Afterwards the process stays within its pool, logs no InternalClientError, and answers.
PR tier: 50 clients; LANEWAY_CHAOS_FULL=1: the plan's 1,000.
"""

import asyncio
import json
import logging

import asyncpg
import pytest
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import connect

from tests.api.conftest import LiveServer, live_server, make_settings, wait_until
from tests.sizes import size

PROTOCOL = WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL
LIST = "{ workflowInstances(limit: 5) { instanceID } }"
POOL_SIZE = 10


async def serve_connections(admin: asyncpg.Connection) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE 'laneway-serve-%' AND datname = current_database()"
    )
    return count


async def waiting_on_the_lock(admin: asyncpg.Connection) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE 'laneway-serve-%' AND wait_event_type = 'Lock'"
        "   AND datname = current_database()"
    )
    return count


async def query_then_leave(server: LiveServer, started: asyncio.Event) -> None:
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": LIST}}))
        await started.wait()
    # Leaving the block closed the socket with the query unanswered.


@pytest.mark.parametrize("clients", [size(50, 1000)])
async def test_clients_leaving_mid_query_leave_the_pool_bounded_and_the_api_answering(
    database_url: str,
    admin: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
    clients: int,
) -> None:
    # The statements must still be waiting when the clients leave: a long lock timeout.
    settings = make_settings(database_url, engine_enabled=False, lock_timeout_seconds=60)
    caplog.set_level(logging.WARNING)
    locker = await asyncpg.connect(database_url)
    try:
        async with live_server(settings) as server:
            await locker.execute("BEGIN; LOCK TABLE laneway.instances IN ACCESS EXCLUSIVE MODE")
            started = asyncio.Event()
            leaving = [
                asyncio.create_task(query_then_leave(server, started)) for _ in range(clients)
            ]

            async def pool_busy() -> bool:
                return await waiting_on_the_lock(admin) >= min(clients, POOL_SIZE)

            # Every pooled connection stuck mid-statement (1,000 clients take a while to connect).
            await wait_until(pool_busy, seconds=120)
            started.set()
            await asyncio.gather(*leaving)

            async def settled() -> bool:
                return await waiting_on_the_lock(admin) == 0

            # With the lock still held: the server gave up the statements of the clients that
            # left (the plan: back within 5 s), rather than leaving them queued on the lock.
            await wait_until(settled, seconds=5)
            await locker.execute("ROLLBACK")
            assert await serve_connections(admin) <= POOL_SIZE + 1  # the pool and a listener
            body = await server.graphql(LIST)
            assert body["data"]["workflowInstances"] == []
            health = await server.client.get("/healthz")
            assert health.status_code == 200
            assert health.json()["database"] == health.json()["listener"] == "ok"
    finally:
        await locker.close()
    assert "InternalClientError" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
