"""workflowEvents over real websockets (graphql-transport-ws) against uvicorn on 127.0.0.1.

The gql client for subscriptions; the plain `websockets` client where close codes matter.
Where a test needs events to happen after the subscription is registered, the server runs
API-only and the test starts an engine of its own once /healthz counts the subscriber.
"""

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pgserver
import pytest
from gql import Client, GraphQLRequest
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from laneway.api.app import MAX_SUBSCRIPTIONS_PER_CONNECTION, WS_MAX_MESSAGE_BYTES, create_app
from laneway.api.auth import Caller, Decision
from tests.api.conftest import (
    TOKEN,
    LiveServer,
    live_server,
    make_settings,
    running_services,
    wait_until,
)

PROTOCOL = WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL
EVENTS = """subscription ($id: ID, $name: String, $after: ID) {
  workflowEvents(instanceID: $id, name: $name, afterEventID: $after) {
    eventID type instanceID name status
  }
}"""
HISTORY = """query ($after: ID) {
  workflowEventHistory(afterEventID: $after, limit: 500) { eventID type instanceID name status }
}"""
ENQUEUE = """mutation ($name: String!) {
  enqueueWorkflow(name: "hello", params: {name: $name}) { instanceID }
}"""


def transport(server: LiveServer, token: str | None = None) -> WebsocketsTransport:
    payload = {"authorization": f"Bearer {token}"} if token else {}
    return WebsocketsTransport(url=server.ws_url, subprotocols=[PROTOCOL], init_payload=payload)


async def collect(
    server: LiveServer, query: str, count: int, token: str | None = None, **variables: Any
) -> list[dict[str, Any]]:
    """The first `count` events of one subscription, over its own websocket."""
    received: list[dict[str, Any]] = []
    async with Client(transport=transport(server, token)) as session:
        request = GraphQLRequest(query, variable_values=variables)
        async for result in session.subscribe(request):
            received.append(result["workflowEvents"])
            if len(received) == count:
                break
    return received


async def enqueue_hello(server: LiveServer, name: str = "WS", token: str | None = None) -> str:
    body = await server.graphql(ENQUEUE, token=token, name=name)
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def history(server: LiveServer, after: str = "0") -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await server.graphql(HISTORY, after=after))["data"][
        "workflowEventHistory"
    ]
    return events


@pytest.fixture
async def api_only(database_url: str) -> AsyncIterator[LiveServer]:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


async def test_hello_lifecycle_arrives_in_order(api_only: LiveServer, database_url: str) -> None:
    instance_id = await enqueue_hello(api_only)
    subscriber = asyncio.create_task(collect(api_only, EVENTS, 3, id=instance_id, after="0"))
    await api_only.wait_for_subscribers(1)
    async with running_services(make_settings(database_url)), asyncio.timeout(20):
        received = await subscriber
    assert [e["type"] for e in received] == ["enqueued", "started", "completed"]
    assert [e["status"] for e in received] == ["pending", "running", "completed"]
    assert {(e["instanceID"], e["name"]) for e in received} == {(instance_id, "hello")}
    ids = [int(e["eventID"]) for e in received]
    assert ids == sorted(set(ids))


async def test_seed_subscription_works_verbatim(api_only: LiveServer, database_url: str) -> None:
    instance_id = await enqueue_hello(api_only)
    seed = "subscription ($id: ID!) { workflowEvents(instanceID: $id) { type instanceID name } }"
    subscriber = asyncio.create_task(collect(api_only, seed, 2, id=instance_id))
    await api_only.wait_for_subscribers(1)
    async with running_services(make_settings(database_url)), asyncio.timeout(20):
        received = await subscriber
    assert received == [
        {"type": "started", "instanceID": instance_id, "name": "hello"},
        {"type": "completed", "instanceID": instance_id, "name": "hello"},
    ]


async def all_completed(server: LiveServer, count: int) -> None:
    query = '{ workflowInstances(name: "hello", status: "completed", limit: 500) { instanceID } }'

    async def done() -> bool:
        return len((await server.graphql(query))["data"]["workflowInstances"]) >= count

    await wait_until(done, seconds=30)


async def test_resume_after_fifty_events_replays_exactly_the_rest(server: LiveServer) -> None:
    for n in range(20):
        await enqueue_hello(server, f"n{n}")
    await all_completed(server, 20)
    past = await history(server)
    assert len(past) == 60
    cursor = past[49]["eventID"]
    subscriber = asyncio.create_task(collect(server, EVENTS, 13, after=cursor))
    await server.wait_for_subscribers(1)
    late = await enqueue_hello(server, "late")
    async with asyncio.timeout(20):
        received = await subscriber
    assert received[:10] == past[50:]
    assert [e["instanceID"] for e in received[10:]] == [late] * 3
    ids = [int(e["eventID"]) for e in received]
    assert ids == sorted(set(ids))


async def assert_every_hello_event_once_in_order(
    server: LiveServer, received: list[dict[str, Any]], *, instances: int
) -> None:
    """The subscriber got exactly the `hello` events of the history: none lost, none twice."""
    await all_completed(server, instances)
    expected = [e for e in await history(server) if e["name"] == "hello"]
    assert received == expected
    ids = [int(e["eventID"]) for e in received]
    assert ids == sorted(set(ids))


async def collect_hello_events(
    server: LiveServer, received: list[dict[str, Any]], total: int
) -> None:
    """Subscribe to every `hello` event from the beginning until `total` have arrived."""
    async with Client(transport=transport(server)) as session:
        request = GraphQLRequest(EVENTS, variable_values={"name": "hello", "after": "0"})
        async for result in session.subscribe(request):
            received.append(result["workflowEvents"])
            if len(received) == total:
                return


async def test_every_event_arrives_once_in_order_across_a_killed_listener(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    received: list[dict[str, Any]] = []
    total = 60
    subscriber = asyncio.create_task(collect_hello_events(server, received, total))
    for n in range(10):
        await enqueue_hello(server, f"a{n}")

    async def midway() -> bool:
        return len(received) >= 10

    await wait_until(midway)
    killed = await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
    )
    assert killed == 1
    for n in range(10):
        await enqueue_hello(server, f"b{n}")
    async with asyncio.timeout(30):
        await subscriber
    await assert_every_hello_event_once_in_order(server, received, instances=20)

    async def reconnected() -> bool:
        listener: object = (await server.health())["listener"]
        return listener == "ok"

    await wait_until(reconnected)


async def test_ten_subscribers_joining_at_once_all_receive(server: LiveServer) -> None:
    subscribers = [asyncio.create_task(collect(server, EVENTS, 3, name="hello")) for _ in range(10)]
    await server.wait_for_subscribers(10)
    instance_id = await enqueue_hello(server)
    async with asyncio.timeout(20):
        results = await asyncio.gather(*subscribers)
    for received in results:
        assert [e["type"] for e in received] == ["enqueued", "started", "completed"]
        assert {e["instanceID"] for e in received} == {instance_id}
    assert len({json.dumps(r) for r in results}) == 1


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(database_url, api_tokens=(TOKEN,))
    async with live_server(settings) as server:
        yield server


async def close_code(
    server: LiveServer, init: dict[str, Any] | None, protocol: str = PROTOCOL
) -> int:
    """Open a raw socket, send connection_init (unless None), return the server's close code."""
    async with connect(server.ws_url, subprotocols=[protocol]) as ws:  # type: ignore[list-item]
        if init is not None:
            message = json.dumps({"type": "connection_init", "payload": init})
            return await closed_with(ws, message)
        return await closed_with(ws)


async def closed_with(ws: ClientConnection, message: str | None = None) -> int:
    """Send `message` (if any), then read until the server closes; return its close code."""
    try:
        async with asyncio.timeout(15):
            if message is not None:
                await ws.send(message)
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        # No close frame from the server reads as 1006, which no test expects.
        return closed.rcvd.code if closed.rcvd is not None else 1006


async def test_websocket_without_a_valid_token_closes_with_4403(secured: LiveServer) -> None:
    assert await close_code(secured, {}) == 4403
    assert await close_code(secured, {"authorization": "Bearer guess"}) == 4403
    assert await close_code(secured, {"authorization": TOKEN}) == 4403


async def test_websocket_with_the_token_subscribes(secured: LiveServer) -> None:
    subscriber = asyncio.create_task(collect(secured, EVENTS, 3, token=TOKEN, name="hello"))
    await secured.wait_for_subscribers(1)
    instance_id = await enqueue_hello(secured, token=TOKEN)
    async with asyncio.timeout(20):
        received = await subscriber
    assert [e["instanceID"] for e in received] == [instance_id] * 3


async def test_legacy_protocol_is_refused_and_init_must_come_quickly(server: LiveServer) -> None:
    assert await close_code(server, {}, protocol="graphql-ws") == 4406
    # No connection_init at all: the server closes after its 5 s init timeout.
    assert await close_code(server, None) == 4408


async def test_websocket_limits_frames_and_subscriptions(server: LiveServer) -> None:
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for n in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1):
            message = {"id": str(n), "type": "subscribe", "payload": {"query": EVENTS}}
            await ws.send(json.dumps(message))
        async with asyncio.timeout(15):
            reply = json.loads(await ws.recv())
        assert reply["type"] == "error"
        assert reply["id"] == str(MAX_SUBSCRIPTIONS_PER_CONNECTION)
        assert reply["payload"][0]["message"] == "Subscription limit reached"
        assert await closed_with(ws, "x" * (WS_MAX_MESSAGE_BYTES + 1)) == 1009


async def test_non_json_frame_closes_with_4400(server: LiveServer) -> None:
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        init = '{"type": "connection_init", "payload": {"n": NaN}}'
        assert await closed_with(ws, init) == 4400


@pytest.mark.parametrize("number", ["1e400", "1e-400"])
async def test_a_frame_with_a_number_a_float_cannot_hold_closes_with_4400(
    server: LiveServer, number: str
) -> None:
    """As the request body's decoder refuses it (strict_json.py): an overflow, or a non-zero
    number that would be taken as 0.0."""
    ws = await acked(server)
    try:
        query = 'mutation ($p: JSON) { enqueueWorkflow(name: "noop", params: $p) { created } }'
        payload = '{"query": ' + json.dumps(query) + ', "variables": {"p": {"b": ' + number + "}}}"
        frame = '{"id": "e", "type": "subscribe", "payload": ' + payload + "}"
        assert await closed_with(ws, frame) == 4400
    finally:
        await ws.close()


async def acked(server: LiveServer) -> ClientConnection:
    """A raw socket past connection_ack (the caller closes it)."""
    ws = await connect(server.ws_url, subprotocols=[PROTOCOL])  # type: ignore[list-item]
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    async with asyncio.timeout(15):
        assert json.loads(await ws.recv())["type"] == "connection_ack"
    return ws


@pytest.mark.parametrize("frame", ["[1, 2]", "null", "42", '"subscribe"', "true"])
async def test_a_json_frame_that_is_not_an_object_closes_with_4400(
    server: LiveServer, frame: str
) -> None:
    ws = await acked(server)
    try:
        assert await closed_with(ws, frame) == 4400
    finally:
        await ws.close()


SUBSCRIBE_PROBLEMS = [
    ({"id": "1", "type": "subscribe", "payload": "x"}, "'payload' to be an object, got string"),
    ({"id": "1", "type": "subscribe"}, "'payload' to be an object, got nothing"),
    ({"id": "1", "type": "subscribe", "payload": {"query": 5}}, "'query' to be a string"),
    ({"id": "1", "type": "subscribe", "payload": {}}, "'query' to be a string, got nothing"),
    ({"id": 1, "type": "subscribe", "payload": {"query": EVENTS}}, "'id' to be a string"),
    ({"type": "subscribe", "payload": {"query": EVENTS}}, "'id' to be a string, got nothing"),
    ({"id": "", "type": "subscribe", "payload": {"query": EVENTS}}, "a non-empty 'id'"),
    (
        {"id": "1", "type": "subscribe", "payload": {"query": EVENTS, "variables": []}},
        "'variables' to be an object, got array",
    ),
    (
        {"id": "1", "type": "subscribe", "payload": {"query": EVENTS, "operationName": 5}},
        "'operationName' to be a string, got number",
    ),
    (
        {"id": "1", "type": "subscribe", "payload": {"query": EVENTS, "extensions": "x"}},
        "'extensions' to be an object, got string",
    ),
]


async def closed_with_reason(ws: ClientConnection, message: str) -> tuple[int, str]:
    """Send `message`, then read until the server closes; its close code and reason."""
    try:
        async with asyncio.timeout(15):
            await ws.send(message)
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return (closed.rcvd.code, closed.rcvd.reason) if closed.rcvd is not None else (1006, "")


@pytest.mark.parametrize(("frame", "problem"), SUBSCRIBE_PROBLEMS)
async def test_a_malformed_subscribe_closes_with_4400_and_says_why(
    server: LiveServer, frame: dict[str, Any], problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    ws = await acked(server)
    try:
        code, reason = await closed_with_reason(ws, json.dumps(frame))
    finally:
        await ws.close()
    assert code == 4400
    assert problem in reason
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_malformed_subscribes_never_take_an_operation_slot(server: LiveServer) -> None:
    # Each one closes its socket; a fresh socket then has all its slots.
    for _ in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1):
        ws = await acked(server)
        try:
            frame = {"id": "1", "type": "subscribe", "payload": {"query": 5}}
            assert (await closed_with_reason(ws, json.dumps(frame)))[0] == 4400
        finally:
            await ws.close()
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for n in range(MAX_SUBSCRIPTIONS_PER_CONNECTION):
            payload = {"query": EVENTS, "variables": None, "operationName": None}
            await ws.send(json.dumps({"id": str(n), "type": "subscribe", "payload": payload}))
        await server.wait_for_subscribers(MAX_SUBSCRIPTIONS_PER_CONNECTION)


class ReadsFailAfterConnect:
    """A host's Permission whose read check fails (its user store went away) once the
    socket is open."""

    def __init__(self) -> None:
        self.checks = 0

    async def may_read(self, caller: Caller) -> Decision:
        self.checks += 1
        if self.checks > 1:
            raise RuntimeError("the user store is down")
        return Decision.ALLOW

    async def may_write(self, caller: Caller) -> Decision:
        return Decision.ALLOW


async def test_a_subscription_that_fails_to_start_answers_and_frees_its_slot(
    database_url: str,
) -> None:
    settings = make_settings(database_url, engine_enabled=False)
    app = create_app(settings, permission=ReadsFailAfterConnect())
    async with live_server(settings, app=app) as server:
        ws = await acked(server)
        try:
            for n in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1):
                frame = {"id": str(n), "type": "subscribe", "payload": {"query": EVENTS}}
                await ws.send(json.dumps(frame))
                async with asyncio.timeout(15):
                    reply = json.loads(await ws.recv())
                assert reply["type"] == "error", reply
                assert reply["id"] == str(n)
                assert reply["payload"][0]["message"] == "Unexpected error."
                assert reply["payload"][0]["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
        finally:
            await ws.close()


async def test_null_optional_fields_of_a_subscribe_are_accepted(server: LiveServer) -> None:
    ws = await acked(server)
    try:
        payload = {"query": "{ __typename }", "variables": None, "operationName": None}
        frame = {"id": "q", "type": "subscribe", "payload": {**payload, "extensions": None}}
        await ws.send(json.dumps(frame))
        async with asyncio.timeout(15):
            data = {"data": {"__typename": "Query"}}
            assert json.loads(await ws.recv()) == {"id": "q", "type": "next", "payload": data}
            assert json.loads(await ws.recv()) == {"id": "q", "type": "complete"}
    finally:
        await ws.close()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"query": "subscription A { workflowEvents { eventID } }", "operationName": "B"},
            'Unknown operation named "B".',
        ),
        (
            {"query": "subscription A { workflowEvents { eventID } } query B { __typename }"},
            "Must provide operation name if query contains multiple operations.",
        ),
        ({"query": "subscription { workflowEvents { ...G } }"}, "Unknown fragment 'G'."),
    ],
)
async def test_a_request_error_is_an_error_message_and_the_socket_stays(
    server: LiveServer, payload: dict[str, str], message: str
) -> None:
    ws = await acked(server)
    try:
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        async with asyncio.timeout(15):
            reply = json.loads(await ws.recv())
        assert reply["type"] == "error", reply
        assert reply["id"] == "1"
        assert [e["message"] for e in reply["payload"]] == [message]
        await ws.send(json.dumps({"type": "ping"}))  # the socket, and its other operations, go on
        async with asyncio.timeout(15):
            assert json.loads(await ws.recv())["type"] == "pong"
    finally:
        await ws.close()


async def test_a_malformed_instance_id_refuses_the_subscription_before_it_starts(
    server: LiveServer,
) -> None:
    query = 'subscription { workflowEvents(instanceID: "nope") { eventID } }'
    ws = await acked(server)
    try:
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        async with asyncio.timeout(15):
            reply = json.loads(await ws.recv())
        assert reply["type"] == "error", reply
        (error,) = reply["payload"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert 'argument "instanceID" of workflowEvents' in error["message"]
        assert "instanceID must be a UUID" in error["message"]
    finally:
        await ws.close()


async def restart_postgres(admin: asyncpg.Connection) -> None:
    """Restart the (embedded) server with pg_ctl, as the user that owns its data folder."""
    pgdata = Path(await admin.fetchval("SHOW data_directory"))
    owner = (await asyncio.to_thread(os.stat, pgdata)).st_uid
    pg_ctl = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    process = await asyncio.create_subprocess_exec(
        str(pg_ctl),
        "-D",
        str(pgdata),
        "-l",
        str(pgdata / "restart.log"),
        "-w",
        "-m",
        "fast",
        "restart",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        user=owner if os.getuid() != owner else None,
    )
    async with asyncio.timeout(60):
        assert await process.wait() == 0


async def enqueue_until_accepted(server: LiveServer, name: str) -> None:
    """Enqueue, retrying while the API's pool reconnects after the restart."""
    async with asyncio.timeout(30):
        while True:
            body = await server.graphql(ENQUEUE, name=name)
            if body.get("data"):
                return
            await asyncio.sleep(0.05)


@pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_TEST_DATABASE_URL")),
    reason="restarts the embedded server; an external one is not ours to restart",
)
async def test_every_event_arrives_once_in_order_across_a_postgres_restart(
    server: LiveServer, admin: asyncpg.Connection, database_url: str
) -> None:
    started = await admin.fetchval("SELECT pg_postmaster_start_time()")
    received: list[dict[str, Any]] = []
    total = 60
    subscriber = asyncio.create_task(collect_hello_events(server, received, total))
    for n in range(10):
        await enqueue_hello(server, f"a{n}")
    await all_completed(server, 10)

    async def all_first_events() -> bool:
        return len(received) >= 30

    await wait_until(all_first_events)
    await restart_postgres(admin)
    fresh = await asyncpg.connect(database_url)
    try:
        assert await fresh.fetchval("SELECT pg_postmaster_start_time()") > started
    finally:
        await fresh.close()
    for n in range(10):
        await enqueue_until_accepted(server, f"b{n}")
    async with asyncio.timeout(60):
        await subscriber
    await assert_every_hello_event_once_in_order(server, received, instances=20)


async def test_open_reads_admit_a_websocket_without_token_but_not_its_mutations(
    database_url: str,
) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,), open_reads=True)
    async with live_server(settings) as server:
        assert await close_code(server, {"authorization": "Bearer guess"}) == 4403
        async with Client(transport=transport(server)) as session:
            read = await session.execute(GraphQLRequest("{ workflows { name } }"))
            assert {"name": "hello"} in read["workflows"]
            with pytest.raises(TransportQueryError) as refused:
                await session.execute(GraphQLRequest('mutation { deleteSchedule(name: "x") }'))
        assert refused.value.errors is not None
        assert refused.value.errors[0]["extensions"]["code"] == "UNAUTHENTICATED"
