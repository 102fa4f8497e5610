"""Laneway embedded in a host application (app/host.py), served by a real uvicorn server.

The host's own schema at /graphql (its `hello`, its context, its permission hook, Laneway's
fields), over HTTP and a real websocket; the whole Laneway app mounted at /laneway (its
health, its /graphql with its own bearer tokens, its limits, its websocket). Also the one
permission rule, the names a host schema gets, and the context a dict can carry.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import strawberry
import websockets
from gql import Client, GraphQLRequest
from gql.transport.websockets import WebsocketsTransport
from graphql import GraphQLNamedType, GraphQLObjectType, build_schema, print_type
from starlette.applications import Starlette
from starlette.routing import Mount
from websockets.typing import Subprotocol

from app import host
from laneway.api import (
    LanewayMutation,
    LanewayQuery,
    LanewaySubscription,
    create_app,
    laneway_context,
    lifespan,
    schema_extensions,
    server_config,
)
from laneway.api.http.body_limits import MAX_BODY_BYTES
from laneway.api.http.server import LanewayHttpProtocol
from laneway.config import Settings
from laneway.services import Services, open_services
from tests.api.conftest import (
    TOKEN,
    LiveServer,
    assert_clean,
    codes,
    executor,
    live_server,
    make_settings,
    running_services,
    wait_until,
)

CONTRACT = "schema.graphql"
PROTOCOL = WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL
ENQUEUE = """mutation ($name: String!) {
  enqueueWorkflow(name: "hello", params: {name: $name}) { instanceID created }
}"""
EVENTS = """subscription ($id: ID) {
  workflowEvents(instanceID: $id, name: "hello") { eventID type instanceID name status }
}"""
BATCH = """mutation ($requests: [EnqueueInput!]!) {
  enqueueWorkflows(requests: $requests) { instanceID }
}"""
STATUS = "query ($id: ID!) { workflowInstance(instanceID: $id) { instanceID status } }"
BEARER = {"authorization": f"Bearer {TOKEN}"}


def host_headers(user: str) -> dict[str, str]:
    return {host.USER_HEADER: user}


async def post(
    client: httpx.AsyncClient, path: str, query: str, headers: dict[str, str], **variables: Any
) -> dict[str, Any]:
    response = await client.post(
        path, json={"query": query, "variables": variables}, headers=headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert_clean(body.get("errors"))
    return body


def error_codes(body: dict[str, Any]) -> list[str | None]:
    return [(e.get("extensions") or {}).get("code") for e in body.get("errors") or []]


@pytest.fixture
def host_settings(database_url: str) -> Settings:
    """The mounted app's own bearer tokens are on; the host's schema ignores them."""
    return make_settings(database_url, api_tokens=(TOKEN,))


@pytest.fixture
async def hosted(host_settings: Settings) -> AsyncIterator[LiveServer]:
    """app.host served by uvicorn; the LiveServer's own helpers talk to the mounted app."""
    app = host.build(host_settings)
    async with live_server(host_settings, app=app, prefix=host.LANEWAY_PREFIX) as server:
        yield server


async def wait_for_subscribers(server: LiveServer, count: int) -> None:
    async def registered() -> bool:
        health = await server.client.get(f"{server.prefix}/healthz")
        return bool(health.json()["subscribers"] >= count)

    await wait_until(registered)


# -- the host's own schema ----------------------------------------------------------------------


def contract_types() -> dict[str, GraphQLNamedType]:
    with open(CONTRACT, encoding="utf-8") as sdl:
        return build_schema(sdl.read()).type_map


def test_a_host_schema_with_default_config_has_the_contracts_names() -> None:
    """Every object type of schema.graphql, field by field and argument by argument, as the
    host's schema (Strawberry's default config, its own `hello`) prints it."""
    contract = contract_types()
    hosted = host.schema._schema.type_map
    compared = 0
    for name, kind in contract.items():
        if name.startswith("__") or not isinstance(kind, GraphQLObjectType):
            continue
        expected = print_type(kind)
        if name == "Query":  # the host's own type: its fields are Laneway's, and its `hello`
            kind.description = None
            expected = print_type(kind).replace("\n}", "\n  hello: String!\n}")
        assert print_type(hosted[name]) == expected
        compared += 1
    assert compared >= 12
    mutation = hosted["Mutation"]
    assert isinstance(mutation, GraphQLObjectType)
    assert list(mutation.fields["cancelWorkflow"].args) == ["instanceID"]


async def test_host_serves_its_own_field_and_laneways_from_one_endpoint(
    hosted: LiveServer,
) -> None:
    body = await post(
        hosted.client, "/graphql", "{ hello workflows { name } }", host_headers("ana")
    )
    assert body.get("errors") is None
    assert body["data"]["hello"] == "hello ana"
    assert {"name": "hello"} in body["data"]["workflows"]


async def test_host_enqueues_through_its_schema_and_its_permission_refuses_others(
    hosted: LiveServer,
) -> None:
    refused = await post(hosted.client, "/graphql", ENQUEUE, host_headers("guest"), name="G")
    assert refused["data"] is None
    assert error_codes(refused) == ["FORBIDDEN"]
    # The mounted app's bearer token means nothing to the host's rule.
    with_token = await post(hosted.client, "/graphql", ENQUEUE, BEARER, name="G")
    assert error_codes(with_token) == ["FORBIDDEN"]

    done = await post(hosted.client, "/graphql", ENQUEUE, host_headers(host.ADMIN), name="A")
    assert done.get("errors") is None
    instance_id = done["data"]["enqueueWorkflow"]["instanceID"]
    assert done["data"]["enqueueWorkflow"]["created"] is True

    async def completed() -> bool:
        status = await post(hosted.client, "/graphql", STATUS, {}, id=instance_id)
        return bool(status["data"]["workflowInstance"]["status"] == "completed")

    await wait_until(completed)
    # The same services behind both ways: the mounted app sees the instance too.
    mounted = await hosted.graphql(STATUS, token=TOKEN, id=instance_id)
    assert mounted["data"]["workflowInstance"] == {"instanceID": instance_id, "status": "completed"}
    instances = await hosted.graphql('{ workflowInstances(name: "hello") { instanceID } }', TOKEN)
    assert instances["data"]["workflowInstances"] == [{"instanceID": instance_id}]


async def test_laneway_errors_keep_their_codes_in_the_host_schema(
    hosted: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    admin = host_headers(host.ADMIN)
    bad = await post(hosted.client, "/graphql", STATUS, admin, id="not-a-uuid")
    assert error_codes(bad) == ["BAD_USER_INPUT"]
    missing = await post(
        hosted.client,
        "/graphql",
        'mutation { setScheduleEnabled(name: "nowhere", enabled: true) { name } }',
        admin,
    )
    assert error_codes(missing) == ["NOT_FOUND"]
    created = await post(hosted.client, "/graphql", ENQUEUE, admin, name="C")
    instance_id = created["data"]["enqueueWorkflow"]["instanceID"]
    conflict = await post(
        hosted.client,
        "/graphql",
        "mutation ($id: ID!) { resumeWorkflow(instanceID: $id) { status } }",
        admin,
        id=instance_id,
    )
    assert error_codes(conflict) == ["CONFLICT"]
    limited = await post(
        hosted.client, "/graphql", "{ workflowInstances(limit: 0) { instanceID } }", admin
    )
    assert error_codes(limited) == ["BAD_USER_INPUT"]
    nested = "{ workflowInstances { events(limit: 0) { type } } }"
    deep = await post(hosted.client, "/graphql", nested, admin)
    assert error_codes(deep) == ["BAD_USER_INPUT"]
    # A client's mistakes are answered, not logged as the server's errors (LanewaySchema).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_host_websocket_route_delivers_workflow_events(hosted: LiveServer) -> None:
    received: list[dict[str, Any]] = []
    url = f"ws://127.0.0.1:{hosted.port}/graphql"

    async def subscribe() -> None:
        transport = WebsocketsTransport(
            url=url, subprotocols=[PROTOCOL], headers=host_headers("watcher")
        )
        async with Client(transport=transport) as session:
            async for result in session.subscribe(GraphQLRequest(EVENTS)):
                received.append(result["workflowEvents"])
                if received[-1]["type"] == "completed":
                    return

    subscriber = asyncio.create_task(subscribe())
    await wait_for_subscribers(hosted, 1)
    done = await post(hosted.client, "/graphql", ENQUEUE, host_headers(host.ADMIN), name="W")
    instance_id = done["data"]["enqueueWorkflow"]["instanceID"]
    async with asyncio.timeout(20):
        await subscriber
    assert [e["type"] for e in received] == ["enqueued", "started", "completed"]
    assert {(e["instanceID"], e["name"]) for e in received} == {(instance_id, "hello")}


async def test_a_subscriber_leaving_mid_replay_is_not_an_error_on_the_host(
    hosted: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that closes while its replay is still being sent has only gone away: the
    host's view, with Laneway's websocket handler, logs nothing (Strawberry's own logs each
    such close as "Exception in worker task" with a traceback)."""
    requests = [{"name": "hello", "params": {"name": str(n)}} for n in range(40)]
    await hosted.graphql(BATCH, token=TOKEN, requests=requests)
    url = f"ws://127.0.0.1:{hosted.port}/graphql"
    for _ in range(3):
        async with websockets.connect(url, subprotocols=[Subprotocol(PROTOCOL)]) as socket:
            await socket.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await socket.recv())["type"] == "connection_ack"
            replay = {"query": 'subscription { workflowEvents(afterEventID: "0") { eventID } }'}
            await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": replay}))
            assert json.loads(await socket.recv())["type"] == "next"

        async def left() -> bool:
            health = await hosted.client.get(f"{hosted.prefix}/healthz")
            return bool(health.json()["subscribers"] == 0)

        await wait_until(left)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_host_with_only_its_schema_runs_laneway_with_running(database_url: str) -> None:
    settings = make_settings(database_url)
    app = host.build(settings, mount=False)
    async with live_server(settings, app=app) as server:
        body = await post(server.client, "/graphql", "{ hello queues { name } }", {})
        assert body.get("errors") is None
        assert body["data"]["hello"] == "hello guest"
        assert {"name": "hello"} in body["data"]["queues"]
        assert (await server.client.get("/laneway/healthz")).status_code == 404


async def test_a_dict_context_carries_laneway_under_its_key(services: Services) -> None:
    @strawberry.type
    class Query(LanewayQuery):
        @strawberry.field
        def hello(self, info: strawberry.Info[dict[str, Any], None]) -> str:
            return f"hello {info.context['user']}"

    schema = strawberry.Schema(
        query=Query,
        mutation=LanewayMutation,
        subscription=LanewaySubscription,
        extensions=schema_extensions(),
    )
    context = {"user": "dict", "laneway": await laneway_context(services, None)}
    result = await schema.execute("{ hello workflows { name } }", context_value=context)
    assert result.errors is None
    assert result.data is not None
    assert result.data["hello"] == "hello dict"
    assert {"name": "hello"} in result.data["workflows"]
    without = await schema.execute("{ workflows { name } }", context_value={"user": "x"})
    assert without.errors is not None
    assert [e.message for e in without.errors] == ["Unexpected error."]


# -- the whole app mounted at /laneway ----------------------------------------------------------


async def test_mounted_app_serves_health_graphql_and_its_dashboard(hosted: LiveServer) -> None:
    health = await hosted.client.get("/laneway/healthz")
    assert health.status_code == 200, health.text
    assert health.json()["database"] == "ok"
    assert health.json()["engine"] == "ok"
    anonymous = await hosted.client.post("/laneway/graphql", json={"query": "{ queues { name } }"})
    assert error_codes(anonymous.json()) == ["UNAUTHENTICATED"]
    body = await hosted.graphql("{ queues { name } }", token=TOKEN)
    assert {"name": "hello"} in body["data"]["queues"]
    page = await hosted.client.get("/laneway/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in page.headers
    bare = await hosted.client.get("/laneway", follow_redirects=False)
    assert bare.status_code in (307, 308)
    assert bare.headers["location"].endswith("/laneway/")


async def test_mounted_app_keeps_its_request_limits(hosted: LiveServer) -> None:
    oversized = {"query": "{ queues { name } }", "padding": "x" * (MAX_BODY_BYTES + 1)}
    response = await hosted.client.post("/laneway/graphql", json=oversized, headers=BEARER)
    assert response.status_code == 413
    assert response.headers.get("x-request-id")


async def test_the_hosts_own_graphql_keeps_laneways_request_limits(hosted: LiveServer) -> None:
    # A host serving its own schema had none of the limits of Laneway's app around it: a body
    # of any size was read, and no request carried an id.
    oversized = {"query": "{ hello }", "padding": "x" * (MAX_BODY_BYTES + 1)}
    response = await hosted.client.post("/graphql", json=oversized)
    assert response.status_code == 413
    assert error_codes(response.json()) == ["BAD_REQUEST"]
    duplicated = b'{"query": "{ hello }", "query": "{ hello }"}'  # strict JSON
    response = await hosted.client.post(
        "/graphql", content=duplicated, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    answered = await hosted.client.post("/graphql", json={"query": "{ hello }"})
    assert answered.status_code == 200
    assert len(answered.headers.get_list("x-request-id")) == 1


async def test_a_mounted_app_inside_the_hosts_limits_answers_with_one_request_id(
    hosted: LiveServer,
) -> None:
    for path in ("/laneway/graphql", "/laneway/healthz", "/graphql"):
        response = await hosted.client.post(
            path, json={"query": "{ queues { name } }"}, headers={"x-request-id": "abc-1"}
        )
        assert response.headers.get_list("x-request-id") == ["abc-1"], path


async def test_the_hosts_own_graphql_keeps_laneways_rate_limit(database_url: str) -> None:
    settings = make_settings(
        database_url, rate_limit_per_second=0.01, rate_burst=2, limit_local_clients=True
    )
    async with live_server(
        settings, app=host.build(settings), prefix=host.LANEWAY_PREFIX
    ) as hosted:
        answers = [
            await hosted.client.post("/graphql", json={"query": "{ hello }"}) for _ in range(3)
        ]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert error_codes(answers[-1].json()) == ["RATE_LIMITED"]


def test_server_config_gives_a_host_app_the_connection_limits_of_its_settings(
    database_url: str,
) -> None:
    settings = make_settings(database_url, header_timeout_seconds=3.0, max_connections=7)
    config = server_config(host.build(settings), host="127.0.0.1", port=0, settings=settings)
    assert isinstance(config.http, type)
    assert issubclass(config.http, LanewayHttpProtocol)
    assert (config.http.limits.header_timeout_seconds, config.http.limits.max_connections) == (
        3.0,
        7,
    )


async def test_mounted_app_websocket_checks_its_tokens_and_delivers(hosted: LiveServer) -> None:
    received: list[dict[str, Any]] = []

    async def subscribe() -> None:
        transport = WebsocketsTransport(
            url=hosted.ws_url, subprotocols=[PROTOCOL], init_payload=dict(BEARER)
        )
        async with Client(transport=transport) as session:
            async for result in session.subscribe(GraphQLRequest(EVENTS)):
                received.append(result["workflowEvents"])
                if received[-1]["type"] == "completed":
                    return

    subscriber = asyncio.create_task(subscribe())
    await wait_for_subscribers(hosted, 1)
    done = await hosted.graphql(ENQUEUE, token=TOKEN, name="M")
    instance_id = done["data"]["enqueueWorkflow"]["instanceID"]
    async with asyncio.timeout(20):
        await subscriber
    assert [e["type"] for e in received] == ["enqueued", "started", "completed"]
    assert {e["instanceID"] for e in received} == {instance_id}


async def test_a_mounted_app_that_is_not_running_says_so(host_settings: Settings) -> None:
    laneway_app = create_app(host_settings)
    app = Starlette(routes=[Mount("/laneway", laneway_app)])  # no lifespan: never running
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        response = await client.get("/laneway/healthz")
    assert response.status_code == 500
    assert laneway_app.services is None


# -- the one permission rule --------------------------------------------------------------------


async def test_bearer_tokens_answer_reads_and_writes_the_same_everywhere(
    database_url: str,
) -> None:
    settings = make_settings(
        database_url, api_tokens=(TOKEN,), open_reads=True, engine_enabled=False
    )
    async with running_services(settings) as services:
        read = "{ workflows { name } }"
        write = 'mutation { deleteSchedule(name: "x") }'
        anonymous, wrong = executor(services), executor(services, "Bearer guess")
        right = executor(services, f"Bearer {TOKEN}")
        assert (await anonymous(read)).errors is None
        assert codes(await anonymous(write)) == ["UNAUTHENTICATED"]
        # A wrong token is refused for reads too, as the websocket connect check refuses it.
        assert codes(await wrong(read)) == ["FORBIDDEN"]
        assert codes(await wrong(write)) == ["FORBIDDEN"]
        assert (await right(read)).errors is None
        assert (await right(write)).errors is None


class _HostError(Exception):
    """An error of the host's own code inside a running block."""


async def test_an_error_inside_a_running_block_comes_out_as_itself(database_url: str) -> None:
    # Not as an ExceptionGroup of the TaskGroup the engine runs in: `except TimeoutError`
    # around `engine.wait(...)`, or a test's assert, must see the error the block raised.
    settings = make_settings(database_url)
    app = create_app(settings)
    with pytest.raises(_HostError, match="the host's own"):
        async with app.running():
            raise _HostError("the host's own")
    async with open_services(settings) as services:
        enqueued = await services.engine.enqueue("nap", {"seconds": 3600})
        with pytest.raises(TimeoutError):
            async with services.engine.running():
                await services.engine.wait(enqueued.instance_id, timeout=0.01)
    with pytest.raises(TimeoutError):
        async with lifespan.running(settings) as services:
            await services.engine.wait(enqueued.instance_id, timeout=0.01)
