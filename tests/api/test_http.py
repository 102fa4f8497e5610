"""The app over real HTTP: uvicorn on 127.0.0.1, httpx as the client.

Covers the lifespan (engine on and off), /healthz, /, GraphiQL, bearer tokens, and the
malformed-request matrix (truncated or deep JSON, bodies too large, forms, batches, bad
documents): never a 500, never internals in a body.
"""

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from laneway.api.http.body_limits import MAX_BODY_BYTES
from tests.api.conftest import (
    FORBIDDEN_TEXT,
    TOKEN,
    LiveServer,
    live_server,
    make_settings,
    wait_until,
)

HELLO = 'mutation { enqueueWorkflow(name: "hello", params: {name: "Web"}) { instanceID } }'
STATUS = "query ($id: ID!) { workflowInstance(instanceID: $id) { status result } }"


def assert_no_internals(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    for word in FORBIDDEN_TEXT:
        assert word not in response.text


async def test_hello_enqueued_over_http_completes(server: LiveServer) -> None:
    body = await server.graphql(HELLO)
    instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
    seen: dict[str, Any] = {}

    async def completed() -> bool:
        seen.update((await server.graphql(STATUS, id=instance_id))["data"]["workflowInstance"])
        return bool(seen["status"] == "completed")

    await wait_until(completed)
    assert seen["result"] == {"greeting": "Hello, Web!"}


async def test_healthz_reports_database_listener_and_engine(server: LiveServer) -> None:
    response = await server.client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert (body["database"], body["listener"], body["engine"]) == ("ok", "ok", "ok")
    assert body["schema"] == "ok"


async def test_healthz_counts_a_disabled_engine_as_healthy(database_url: str) -> None:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        response = await server.client.get("/healthz")
        assert response.status_code == 200
        assert response.json()["engine"] == "disabled"
        body = await server.graphql(HELLO)
        instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
        status = await server.graphql(STATUS, id=instance_id)
        assert status["data"]["workflowInstance"]["status"] == "pending"


async def test_healthz_is_503_when_the_listener_is_down(
    server: LiveServer, admin: asyncpg.Connection, server_url: str
) -> None:
    name = await admin.fetchval("SELECT current_database()")
    # Refuse new connections (superusers too) so the listener cannot reconnect for a while.
    owner = await asyncpg.connect(server_url)
    try:
        await owner.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
            )

            async def unhealthy() -> bool:
                return (await server.client.get("/healthz")).status_code == 503

            await wait_until(unhealthy)
            assert (await server.health())["listener"] == "disconnected"
        finally:
            await owner.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    finally:
        await owner.close()

    async def healthy() -> bool:
        return (await server.client.get("/healthz")).status_code == 200

    await wait_until(healthy)


async def test_root_serves_the_dashboard_and_graphiql_stays_at_graphql(
    server: LiveServer,
) -> None:
    response = await server.client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "<title>Laneway dashboard</title>" in response.text
    assert 'href="graphql"' in response.text  # relative: works under a host's prefix too
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "script-src 'sha256-" in policy
    page = await server.client.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "graphiql" in page.text.lower()


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(database_url, api_tokens=(TOKEN,), engine_enabled=False)
    async with live_server(settings) as server:
        yield server


async def test_mutations_over_http_need_a_valid_bearer_token(
    secured: LiveServer, admin: asyncpg.Connection
) -> None:
    anonymous = await secured.graphql(HELLO)
    wrong = await secured.graphql(HELLO, token="guess")
    assert anonymous["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert wrong["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0
    allowed = await secured.graphql(HELLO, token=TOKEN)
    assert "errors" not in allowed
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 1
    read = await secured.graphql("{ workflows { name } }")
    assert read["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize("authorization", ["Basic dXNlcjpwYXNz", "Digest x", "Token s3cret"])
async def test_a_credential_of_another_scheme_is_no_credential(
    database_url: str, admin: asyncpg.Connection, authorization: str
) -> None:
    # An outside audit: `Authorization: Basic …` was FORBIDDEN, the code of a credential that
    # does not allow the operation; the API takes only bearer tokens, so there is none.
    settings = make_settings(
        database_url, api_tokens=(TOKEN,), open_reads=True, engine_enabled=False
    )
    headers = {"authorization": authorization}
    async with live_server(settings) as server:
        response = await server.client.post("/graphql", json={"query": HELLO}, headers=headers)
        assert response.status_code == 200, response.text
        [error] = response.json()["errors"]
        assert error["extensions"]["code"] == "UNAUTHENTICATED"
        assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0
        # With open reads, no credential may read: a reverse proxy's Basic login passes on.
        query = {"query": "{ workflows { name } }"}
        read = await server.client.post("/graphql", json=query, headers=headers)
        assert "errors" not in read.json(), read.text
        # A bearer token that is wrong is still FORBIDDEN, for reads too.
        wrong = await server.client.post(
            "/graphql", json=query, headers={"authorization": "Bearer guess"}
        )
        assert wrong.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"


def chunks(total: int, size: int = 64 * 1024) -> Any:
    async def body() -> AsyncIterator[bytes]:
        sent = 0
        while sent < total:
            yield b" " * min(size, total - sent)
            sent += size

    return body()


def deep(levels: int) -> str:
    return (
        '{"query": "{ workflows { name } }", "variables": {"v": '
        + "[" * levels
        + "]" * levels
        + "}}"
    )


JSON = {"content-type": "application/json"}
DOC = "{ workflows { name } }"

# (request kwargs, expected status, text the body must contain)
MALFORMED: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "truncated",
        {"content": b'{"query":', "headers": JSON},
        400,
        "Unable to parse the request body as JSON: Expecting value",
    ),
    (
        "deep",
        {"content": deep(5000).encode(), "headers": JSON},
        400,
        "Unable to parse the request body as JSON: nested too deeply",
    ),
    # Over the body's own limit: a value's 64 levels and the request's 8 around it.
    (
        "deep-73",
        {"content": deep(71).encode(), "headers": JSON},
        400,
        "Unable to parse the request body as JSON: nested deeper than 72",
    ),
    (
        "huge-int",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"n": '
            + b"9" * 5000
            + b"}}",
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: integer too long",
    ),
    (
        "nan",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"n": NaN}}',
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: NaN and Infinity are not JSON",
    ),
    (
        "infinity",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"n": -Infinity}}',
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: NaN and Infinity are not JSON",
    ),
    (
        "overflow",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"n": 1e400}}',
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: number out of range",
    ),
    (
        "overflow-int",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"n": '
            + b"9" * 400
            + b"}}",
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: number out of range",
    ),
    (
        "underflow",
        {
            "content": b'{"query": "{ workflows { name } }", "variables": {"p": {"b": 1e-400}}}',
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: number out of range",
    ),
    (
        "duplicate-keys",
        {
            "content": b'{"query": "{ workflows { name } }", "query": "{ queues { name } }"}',
            "headers": JSON,
        },
        400,
        "Unable to parse the request body as JSON: duplicate object key",
    ),
    ("too-large", {"content": b" " * (2 * MAX_BODY_BYTES), "headers": JSON}, 413, "too large"),
    ("chunked", {"content": chunks(MAX_BODY_BYTES + 1), "headers": JSON}, 413, "too large"),
    (
        "text-plain",
        {"content": DOC.encode(), "headers": {"content-type": "text/plain"}},
        415,
        "Unsupported",
    ),
    ("form", {"data": {"query": DOC}}, 415, "Unsupported content type"),
    ("multipart", {"files": {"query": ("q", DOC.encode())}}, 415, "Unsupported content type"),
    ("batch", {"json": [{"query": DOC}, {"query": DOC}]}, 400, "Batching is not enabled"),
    ("query-not-string", {"json": {"query": 123}}, 400, "must be a string"),
    ("variables-list", {"json": {"query": DOC, "variables": [1, 2]}}, 400, "must be an object"),
    ("name-number", {"json": {"query": DOC, "operationName": 5}}, 400, "must be a string or null"),
    ("extensions-list", {"json": {"query": DOC, "extensions": []}}, 400, "must be an object"),
    ("empty", {"json": {"query": ""}}, 400, "No GraphQL query found"),
    (
        "two-operations",
        {
            "json": {
                "query": 'mutation A { deleteSchedule(name: "x") } query B { workflows { name } }'
            }
        },
        400,
        "Must provide operation name",
    ),
    (
        "unknown-operation",
        {"json": {"query": "query A { workflows { name } }", "operationName": "Z"}},
        400,
        "Unknown operation",
    ),
    ("syntax", {"json": {"query": "{ workflows { name }"}}, 200, "Syntax Error"),
    ("unknown-fragment", {"json": {"query": "{ ...G }"}}, 200, "Unknown fragment 'G'."),
    (
        "unknown-nested-fragment",
        {"json": {"query": "{ workflows { ...G } }"}},
        200,
        "Unknown fragment 'G'.",
    ),
    ("deep-document", {"json": {"query": "{ a " * 600 + "}" * 600}}, 200, "nested too deeply"),
    (
        "aliases",
        {
            "json": {
                "query": "{ " + " ".join(f"a{i}: workflows {{ name }}" for i in range(50)) + " }"
            }
        },
        200,
        "50 aliases found. Allowed: 15",
    ),
    (
        "tokens",
        {"json": {"query": "{ workflows { " + "name " * 5000 + "} }"}},
        200,
        "more than 2000 tokens",
    ),
    (
        "circular",
        {
            "json": {
                "query": "query Q { ...A } fragment A on Query { ...B } "
                "fragment B on Query { ...A }"
            }
        },
        200,
        "Cannot spread fragment",
    ),
    ("suggestion", {"json": {"query": "{ workflow { name } }"}}, 200, "Cannot query field"),
    (
        "int-range",
        {
            "json": {
                "query": 'mutation { enqueueWorkflow(name: "noop", priority: 99999999999) '
                "{ created } }"
            }
        },
        200,
        "non 32-bit",
    ),
    (
        "missing-variable",
        {"json": {"query": "query ($id: ID!) { workflowInstance(instanceID: $id) { name } }"}},
        200,
        "to be provided",
    ),
]


@pytest.mark.parametrize(
    ("case", "request_kwargs", "status", "text"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
async def test_malformed_requests_get_4xx_and_no_internals(
    server: LiveServer, case: str, request_kwargs: dict[str, Any], status: int, text: str
) -> None:
    response = await server.client.post("/graphql", **request_kwargs)
    assert_no_internals(response)
    assert response.status_code == status, response.text
    assert text in response.text
    assert "Did you mean" not in response.text


async def test_json_numbers_in_a_body_keep_their_value(server: LiveServer) -> None:
    """A zero in any notation (and -0.0, stored as 0) and the smallest numbers a float holds
    are taken as they are; one that would underflow to 0.0 is refused (MALFORMED)."""
    query = (
        'mutation ($p: JSON) { enqueueWorkflow(name: "noop", params: $p) { instance { params } } }'
    )
    numbers = b'{"z": 0e400, "n": -0.0, "e": 0.000e-999, "t": 1e-300, "s": 5e-324}'
    body = b'{"query": ' + json.dumps(query).encode() + b', "variables": {"p": ' + numbers + b"}}"
    response = await server.client.post("/graphql", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    stored = {"z": 0.0, "n": 0.0, "e": 0.0, "t": 1e-300, "s": 5e-324}
    assert response.json()["data"]["enqueueWorkflow"]["instance"]["params"] == stored


async def test_other_methods_and_get_mutations_are_refused(server: LiveServer) -> None:
    put = await server.client.put("/graphql", json={"query": DOC})
    assert put.status_code == 405
    mutation = await server.client.get(
        "/graphql", params={"query": 'mutation { deleteSchedule(name: "x") }'}
    )
    assert mutation.status_code == 405
    assert mutation.headers["allow"] == "POST"
    assert "mutations are not allowed when using GET" in mutation.text
    strict = await server.client.get("/graphql", params={"query": DOC, "variables": '{"n": NaN}'})
    assert strict.status_code == 400
    assert "Unable to parse `variables` as JSON: NaN and Infinity are not JSON" in strict.text
    twice = await server.client.get(
        "/graphql", params={"query": DOC, "extensions": '{"a":1,"a":2}'}
    )
    assert twice.status_code == 400
    assert "Unable to parse `extensions` as JSON: duplicate object key" in twice.text
    for response in (put, mutation, strict, twice):
        assert_no_internals(response)


async def test_a_get_parameter_given_empty_is_not_given(server: LiveServer) -> None:
    params = {"query": "{ __typename }", "variables": "", "extensions": "", "operationName": ""}
    response = await server.client.get("/graphql", params=params)
    assert response.status_code == 200, response.text
    assert response.json() == {"data": {"__typename": "Query"}}


async def test_a_get_must_name_its_operation_as_a_post_must(server: LiveServer) -> None:
    two = "query A { __typename } query B { workflows { name } }"
    for params, message in (
        ({"query": two}, "Must provide operation name if query contains multiple operations."),
        ({"query": two, "operationName": "C"}, 'Unknown operation named "C".'),
        # Only a fragment: no operation (Strawberry's words were "Can't get GraphQL
        # operation type", an outside audit found).
        ({"query": "fragment F on Query { __typename }"}, "Must provide an operation."),
    ):
        for response in (
            await server.client.get("/graphql", params=params),
            await server.client.post("/graphql", json=params),
        ):
            assert_no_internals(response)
            assert response.status_code == 400, response.text
            assert [e["message"] for e in response.json()["errors"]] == [message]
    named = await server.client.get("/graphql", params={"query": two, "operationName": "A"})
    assert named.json() == {"data": {"__typename": "Query"}}


async def test_a_subscription_over_http_is_a_request_error(server: LiveServer) -> None:
    subscription = "subscription { workflowEvents { eventID } }"
    multipart = {"accept": "multipart/mixed;subscriptionSpec=1.0"}
    responses = [
        await server.client.post("/graphql", json={"query": subscription}),
        await server.client.post("/graphql", json={"query": subscription}, headers=multipart),
        await server.client.get("/graphql", params={"query": subscription}),
    ]
    for response in responses:
        assert_no_internals(response)
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        (error,) = response.json()["errors"]
        assert "over a websocket" in error["message"]


async def test_strawberrys_request_errors_are_json_documents(server: LiveServer) -> None:
    empty = await server.client.post("/graphql", json={})
    unsupported = await server.client.post(
        "/graphql", content=DOC.encode(), headers={"content-type": "text/plain"}
    )
    for response, status, message in (
        (empty, 400, "No GraphQL query found"),
        (unsupported, 415, "Unsupported content type"),
    ):
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        (error,) = response.json()["errors"]
        assert message in error["message"]


@pytest.mark.parametrize(
    ("headers", "message", "accepted"),
    [
        (
            {"content-type": "text/plain"},
            "Unsupported content type",
            ("accept", "application/json"),
        ),
        ({"content-type": "application/graphql"}, "Unsupported content type", None),
        ({"content-type": "application/x-www-form-urlencoded"}, "Unsupported content type", None),
        ({"content-type": "multipart/form-data; boundary=x"}, "Unsupported content type", None),
        ({"content-type": "application/vnd.foo+json"}, "Unsupported content type", None),
        ({}, "Unsupported content type", None),
        ({"content-type": "application/json; charset=latin1"}, "Unsupported charset", None),
        (
            {"content-type": "application/json", "content-encoding": "gzip"},
            "Unsupported content encoding",
            ("accept-encoding", "identity"),
        ),
    ],
    ids=["text", "graphql", "form", "multipart", "vnd-json", "none", "latin1", "gzip"],
)
async def test_a_body_the_server_cannot_read_is_415(
    server: LiveServer,
    headers: dict[str, str],
    message: str,
    accepted: tuple[str, str] | None,
) -> None:
    # An outside audit: these were 400 (or, for a charset or a content coding, read as plain
    # UTF-8 JSON); GraphQL over HTTP and RFC 9110 say 415.
    body = json.dumps({"query": DOC}).encode()
    response = await server.client.post("/graphql", content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert response.headers["content-type"] == "application/json"
    (error,) = response.json()["errors"]
    assert error["message"].startswith(message)
    assert error["extensions"] == {"code": "BAD_REQUEST"}
    if accepted is not None:
        assert response.headers[accepted[0]] == accepted[1]


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "application/json; charset=utf-8"},
        {"content-type": 'Application/JSON; Charset="UTF-8"'},
        {"content-type": "application/json", "content-encoding": "identity"},
    ],
    ids=["utf-8", "quoted", "identity"],
)
async def test_json_in_utf_8_without_a_content_coding_is_read(
    server: LiveServer, headers: dict[str, str]
) -> None:
    body = json.dumps({"query": DOC}).encode()
    response = await server.client.post("/graphql", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert "errors" not in response.json()


async def test_a_body_at_the_limit_is_accepted(server: LiveServer) -> None:
    payload = json.dumps({"query": DOC}).encode()
    padded = payload[:-1] + b" " * (MAX_BODY_BYTES - len(payload)) + b"}"
    assert len(padded) == MAX_BODY_BYTES
    response = await server.client.post("/graphql", content=padded, headers=JSON)
    assert response.status_code == 200
    assert "errors" not in response.json()


async def test_duplicate_operation_names_do_not_run_a_mutation(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    response = await server.client.post(
        "/graphql",
        json={
            "query": 'mutation A { enqueueWorkflow(name: "noop") { created } } '
            "query B { workflows { name } }"
        },
    )
    assert response.status_code == 400
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0


async def test_without_graphiql_introspection_is_refused(database_url: str) -> None:
    settings = make_settings(database_url, graphiql=False, engine_enabled=False)
    async with live_server(settings) as server:
        introspect = await server.graphql("{ __schema { types { name } } }")
        assert "introspection has been disabled" in introspect["errors"][0]["message"]
        assert (await server.graphql("{ __typename }"))["data"] == {"__typename": "Query"}
        page = await server.client.get("/graphql", headers={"accept": "text/html"})
        assert page.status_code == 400  # no page: a request without `query`


async def test_aliases_inside_a_repeated_fragment_count_against_the_limit(
    server: LiveServer,
) -> None:
    fragment = "fragment F on Query { a: workflows { name } }"
    spreads = " ".join("...F" for _ in range(20))
    body = await server.graphql(f"query Q {{ {spreads} }} {fragment}")
    assert "aliases found. Allowed: 15" in body["errors"][0]["message"]
