"""Issue #7 (P-01 and P-04 of docs/reliability.md, at the API): 503, never 500, while PostgreSQL
is down.

A private throwaway server is stopped under a running API and started again. While it is
down, GraphQL over HTTP answers 503 SERVICE_UNAVAILABLE with a Retry-After, /healthz 503,
and an operation over a websocket an error with the same code; no body names the driver, a
statement, a socket or a host. Once it is back the same process answers 200 again.
"""

import asyncio
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pgserver
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from laneway.api.graphql.errors import is_database_unavailable, public_error
from laneway.store.databases import create_database, throwaway_server
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer, live_server, make_settings, wait_until

PROTOCOL = Subprotocol("graphql-transport-ws")
PG_CTL = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
UNAVAILABLE = "SERVICE_UNAVAILABLE"
QUERIES = [
    "{ queues { name } }",
    "{ workflowInstances { instanceID } }",
    '{ workflowEventHistory(afterEventID: "0") { eventID } }',
    'mutation { enqueueWorkflow(name: "noop") { instanceID } }',
]


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed ('10.0.0.7', 5432)"),
        FileNotFoundError(2, "No such file or directory"),
        TimeoutError(),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.LockNotAvailableError("canceling statement due to lock timeout"),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
        asyncpg.InterfaceError("connection is closed"),
        asyncpg.InterfaceError("pool is closing"),
        asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        ),
    ],
    ids=lambda error: type(error).__name__,
)
def test_driver_and_socket_errors_of_a_database_that_is_down_are_unavailable(
    error: BaseException,
) -> None:
    assert is_database_unavailable(error)
    assert public_error(error) == {
        "message": "The database is unavailable; try again shortly.",
        "extensions": {"code": UNAVAILABLE},
    }


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("boom"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        asyncpg.UniqueViolationError("duplicate key"),
        asyncpg.InternalClientError("unexpected codec state"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_other_errors_are_masked(error: BaseException) -> None:
    assert not is_database_unavailable(error)
    assert public_error(error) == {
        "message": "Unexpected error.",
        "extensions": {"code": "INTERNAL_SERVER_ERROR"},
    }


@pytest.fixture
def private_server() -> Iterator[str]:
    """An admin URL of an embedded PostgreSQL that only this test uses."""
    with throwaway_server() as url:
        yield url


async def private_database(server_url: str, name: str, *setup: str) -> tuple[str, Path]:
    """A migrated database on the private server, and the server's data directory; `setup`
    statements run on it first."""
    database_url = await create_database(server_url, name, migrate=True)
    probe = await asyncpg.connect(database_url)
    try:
        for statement in setup:
            await probe.execute(statement)
        return database_url, Path(await probe.fetchval("SHOW data_directory"))
    finally:
        await probe.close()


async def pg_ctl(pgdata: Path, *args: str) -> None:
    """Run pg_ctl on `pgdata` as the user that owns it."""
    owner = (await asyncio.to_thread(os.stat, pgdata)).st_uid
    process = await asyncio.create_subprocess_exec(
        str(PG_CTL),
        "-D",
        str(pgdata),
        "-l",
        str(pgdata / "pg_ctl.log"),
        "-w",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        user=owner if os.getuid() != owner else None,
    )
    async with asyncio.timeout(60):
        assert await process.wait() == 0


def leaked(text: str, pgdata: Path) -> list[str]:
    words = [*FORBIDDEN_TEXT, "Traceback", 'File "', str(pgdata), ".s.PGSQL", "Errno"]
    words.append(socket.gethostname())
    return [word for word in words if word in text]


def assert_unavailable(response: httpx.Response, pgdata: Path) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "2"
    errors = response.json()["errors"]
    assert {e["extensions"]["code"] for e in errors} == {UNAVAILABLE}
    assert {e["message"] for e in errors} == {"The database is unavailable; try again shortly."}
    assert not leaked(response.text, pgdata)


async def websocket_reply(ws: ClientConnection, operation_id: str, query: str) -> dict[str, Any]:
    frame = {"id": operation_id, "type": "subscribe", "payload": {"query": query}}
    await ws.send(json.dumps(frame))
    async with asyncio.timeout(10):
        while True:
            reply: dict[str, Any] = json.loads(await ws.recv())
            if reply.get("id") == operation_id and reply["type"] in ("next", "error"):
                return reply


def error_codes(reply: dict[str, Any]) -> set[str]:
    errors = reply["payload"]["errors"] if reply["type"] == "next" else reply["payload"]
    return {e.get("extensions", {}).get("code") for e in errors}


async def test_while_postgres_is_down_the_api_answers_503_and_recovers_without_restart(
    private_server: str,
) -> None:
    database_url, pgdata = await private_database(private_server, "laneway_down")
    settings = make_settings(database_url)
    async with live_server(settings) as server:
        assert (await server.client.post("/graphql", json={"query": QUERIES[0]})).status_code == 200
        ws = await connect(server.ws_url, subprotocols=[PROTOCOL])
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await pg_ctl(pgdata, "-m", "fast", "stop")
        try:
            for query in QUERIES:
                response = await server.client.post("/graphql", json={"query": query})
                assert_unavailable(response, pgdata)
            health = await server.client.get("/healthz")
            assert health.status_code == 503
            assert health.json()["database"] == "unreachable"
            async with ws:
                reply = await websocket_reply(ws, "q", QUERIES[0])
                assert error_codes(reply) == {UNAVAILABLE}, reply
                assert not leaked(json.dumps(reply), pgdata)
                # A fragment keeps the subscription on Strawberry's path (not websocket.py's).
                events = "subscription { workflowEvents { ... on WorkflowEvent { eventID } } }"
                reply = await websocket_reply(ws, "s", events)
                assert error_codes(reply) == {UNAVAILABLE}, reply
        finally:
            await pg_ctl(pgdata, "-o", '-h ""', "-o", f"-k {pgdata}", "start")
        await assert_recovers(server)


async def assert_recovers(server: LiveServer) -> None:
    async def answers() -> bool:
        response = await server.client.post("/graphql", json={"query": QUERIES[0]})
        assert response.status_code in (200, 503), response.text
        return response.status_code == 200 and "errors" not in response.json()

    await wait_until(answers, seconds=20)

    async def healthy() -> bool:
        return (await server.client.get("/healthz")).status_code == 200

    await wait_until(healthy, seconds=20)
    body = await server.graphql(QUERIES[3])
    assert body["data"]["enqueueWorkflow"]["instanceID"]


async def test_with_every_connection_taken_nothing_answers_500_and_all_recovers(
    private_server: str,
) -> None:
    # P-06 (docs/reliability.md): another client takes every connection the server has left.
    # Requests either find a pooled connection (200) or are told to come back (503), never 500; once
    # the connections are given back the API and the engine carry on without a restart.
    database_url, pgdata = await private_database(
        private_server, "laneway_full", "ALTER SYSTEM SET max_connections = 12"
    )
    await pg_ctl(pgdata, "-m", "fast", "stop")
    await pg_ctl(pgdata, "-o", '-h ""', "-o", f"-k {pgdata}", "start")
    settings = make_settings(database_url, pool_size=4)
    async with live_server(settings) as server:
        assert (await server.client.post("/graphql", json={"query": QUERIES[0]})).status_code == 200
        hogs: list[asyncpg.Connection] = []
        try:
            for _ in range(12):
                try:
                    hogs.append(await asyncpg.connect(database_url))
                except asyncpg.TooManyConnectionsError:
                    break
            else:
                raise AssertionError("the server never refused a connection")
            responses = await asyncio.gather(
                *(server.client.post("/graphql", json={"query": q}) for q in QUERIES * 3)
            )
            for response in responses:
                assert response.status_code in (200, 503), response.text
                if response.status_code == 503:
                    assert_unavailable(response, pgdata)
                assert not leaked(response.text, pgdata)
            assert (await server.client.get("/healthz")).status_code in (200, 503)
        finally:
            for hog in hogs:
                await hog.close()
        await assert_recovers(server)
        enqueued = await server.graphql(QUERIES[3])
        instance_id = enqueued["data"]["enqueueWorkflow"]["instanceID"]

        async def completed() -> bool:
            body = await server.graphql(
                f'{{ workflowInstance(instanceID: "{instance_id}") {{ status }} }}'
            )
            status: object = body["data"]["workflowInstance"]["status"]
            return status == "completed"

        await wait_until(completed, seconds=20)


async def test_healthz_says_read_only_while_the_database_cannot_write(
    database_url: str, admin: asyncpg.Connection
) -> None:
    """Found by an outside audit: while the database was read-only (a failover that first
    landed on a standby) every write was answered 503, yet /healthz said the database was ok,
    so no health check noticed. It says "read-only" (503), and "ok" once it can write again."""
    database = await admin.fetchval("SELECT current_database()")
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:

        async def says(status: int, database_state: str) -> bool:
            response = await server.client.get("/healthz")
            return (response.status_code, response.json()["database"]) == (status, database_state)

        assert await says(200, "ok")
        await admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await wait_until(lambda: says(503, "read-only"))
        await admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        await wait_until(lambda: says(200, "ok"))
