"""Every error a request can get carries `extensions.code`, over real HTTP and real websockets.

A client (the CLI, a dashboard, Apollo Client) decides what to do from the code, never from a
message: a request's own errors follow Apollo's names (GRAPHQL_PARSE_FAILED,
GRAPHQL_VALIDATION_FAILED, BAD_USER_INPUT for variable values that do not fit their types),
whichever transport carried them. The codes errors already had (the input guard's
BAD_USER_INPUT, a field's NOT_FOUND) stay as they were.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from laneway.api.app import MAX_SUBSCRIPTIONS_PER_CONNECTION
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer, live_server, make_settings

PROTOCOL = Subprotocol("graphql-transport-ws")
ID = "00000000-0000-0000-0000-000000000001"
SIGNAL = f'mutation ($n: String!) {{ signalWorkflow(instanceID: "{ID}", name: $n) {{ accepted }} }}'
EVENTS_OF = "subscription ($i: ID!) { workflowEvents(instanceID: $i) { eventID } }"


def nested(depth: int) -> str:
    inner = "leaf"
    for level in range(depth, 0, -1):
        inner = f"f{level} {{ {inner} }}"
    return f"query deep {{ {inner} }}"


# (case, document, variables, the code every error of the answer carries)
CASES: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("unknown field", "{ nope }", None, "GRAPHQL_VALIDATION_FAILED"),
    (
        "literal of the wrong type",
        f'mutation {{ signalWorkflow(instanceID: "{ID}", name: 5) {{ accepted }} }}',
        None,
        "GRAPHQL_VALIDATION_FAILED",
    ),
    (
        "undefined variable",
        "{ workflowInstance(instanceID: $x) { name } }",
        None,
        "GRAPHQL_VALIDATION_FAILED",
    ),
    ("unknown fragment", "{ ...F }", None, "GRAPHQL_VALIDATION_FAILED"),
    ("too deep", nested(11), None, "GRAPHQL_VALIDATION_FAILED"),
    (
        "too many aliases",
        "{ " + " ".join(f"a{i}: workflows {{ name }}" for i in range(16)) + " }",
        None,
        "GRAPHQL_VALIDATION_FAILED",
    ),
    ("introspection off", "{ __schema { types { name } } }", None, "GRAPHQL_VALIDATION_FAILED"),
    ("variable of the wrong type", SIGNAL, {"n": 5}, "BAD_USER_INPUT"),
    ("missing variable", SIGNAL, {}, "BAD_USER_INPUT"),
    ("null variable for a non-null type", SIGNAL, {"n": None}, "BAD_USER_INPUT"),
    (
        "input object variable with an unknown field",
        "mutation ($r: [EnqueueInput!]!) { enqueueWorkflows(requests: $r) { created } }",
        {"r": [{"nam": "noop"}]},
        "BAD_USER_INPUT",
    ),
    (
        "the input guard's refusal",
        "{ workflowInstances(limit: 100000) { name } }",
        None,
        "BAD_USER_INPUT",
    ),
]
# Over HTTP only: a websocket answers a document that does not parse by closing with 4400
# (graphql-transport-ws), the close code being its code (test_syntax_errors_close_a_websocket).
HTTP_ONLY: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("syntax error", "{ workflows { name }", None, "GRAPHQL_PARSE_FAILED"),
    ("empty document", "   ", None, "GRAPHQL_PARSE_FAILED"),
    ("too many tokens", "{ " + "workflows { name } " * 700 + "}", None, "GRAPHQL_PARSE_FAILED"),
]
# Over a websocket only: HTTP serves no subscription.
WS_ONLY: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("subscription variable of the wrong type", EVENTS_OF, {"i": [1]}, "BAD_USER_INPUT"),
    ("missing subscription variable", EVENTS_OF, {}, "BAD_USER_INPUT"),
    (
        "subscription literal of the wrong type",
        "subscription { workflowEvents(instanceID: 5.5) { eventID } }",
        None,
        "GRAPHQL_VALIDATION_FAILED",
    ),
]


@pytest.fixture
async def closed_server(database_url: str) -> AsyncIterator[LiveServer]:
    """No engine, and no GraphiQL, so introspection is refused as in production."""
    settings = make_settings(database_url, engine_enabled=False, graphiql=False)
    async with live_server(settings) as server:
        yield server


def error_codes(errors: list[dict[str, Any]]) -> set[str | None]:
    assert errors
    for word in FORBIDDEN_TEXT:
        assert word not in json.dumps(errors)
    return {(e.get("extensions") or {}).get("code") for e in errors}


async def acked(server: LiveServer) -> ClientConnection:
    ws = await connect(server.ws_url, subprotocols=[PROTOCOL])
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    return ws


@pytest.mark.parametrize("payload", [{}, None, "absent"])
async def test_connection_init_takes_an_object_null_or_no_payload(
    closed_server: LiveServer, payload: object
) -> None:
    """graphql-transport-ws allows `payload?: Record<string, unknown> | null`: a client whose
    connectionParams gave null was closed with 4400 (an outside audit)."""
    init: dict[str, object] = {"type": "connection_init"}
    if payload != "absent":
        init["payload"] = payload
    async with connect(closed_server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv()) == {"type": "connection_ack"}
        query = {"query": "{ __typename }"}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": query}))
        answer = json.loads(await ws.recv())
        assert answer == {"id": "1", "type": "next", "payload": {"data": {"__typename": "Query"}}}


@pytest.mark.parametrize("accept", ["application/json", "application/graphql-response+json"])
async def test_request_errors_carry_a_code_over_http(
    closed_server: LiveServer, accept: str
) -> None:
    for case, query, variables, code in CASES + HTTP_ONLY:
        body: dict[str, Any] = {"query": query}
        if variables is not None:
            body["variables"] = variables
        response = await closed_server.client.post(
            "/graphql", json=body, headers={"accept": accept}
        )
        assert response.status_code < 500, response.text
        assert error_codes(response.json()["errors"]) == {code}, (case, response.text)


async def test_request_errors_carry_a_code_over_a_websocket(closed_server: LiveServer) -> None:
    """Each on one socket, which stays open: an `error` message (graphql-transport-ws: the
    errors of a request refused before execution), never a `next`."""
    ws = await acked(closed_server)
    try:
        for number, (case, query, variables, code) in enumerate(CASES + WS_ONLY):
            payload: dict[str, Any] = {"query": query}
            if variables is not None:
                payload["variables"] = variables
            frame = {"id": str(number), "type": "subscribe", "payload": payload}
            await ws.send(json.dumps(frame))
            async with asyncio.timeout(10):
                reply = json.loads(await ws.recv())
            assert reply["id"] == str(number), reply
            assert reply["type"] == "error", (case, reply)
            assert error_codes(reply["payload"]) == {code}, (case, reply)
    finally:
        await ws.close()


LIMIT_OF = "query ($l: Int!) { workflowInstances(limit: $l) { instanceID } }"
# (case, document, variables): variables that do not coerce, in a query and in a mutation.
REFUSED_VARIABLES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("no variables for a non-null one", LIMIT_OF, None),
    ("a string for an Int", LIMIT_OF.replace("Int!", "Int"), {"l": "x"}),
    ("a missing variable of a mutation", SIGNAL, {}),
]


async def test_a_query_or_mutation_whose_variables_do_not_coerce_gets_only_an_error_message(
    closed_server: LiveServer,
) -> None:
    """As over HTTP (a request error, no `data`) and as a subscription's: one `error` message
    with the errors, and no `next` (`data: null` would say the operation ran) nor `complete`
    (the `error` ends the operation). The same socket then answers the next operation."""
    ws = await acked(closed_server)
    try:
        for number, (case, query, variables) in enumerate(REFUSED_VARIABLES):
            payload: dict[str, Any] = {"query": query}
            if variables is not None:
                payload["variables"] = variables
            refused_id, then = f"v{number}", f"t{number}"
            await ws.send(json.dumps({"id": refused_id, "type": "subscribe", "payload": payload}))
            replies = []
            async with asyncio.timeout(10):
                replies.append(json.loads(await ws.recv()))
                typename = {"id": then, "type": "subscribe", "payload": {"query": "{ __typename }"}}
                await ws.send(json.dumps(typename))
                while replies[-1] != {"id": then, "type": "complete"}:
                    replies.append(json.loads(await ws.recv()))
            refused = [reply for reply in replies if reply["id"] == refused_id]
            assert [reply["type"] for reply in refused] == ["error"], (case, replies)
            errors = refused[0]["payload"]
            assert error_codes(errors) == {"BAD_USER_INPUT"}, (case, errors)
            assert all("Variable '$" in error["message"] for error in errors), (case, errors)
    finally:
        await ws.close()


async def test_a_field_error_of_an_operation_that_ran_still_comes_as_next(
    closed_server: LiveServer,
) -> None:
    """Only a request error becomes an `error` message: a mutation whose non-null field fails
    (NOT_FOUND, so `data` is null) ran, and is a `next` with `data: null`, then `complete`."""
    ws = await acked(closed_server)
    try:
        query = "mutation ($i: ID!) { cancelWorkflow(instanceID: $i) { status } }"
        payload = {"query": query, "variables": {"i": ID}}
        await ws.send(json.dumps({"id": "m", "type": "subscribe", "payload": payload}))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
            complete = json.loads(await ws.recv())
        assert reply["type"] == "next", reply
        assert reply["payload"]["data"] is None, reply
        assert error_codes(reply["payload"]["errors"]) == {"NOT_FOUND"}, reply
        assert reply["payload"]["errors"][0]["path"] == ["cancelWorkflow"]
        assert complete == {"id": "m", "type": "complete"}
    finally:
        await ws.close()


async def test_syntax_errors_close_a_websocket_with_4400(closed_server: LiveServer) -> None:
    for case, query, _, _ in HTTP_ONLY:
        ws = await acked(closed_server)
        frame = {"id": "1", "type": "subscribe", "payload": {"query": query}}
        await ws.send(json.dumps(frame))
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(10):
                await ws.recv()
        assert closed.value.rcvd is not None, case
        assert closed.value.rcvd.code == 4400, case


TWO_OPERATIONS = "query A { __typename } query B { workflows { name } }"
JSON_TYPE = {"content-type": "application/json"}
# (case, method, request arguments, HTTP status, code)
REFUSED_REQUESTS: list[tuple[str, str, dict[str, Any], int, str]] = [
    (
        "unknown operation",
        "POST",
        {"json": {"query": TWO_OPERATIONS, "operationName": "C"}},
        400,
        "OPERATION_RESOLUTION_FAILURE",
    ),
    (
        "unknown operation by GET",
        "GET",
        {"params": {"query": TWO_OPERATIONS, "operationName": "C"}},
        400,
        "OPERATION_RESOLUTION_FAILURE",
    ),
    (
        "several operations, no name",
        "POST",
        {"json": {"query": TWO_OPERATIONS}},
        400,
        "OPERATION_RESOLUTION_FAILURE",
    ),
    (
        "several operations by GET",
        "GET",
        {"params": {"query": TWO_OPERATIONS}},
        400,
        "OPERATION_RESOLUTION_FAILURE",
    ),
    ("not JSON", "POST", {"content": b"{", "headers": JSON_TYPE}, 400, "BAD_REQUEST"),
    ("an array", "POST", {"json": [{"query": "{ __typename }"}]}, 400, "BAD_REQUEST"),
    ("no query", "POST", {"json": {}}, 400, "BAD_REQUEST"),
    ("a query that is no string", "POST", {"json": {"query": 5}}, 400, "BAD_REQUEST"),
    (
        "an operationName that is no string",
        "POST",
        {"json": {"query": "{ __typename }", "operationName": 5}},
        400,
        "BAD_REQUEST",
    ),
    (
        "variables that are no object",
        "POST",
        {"json": {"query": "{ __typename }", "variables": [1]}},
        400,
        "BAD_REQUEST",
    ),
    (
        "variables by GET that are not JSON",
        "GET",
        {"params": {"query": "{ __typename }", "variables": "{"}},
        400,
        "BAD_REQUEST",
    ),
    (
        "a body too large",
        "POST",
        {"content": b"{" + b" " * (1024 * 1024) + b"}", "headers": JSON_TYPE},
        413,
        "BAD_REQUEST",
    ),
    (
        "an unsupported content type",
        "POST",
        {"content": b"{ __typename }", "headers": {"content-type": "text/plain"}},
        415,
        "BAD_REQUEST",
    ),
    (
        "a mutation by GET",
        "GET",
        {"params": {"query": 'mutation { deleteSchedule(name: "x") }'}},
        405,
        "BAD_REQUEST",
    ),
    ("another method", "PUT", {"json": {"query": "{ __typename }"}}, 405, "BAD_REQUEST"),
    (
        "a subscription",
        "POST",
        {"json": {"query": "subscription { workflowEvents { eventID } }"}},
        400,
        "BAD_REQUEST",
    ),
    (
        "an unknown host",
        "GET",
        {"params": {"query": "{ __typename }"}, "headers": {"host": "rebound.example"}},
        400,
        "BAD_REQUEST",
    ),
]


@pytest.mark.parametrize("accept", ["application/json", "application/graphql-response+json"])
async def test_refused_requests_carry_a_code(closed_server: LiveServer, accept: str) -> None:
    for case, method, arguments, status, code in REFUSED_REQUESTS:
        rest = {key: value for key, value in arguments.items() if key != "headers"}
        headers = {"accept": accept, **arguments.get("headers", {})}
        response = await closed_server.client.request(method, "/graphql", headers=headers, **rest)
        assert response.status_code == status, (case, response.text)
        assert error_codes(response.json()["errors"]) == {code}, (case, response.text)


async def test_a_websocket_refused_for_its_host_says_why_with_a_code(
    closed_server: LiveServer,
) -> None:
    url = closed_server.ws_url
    with pytest.raises(InvalidStatus) as refused:
        await connect(url, subprotocols=[PROTOCOL], additional_headers={"host": "rebound.example"})
    assert refused.value.response.status_code == 400
    errors = json.loads(refused.value.response.body or b"")["errors"]
    assert error_codes(errors) == {"BAD_REQUEST"}


async def test_a_websocket_operation_without_its_operation_gets_a_code(
    closed_server: LiveServer,
) -> None:
    ws = await acked(closed_server)
    try:
        for number, name in enumerate(("C", None)):
            payload = {"query": TWO_OPERATIONS, "operationName": name}
            await ws.send(json.dumps({"id": str(number), "type": "subscribe", "payload": payload}))
            async with asyncio.timeout(10):
                reply = json.loads(await ws.recv())
            assert reply["type"] == "error", reply
            assert error_codes(reply["payload"]) == {"OPERATION_RESOLUTION_FAILURE"}, reply
    finally:
        await ws.close()


async def test_an_operation_over_a_sockets_limit_is_rate_limited_and_the_socket_stays(
    closed_server: LiveServer,
) -> None:
    events = {"query": "subscription { workflowEvents { eventID } }"}
    ws = await acked(closed_server)
    try:
        for number in range(MAX_SUBSCRIPTIONS_PER_CONNECTION + 1):
            await ws.send(json.dumps({"id": str(number), "type": "subscribe", "payload": events}))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert reply["type"] == "error", reply
        assert reply["id"] == str(MAX_SUBSCRIPTIONS_PER_CONNECTION)
        assert error_codes(reply["payload"]) == {"RATE_LIMITED"}
        # One ends, and the same socket takes another.
        await ws.send(json.dumps({"id": "0", "type": "complete"}))
        await ws.send(
            json.dumps({"id": "again", "type": "subscribe", "payload": {"query": "{ __typename }"}})
        )
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert reply == {
            "id": "again",
            "type": "next",
            "payload": {"data": {"__typename": "Query"}},
        }
    finally:
        await ws.close()
