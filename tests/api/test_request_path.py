"""The honest request path: each document parsed and validated once, limits on every request.

Covers the shared document cache (graphql/documents.py) over a real server and on its own
(bounded, shared by the middlewares and the schema, the same verdict every time), the
one-pass completion of plain objects (graphql/execution.py) against graphql-core's own, JSON
bodies that are not objects, and the silence of the log for a successful request.
"""

import logging
import uuid
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import httpx
import pytest
import strawberry
from graphql import DocumentNode, GraphQLError
from strawberry.types import ExecutionResult

from laneway.api.auth import BearerTokens
from laneway.api.graphql import documents
from laneway.api.graphql.context import LanewayContext
from laneway.api.graphql.documents import (
    MAX_CACHED_CHARS,
    MAX_DOCUMENT_CHARS,
    MAX_DOCUMENTS,
    cache_info,
    parsed,
)
from laneway.api.graphql.execution import MAX_PLANS, LanewayExecutor
from laneway.api.graphql.mutation import LanewayMutation
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.schema import MAX_TOKENS, schema, schema_config, schema_extensions
from laneway.api.graphql.subscription import LanewaySubscription
from laneway.services import Services
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer

PAGE = (
    "query Page($limit: Int) { workflowInstances(limit: $limit) { __typename instanceID name"
    " queue status attempts lastError createdAt updatedAt priority runAfter parentID stage"
    " checkpoint progress message params result } }"
)


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    documents.clear_cache()
    yield
    documents.clear_cache()


def unique_name() -> str:
    return f"Q{uuid.uuid4().hex}"


async def post(server: LiveServer, body: dict[str, Any]) -> dict[str, Any]:
    response = await server.client.post("/graphql", json=body)
    assert response.status_code == 200, response.text
    for word in FORBIDDEN_TEXT:
        assert word not in response.text
    reply: dict[str, Any] = response.json()
    return reply


async def test_a_document_sent_twice_is_parsed_and_validated_once_for_every_layer(
    server: LiveServer,
) -> None:
    # Two operations' worth of braces and no operationName: the body middleware parses it
    # (to count its operations) before the schema does; both must share the one parse.
    body = {"query": f"query {unique_name()} {{ workflows {{ name }} }}"}
    first = await post(server, body)
    after_first = cache_info()
    second = await post(server, body)
    after_second = cache_info()
    assert first == second
    assert "errors" not in first
    assert (after_first.parses, after_first.validations) == (1, 1)
    assert after_first.hits >= 1  # the schema found what the middleware parsed
    assert (after_second.parses, after_second.validations) == (1, 1)
    assert after_second.hits >= after_first.hits + 2


@pytest.mark.parametrize(
    ("case", "query", "message"),
    [
        (
            "too deep",  # the depth rule reads the document: the fields need not exist
            "query NAME { " + "".join(f"f{i} {{ " for i in range(11)) + "leaf" + " }" * 12,
            "exceeds maximum operation depth of 10",
        ),
        (
            "too many aliases",
            "query NAME { " + " ".join(f"a{i}: workflows {{ name }}" for i in range(16)) + " }",
            "16 aliases found. Allowed: 15",
        ),
        (
            "too many tokens",
            "query NAME { workflows { " + "n " * (MAX_TOKENS + 1) + "} }",
            f"more than {MAX_TOKENS} tokens",
        ),
    ],
)
async def test_a_refused_document_is_refused_on_its_first_and_second_send(
    server: LiveServer, case: str, query: str, message: str
) -> None:
    body = {"query": query.replace("NAME", unique_name())}
    for attempt in ("first", "second"):
        reply = await post(server, body)
        assert reply.get("data") is None, (case, attempt)
        assert any(message in error["message"] for error in reply["errors"]), (case, reply)
    assert cache_info().parses == 1  # the second send was judged from the cache


async def test_a_document_parsed_without_a_token_limit_is_still_refused_by_the_schema(
    server: LiveServer,
) -> None:
    query = f"query {unique_name()} {{ workflows {{ {'name ' * (MAX_TOKENS + 1)}}} }}"
    assert isinstance(parsed(query, None), DocumentNode)  # cached under "no limit"
    assert isinstance(parsed(query, MAX_TOKENS), GraphQLError)
    reply = await post(server, {"query": query})
    assert reply.get("data") is None
    assert f"more than {MAX_TOKENS} tokens" in reply["errors"][0]["message"]


def test_the_cache_is_bounded_in_documents_and_in_characters() -> None:
    for i in range(MAX_DOCUMENTS + 10):
        parsed(f"query Q{i} {{ __typename }}", MAX_TOKENS)
    assert cache_info().entries == MAX_DOCUMENTS
    assert cache_info().parses == MAX_DOCUMENTS + 10
    parsed("query Q0 { __typename }", MAX_TOKENS)  # the oldest was forgotten
    assert cache_info().parses == MAX_DOCUMENTS + 11

    documents.clear_cache()
    padding = " " * (MAX_DOCUMENT_CHARS - 40)
    for i in range(2 * MAX_CACHED_CHARS // MAX_DOCUMENT_CHARS):
        parsed(f"query Q{i} {{ __typename {padding}}}", MAX_TOKENS)
    assert cache_info().chars <= MAX_CACHED_CHARS
    assert cache_info().entries == cache_info().chars // len(f"query Q10 {{ __typename {padding}}}")

    documents.clear_cache()
    too_long = "query Long { __typename " + " " * MAX_DOCUMENT_CHARS + "}"
    for _ in range(2):
        assert isinstance(parsed(too_long, MAX_TOKENS), DocumentNode)
    assert (cache_info().entries, cache_info().parses) == (0, 2)


def test_a_cached_syntax_error_is_a_fresh_copy_every_time() -> None:
    first = parsed("{ workflows { name }", MAX_TOKENS)
    second = parsed("{ workflows { name }", MAX_TOKENS)
    assert isinstance(first, GraphQLError)
    assert isinstance(second, GraphQLError)
    assert first is not second
    first.message = "changed by one request"
    first.extensions = {"code": "CHANGED"}
    assert second.message.startswith("Syntax Error")
    assert "code" not in (second.extensions or {})
    assert cache_info().parses == 1


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'"just a string"', "a string"),
        (b"42", "a number"),
        (b"1.5", "a number"),
        (b"null", "null"),
        (b"true", "a boolean"),
        (b"false", "a boolean"),
        (b'[{"query": "{ __typename }"}]', "an array"),
        (b"[]", "an array"),
    ],
)
async def test_a_json_body_that_is_not_an_object_gets_400(
    server: LiveServer, body: bytes, kind: str
) -> None:
    response = await server.client.post(
        "/graphql", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    message = response.json()["errors"][0]["message"]
    assert message.endswith(f"must be a JSON object, not {kind}."), message


async def test_a_successful_request_logs_nothing_at_the_default_level(
    server: LiveServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)  # the level of `laneway serve`
    access = logging.getLogger("uvicorn.access")
    if not access.propagate:
        # Access logging is off. pytest attaches its capture handlers to loggers that do not
        # propagate, and uvicorn logs access whenever its logger has a handler: take them off.
        monkeypatch.setattr(access, "handlers", [])
    created: list[logging.LogRecord] = []
    make_record = logging.getLogRecordFactory()

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = make_record(*args, **kwargs)
        created.append(made)
        return made

    # Every record any logger makes, whether or not a handler would see it.
    logging.setLogRecordFactory(record)
    try:
        # A new connection: uvicorn decides whether to log access when one opens.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            for body in ({"query": "{ __typename }"}, {"query": "{ workflows { name } }"}):
                response = await client.post("/graphql", json=body)
                assert response.status_code == 200
                assert "errors" not in response.json()
            assert (await client.get("/healthz")).status_code == 200
    finally:
        logging.setLogRecordFactory(make_record)
    server_side = [r for r in created if not r.name.startswith(("httpx", "httpcore"))]
    assert [(r.name, r.getMessage()) for r in server_side] == []


async def test_a_page_completes_exactly_as_graphql_core_completes_it(
    services: Services,
) -> None:
    for i in range(3):
        await services.engine.enqueue("hello", {"name": f"page {i}"})
    plain = strawberry.Schema(
        query=LanewayQuery,
        mutation=LanewayMutation,
        subscription=LanewaySubscription,
        config=schema_config(),
        extensions=schema_extensions(),
    )
    assert schema.execution_context_class is LanewayExecutor
    assert plain.execution_context_class is not LanewayExecutor
    results = []
    for chosen in (schema, plain):
        context = LanewayContext(
            services=services, permission=BearerTokens.from_settings(services.settings)
        )
        # 40: with params and result (counted at their largest), 50 is over the result-size cap.
        results.append(await chosen.execute(PAGE, {"limit": 40}, context_value=context))
    ours, expected = results
    assert ours.errors is None
    assert ours.data == expected.data
    rows = ours.data["workflowInstances"] if ours.data else []
    assert len(rows) == 3
    assert rows[0]["__typename"] == "WorkflowInstanceStatus"
    assert {row["params"]["name"] for row in rows} == {"page 0", "page 1", "page 2"}


@strawberry.type
class Item:
    name: str
    count: int
    note: str | None = None


def item_schema(items: list[Item], *, ours: bool) -> strawberry.Schema:
    @strawberry.type
    class Query:
        @strawberry.field
        def items(self) -> list[Item]:
            return items

        @strawberry.field
        def item(self) -> Item:
            return items[0]

    return strawberry.Schema(query=Query, execution_context_class=LanewayExecutor if ours else None)


@pytest.mark.parametrize(
    "items",
    [
        [Item(name="a", count=1), Item(name="b", count=2, note="n")],
        [Item(name="a", count=1), Item(name=None, count=2)],  # type: ignore[arg-type]
        [Item(name="a", count=2**40)],
        [Item(name="a", count="many")],  # type: ignore[arg-type]
        [],
    ],
    ids=["plain", "null for a non-null field", "int out of range", "not an int", "empty"],
)
async def test_plain_objects_complete_as_graphql_core_does_even_when_they_are_wrong(
    items: list[Item],
) -> None:
    query = "{ items { __typename name count note alias: name } first: item { name } }"
    if not items:
        query = "{ items { name } }"
    expected = await item_schema(items, ours=False).execute(query)
    found = await item_schema(items, ours=True).execute(query)
    assert found.data == expected.data
    assert [(e.message, e.path) for e in found.errors or []] == [
        (e.message, e.path) for e in expected.errors or []
    ]


async def test_the_plans_of_a_long_subscription_stay_bounded() -> None:
    executors: list[LanewayExecutor] = []

    class Counted(LanewayExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            executors.append(self)

    @strawberry.type
    class Query:
        ready: bool = True

    @strawberry.type
    class Subscription:
        @strawberry.subscription
        async def items(self) -> AsyncGenerator[Item, None]:
            for i in range(10 * MAX_PLANS):
                yield Item(name=f"item {i}", count=i)

    chosen = strawberry.Schema(
        query=Query, subscription=Subscription, execution_context_class=Counted
    )
    stream = await chosen.subscribe("subscription { items { name count } }")
    assert not isinstance(stream, ExecutionResult)
    counts = [result.data["items"]["count"] async for result in stream if result.data]
    assert counts == list(range(10 * MAX_PLANS))
    assert len(executors) == 1  # every event's executor is a copy sharing its plans
    assert len(executors[0]._plans) <= MAX_PLANS


async def test_an_ordinary_post_is_decoded_once_and_answered_as_before(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view answers an ordinary POST from the body RequestLimits decoded (app.py
    `_posted`): one JSON decode per request, with Strawberry's answer and headers."""
    from laneway.api import app as app_module
    from laneway.api.http import body_limits
    from laneway.api.http.strict_json import strict_json_loads

    decoded: list[object] = []

    def counting(data: str | bytes, *, max_depth: int) -> object:
        decoded.append(data)
        return strict_json_loads(data, max_depth=max_depth)

    monkeypatch.setattr(body_limits, "strict_json_loads", counting)
    monkeypatch.setattr(app_module, "strict_json_loads", counting)
    response = await server.client.post(
        "/graphql", json={"query": "query Q { workflows { name } }", "variables": {}}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert "name" in response.json()["data"]["workflows"][0]
    assert len(decoded) == 1
