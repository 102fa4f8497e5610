"""The input guard (laneway/api/graphql/input_guard.py) over a real uvicorn server.

Each case of issue #17's point 2 answered BAD_USER_INPUT naming the argument instead of
"Unexpected error.": a NUL or a lone surrogate in string arguments the database would choke
on, an event id above the bigint maximum (over HTTP and in a websocket subscribe), and the
lengths, ranges and nesting the guard adds. A refused mutation writes nothing, even when an
earlier root field of the same operation was valid.

Bodies are sent as bytes encoded with `ensure_ascii`, so a lone surrogate travels as the JSON
escape `\\ud800` (it has no UTF-8 encoding of its own).
"""

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
import strawberry
from gql.transport.websockets import WebsocketsTransport
from strawberry.extensions import ParserCache, ValidationCache
from strawberry.types.execution import PreExecutionError
from websockets.asyncio.client import connect

from laneway.api.graphql.arguments import MAX_EVENT_ID, parse_event_id
from laneway.api.graphql.input_guard import InputGuard
from laneway.api.graphql.mutation import LanewayMutation
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.schema import Extension, LanewaySchema, schema_extensions
from laneway.api.graphql.subscription import LanewaySubscription
from laneway.errors import InvalidInputError
from tests.api.conftest import FORBIDDEN_TEXT, Execute, LiveServer, codes, wait_until

PROTOCOL = WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL
NUL = "a\x00b"
LONE = "a\ud800b"
TOO_BIG_EVENT_ID = "9999999999999999999"  # 19 digits, above the bigint maximum
TABLES = ("instances", "events", "schedules", "queues", "locks")

INSTANCES = "query ($v: String) { workflowInstances(name: $v) { instanceID } }"
QUEUE_FILTER = "query ($v: String) { workflowInstances(queue: $v) { instanceID } }"
LOCK_TYPE = 'query ($v: String!) { entityLock(entityType: $v, entityID: "e") { entityID } }'
LOCK_ID = 'query ($v: String!) { entityLock(entityType: "t", entityID: $v) { entityID } }'
ENABLE = "mutation ($v: String!) { setScheduleEnabled(name: $v, enabled: false) { name } }"
DELETE = "mutation ($v: String!) { deleteSchedule(name: $v) }"
IDEMPOTENT = (
    'mutation ($v: String) { enqueueWorkflow(name: "noop", idempotencyKey: $v) { created } }'
)
SINGLETON = 'mutation ($v: String) { enqueueWorkflow(name: "noop", singletonKey: $v) { created } }'
HISTORY = "query ($v: ID) { workflowEventHistory(afterEventID: $v) { eventID } }"
EVENTS = """subscription ($v: ID, $name: String) {
  workflowEvents(afterEventID: $v, name: $name) { eventID type }
}"""


async def post(server: LiveServer, query: str, **variables: Any) -> dict[str, Any]:
    """POST a document; the body is ASCII JSON, so lone surrogates travel as escapes."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    response = await server.client.post(
        "/graphql", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    for word in (*FORBIDDEN_TEXT, "Unexpected error."):
        assert word not in response.text, response.text
    result: dict[str, Any] = response.json()
    return result


async def row_counts(admin: asyncpg.Connection) -> dict[str, int]:
    count = "SELECT count(*) FROM laneway.{}"  # TABLES are this module's constants
    return {t: await admin.fetchval(count.format(t)) for t in TABLES}


def refusal(body: dict[str, Any]) -> str:
    """The one error of a refused operation, which must be BAD_USER_INPUT with no data."""
    assert body.get("data") is None, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    message: str = error["message"]
    return message


@pytest.mark.parametrize(
    ("query", "value", "argument", "field"),
    [
        (INSTANCES, NUL, "name", "workflowInstances"),
        (INSTANCES, LONE, "name", "workflowInstances"),
        (QUEUE_FILTER, NUL, "queue", "workflowInstances"),
        (QUEUE_FILTER, LONE, "queue", "workflowInstances"),
        (LOCK_TYPE, NUL, "entityType", "entityLock"),
        (LOCK_ID, LONE, "entityID", "entityLock"),
        (ENABLE, NUL, "name", "setScheduleEnabled"),
        (DELETE, LONE, "name", "deleteSchedule"),
        (IDEMPOTENT, LONE, "idempotencyKey", "enqueueWorkflow"),
        (SINGLETON, LONE, "singletonKey", "enqueueWorkflow"),
        (SINGLETON, NUL, "singletonKey", "enqueueWorkflow"),
    ],
)
async def test_a_nul_or_lone_surrogate_in_a_variable_is_bad_user_input_naming_the_argument(
    server: LiveServer, admin: asyncpg.Connection, query: str, value: str, argument: str, field: str
) -> None:
    before = await row_counts(admin)
    message = refusal(await post(server, query, v=value))
    assert message == (
        f'argument "{argument}" of {field} must not contain NUL or lone surrogate characters'
    )
    assert await row_counts(admin) == before


@pytest.mark.parametrize(
    "query",
    [
        '{ workflowInstances(name: "a\\u0000b") { instanceID } }',
        '{ entityLock(entityType: "t", entityID: "\\u0000") { entityID } }',
        'mutation { deleteSchedule(name: "x\x00") }',
        'query ($v: String = "\\u0000") { workflowInstances(queue: $v) { instanceID } }',
        'query { ...F } fragment F on Query { workflowInstances(name: "\\u0000") { name } }',
        '{ ... on Query { alias: entityLock(entityType: "\\u0000", entityID: "e") { entityID } } }',
        'mutation { enqueueWorkflow(name: "noop", params: {a: ["\\u0000"]}) { created } }',
        '{ __type(name: "\\u0000") { name } }',
    ],
)
async def test_a_nul_in_a_literal_or_a_variable_default_is_bad_user_input(
    server: LiveServer, query: str
) -> None:
    assert "must not contain NUL" in refusal(await post(server, query))


async def test_an_event_id_above_the_bigint_maximum_is_bad_user_input_over_http(
    server: LiveServer,
) -> None:
    as_variable = refusal(await post(server, HISTORY, v=TOO_BIG_EVENT_ID))
    assert as_variable.startswith('argument "afterEventID" of workflowEventHistory is invalid')
    assert str(MAX_EVENT_ID) in as_variable
    literal = "{ workflowEventHistory(afterEventID: 99999999999999999999) { eventID } }"
    assert "afterEventID" in refusal(await post(server, literal))
    at_maximum = await post(server, HISTORY, v=str(MAX_EVENT_ID))
    assert at_maximum == {"data": {"workflowEventHistory": []}}


async def subscribe_reply(server: LiveServer, query: str, variables: dict[str, Any]) -> Any:
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        payload = {"query": query, "variables": variables}
        await ws.send(json.dumps({"id": "s", "type": "subscribe", "payload": payload}))
        return json.loads(await ws.recv())


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"v": TOO_BIG_EVENT_ID}, 'argument "afterEventID" of workflowEvents is invalid'),
        ({"name": NUL}, 'argument "name" of workflowEvents must not contain NUL'),
        ({"name": LONE}, 'argument "name" of workflowEvents must not contain NUL'),
    ],
)
async def test_a_hostile_subscribe_gets_an_error_frame_with_bad_user_input(
    server: LiveServer, variables: dict[str, Any], expected: str
) -> None:
    # EVENTS is the shape the websocket's direct path takes; the guard sends it back to
    # Strawberry's ordinary path, where the extension answers.
    reply = await subscribe_reply(server, EVENTS, variables)
    assert reply["type"] == "error", reply
    [error] = reply["payload"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["message"].startswith(expected)


async def test_an_honest_subscribe_still_streams_after_a_refused_one(
    server: LiveServer,
) -> None:
    refused = await subscribe_reply(server, EVENTS, {"v": TOO_BIG_EVENT_ID})
    assert refused["type"] == "error"
    await post(server, 'mutation { enqueueWorkflow(name: "noop") { instanceID } }')
    honest = await subscribe_reply(server, EVENTS, {"v": "0", "name": "noop"})
    assert honest["type"] == "next", honest
    assert honest["payload"]["data"]["workflowEvents"]["type"] == "enqueued"


async def test_a_refused_argument_refuses_the_whole_operation_before_any_resolver(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    query = """mutation ($v: String) {
      first: enqueueWorkflow(name: "noop") { instanceID }
      second: enqueueWorkflow(name: "noop", idempotencyKey: $v) { instanceID }
    }"""
    before = await row_counts(admin)
    assert "idempotencyKey" in refusal(await post(server, query, v=LONE))
    assert await row_counts(admin) == before


@pytest.mark.parametrize(
    ("query", "variables", "expected"),
    [
        (IDEMPOTENT, {"v": "k" * 10**6}, "must be at most 255 characters"),
        (INSTANCES, {"v": "n" * 65}, 'argument "name" of workflowInstances must be at most 64'),
        (
            'mutation { enqueueWorkflow(name: "noop", params: '
            + "[" * 70
            + "]" * 70
            + ") { created } }",
            {},
            'argument "params" of enqueueWorkflow is nested deeper than 64 levels',
        ),
        (
            'mutation ($v: JSON) { enqueueWorkflow(name: "noop", params: $v) { created } }',
            {"v": {"key\x00": 1}},
            'argument "params" of enqueueWorkflow must not contain NUL',
        ),
        (
            'mutation { enqueueWorkflow(name: "noop", delayMs: 1e400) { created } }',
            {},
            'argument "delayMs" of enqueueWorkflow must be at least 0 and at most',
        ),
        # A JSON number a float cannot hold would be stored as another value (1e-400 as 0.0,
        # an outside audit): refused, as the request body's decoder refuses it in a variable;
        # an integer as large as 1e309 alike (another audit: one of 400 digits was stored).
        *(
            (
                f'mutation {{ enqueueWorkflow(name: "noop", params: {{a: [{number}]}}) '
                "{ created } }",
                {},
                'argument "params" of enqueueWorkflow holds a number out of range',
            )
            for number in ("1e-400", "-2e-324", "1e309", "9" * 400)
        ),
        # A Float argument's literal alike (delayMs: 1e-400 ran at once), bounded or not.
        *(
            (f'mutation {{ enqueueWorkflow(name: "noop", {arg}) {{ created }} }}', {}, says)
            for arg, says in (
                ("delayMs: 1e-400", 'argument "delayMs" of enqueueWorkflow is a number out of'),
                ("delayMs: -2e-324", 'argument "delayMs" of enqueueWorkflow is a number out of'),
            )
        ),
        (
            "mutation { cancelWorkflows(filter: {createdAfter: 1e-400}) { __typename } }",
            {},
            'argument "filter.createdAfter" of cancelWorkflows is a number out of range',
        ),
        (
            'mutation { enqueueWorkflows(requests: [{name: "noop", params: {b: 1e-400}}]) '
            "{ created } }",
            {},
            'argument "requests[0].params" of enqueueWorkflows holds a number out of range',
        ),
        (
            'mutation { configureQueue(name: "q", concurrency: 1, ratePerMinute: 0) { name } }',
            {},
            'argument "ratePerMinute" of configureQueue must be at least 0.0001 and at most',
        ),
        # An outside audit: rates this near 0 were taken, and then failed every claim round
        # (keyRatePerMinute 5e-324), or the configureQueue itself and every read of a waiting
        # reason in the queue (ratePerMinute 5e-324, 1e-310) with INTERNAL_SERVER_ERROR.
        *(
            (
                f'mutation {{ configureQueue(name: "q", concurrency: 1, {name}: {rate}) '
                "{ name } }",
                {},
                f'argument "{name}" of configureQueue must be at least 0.0001 and at most'
                " 1000000000",
            )
            for name in ("ratePerMinute", "keyRatePerMinute")
            for rate in ("5e-324", "1e-310", "0.0000999999", "1000000000.001", "1e308")
        ),
        (
            'mutation ($r: Float) { configureQueue(name: "q", concurrency: 1, '
            "keyRatePerMinute: $r) { name } }",
            {"r": 5e-324},
            'argument "keyRatePerMinute" of configureQueue must be at least 0.0001',
        ),
        (
            "{ workflowInstances { events(limit: 501) { eventID } } }",
            {},
            'argument "limit" of events must be at least 1 and at most 500',
        ),
        (
            "{ workflowInstances(offset: -1) { instanceID } }",
            {},
            'argument "offset" of workflowInstances must be at least 0',
        ),
    ],
)
async def test_lengths_ranges_and_nesting_are_refused_before_the_database(
    server: LiveServer,
    admin: asyncpg.Connection,
    query: str,
    variables: dict[str, Any],
    expected: str,
) -> None:
    before = await row_counts(admin)
    assert expected in refusal(await post(server, query, **variables))
    assert await row_counts(admin) == before


@pytest.mark.parametrize("name", ["ratePerMinute", "keyRatePerMinute"])
async def test_a_rate_at_its_lower_bound_is_taken_and_its_queue_reads(
    server: LiveServer, name: str
) -> None:
    # The noop queue, at 0.0001 starts a minute (per key or not): the bucket's one token
    # starts the first instance, the second waits about a week, and a page of instances
    # with their waiting reasons (the dashboard's list) still reads.
    configure = f'mutation {{ configureQueue(name: "noop", concurrency: 5, {name}: 0.0001) '
    body = await post(server, configure + f"{{ {name} }} }}")
    assert body == {"data": {"configureQueue": {name: 0.0001}}}
    enqueue = 'mutation { enqueueWorkflow(name: "noop", concurrencyKey: "k") { instanceID } }'
    first, second = [
        (await post(server, enqueue))["data"]["enqueueWorkflow"]["instanceID"] for _ in "ab"
    ]
    page = "{ workflowInstances(limit: 20) { instanceID status waitingReason { code } } }"

    async def first_done() -> bool:
        body = await post(server, page)
        assert "errors" not in body, body
        found = {i["instanceID"]: i for i in body["data"]["workflowInstances"]}
        return bool(found[first]["status"] == "completed")

    await wait_until(first_done)
    found = {i["instanceID"]: i for i in (await post(server, page))["data"]["workflowInstances"]}
    code = "RATE_LIMITED" if name == "ratePerMinute" else "KEY_RATE_LIMITED"
    assert found[second] == {
        "instanceID": second,
        "status": "pending",
        "waitingReason": {"code": code},
    }


async def test_a_refusal_is_located_at_its_argument(server: LiveServer) -> None:
    body = await post(server, "{ workflowInstances(limit: 0) { instanceID } }")
    assert 'argument "limit" of workflowInstances' in refusal(body)
    assert body["errors"][0]["locations"] == [{"line": 1, "column": 21}]
    variable = "query ($n: Int) {\n  workflowInstances(limit: $n) { instanceID }\n}"
    body = await post(server, variable, n=0)
    assert body["errors"][0]["locations"] == [{"line": 2, "column": 21}]


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


# Per field: the document taking the params as a variable, the variables carrying them, the
# document taking them as a literal ({} is where they go) and how a refusal names them.
DEPTH_SHAPES: dict[str, tuple[str, Callable[[Any], dict[str, Any]], str, str]] = {
    "enqueueWorkflow": (
        'mutation ($v: JSON) { enqueueWorkflow(name: "noop", params: $v) { created } }',
        lambda params: {"v": params},
        'mutation {{ enqueueWorkflow(name: "noop", params: {}) {{ created }} }}',
        'argument "params" of enqueueWorkflow',
    ),
    # Each request takes enqueueWorkflow's arguments: its params' 64 levels are theirs, not
    # less the list and the input object around them.
    "enqueueWorkflows": (
        "mutation ($r: [EnqueueInput!]!) { enqueueWorkflows(requests: $r) { created } }",
        lambda params: {"r": [{"name": "noop", "params": params}]},
        'mutation {{ enqueueWorkflows(requests: [{{name: "noop", params: {}}}]) {{ created }} }}',
        'argument "requests[0].params" of enqueueWorkflows',
    ),
}


@pytest.mark.parametrize("field", DEPTH_SHAPES)
async def test_json_depth_is_the_params_own_as_a_variable_and_as_a_literal(
    server: LiveServer, admin: asyncpg.Connection, field: str
) -> None:
    variable, variables, literal, argument = DEPTH_SHAPES[field]
    # 64 levels pass either way (the body's own limit leaves room for the request around it).
    at_limit = json.loads(_nested(64))
    for body in (
        await post(server, variable, **variables(at_limit)),
        await post(server, literal.format(_nested(64))),
    ):
        assert "errors" not in body, body
    # 65 are refused either way, by the guard, which names the argument.
    count = "SELECT count(*) FROM laneway.instances"
    assert await admin.fetchval(count) == 2
    over = json.loads(_nested(65))
    for body in (
        await post(server, variable, **variables(over)),
        await post(server, literal.format(_nested(65))),
    ):
        assert f"{argument} is nested deeper than 64 levels" in refusal(body)
    assert await admin.fetchval(count) == 2  # the two at the limit, and nothing more


async def test_deeply_nested_json_in_a_variable_is_refused_in_process(
    run: Execute, admin: asyncpg.Connection
) -> None:
    # Far past the limit: over HTTP and websockets the body's own depth limit (strict_json.py,
    # MAX_REQUEST_DEPTH) answers first.
    query = 'mutation ($v: JSON) { enqueueWorkflow(name: "noop", params: $v) { created } }'
    result = await run(query, v={"deep": json.loads("[" * 500 + "]" * 500)})
    assert codes(result) == ["BAD_USER_INPUT"]
    assert result.errors is not None
    assert "params" in result.errors[0].message
    assert "nested deeper than 64 levels" in result.errors[0].message
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0


async def test_honest_values_at_the_limits_pass(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    query = """mutation ($key: String, $params: JSON) {
      enqueueWorkflow(name: "noop", idempotencyKey: $key, params: $params, priority: 1000000,
                      delayMs: 0) { created }
    }"""
    params = {"emoji": "\U0001f600", "deep": json.loads("[" * 60 + "]" * 60)}
    body = await post(server, query, key="k" * 255, params=params)
    assert body == {"data": {"enqueueWorkflow": {"created": True}}}
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 1
    names = await post(server, INSTANCES, v="n" * 64)
    assert names == {"data": {"workflowInstances": []}}


def test_parse_event_id_takes_the_bigint_maximum_and_nothing_above() -> None:
    assert parse_event_id(str(MAX_EVENT_ID)) == 2**63 - 1
    assert parse_event_id("0") == 0
    for bad in (str(MAX_EVENT_ID + 1), TOO_BIG_EVENT_ID, "1" * 20, "-1", "١٢", ""):
        with pytest.raises(InvalidInputError):
            parse_event_id(bad)


def schema_with(extensions: list[Extension]) -> strawberry.Schema:
    return LanewaySchema(
        query=LanewayQuery,
        mutation=LanewayMutation,
        subscription=LanewaySubscription,
        extensions=extensions,
    )


@pytest.mark.parametrize(
    "order",
    ["guard alone", "schema_extensions", "caches before the guard", "caches after the guard"],
)
async def test_the_guard_refuses_whichever_side_of_the_parser_and_validation_caches_it_is(
    order: str,
) -> None:
    # No context: were a resolver reached, it would fail with a masked error, not this one.
    caches: list[Extension] = [ParserCache, ValidationCache]
    orders: dict[str, list[Extension]] = {
        "guard alone": [InputGuard],  # Strawberry's own parse and validation
        "schema_extensions": schema_extensions(),
        "caches before the guard": [*caches, *schema_extensions()],
        "caches after the guard": [*schema_extensions(), *caches],
    }
    hosted = schema_with(orders[order])
    for _ in range(2):  # the second time, both caches answer
        result = await hosted.execute(INSTANCES, variable_values={"v": NUL})
        assert result.data is None
        assert [e.extensions for e in result.errors or []] == [{"code": "BAD_USER_INPUT"}]
        honest = await hosted.execute("{ __typename }")
        assert honest.data == {"__typename": "Query"}
        assert honest.errors is None
        stream = await hosted.subscribe(EVENTS, variable_values={"v": TOO_BIG_EVENT_ID})
        assert isinstance(stream, AsyncIterator)
        first = await anext(stream)
        assert isinstance(first, PreExecutionError)  # an `error` message, not a `next`
        assert [e.extensions for e in first.errors or []] == [{"code": "BAD_USER_INPUT"}]


async def test_an_invalid_document_gets_its_validation_errors_with_the_refusal() -> None:
    result = await schema_with(schema_extensions()).execute(
        "query ($v: String) { workflowInstances(name: $v, nope: 1) { instanceID } }",
        variable_values={"v": NUL},
    )
    messages = [e.message for e in result.errors or []]
    assert any("nope" in m for m in messages), messages
    assert result.data is None


@pytest.mark.parametrize(
    ("variables", "argument"),
    [
        ({"v": 10**19}, "afterEventID"),  # an ID sent as a number
        ({"v": 10**5000}, "afterEventID"),  # more digits than Python writes
        ({"v": "0", "name": "\udc00"}, "name"),
    ],
)
async def test_in_process_variables_get_the_same_guard(
    variables: dict[str, Any], argument: str
) -> None:
    # schema.execute takes Python values: no HTTP body limits stand in front of the guard.
    query = "query ($v: ID, $name: String) { workflowEventHistory(afterEventID: $v) { eventID } "
    query += "workflowInstances(name: $name) { name } }"
    result = await schema_with(schema_extensions()).execute(query, variable_values=variables)
    assert result.data is None
    [error] = result.errors or []
    assert error.extensions == {"code": "BAD_USER_INPUT"}
    assert error.message.startswith(f'argument "{argument}" of ')
