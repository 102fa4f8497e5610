"""The operation wall clock (over HTTP and websockets) and P-04 of docs/reliability.md (a lock
stall) at the API.

The test holds an ACCESS EXCLUSIVE lock on the instances table from its own connection, so a
query resolver blocks in PostgreSQL. Past LANEWAY_OPERATION_TIMEOUT the request is answered
504 TIMEOUT; past the lock timeout PostgreSQL gives up first and the answer is 503. Either
way the server keeps its pool and answers normally once the lock is gone.
"""

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from websockets.asyncio.client import connect

from tests.api.conftest import FORBIDDEN_TEXT, live_server, make_settings
from tests.api.test_security_database import PROTOCOL, websocket_reply

INSTANCES = "{ workflowInstances { instanceID } }"


@asynccontextmanager
async def instances_locked(admin: asyncpg.Connection) -> AsyncIterator[None]:
    async with admin.transaction():
        await admin.execute("LOCK TABLE laneway.instances IN ACCESS EXCLUSIVE MODE")
        yield


async def lock_waiters(admin: asyncpg.Connection) -> int:
    """Statements of other sessions waiting on a lock now (behind the test's)."""
    count: int = await admin.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted")
    return count


async def test_an_operation_past_the_deadline_gets_504_timeout_and_the_pool_survives(
    database_url: str, admin: asyncpg.Connection
) -> None:
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=0.3, pool_size=2
    )
    async with live_server(settings) as server:
        async with instances_locked(admin):
            # More timed-out requests than the pool has connections: each gives its back.
            for _ in range(3):
                began = time.monotonic()
                response = await server.client.post("/graphql", json={"query": INSTANCES})
                assert time.monotonic() - began < 2.0
                assert response.status_code == 504, response.text
                # "Cancelled" holds when it is said: the statement has ended on the server.
                assert await lock_waiters(admin) == 0
                error = response.json()["errors"][0]
                assert error["extensions"]["code"] == "TIMEOUT"
                assert "0.3 s" in error["message"]
                assert "x-request-id" in response.headers
                for word in FORBIDDEN_TEXT:
                    assert word not in response.text
            # Requests that do not touch the locked table are unaffected meanwhile.
            assert (await server.graphql("{ workflows { name } }"))["data"]["workflows"]
        body = await server.graphql(INSTANCES)
        assert body["data"] == {"workflowInstances": []}
        assert (await server.client.get("/healthz")).status_code == 200


async def test_a_lock_stall_past_the_lock_timeout_answers_503(
    database_url: str, admin: asyncpg.Connection
) -> None:
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=5, lock_timeout_seconds=0.2
    )
    async with live_server(settings) as server:
        async with instances_locked(admin):
            began = time.monotonic()
            response = await server.client.post("/graphql", json={"query": INSTANCES})
            assert time.monotonic() - began < 3.0
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "2"
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        assert error["message"] == "The database is unavailable; try again shortly."
        body = await server.graphql(INSTANCES)
        assert body["data"] == {"workflowInstances": []}


async def test_a_websocket_query_past_the_deadline_gets_a_timeout_error_and_the_socket_lives(
    database_url: str, admin: asyncpg.Connection
) -> None:
    settings = make_settings(database_url, engine_enabled=False, operation_timeout_seconds=0.3)
    async with (
        live_server(settings) as server,
        connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        async with instances_locked(admin):
            began = time.monotonic()
            reply = await websocket_reply(ws, "slow", INSTANCES)
            assert time.monotonic() - began < 2.0
            assert await lock_waiters(admin) == 0
        assert reply["type"] == "error", reply
        [error] = reply["payload"]
        assert error["extensions"]["code"] == "TIMEOUT"
        assert "0.3 s" in error["message"]
        # The same socket answers the next operation.
        reply = await websocket_reply(ws, "after", INSTANCES)
        assert reply["type"] == "next"
        assert reply["payload"]["data"] == {"workflowInstances": []}


@asynccontextmanager
async def table_locked(admin: asyncpg.Connection, table: str) -> AsyncIterator[None]:
    async with admin.transaction():
        await admin.execute(f"LOCK TABLE laneway.{table} IN ACCESS EXCLUSIVE MODE")
        yield


ENQUEUE_THEN_SCHEDULE = (
    'mutation { a: enqueueWorkflow(name: "noop", params: {tag: "audit"}) { instanceID }'
    ' b: setScheduleEnabled(name: "zz", enabled: true) { name } }'
)


async def enqueued_tags(admin: asyncpg.Connection) -> list[object]:
    rows = await admin.fetch("SELECT params->>'tag' AS tag FROM laneway.instances")
    return [row["tag"] for row in rows]


async def test_a_lock_stall_in_one_field_of_an_answer_with_data_is_200_without_retry_after(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # An outside audit: 503 + Retry-After went out with the other fields' data in the body
    # (GraphQL over HTTP: non-null data is a 2xx).
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=5, lock_timeout_seconds=0.2
    )
    query = (
        '{ workflows { name } workflowInstance(instanceID: "00000000-0000-0000-0000-000000000001")'
        " { status } }"
    )
    async with live_server(settings) as server:
        async with instances_locked(admin):
            response = await server.client.post("/graphql", json={"query": query})
        assert response.status_code == 200, response.text
        assert "retry-after" not in response.headers
        body = response.json()
        assert body["data"]["workflows"]
        assert body["data"]["workflowInstance"] is None
        [error] = body["errors"]
        assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        assert error["path"] == ["workflowInstance"]


async def test_a_lock_stall_after_a_root_mutation_field_committed_is_200_without_retry_after(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # An outside audit: the enqueue had committed, yet the answer was 503 + Retry-After, which
    # docs/limits.md tells a client to retry: a duplicate enqueue.
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=5, lock_timeout_seconds=0.2
    )
    async with live_server(settings) as server:
        async with table_locked(admin, "schedules"):
            response = await server.client.post("/graphql", json={"query": ENQUEUE_THEN_SCHEDULE})
        assert response.status_code == 200, response.text
        assert "retry-after" not in response.headers
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        # An outside audit: `data` null said nothing of `a`; the error names what stays done.
        assert error["extensions"] == {"code": "SERVICE_UNAVAILABLE", "completed": ["a"]}
        assert error["path"] == ["b"]
        assert await enqueued_tags(admin) == ["audit"]
        # With nothing written, the same stall is still 503: sending it again repeats nothing.
        async with table_locked(admin, "schedules"):
            response = await server.client.post(
                "/graphql",
                json={
                    "query": 'mutation { setScheduleEnabled(name: "zz", enabled: true) { name } }'
                },
            )
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "2"
        assert response.json()["data"] is None
        assert "completed" not in response.json()["errors"][0]["extensions"]


async def test_a_failed_root_mutation_field_lists_the_fields_that_completed_before_it(
    database_url: str, admin: asyncpg.Connection
) -> None:
    """As a TIMEOUT does: the root mutation fields run one after another, so the error of the
    one that failed names, by response key, those before it that stay done; a query's do not."""
    settings = make_settings(database_url, engine_enabled=False)
    missing = "00000000-0000-0000-0000-000000000001"
    document = (
        'mutation { first: enqueueWorkflow(name: "noop", params: {tag: "x"}) { instanceID }'
        ' second: enqueueWorkflow(name: "noop", params: {tag: "y"}) { instanceID }'
        f' gone: cancelWorkflow(instanceID: "{missing}") {{ instanceID }}'
        ' last: enqueueWorkflow(name: "noop", params: {tag: "z"}) { instanceID } }'
    )
    async with live_server(settings) as server:
        response = await server.client.post("/graphql", json={"query": document})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        assert error["path"] == ["gone"]
        assert error["extensions"] == {"code": "NOT_FOUND", "completed": ["first", "second"]}
        assert sorted(map(str, await enqueued_tags(admin))) == ["x", "y"]  # `last` did not run
        # The first field failing: nothing before it, no list.
        alone = await server.client.post(
            "/graphql", json={"query": "mutation { " + document.split("gone: ", 1)[1]}
        )
        assert alone.json()["errors"][0]["extensions"] == {"code": "NOT_FOUND"}
        # A query's field errors are as they were.
        read = await server.client.post(
            "/graphql",
            json={
                "query": f'{{ workflows {{ name }} w: workflowInstance(instanceID: "{missing}")'
                " { status } }"
            },
        )
        assert "completed" not in json.dumps(read.json())


async def test_the_deadline_after_a_root_mutation_field_committed_says_so_and_is_not_504(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # An outside audit: the answer was 504 TIMEOUT, which docs/limits.md said meant "rolled
    # back", while the enqueue before the stalled field had committed (and later ran).
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=0.5, lock_timeout_seconds=5
    )
    async with live_server(settings) as server:
        async with table_locked(admin, "schedules"):
            response = await server.client.post(
                "/graphql",
                json={"query": ENQUEUE_THEN_SCHEDULE},
                headers={"accept": "application/graphql-response+json"},
            )
            assert await lock_waiters(admin) == 0
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/graphql-response+json")
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        assert error["extensions"] == {"code": "TIMEOUT", "completed": ["a"]}
        assert "0.5 s" in error["message"]
        assert "stay done" in error["message"]
        assert await enqueued_tags(admin) == ["audit"]
        # Nothing completed: 504, and nothing of it stays.
        async with table_locked(admin, "instances"):
            response = await server.client.post("/graphql", json={"query": ENQUEUE_THEN_SCHEDULE})
            # The enqueue is one statement, its own transaction: had the 504 gone out before its
            # cancel landed, the lock given up here would have let it commit (CI saw it).
            assert await lock_waiters(admin) == 0
        assert response.status_code == 504, response.text
        [error] = response.json()["errors"]
        assert error["extensions"] == {"code": "TIMEOUT"}
        assert await enqueued_tags(admin) == ["audit"]


async def test_a_failure_below_a_root_mutation_field_lists_the_fields_that_completed_up_to_it(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # An outside audit: an error under a root mutation field (here its result's `failures`,
    # stalled on a lock) nulled the whole `data` with no `completed`, though `a` ran and `b`'s
    # enqueue committed.
    settings = make_settings(
        database_url, engine_enabled=False, operation_timeout_seconds=5, lock_timeout_seconds=0.2
    )
    below = (
        ' b: enqueueWorkflow(name: "noop", params: {tag: "b"})'
        " { instanceID instance { failures { message } } }"
    )
    document = (
        'mutation { a: pauseQueue(name: "q1") { name }'
        + below
        + ' c: resumeQueue(name: "q1") { name } }'
    )
    async with live_server(settings) as server:
        async with table_locked(admin, "failures"):
            response = await server.client.post("/graphql", json={"query": document})
            alone = await server.client.post("/graphql", json={"query": "mutation {" + below + "}"})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        assert error["path"] == ["b", "instance", "failures"]
        assert error["extensions"] == {"code": "SERVICE_UNAVAILABLE", "completed": ["a", "b"]}
        paused = await admin.fetchval("SELECT paused FROM laneway.queues WHERE name = 'q1'")
        assert paused is True  # `a` stays done; `c` did not run
        # The first root field failing below: it alone committed, and that is no 503 to retry.
        assert alone.status_code == 200, alone.text
        [error] = alone.json()["errors"]
        assert error["extensions"] == {"code": "SERVICE_UNAVAILABLE", "completed": ["b"]}
        assert await enqueued_tags(admin) == ["b", "b"]
