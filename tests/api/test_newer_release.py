"""A process whose database a newer release migrated while it ran: its API refuses every
operation with SERVICE_UNAVAILABLE (503 over HTTP), and /healthz says why.

Found by an outside audit of the upgrade path: a 0.3.3 `serve` left running after 0.3.4's
`laneway migrate` went on enqueueing with its old SQL, which ignores the idempotency bindings
0035 added, and one idempotency key got two instances. Its engine stopped at a heartbeat; its
API did not, and one with LANEWAY_ENGINE=0 never noticed at all. The newer release's migration
is faked here by a row in laneway.schema_migrations that no release ships.
"""

import asyncio
import json
import logging
from typing import Any

import asyncpg
import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from app import host
from laneway.api.graphql.errors import public_error
from laneway.errors import DatabaseNewerError
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer, live_server, make_settings, wait_until

PROTOCOL = Subprotocol("graphql-transport-ws")
NEWER = "9999_from_a_newer_release"
REFUSAL = (
    f"The database was migrated by a newer Laneway release ({NEWER}); this process must be"
    " restarted on that release."
)
UNAVAILABLE = "SERVICE_UNAVAILABLE"
QUERY = "{ queues { name } }"
ENQUEUE = 'mutation { enqueueWorkflow(name: "hello", params: {name: "Web"}) { instanceID } }'
# The first takes websocket.py's direct path; a fragment keeps the second on Strawberry's.
EVENTS = "subscription { workflowEvents { eventID } }"
EVENTS_BY_FRAGMENT = "subscription { workflowEvents { ... on WorkflowEvent { eventID } } }"
GRAPHQL_RESPONSE = "application/graphql-response+json"


def test_a_newer_release_is_service_unavailable_and_says_what_to_do() -> None:
    assert public_error(DatabaseNewerError(["0036_a", "0037_b"])) == {
        "message": "The database was migrated by a newer Laneway release (0036_a, 0037_b);"
        " this process must be restarted on that release.",
        "extensions": {"code": UNAVAILABLE},
    }


async def migrate_newer(admin: asyncpg.Connection) -> None:
    await admin.execute("INSERT INTO laneway.schema_migrations (name) VALUES ($1)", NEWER)


async def refused_health(client: httpx.AsyncClient, path: str = "/healthz") -> dict[str, Any]:
    """/healthz's body once it answers 503 because of the newer schema (within a deadline)."""
    seen: dict[str, Any] = {}

    async def refused() -> bool:
        response = await client.get(path)
        seen.clear()
        seen.update(response.json())
        return response.status_code == 503 and seen.get("schema") == "newer"

    await wait_until(refused, seconds=10)
    return seen


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "2"
    body = response.json()
    assert body.get("data") is None, body
    assert [e["extensions"]["code"] for e in body["errors"]] == [UNAVAILABLE], body
    assert [e["message"] for e in body["errors"]] == [REFUSAL]
    for word in FORBIDDEN_TEXT:
        assert word not in response.text


async def instances(admin: asyncpg.Connection) -> int:
    count: int = await admin.fetchval("SELECT count(*) FROM laneway.instances")
    return count


async def assert_http_refuses(
    client: httpx.AsyncClient,
    admin: asyncpg.Connection,
    path: str = "/graphql",
    headers: dict[str, str] | None = None,
    *,
    laneways_view: bool = True,
) -> None:
    """A query and a mutation get 503 (in either media type, where Laneway's view serves
    both), and the mutation wrote nothing."""
    before = await instances(admin)
    for query in (QUERY, ENQUEUE):
        assert_refused(await client.post(path, json={"query": query}, headers=headers))
    # Not the 400 a request error gets under GraphQL over HTTP's own media type.
    answer = await client.post(
        path, json={"query": ENQUEUE}, headers={"accept": GRAPHQL_RESPONSE, **(headers or {})}
    )
    assert_refused(answer)
    if laneways_view:  # a host's own Strawberry view answers application/json
        assert answer.headers["content-type"].startswith(GRAPHQL_RESPONSE)
    assert await instances(admin) == before


async def acked(server: LiveServer) -> ClientConnection:
    ws = await connect(server.ws_url, subprotocols=[PROTOCOL])
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    async with asyncio.timeout(10):
        assert json.loads(await ws.recv())["type"] == "connection_ack"
    return ws


async def subscribe(ws: ClientConnection, operation_id: str, query: str) -> None:
    frame = {"id": operation_id, "type": "subscribe", "payload": {"query": query}}
    await ws.send(json.dumps(frame))


def errors_in(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """An `error` message's errors, or those of a `next` message's result."""
    if frame["type"] == "error":
        errors: list[dict[str, Any]] = frame["payload"]
        return errors
    if frame["type"] == "next":
        return list(frame["payload"].get("errors") or [])
    return []


async def ended_with_errors(ws: ClientConnection, ids: set[str]) -> dict[str, list[Any]]:
    """The errors each operation of `ids` ends with (an `error` message, or a `next` with
    errors before its `complete`), read within a deadline; events in between are skipped."""
    ended: dict[str, list[Any]] = {}
    async with asyncio.timeout(10):
        while set(ended) != ids:
            frame = json.loads(await ws.recv())
            errors = errors_in(frame)
            if frame.get("id") in ids and errors:
                ended.setdefault(frame["id"], errors)
    return ended


def assert_all_refused(ended: dict[str, list[Any]]) -> None:
    for operation_id, errors in ended.items():
        assert [e["extensions"]["code"] for e in errors] == [UNAVAILABLE], (operation_id, errors)
        assert [e["message"] for e in errors] == [REFUSAL], (operation_id, errors)


async def test_an_api_only_serve_refuses_every_operation_once_a_newer_release_migrated(
    database_url: str, admin: asyncpg.Connection, caplog: Any
) -> None:
    # No engine, so no heartbeat: the API reads the newest migration itself, every third of
    # LANEWAY_LEASE_SECONDS.
    settings = make_settings(database_url, engine_enabled=False, lease_seconds=0.6)
    async with live_server(settings) as server:
        health = await server.client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["schema"] == "ok"
        enqueued = await server.graphql(ENQUEUE)
        assert enqueued["data"]["enqueueWorkflow"]["instanceID"]
        assert "errors" not in await server.graphql(QUERY)
        ws = await acked(server)
        try:
            await subscribe(ws, "open", EVENTS)
            await subscribe(ws, "open-by-fragment", EVENTS_BY_FRAGMENT)
            await server.wait_for_subscribers(2)
            await migrate_newer(admin)
            health_body = await refused_health(server.client)
            assert (health_body["database"], health_body["listener"]) == ("ok", "ok")
            assert health_body["engine"] == "disabled"
            await assert_http_refuses(server.client, admin)
            # The subscriptions open when it learnt it end with the same error.
            assert_all_refused(await ended_with_errors(ws, {"open", "open-by-fragment"}))
            before = await instances(admin)
            operations = {"q": QUERY, "m": ENQUEUE, "s": EVENTS, "f": EVENTS_BY_FRAGMENT}
            for operation_id, query in operations.items():
                await subscribe(ws, operation_id, query)
            assert_all_refused(await ended_with_errors(ws, set(operations)))
            assert await instances(admin) == before
        finally:
            await ws.close()
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged == ["the database was migrated by a newer release; refusing requests"]


async def test_a_serve_with_an_engine_refuses_every_operation_once_its_heartbeat_sees_it(
    database_url: str, admin: asyncpg.Connection, caplog: Any
) -> None:
    # The engine's heartbeat finds the newer migration: the engine stops (draining, then
    # handing back), and the API refuses from that heartbeat on, not after the drain.
    settings = make_settings(database_url, lease_seconds=0.6, shutdown_grace_seconds=0.2)
    async with live_server(settings) as server:
        enqueued = await server.graphql(ENQUEUE)
        assert enqueued["data"]["enqueueWorkflow"]["instanceID"]
        assert "errors" not in await server.graphql(QUERY)
        await migrate_newer(admin)
        health = await refused_health(server.client)
        assert (health["database"], health["listener"]) == ("ok", "ok")
        await assert_http_refuses(server.client, admin)

        async def engine_stopped() -> bool:
            return bool((await server.health())["engine"] == "stopped")

        await wait_until(engine_stopped, seconds=10)
        await assert_http_refuses(server.client, admin)
    # One ERROR line for one event: the lifespan said it again as the engine's own failure
    # ("engine stopped; …"), which an alert on ERROR lines counted as a second incident.
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged == ["the database was migrated by a newer release; stopping"]


async def test_a_host_that_mounts_laneway_without_an_engine_refuses_on_both_its_routes(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # app/host.py: Laneway's app at /laneway, run by the host's lifespan (app.running()), and
    # the host's own schema, with Laneway's extensions, at /graphql.
    settings = make_settings(database_url, engine_enabled=False, lease_seconds=0.6)
    admin_user = {host.USER_HEADER: host.ADMIN}
    app = host.build(settings)
    async with live_server(settings, app=app, prefix=host.LANEWAY_PREFIX) as server:
        hosted = await server.client.post(
            "/graphql", json={"query": "{ hello queues { name } }"}, headers=admin_user
        )
        assert hosted.status_code == 200
        assert "errors" not in hosted.json()
        await migrate_newer(admin)
        await refused_health(server.client, f"{host.LANEWAY_PREFIX}/healthz")
        await assert_http_refuses(server.client, admin, f"{host.LANEWAY_PREFIX}/graphql")
        await assert_http_refuses(
            server.client, admin, "/graphql", headers=admin_user, laneways_view=False
        )
