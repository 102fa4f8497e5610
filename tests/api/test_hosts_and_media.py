"""The host allow-list, GraphQL-over-HTTP media types and methods, and the websocket
`Authorization` key, over a real uvicorn server (http/hosts.py, http/media_type.py, app.py).

Requests name a foreign `Host` by header (httpx) or by URI while connecting to 127.0.0.1
(websockets), as a page on a rebound name would. The pure rules (Accept negotiation, what
counts as a request error, host patterns) have pure tests at the end.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from strawberry.types import ExecutionResult
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

from laneway.api import http_protections
from laneway.api.auth import credential_of
from laneway.api.http.hosts import FOREIGN_ORIGIN, UNKNOWN_HOST, origin_host
from laneway.api.http.media_type import (
    GRAPHQL_RESPONSE_CONTENT_TYPE,
    is_request_error,
    wants_graphql_response,
)
from laneway.api.request_trace import REQUEST_ID_HEADER
from laneway.config import Settings, split_host
from laneway.errors import InvalidInputError
from laneway.host_names import AllowedHosts
from tests.api.conftest import FORBIDDEN_TEXT, TOKEN, LiveServer, live_server, make_settings

PROTOCOL = Subprotocol("graphql-transport-ws")
FOREIGN = "attacker.example"
ENQUEUE = 'mutation { enqueueWorkflow(name: "hello", params: {name: "x"}) { instanceID } }'
COUNT = "{ workflowInstances { instanceID } }"
WORKFLOWS = "{ workflows { name } }"
GRAPHQL_RESPONSE = {"accept": "application/graphql-response+json"}
APOLLO = {"accept": "application/graphql-response+json,application/json;q=0.9"}
OTHER_TOKEN = "another-token"


@pytest.fixture
async def open_server(database_url: str) -> AsyncIterator[LiveServer]:
    """No tokens: the loopback default."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


@pytest.fixture
async def listed(database_url: str) -> AsyncIterator[LiveServer]:
    """No tokens, and LANEWAY_ALLOWED_HOSTS (exact, with a port, and a wildcard)."""
    hosts = Settings.from_env(
        {"LANEWAY_ALLOWED_HOSTS": "Laneway.Example.com, proxy.example:8443, *.corp.example"}
    ).allowed_hosts
    settings = make_settings(database_url, engine_enabled=False, allowed_hosts=hosts)
    async with live_server(settings) as server:
        yield server


@pytest.fixture
async def guarded(database_url: str) -> AsyncIterator[LiveServer]:
    """Tokens and no list: any host."""
    settings = make_settings(
        database_url,
        engine_enabled=False,
        api_tokens=(TOKEN, OTHER_TOKEN),
        ws_connections_per_token=1,
    )
    async with live_server(settings) as server:
        yield server


def assert_clean(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    for word in (*FORBIDDEN_TEXT, "Unexpected error"):
        assert word not in response.text


async def post_as(server: LiveServer, host: str, query: str) -> httpx.Response:
    return await server.client.post("/graphql", json={"query": query}, headers={"host": host})


async def instance_count(server: LiveServer, token: str | None = None) -> int:
    return len((await server.graphql(COUNT, token=token))["data"]["workflowInstances"])


async def handshake(
    server: LiveServer, host: str, origin: str | None = None, token: str | None = None
) -> str:
    """Open a websocket to 127.0.0.1 whose Host is `host` (and Origin `origin`): "ack" when
    connection_init with `token` is acknowledged, else its close code.

    Raises:
        InvalidStatus: the handshake was refused.
    """
    async with connect(
        f"ws://{host}/graphql",
        host="127.0.0.1",
        port=server.port,
        origin=Origin(origin) if origin else None,
        subprotocols=[PROTOCOL],
        proxy=None,
    ) as ws:
        return await init_outcome(ws, {"authorization": f"Bearer {token}"} if token else {})


async def handshake_status(
    server: LiveServer, host: str, origin: str | None = None, token: str | None = None
) -> int | str:
    """The HTTP status a refused handshake got, else what `handshake` says."""
    try:
        return await handshake(server, host, origin, token)
    except InvalidStatus as refused:
        return refused.response.status_code


async def refusal(server: LiveServer, host: str, origin: str) -> tuple[int, str]:
    """The status and error message a refused websocket handshake was answered with."""
    with pytest.raises(InvalidStatus) as refused:
        await handshake(server, host, origin)
    response = refused.value.response
    return response.status_code, json.loads(response.body)["errors"][0]["message"]


async def init_outcome(ws: ClientConnection, payload: dict[str, Any]) -> str:
    """ "ack", or the close code connection_init was answered with."""
    await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
    try:
        async with asyncio.timeout(10):
            return str(json.loads(await ws.recv())["type"]).replace("connection_", "")
    except ConnectionClosed as closed:
        return str(closed.rcvd.code if closed.rcvd is not None else 1006)


# -- the host allow-list over HTTP --------------------------------------------------------------


async def test_a_foreign_host_is_refused_with_400_before_anything_runs(
    open_server: LiveServer,
) -> None:
    foreign = f"{FOREIGN}:{open_server.port}"
    mutation = await post_as(open_server, foreign, ENQUEUE)
    assert mutation.status_code == 400
    assert mutation.json() == {
        "errors": [{"message": UNKNOWN_HOST, "extensions": {"code": "BAD_REQUEST"}}]
    }
    assert mutation.headers[REQUEST_ID_HEADER]
    for path in ("/", "/healthz", "/graphql?query={__typename}"):
        response = await open_server.client.get(path, headers={"host": foreign})
        assert response.status_code == 400, path
        assert "Unknown host" in response.text
    assert await instance_count(open_server) == 0


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{other}",  # a loopback name at another port than the served one
        "localhost",  # no port: the scheme's 80
        "127.0.0.2:{port}",
        "laneway.example.com:{port}",
        "localhost.attacker.example:{port}",
        "attacker.example:{port}@127.0.0.1",
        "",
    ],
)
async def test_hosts_that_are_not_the_loopback_names_at_the_served_port_are_refused(
    open_server: LiveServer, host: str
) -> None:
    value = host.format(port=open_server.port, other=open_server.port + 1)
    response = await post_as(open_server, value, ENQUEUE)
    assert response.status_code == 400, value
    assert_clean(response)
    assert await instance_count(open_server) == 0


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LocalHost", "[::1]", "localhost."])
async def test_the_loopback_names_at_the_served_port_pass(
    open_server: LiveServer, name: str
) -> None:
    host = f"{name}:{open_server.port}"
    assert (await open_server.client.get("/healthz", headers={"host": host})).status_code == 200
    response = await post_as(open_server, host, ENQUEUE)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["enqueueWorkflow"]["instanceID"]


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("laneway.example.com", 200),  # an entry without a port: any port
        ("laneway.example.com:9999", 200),
        ("proxy.example:8443", 200),
        ("proxy.example", 400),  # that entry names its port
        ("a.corp.example", 200),
        ("a.b.corp.example:1234", 200),
        ("corp.example", 400),  # *.corp.example is the subdomains only
        ("evilcorp.example", 400),
        ("example.com", 400),
        (f"{FOREIGN}", 400),
    ],
)
async def test_allowed_hosts_extend_the_list_with_names_ports_and_wildcards(
    listed: LiveServer, host: str, status: int
) -> None:
    response = await listed.client.get("/healthz", headers={"host": host})
    assert response.status_code == status, response.text
    loopback = await listed.client.get("/healthz")
    assert loopback.status_code == 200


async def test_with_tokens_any_host_passes_and_the_token_still_decides(
    guarded: LiveServer,
) -> None:
    host = f"{FOREIGN}:{guarded.port}"
    assert (await guarded.client.get("/healthz", headers={"host": host})).status_code == 200
    refused = await post_as(guarded, host, ENQUEUE)
    assert refused.status_code == 200
    assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert await instance_count(guarded, TOKEN) == 0


@pytest.mark.parametrize(
    ("path", "location"),
    [("/graphql/", "/graphql"), ("/healthz/?verbose=1", "/healthz?verbose=1")],
)
async def test_a_trailing_slash_is_redirected_by_path_not_to_the_claimed_host(
    guarded: LiveServer, path: str, location: str
) -> None:
    """With tokens and no list any Host is served; Starlette's redirect built an absolute
    URL from it (`http://evil.example/graphql`), sending the client to the name it claimed."""
    host = f"{FOREIGN}:{guarded.port}"
    response = await guarded.client.get(path, headers={"host": host}, follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == location
    assert (await guarded.client.get("/nothing/", follow_redirects=False)).status_code == 404


async def test_with_tokens_and_a_list_only_the_list_and_loopback_pass(database_url: str) -> None:
    settings = make_settings(
        database_url, engine_enabled=False, api_tokens=(TOKEN,), allowed_hosts=("api.example",)
    )
    async with live_server(settings) as server:
        for host, status in (
            ("api.example", 200),
            (FOREIGN, 400),
            (f"localhost:{server.port}", 200),
        ):
            response = await server.client.get("/healthz", headers={"host": host})
            assert response.status_code == status, host


async def test_a_star_in_the_list_allows_any_host(database_url: str) -> None:
    settings = make_settings(database_url, engine_enabled=False, allowed_hosts=("*",))
    async with live_server(settings) as server:
        response = await server.client.get("/healthz", headers={"host": FOREIGN})
        assert response.status_code == 200


# -- the host allow-list and Origin on websockets -----------------------------------------------


async def test_a_rebound_websocket_is_refused_though_its_origin_equals_its_host(
    open_server: LiveServer,
) -> None:
    """The attack: a page on a rebound name opens a socket to its own name (same origin)."""
    foreign = f"{FOREIGN}:{open_server.port}"
    assert await refusal(open_server, foreign, f"http://{foreign}") == (400, UNKNOWN_HOST)
    assert await handshake_status(open_server, foreign) == 400
    assert (await open_server.health())["subscribers"] == 0


@pytest.mark.parametrize(
    "origin",
    [f"http://{FOREIGN}:{{port}}", f"http://{FOREIGN}", "null", "http://127.0.0.1:{other}"],
)
async def test_a_foreign_origin_is_refused_with_403_on_an_allowed_host(
    open_server: LiveServer, origin: str
) -> None:
    value = origin.format(port=open_server.port, other=open_server.port + 1)
    refused = await refusal(open_server, f"127.0.0.1:{open_server.port}", value)
    assert refused == (403, FOREIGN_ORIGIN), value


async def test_origins_of_allowed_names_pass_even_when_they_are_not_the_host(
    open_server: LiveServer,
) -> None:
    port = open_server.port
    host = f"127.0.0.1:{port}"
    assert await handshake_status(open_server, host, f"http://127.0.0.1:{port}") == "ack"
    assert await handshake_status(open_server, host, f"http://localhost:{port}") == "ack"
    assert await handshake_status(open_server, f"localhost:{port}") == "ack"


async def test_listed_origins_pass_and_others_do_not(listed: LiveServer) -> None:
    host = "laneway.example.com"
    assert await handshake_status(listed, host, "https://laneway.example.com") == "ack"
    assert await handshake_status(listed, host, "https://app.corp.example") == "ack"
    assert await handshake_status(listed, host, f"http://{FOREIGN}") == 403


async def test_with_tokens_and_no_list_strawberrys_same_origin_rule_stays(
    guarded: LiveServer,
) -> None:
    foreign = f"{FOREIGN}:{guarded.port}"
    assert await handshake_status(guarded, foreign, f"http://{foreign}", TOKEN) == "ack"
    assert await handshake_status(guarded, foreign, f"http://{foreign}") == "4403"
    # Refused as the list refuses (an error document, not Strawberry's empty 403)
    assert await refusal(guarded, foreign, "http://elsewhere.example") == (403, FOREIGN_ORIGIN)


# -- GraphQL over HTTP: media types -------------------------------------------------------------


async def graphql_response(
    server: LiveServer, body: dict[str, Any], headers: dict[str, str] = GRAPHQL_RESPONSE
) -> httpx.Response:
    response = await server.client.post("/graphql", json=body, headers=headers)
    assert_clean(response)
    return response


# Errors of the request itself, found before execution: nothing ran.
REQUEST_ERRORS = [
    ("parse", {"query": "{ workflows { name }"}, "Syntax Error"),
    ("validation", {"query": "{ workflow { name } }"}, "Cannot query field"),
    (
        "aliases",
        {"query": "{ " + " ".join(f"a{i}: workflows {{ name }}" for i in range(16)) + " }"},
        "16 aliases found",
    ),
    (
        "missing-variable",
        {"query": "query ($id: ID!) { workflowInstance(instanceID: $id) { name } }"},
        "to be provided",
    ),
    (
        "variable-type",
        {
            "query": "query ($n: Int) { workflowInstances(limit: $n) { name } }",
            "variables": {"n": "many"},
        },
        "Int cannot represent",
    ),
    (
        "refused-argument",
        {"query": "{ workflowInstances(limit: 0) { instanceID } }"},
        "limit",
    ),
]


@pytest.mark.parametrize(("case", "body", "text"), REQUEST_ERRORS)
async def test_request_errors_under_graphql_response_json_are_400_without_data(
    open_server: LiveServer, case: str, body: dict[str, Any], text: str
) -> None:
    response = await graphql_response(open_server, body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == GRAPHQL_RESPONSE_CONTENT_TYPE
    document = response.json()
    assert "data" not in document
    assert document["errors"]
    assert text in response.text


@pytest.mark.parametrize(("case", "body", "text"), REQUEST_ERRORS)
async def test_request_errors_under_application_json_are_200_without_data(
    open_server: LiveServer, case: str, body: dict[str, Any], text: str
) -> None:
    # An outside audit: these had `"data": null`; the GraphQL spec's response section: an
    # error raised before execution begins leaves `data` out, whatever the media type.
    response = await graphql_response(open_server, body, {"accept": "application/json"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert "data" not in document
    assert document["errors"]
    assert text in response.text


async def test_a_mutation_with_a_request_error_runs_nothing(open_server: LiveServer) -> None:
    body = {"query": "mutation ($n: String!) { enqueueWorkflow(name: $n) { instanceID } }"}
    response = await graphql_response(open_server, {**body, "variables": {"n": 5}}, APOLLO)
    assert response.status_code == 400
    assert await instance_count(open_server) == 0


async def test_field_errors_under_graphql_response_json_stay_200_with_data(
    open_server: LiveServer,
) -> None:
    # An unknown workflow is the resolver's error (a field error): it ran, so `data` is there.
    null = await graphql_response(
        open_server,
        {"query": 'mutation { enqueueWorkflow(name: "no-such") { instanceID } }'},
        APOLLO,
    )
    assert null.status_code == 200, null.text
    assert null.headers["content-type"] == GRAPHQL_RESPONSE_CONTENT_TYPE
    assert null.json()["data"] is None
    assert null.json()["errors"][0]["path"] == ["enqueueWorkflow"]
    assert null.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    # A malformed id is the argument guard's (a request error): nothing ran, no `data`.
    malformed = await graphql_response(
        open_server,
        {"query": '{ workflows { name } workflowInstance(instanceID: "nope") { name } }'},
        APOLLO,
    )
    assert malformed.status_code == 400, malformed.text
    assert "data" not in malformed.json()
    assert "instanceID must be a UUID" in malformed.text


async def test_errors_answered_before_graphql_runs_respect_the_accept_header(
    open_server: LiveServer,
) -> None:
    two = {"query": "query A { __typename } query B { __typename }"}
    for accept, media_type in ((APOLLO, GRAPHQL_RESPONSE_CONTENT_TYPE), ({}, "application/json")):
        unnamed = await open_server.client.post("/graphql", json=two, headers=accept)
        not_json = await open_server.client.post(
            "/graphql", content=b"{", headers={**accept, "content-type": "application/json"}
        )
        empty = await open_server.client.post("/graphql", json={}, headers=accept)
        for response in (unnamed, not_json, empty):
            assert response.status_code == 400, response.text
            assert response.headers["content-type"] == media_type
            assert response.json()["errors"][0]["message"]


async def test_success_under_graphql_response_json_names_the_media_type(
    open_server: LiveServer,
) -> None:
    response = await graphql_response(open_server, {"query": WORKFLOWS})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/graphql-response+json; charset=utf-8"
    assert "errors" not in response.json()
    assert response.json()["data"]["workflows"]


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "*/*",
        "application/json",
        "application/json, application/graphql-response+json;q=0.5",
        "application/graphql-response+json;q=0",
        "text/html",
    ],
)
async def test_application_json_answers_request_errors_with_200(
    open_server: LiveServer, accept: str | None
) -> None:
    headers = {} if accept is None else {"accept": accept}
    for query in ("{ workflows { name }", "{ workflow { name } }"):
        response = await graphql_response(open_server, {"query": query}, headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        document = response.json()
        assert "data" not in document  # nothing ran (a request error)
        assert document["errors"]
    ok = await graphql_response(open_server, {"query": WORKFLOWS}, headers)
    assert (ok.status_code, ok.headers["content-type"]) == (200, "application/json")


# -- GraphQL over HTTP: methods -----------------------------------------------------------------


async def test_a_mutation_by_get_is_405_with_allow_post_and_runs_nothing(
    open_server: LiveServer,
) -> None:
    for headers in ({}, GRAPHQL_RESPONSE):
        response = await open_server.client.get(
            "/graphql", params={"query": ENQUEUE}, headers=headers
        )
        assert response.status_code == 405, response.text
        assert response.headers["allow"] == "POST"
        assert "mutations are not allowed when using GET" in response.text
    assert await instance_count(open_server) == 0
    query = await open_server.client.get("/graphql", params={"query": WORKFLOWS})
    assert query.status_code == 200
    assert query.json()["data"]["workflows"]


async def test_other_methods_get_405_with_allow_get_and_post(open_server: LiveServer) -> None:
    response = await open_server.client.put("/graphql", json={"query": WORKFLOWS})
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"


# -- websocket connection_init "Authorization" --------------------------------------------------


async def ws_outcome(server: LiveServer, payload: dict[str, Any]) -> str:
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        return await init_outcome(ws, payload)


@pytest.mark.parametrize("key", ["Authorization", "AUTHORIZATION", "authorization"])
async def test_connection_init_reads_the_authorization_key_in_any_case(
    guarded: LiveServer, key: str
) -> None:
    async with connect(guarded.ws_url, subprotocols=[PROTOCOL]) as ws:
        assert await init_outcome(ws, {key: f"Bearer {TOKEN}"}) == "ack"
        # The fields' own permission checks read the same key.
        subscribe = {"id": "1", "type": "subscribe", "payload": {"query": WORKFLOWS}}
        await ws.send(json.dumps(subscribe))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert reply["type"] == "next", reply
        assert "errors" not in reply["payload"]
        assert reply["payload"]["data"]["workflows"]


async def test_a_wrong_token_under_authorization_is_still_4403(guarded: LiveServer) -> None:
    assert await ws_outcome(guarded, {"Authorization": "Bearer wrong"}) == "4403"
    assert await ws_outcome(guarded, {"Authorization": TOKEN}) == "4403"  # no scheme
    assert await ws_outcome(guarded, {}) == "4403"


async def test_the_connection_cap_counts_a_token_sent_as_authorization(
    guarded: LiveServer,
) -> None:
    """One connection per token: a second one with the same token under "Authorization" is
    4429, which it could only be if the limiter read that key (loopback without a token is
    not counted at all)."""
    async with connect(guarded.ws_url, subprotocols=[PROTOCOL]) as first:
        assert await init_outcome(first, {"Authorization": f"Bearer {TOKEN}"}) == "ack"
        assert await ws_outcome(guarded, {"Authorization": f"Bearer {TOKEN}"}) == "4429"
        assert await ws_outcome(guarded, {"Authorization": f"Bearer {OTHER_TOKEN}"}) == "ack"


# -- the pure rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/graphql-response+json", True),
        ("Application/GraphQL-Response+JSON", True),
        ("application/graphql-response+json, application/json;q=0.9", True),  # Apollo
        (
            "application/graphql-response+json, application/graphql+json, application/json, "
            "text/event-stream, multipart/mixed",
            True,  # urql: a tie goes to the GraphQL type
        ),
        ("application/json;q=1, application/graphql-response+json;q=0.9", False),
        ("application/graphql-response+json;q=0.5, */*;q=0.1", True),
        ("application/graphql-response+json;q=0.5, */*", False),
        ("application/graphql-response+json;q=0.5, application/*;q=0.8", False),
        ("application/graphql-response+json;q=0", False),
        ("application/graphql-response+json;q=nope", False),
        ("application/graphql-response+json;q=2", False),
    ],
)
def test_wants_graphql_response_follows_the_accept_qualities(
    accept: str | None, wanted: bool
) -> None:
    assert wants_graphql_response(accept) is wanted


def test_only_errors_before_execution_are_request_errors() -> None:
    parse = GraphQLError("Syntax Error")
    field = GraphQLError("no", path=["workflowInstance"])
    database = GraphQLError("down", original_error=ConnectionRefusedError())
    internal = GraphQLError("boom", original_error=RuntimeError())
    assert is_request_error(ExecutionResult(data=None, errors=[parse]))
    assert not is_request_error(ExecutionResult(data=None, errors=[field]))
    assert not is_request_error(ExecutionResult(data={"a": 1}, errors=[parse]))
    assert not is_request_error(ExecutionResult(data=None, errors=[database]))
    assert not is_request_error(ExecutionResult(data=None, errors=[internal]))
    assert not is_request_error(ExecutionResult(data=None, errors=None))


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("Example.COM", ("example.com", None)),
        ("example.com.:8000", ("example.com", 8000)),
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("[::1]:8000", ("[::1]", 8000)),
        ("[::1]", ("[::1]", None)),
        ("[nope]:80", None),
        ("::1", None),
        ("example.com:65536", None),
        ("example.com:", None),
        ("user@example.com", None),
        ("example.com/path", None),
        ("", None),
    ],
)
def test_split_host(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert split_host(value) == parsed


def test_allowed_hosts_from_the_environment() -> None:
    settings = Settings.from_env({"LANEWAY_ALLOWED_HOSTS": " A.example , *.b.example:443 "})
    assert settings.allowed_hosts == ("a.example", "*.b.example:443")
    assert Settings.from_env({"LANEWAY_ALLOWED_HOSTS": "*"}).allowed_hosts == ("*",)
    for bad in ("http://a.example", "a*.example", "a.example:99999", "*.*.example", "*:80"):
        with pytest.raises(InvalidInputError, match="LANEWAY_ALLOWED_HOSTS"):
            Settings.from_env({"LANEWAY_ALLOWED_HOSTS": bad})


def test_the_bind_address_and_the_served_address_are_allowed_at_the_served_port() -> None:
    hosts = AllowedHosts.from_settings(Settings(host="10.1.2.3"))
    assert hosts is not None
    assert hosts.allows("10.1.2.3", 8000, ("10.1.2.3", 8000))
    assert not hosts.allows("10.1.2.3", 8001, ("10.1.2.3", 8000))
    everywhere = AllowedHosts.from_settings(Settings(host="0.0.0.0", allow_insecure=True))
    assert everywhere is not None
    assert "0.0.0.0" not in everywhere.local
    assert everywhere.allows("192.168.1.5", 8000, ("192.168.1.5", 8000))
    assert everywhere.allows("[fd00::5]", 8000, ("fd00::5", 8000))
    assert not everywhere.allows("192.168.1.6", 8000, ("192.168.1.5", 8000))
    # A server that reports a name as its address (a test client) does not allow that name.
    assert not everywhere.allows("testserver", 80, ("testserver", 80))
    assert everywhere.allows("localhost", 1234, None)  # a Unix socket has no port
    assert AllowedHosts.from_settings(Settings(api_tokens=("t",))) is None


def test_origin_host() -> None:
    assert origin_host("http://LocalHost:8000") == ("localhost", 8000)
    assert origin_host("https://app.example") == ("app.example", 443)
    assert origin_host("null") is None
    assert origin_host("file://") is None
    assert origin_host("http://a.example/path") is None


def test_credential_of_reads_authorization_in_any_case() -> None:
    assert credential_of({"Authorization": "Bearer a"}) == "Bearer a"
    assert credential_of({"authorization": "Bearer a", "Authorization": "Bearer b"}) == "Bearer a"
    assert credential_of({"token": "Bearer a"}) is None
    assert credential_of(None) is None
    assert credential_of("Bearer a") is None


# -- the host allow-list of http_protections, in a host's app ----------------------------------


async def host_home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("home")


async def host_graphql(request: Request) -> PlainTextResponse:
    return PlainTextResponse("graphql reached")


async def host_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("socket reached")
    await websocket.close()


async def test_a_host_app_checks_the_host_of_its_graphql_route_only(database_url: str) -> None:
    # http_protections guards the route at `path`, as every other layer of it does: the host's
    # own routes answer whatever name the host serves them under.
    routes = [
        Route("/", host_home),
        WebSocketRoute("/socket", host_socket),
        Route("/api/graphql", host_graphql, methods=["GET", "POST"]),
        WebSocketRoute("/api/graphql", host_socket),
    ]
    settings = make_settings(database_url, engine_enabled=False)
    app = Starlette(routes=routes, middleware=http_protections(settings, path="/api/graphql"))
    async with live_server(settings, app=app) as server:
        own = "myapp.example.com"
        home = await server.client.get("/", headers={"host": own})
        assert (home.status_code, home.text) == (200, "home")
        refused = await server.client.post(
            "/api/graphql", json={"query": "{ __typename }"}, headers={"host": own}
        )
        assert refused.status_code == 400
        assert refused.json()["errors"][0]["message"] == UNKNOWN_HOST
        local = await server.client.get(
            "/api/graphql", headers={"host": f"127.0.0.1:{server.port}"}
        )
        assert (local.status_code, local.text) == (200, "graphql reached")
        async with connect(
            f"ws://{own}/socket",
            host="127.0.0.1",
            port=server.port,
            origin=Origin(f"http://{own}"),
            proxy=None,
        ) as ws:
            assert await ws.recv() == "socket reached"
        with pytest.raises(InvalidStatus) as handshake_refused:
            await connect(f"ws://{own}/api/graphql", host="127.0.0.1", port=server.port, proxy=None)
        assert handshake_refused.value.response.status_code == 400


async def test_every_refusal_before_graphql_runs_answers_in_the_preferred_media_type(
    database_url: str,
) -> None:
    """An outside audit: a 429 and an unknown host's 400 answered application/json whatever
    the Accept header said, while the other refusals answered in the type the client prefers
    (docs/limits.md: "the answer has that type")."""
    settings = make_settings(
        database_url,
        engine_enabled=False,
        limit_local_clients=True,
        rate_limit_per_second=0.01,
        rate_burst=1,
    )
    async with live_server(settings) as server:
        foreign = {"host": f"{FOREIGN}:{server.port}"}
        twice = [("authorization", "Bearer a"), ("authorization", "Bearer b")]
        for accept, media_type in (
            (APOLLO, GRAPHQL_RESPONSE_CONTENT_TYPE),
            ({}, "application/json"),
        ):
            unknown_host = await server.client.get(
                "/graphql?query={__typename}", headers={**accept, **foreign}
            )
            two_credentials = await server.client.post(
                "/graphql", json={"query": WORKFLOWS}, headers=[*accept.items(), *twice]
            )
            for response in (unknown_host, two_credentials):
                assert response.status_code == 400, response.text
                assert response.headers["content-type"] == media_type
                assert response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
        first = await server.client.post("/graphql", json={"query": WORKFLOWS}, headers=APOLLO)
        assert first.status_code == 200, first.text
        for accept, media_type in (
            (APOLLO, GRAPHQL_RESPONSE_CONTENT_TYPE),
            ({}, "application/json"),
        ):
            limited = await server.client.post(
                "/graphql", json={"query": WORKFLOWS}, headers=accept
            )
            assert limited.status_code == 429, limited.text
            assert limited.headers["content-type"] == media_type
            assert limited.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        # A websocket handshake refused for its host is answered the same way.
        with pytest.raises(InvalidStatus) as refused:
            async with connect(
                f"ws://{FOREIGN}/graphql",
                host="127.0.0.1",
                port=server.port,
                subprotocols=[PROTOCOL],
                additional_headers=APOLLO,
                proxy=None,
            ):
                pass
        assert refused.value.response.status_code == 400
        assert refused.value.response.headers["content-type"] == GRAPHQL_RESPONSE_CONTENT_TYPE
